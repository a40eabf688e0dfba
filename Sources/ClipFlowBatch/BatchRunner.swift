import ClipFlowCore
import ClipFlowUpload
import Foundation
import Tracing
import Synchronization

/// How one row ended.
public struct RowResult: Sendable, Equatable {
    public enum Status: String, Sendable {
        /// Its run completed and its outputs verified.
        case ok
        /// Its outputs were already complete (an earlier run).
        case skipped
        case failed
        /// Stopped by a signal before it ended.
        case interrupted
    }
    public var row: Int
    public var origin: String
    public var status: Status
    /// For a failure: whether running it again may succeed (network, storage, a full disk)
    /// rather than needing the row or its input fixed.
    public var retryable: Bool
    public var reason: String?
    public var seconds: Double
    public var outputs: [String]
}

/// Runs a pipeline once per row, `jobs` rows at a time, each row's run a graph of its own in
/// this process (the stage-graph runtime, as `clipflow run` runs one). For each row:
/// plan (the pipeline with the row's variables, files unchecked) -> skip when its outputs are
/// complete -> validate (fetching `s3://` inputs into a scratch folder) -> run -> publish `s3://`
/// outputs -> verify the outputs. A row's failure is its own: the others go on. Rows whose
/// plans conflict with another row's (`RowConflicts`: one output, or one row's output another's
/// input) fail before any runs.
///
/// Threads: `run` starts `jobs` worker threads and returns when they have; `stop`/`cancel` may be
/// called from any thread (signals). Events go to `sink` from the workers: each row's pipeline
/// events marked with its row, and the batch's own (stage `batch`).
public final class BatchRunner: Sendable {
    public struct Plan: Sendable {
        public var registry: StageRegistry
        public var pipelineFile: String
        public var pipelineText: String
        public var rows: [BatchRow]
        /// Which rows to run (`RowSelection.indices`).
        public var selected: [Int]
        public var jobs: Int
        /// `--set` values; a row's own values win over them.
        public var variables: [String: String]
        public var environment: [String: String]
        /// Run rows even when their outputs are complete.
        public var force: Bool
        /// Where each row's object-storage scratch folder goes.
        public var scratchParent: String
        /// Seconds a row's stages get to finish after a stop, before they are cancelled.
        public var grace: Double

        public init(
            registry: StageRegistry, pipelineFile: String, pipelineText: String, rows: [BatchRow], selected: [Int], jobs: Int,
            variables: [String: String], environment: [String: String], force: Bool, scratchParent: String, grace: Double
        ) {
            self.registry = registry
            self.pipelineFile = pipelineFile
            self.pipelineText = pipelineText
            self.rows = rows
            self.selected = selected
            self.jobs = jobs
            self.variables = variables
            self.environment = environment
            self.force = force
            self.scratchParent = scratchParent
            self.grace = grace
        }
    }

    /// What the batch has done so far, for a status line.
    public struct Tally: Sendable, Equatable {
        public var total = 0
        public var ok = 0
        public var skipped = 0
        public var failed = 0
        public var interrupted = 0
        public var running = 0
        public var started = 0.0
        /// Seconds of the rows that ran (not skipped), for the rate.
        public var ranSeconds = 0.0
        public var ran = 0
        public var finished: Int { ok + skipped + failed + interrupted }
    }

    let plan: Plan
    let parsed: JSONNode?
    let sink: EventSink
    let store: @Sendable () throws -> S3Client
    let clock = SystemClock()
    private struct State {
        var next = 0
        var stopping = false
        var cancelled = false
        var running: [Int: GraphRunner] = [:]
        var results: [RowResult] = []
        var tally = Tally()
    }
    private let state: Mutex<State>
    private let aborted = Atomic<Bool>(false)

    /// `store` makes the object-storage client the first time a row needs it (credentials are
    /// read then); it is called at most once per row.
    public init(plan: Plan, sink: EventSink, store: @escaping @Sendable () throws -> S3Client) {
        self.plan = plan
        self.parsed = try? JSONParser.parse(plan.pipelineText)
        self.sink = sink
        self.store = store
        var s = State()
        s.tally.total = plan.selected.count
        self.state = Mutex(s)
    }

    public var tally: Tally { state.withLock { $0.tally } }
    /// Whether `stop` or `cancel` was called (a signal).
    public var wasStopped: Bool { state.withLock { $0.stopping } }

    /// Stops starting rows and asks the running ones to finish within `deadline` seconds.
    public func stop(deadline: Double) {
        let running = state.withLock { s -> [GraphRunner] in
            s.stopping = true
            return Array(s.running.values)
        }
        for r in running { r.stop(deadline: deadline) }
    }

    /// Stops at once: running rows are cancelled, uploads and downloads abort.
    public func cancel() {
        aborted.store(true, ordering: .releasing)
        let running = state.withLock { s -> [GraphRunner] in
            s.stopping = true
            s.cancelled = true
            return Array(s.running.values)
        }
        for r in running { r.cancel() }
    }

    /// Runs the selected rows; returns their results in row order (rows never started because
    /// of a stop are absent).
    public func run() -> [RowResult] {
        state.withLock { $0.tally.started = clock.now() }
        emitBatch(.progress(completed: 0, total: Int64(plan.selected.count), unit: "rows"))
        let clashes = conflictingRows()
        let workers = max(1, min(plan.jobs, plan.selected.count))
        let threads = HelperThreads()
        for k in 0..<workers {
            threads.start("batch worker \(k + 1)", stackSize: 4 << 20) { [self] in
                while let i = nextRow() {
                    let t0 = clock.now()
                    var rp = planRow(i)
                    if let clash = clashes[i] { rp.problem = clash }
                    var r = withSpan("clipflow.batch.row", context: .topLevel, ofKind: .internal) { span in
                        span.attributes["clipflow.batch.row"] = i
                        let r = runRow(i, rp)
                        span.attributes["clipflow.batch.status"] = r.status.rawValue
                        if r.status == .failed { span.setStatus(SpanStatus(code: .error, message: r.reason)) }
                        return r
                    }
                    r.seconds = clock.now() - t0
                    finish(r)
                }
            }
        }
        threads.wait()
        return state.withLock { $0.results.sorted { $0.row < $1.row } }
    }

    // MARK: rows

    /// A row's pipeline with files unchecked, or why it cannot run.
    struct RowPlan: Sendable {
        var pipeline: Pipeline?
        var variables: [String: String]
        var paths: RowPaths?
        var problem: String?
    }

    /// A row's plan, made when its turn comes (a batch of thousands of rows holds no plans).
    func planRow(_ i: Int) -> RowPlan {
        let row = plan.rows[i]
        var vars = plan.variables.merging(row.values) { _, r in r }
        if vars["ROW"] == nil { vars["ROW"] = String(i) }
        var p = RowPlan(variables: vars)
        if let problem = row.problem {
            p.problem = problem
            return p
        }
        let v = PipelineValidator(registry: plan.registry, variables: vars, environment: plan.environment, checksFiles: false)
        switch validate(v) {
        case .valid(let pipeline):
            p.pipeline = pipeline
            let paths = RowPaths(pipeline, registry: plan.registry)
            p.paths = paths
            for w in paths.writes where S3Location.isS3URL(w.path) {
                if let problem = ObjectStaging.outputProblem(w.path, folder: w.folder) {
                    p.problem = "\(plan.pipelineFile): \(w.field): \(problem)"
                    break
                }
            }
        case .invalid(let issues):
            p.problem = issues.map { "\(plan.pipelineFile):\($0.description)" }.joined(separator: "; ")
        }
        return p
    }

    /// Selected rows whose plans conflict with another row's (`RowConflicts`), with the reason:
    /// they fail before anything runs. Every row of the table is planned, not only the selected
    /// ones: a task of an array that runs one row refuses what a run of them all refuses. Only
    /// the rows' paths are kept while looking.
    func conflictingRows() -> [Int: String] {
        let plans = plan.rows.indices.compactMap { i in planRow(i).paths.map { (row: i, paths: $0) } }
        let selected = Set(plan.selected)
        return RowConflicts.find(plans).filter { selected.contains($0.key) }
    }

    /// Validates the pipeline read once (thousands of rows validate the same document); a file
    /// that is not JSON is reported by each row as the validator words it.
    func validate(_ v: PipelineValidator) -> PipelineValidator.Result {
        if let parsed { return v.validate(root: parsed) }
        return v.validate(text: plan.pipelineText)
    }

    func nextRow() -> Int? {
        state.withLock { s -> Int? in
            guard !s.stopping, s.next < plan.selected.count else { return nil }
            defer { s.next += 1 }
            s.tally.running += 1
            return plan.selected[s.next]
        }
    }

    func runRow(_ i: Int, _ rp: RowPlan) -> RowResult {
        let row = plan.rows[i]
        var result = RowResult(row: i, origin: row.origin, status: .failed, retryable: false, reason: nil, seconds: 0, outputs: [])
        emitRow(i, .item(id: "row \(i)", name: "started", fields: [EventField("origin", .string(row.origin))], text: "started (\(row.origin))"))
        guard rp.pipeline != nil, let paths = rp.paths, rp.problem == nil else {
            result.reason = rp.problem ?? "cannot be planned"
            return result
        }
        result.outputs = paths.writes.map(\.path)
        let key = BatchOutputs.rowKey(pipelineText: plan.pipelineText, variables: rp.variables)
        let storeOnce = StoreOnce(make: store)
        if !plan.force, BatchOutputs.incomplete(paths.writes, rowKey: key, store: storeOnce.get) == nil {
            result.status = .skipped
            return result
        }
        let made: [String]
        do { made = try Self.makeParentFolders(paths.writes) } catch { return failed(result, error) }
        let ran = execute(i, rp, paths, key: key, store: storeOnce, result)
        if ran.status != .ok { Self.removeIfEmpty(made) }
        return ran
    }

    /// A row that is not done: fetch, validate, run, publish, verify.
    func execute(_ i: Int, _ rp: RowPlan, _ paths: RowPaths, key: String, store storeOnce: StoreOnce, _ planned: RowResult) -> RowResult {
        var result = planned
        var staging: ObjectStaging?
        defer { staging?.discard() }
        if paths.usesObjectStorage {
            do {
                staging = try ObjectStaging(
                    store: try storeOnce.get(), scratchParent: plan.scratchParent, name: "clipflow-batch-row-\(i)",
                    shouldAbort: { [self] in aborted.load(ordering: .acquiring) })
            } catch {
                return failed(result, error)
            }
        }
        // A row that runs replaces what its outputs hold: they were found incomplete, or --force.
        let validator = PipelineValidator(registry: plan.registry, variables: rp.variables, environment: plan.environment, remote: staging, overwrite: true)
        let runnable: Pipeline
        switch validate(validator) {
        case .valid(let p): runnable = p
        case .invalid(let issues):
            result.reason = issues.map { "\(plan.pipelineFile):\($0.description)" }.joined(separator: "; ")
            result.retryable = staging?.fetchFailedRetryably ?? false
            if state.withLock({ $0.stopping }) { result.status = .interrupted; result.retryable = true }
            return result
        }
        let runner: GraphRunner
        do {
            let graph = try runnable.makeGraph(plan.registry)
            runner = try GraphRunner(nodes: graph.nodes, edges: graph.edges, sink: RowEventSink(row: i, sink: sink))
        } catch {
            return failed(result, error)
        }
        let (stopping, cancelled) = state.withLock { s -> (Bool, Bool) in
            s.running[i] = runner
            return (s.stopping, s.cancelled)
        }
        if cancelled { runner.cancel() } else if stopping { runner.stop(deadline: plan.grace) }
        let outcome = runner.run()
        state.withLock { _ = $0.running.removeValue(forKey: i) }
        switch outcome {
        case .completed: break
        case .interrupted:
            result.status = .interrupted
            result.retryable = true
            result.reason = "stopped before it ended"
            return result
        case .failed(let stage, let e):
            result.reason = "stage '\(stage)': \(e.message)"
            result.retryable = Self.retryable(e.kind)
            return result
        }
        do { try staging?.publish(rowKey: key, commitMarkers: paths.commitMarkers) } catch {
            return failed(result, error)
        }
        if let problem = BatchOutputs.incomplete(paths.writes, rowKey: key, store: storeOnce.get) {
            result.reason = "the run completed but an output does not verify: \(problem)"
            result.retryable = true
            return result
        }
        result.status = .ok
        return result
    }

    /// Rows name outputs in folders of their own (`out/${NAME}/merged.mp4`): the folders are
    /// made, as a batch of thousands could not be prepared by hand.
    /// Returns the folders it made, deepest first.
    static func makeParentFolders(_ writes: [RowPaths.Written]) throws -> [String] {
        var made: [String] = []
        for w in writes where !S3Location.isS3URL(w.path) {
            let parent = URL(fileURLWithPath: w.path).deletingLastPathComponent().path
            var missing: [String] = [], up = parent
            while !up.isEmpty, up != "/", !FileManager.default.fileExists(atPath: up) {
                missing.append(up)
                up = (up as NSString).deletingLastPathComponent
            }
            made += missing
            do { try FileManager.default.createDirectory(atPath: parent, withIntermediateDirectories: true) } catch {
                throw ClipFlowError.badInput("output folder '\(parent)' (for \(w.field)): cannot create it (\(error.localizedDescription))")
            }
        }
        return made
    }

    /// Removes the folders a row made for outputs it did not write (a failed row leaves nothing).
    static func removeIfEmpty(_ folders: [String]) {
        for f in folders { rmdir(f) }
    }

    func failed(_ r: RowResult, _ error: Error) -> RowResult {
        var r = r
        let e: ClipFlowError =
            switch error {
            case let c as ClipFlowError: c
            case let u as UploadError: u.asClipFlowError
            default: ClipFlowError.failure("\(error)")
            }
        if e.kind == .interrupted {
            r.status = .interrupted
            r.retryable = true
            r.reason = "stopped before it ended"
        } else {
            r.reason = e.message
            r.retryable = Self.retryable(e.kind)
        }
        return r
    }

    /// Bad input (the row, its files) is fixed by a person; anything else (network, storage, a
    /// library, a full disk) may pass on another try.
    static func retryable(_ kind: ClipFlowError.Kind) -> Bool {
        switch kind {
        case .badInput, .incompatible: return false
        case .interrupted, .output, .failure: return true
        }
    }

    func finish(_ r: RowResult) {
        let tally = state.withLock { s -> Tally in
            s.results.append(r)
            s.tally.running -= 1
            switch r.status {
            case .ok: s.tally.ok += 1
            case .skipped: s.tally.skipped += 1
            case .failed: s.tally.failed += 1
            case .interrupted: s.tally.interrupted += 1
            }
            if r.status != .skipped {
                s.tally.ran += 1
                s.tally.ranSeconds += r.seconds
            }
            return s.tally
        }
        var fields: [EventField] = [
            EventField("origin", .string(r.origin)), EventField("status", .string(r.status.rawValue)),
            EventField("seconds", .number((r.seconds * 1000).rounded() / 1000))
        ]
        var text: String
        switch r.status {
        case .ok: text = String(format: "done in %.1f s", r.seconds)
        case .skipped: text = "skipped: its outputs are complete"
        case .failed, .interrupted:
            fields.append(EventField("retryable", .bool(r.retryable)))
            fields.append(EventField("reason", .string(r.reason ?? "")))
            text = "\(r.status == .failed ? "failed" : "stopped") (\(r.origin)): \(r.reason ?? "")"
        }
        if !r.outputs.isEmpty && r.status == .ok { fields.append(EventField("outputs", .string(r.outputs.joined(separator: " ")))) }
        emitRow(r.row, .item(id: "row \(r.row)", name: r.status.rawValue, fields: fields, text: text))
        emitBatch(.progress(completed: Int64(tally.finished), total: Int64(tally.total), unit: "rows"))
    }

    func emitBatch(_ kind: PipelineEvent.Kind) { sink.emit(PipelineEvent(stage: "batch", kind: kind, time: clock.now())) }
    func emitRow(_ row: Int, _ kind: PipelineEvent.Kind) { sink.emit(PipelineEvent(stage: "batch", kind: kind, time: clock.now(), row: row)) }
}

/// The object-storage client for one row, made when first asked (a row with local paths only
/// never reads credentials). Confined to the row's worker thread: not Sendable.
final class StoreOnce {
    let make: @Sendable () throws -> S3Client
    var made: S3Client?
    init(make: @escaping @Sendable () throws -> S3Client) { self.make = make }
    func get() throws -> S3Client {
        if let made { return made }
        let s = try make()
        made = s
        return s
    }
}
