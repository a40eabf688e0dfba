import ClipFlowCore
import ClipFlowMedia
import Foundation
import Synchronization

/// The worker side of processing: one step of a job in a process of its own (`clipflow
/// serve-worker`, which `clipflow serve` starts and supervises through `WorkerProcess`), so that
/// whatever decoding a hostile upload does (crash, abort, exhaust memory) ends that process only.
///
/// Protocol with the server: the request is the command line; the answer is the event lines
/// `clipflow run --events json` writes (docs/events.md) on stdout, through `events`: the graph's
/// own (`progress` of the ladder's decode or copy, `HLSLadder.progressStage`; `failed` with the
/// failure's `kind`), and the probe's `result` (`WorkerProbe`, stage `probe`), which the server
/// reads with one decoder (`WorkerEventLine`). The exit status says coarsely how it ended
/// (`WorkerExit`), with the reason on stderr. The worker ends by itself when its stdin reaches
/// end of file: the server that started it is gone.
public enum ServeWorker {
    public enum Step: String, Sendable, CaseIterable {
        /// Reads the input's container and stream headers: a `WorkerProbe` result (and its
        /// copy, `run`).
        case probe
        /// Writes the input's ladder (`--rungs`) into a new folder `--output`: shorthand for the
        /// step's pipeline (`StepPipeline`, run by `run(pipeline:)`).
        case ladder
    }

    /// The id of the probe's stage in the worker's events.
    public static let probeStage = "probe"
    /// The ids of a step's stages: the upload (`files`) and its ladder (`hls`), in a step's
    /// pipeline (`StepPipeline`) as in a probe's copy.
    public static let uploadStage = "upload"
    public static let ladderStage = "ladder"

    /// Runs a graph to its end, its events to the worker's `events`: the caller's front door
    /// (`clipflow serve-worker` passes the one every command runs through; a signal cancels the
    /// graph).
    public typealias GraphRunning = @Sendable (_ nodes: [StageNode], _ edges: [Edge]) throws -> GraphOutcome

    /// Runs `step`, its graphs through `runGraph`, and returns the process's exit status; what it
    /// learns goes to `events` (the same sink `runGraph`'s graphs report to). `memoryLimit` bytes
    /// (0: none) bounds the process's data (RLIMIT_DATA: heap and private mappings), set before any
    /// work.
    ///
    /// A `nice` above 0 puts every thread of the worker at that CPU priority (`keepNice`).
    ///
    /// A probe with `output` and `copyWithin` goes on, when the upload can be copied
    /// (`PlayableFirst`) and is within those limits, to write its copy there (nothing decoded: no
    /// second process to start, no second open); its result says whether it did (`copied`; a copy
    /// that refused the upload sets `copyRefusal`: the probe stands).
    public static func run(
        step: Step, input: String, output: String?, copyWithin: ProcessingLimits? = nil, memoryLimit: Int64, nice: Int32 = 0, events: any EventSink,
        runGraph: GraphRunning
    ) -> Int32 {
        let stage = probeStage
        if let refused = start(memoryLimit: memoryLimit, nice: nice) { return fail(refused, stage: stage, events: events) }
        do {
            switch step {
            case .probe:
                // One open: the keyframes are measured from the probe's own demuxer.
                let (info, spacing) = try Transcoder.probeWithSpacing(input)
                var probe = WorkerProbe(
                    duration: info.duration, width: info.video.displaySize.width, height: info.video.displaySize.height,
                    frameRate: info.video.frameRate, copyRefusal: try PlayableFirst.copyRefusal(info, spacing: spacing))
                if let output, let limits = copyWithin, probe.copyRefusal == nil, limits.refusal(probe) == nil {
                    probe.copyRefusal = try copy(input, into: output, runGraph: runGraph)
                    probe.copied = probe.copyRefusal == nil
                }
                events.emit(PipelineEvent(stage: probeStage, kind: .result(probe.fields), time: SystemClock().now()))
            case .ladder:
                return fail(.failure("internal: a ladder is a pipeline (StepPipeline)"), stage: stage, events: events)
            }
            return WorkerExit.finished.rawValue
        } catch let failed as GraphFailed {
            // The graph's failing stage said it in its own `failed` event.
            return fail(failed.error, stage: nil, events: events)
        } catch {
            return fail(error as? ClipFlowError ?? .failure("\(error)"), stage: stage, events: events)
        }
    }

    /// Runs a step's pipeline (`StepPipeline`: the file the server wrote, which `clipflow run`
    /// runs the same), its graph made by `graph` (the pipeline validated as `clipflow run`
    /// validates it) and run through `runGraph`; returns the process's exit status. `memoryLimit`
    /// and `nice` as `run(step:...)`. A pipeline refused before it runs fails as the stage
    /// `pipeline`.
    public static func run(
        pipeline graph: () throws -> (nodes: [StageNode], edges: [Edge]), memoryLimit: Int64, nice: Int32 = 0, events: any EventSink,
        runGraph: GraphRunning
    ) -> Int32 {
        if let refused = start(memoryLimit: memoryLimit, nice: nice) { return fail(refused, stage: "pipeline", events: events) }
        let made: (nodes: [StageNode], edges: [Edge])
        do { made = try graph() } catch { return fail(error as? ClipFlowError ?? .failure("\(error)"), stage: "pipeline", events: events) }
        do {
            switch try runGraph(made.nodes, made.edges) {
            case .completed: return WorkerExit.finished.rawValue
            case .interrupted: return fail(.interrupted, stage: nil, events: events)
            case .failed(let stage, let e): return fail(ClipFlowError(e.kind, "\(stage): \(e.message)", cause: e.cause), stage: nil, events: events)
            }
        } catch {
            return fail(error as? ClipFlowError ?? .failure("\(error)"), stage: "pipeline", events: events)
        }
    }

    /// What every worker does first: it ends when the server goes, takes its CPU priority and its
    /// memory bound; returns why it cannot, or nil.
    private static func start(memoryLimit: Int64, nice: Int32) -> ClipFlowError? {
        endWhenServerGoes()
        if nice > 0 { keepNice(nice) }
        if memoryLimit > 0 {
            var limit = rlimit(rlim_cur: rlim_t(memoryLimit), rlim_max: rlim_t(memoryLimit))
            guard setrlimit(__rlimit_resource_t(RLIMIT_DATA.rawValue), &limit) == 0 else {
                return .failure("cannot limit the worker's memory: \(String(cString: strerror(errno)))")
            }
        }
        return nil
    }

    /// The copy of a probe that goes on (`run`); returns nil once written, or the copy's refusal
    /// (an answer, not a failure).
    private static func copy(_ input: String, into output: String, runGraph: GraphRunning) throws -> String? {
        do {
            try write(HLSLadder(output: output, ladder: LadderChoice(rungs: [], copy: true), schedule: .feed), of: input, runGraph: runGraph)
            return nil
        } catch let e as GraphFailed where e.error.kind == .badInput {
            return e.error.message
        }
    }

    /// A graph that failed: its stage's error (the stage's `failed` event told it already).
    private struct GraphFailed: Error {
        let error: ClipFlowError
    }

    /// Writes `ladder` of `input` through `runGraph`; an interrupted run throws
    /// `ClipFlowError.interrupted`, a failed one the stage's error.
    private static func write(_ ladder: HLSLadder, of input: String, runGraph: GraphRunning) throws {
        let g = ladder.graph(id: ladderStage)
        let nodes = [StageNode(uploadStage) { FilesStage(id: uploadStage, paths: [input], glob: nil) }] + g.nodes
        let edges = g.entries.map { Edge(from: uploadStage, to: $0, limits: HLSStage.kind.queue) } + g.edges
        switch try runGraph(nodes, edges) {
        case .completed: return
        case .interrupted: throw ClipFlowError.interrupted
        case .failed(let stage, let e): throw GraphFailed(error: ClipFlowError(e.kind, "\(stage): \(e.message)", cause: e.cause))
        }
    }

    /// Ends with `error`: its `failed` event (unless a graph's stage emitted it: `stage` nil), its
    /// message on stderr, and the exit status of its kind.
    private static func fail(_ error: ClipFlowError, stage: String?, events: any EventSink) -> Int32 {
        if let stage, error.kind != .interrupted {
            events.emit(PipelineEvent(stage: stage, kind: .failed(error.message, kind: error.failureKind), time: SystemClock().now()))
        }
        let status: WorkerExit = error.kind == .interrupted ? .stopped : error.isDiskFull ? .diskFull : .failed
        let message = error.kind == .interrupted ? "stopped before the work was done" : error.message
        FileHandle.standardError.write(Data((message + "\n").utf8))
        return status.rawValue
    }

    /// The CPU priority of a worker whose video plays already (a ladder step): it gives way to
    /// the server and to the steps that make videos playable.
    public static let backgroundNice: Int32 = 10

    /// Keeps every thread of this process at nice `value` or lower priority, now and every 0.25 s.
    /// Linux keeps the nice value per thread, and libdispatch gives each worker thread it starts
    /// the nice value of its queue's QoS, so a value set once (or inherited from the parent)
    /// would not hold for them; a thread started in between runs at most 0.25 s at its own.
    private static func keepNice(_ value: Int32) {
        let which = __priority_which_t(PRIO_PROCESS.rawValue)
        @Sendable func apply() {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
                guard let tid = id_t(name) else { continue }
                errno = 0
                let current = getpriority(which, tid)
                if errno == 0, current < value { _ = setpriority(which, tid, value) }
            }
        }
        apply()
        _ = RepeatingTimer(every: 0.25, label: "clipflow.worker.nice") {
            apply()
            return true
        }
    }

    /// Ends the process as soon as its stdin reaches end of file (the server closed its end, or
    /// died), so a worker never outlives the server that supervises it.
    private static func endWhenServerGoes() {
        HelperThreads().start("server watch") {
            var byte: UInt8 = 0
            while true {
                let n = read(0, &byte, 1)
                if n == 0 || (n < 0 && errno != EINTR) { _exit(WorkerExit.orphaned.rawValue) }
            }
        }
    }
}

/// How a worker process ended, as its exit status.
public enum WorkerExit: Int32, Sendable {
    case finished = 0
    /// The input cannot be processed (the reason is on stderr); trying again would not help.
    case failed = 1
    /// The server went away (stdin closed) before the work was done.
    case orphaned = 3
    /// No space was left on the disk (EX_TEMPFAIL): worth trying again once there is.
    case diskFull = 75
    /// A signal (SIGTERM from the server that stops the job) cancelled the work; what it was
    /// writing is removed.
    case stopped = 130
}

/// What a probe tells the server: enough to check the job's limits before anything is decoded.
/// The probe step's `result` event (stage `ServeWorker.probeStage`); kept in the job's row
/// (`JobRow.probe`, this as JSON), so no later step probes again.
public struct WorkerProbe: Codable, Sendable, Equatable, StageResult {
    /// Seconds (0 when the container does not say).
    public var duration: Double
    /// Size as displayed.
    public var width: Int
    public var height: Int
    public var frameRate: Double?
    /// Why the upload cannot be published first as a copy of itself (nil: it can; `PlayableFirst`).
    public var copyRefusal: String?
    /// Whether the probe's copy was written (nil: not tried).
    public var copied: Bool?

    public init(duration: Double, width: Int, height: Int, frameRate: Double? = nil, copyRefusal: String? = nil, copied: Bool? = nil) {
        self.duration = duration
        self.width = width
        self.height = height
        self.frameRate = frameRate
        self.copyRefusal = copyRefusal
        self.copied = copied
    }

    enum CodingKeys: String, CodingKey {
        case duration, width, height
        case frameRate = "frame_rate"
        case copyRefusal = "copy_refusal"
        case copied
    }

    /// The probe as a job's row keeps it (`JobRow.probe`).
    var json: String { String(decoding: (try? JSONEncoder().encode(self)) ?? Data("{}".utf8), as: UTF8.self) }

    /// The probe a job's row kept, or nil when `json` is not one.
    init?(json: String) {
        guard let p = try? JSONDecoder().decode(Self.self, from: Data(json.utf8)) else { return nil }
        self = p
    }

    public var fields: [EventField] {
        var f = [EventField("duration", .number(duration)), EventField("width", .integer(Int64(width))), EventField("height", .integer(Int64(height)))]
        if let frameRate { f.append(EventField("frame_rate", .number(frameRate))) }
        if let copyRefusal { f.append(EventField("copy_refusal", .string(copyRefusal))) }
        if let copied { f.append(EventField("copied", .bool(copied))) }
        return f
    }

    public init(fields: [EventField]) {
        self.init(
            duration: fields.double("duration"), width: fields.int("width"), height: fields.int("height"), frameRate: fields["frame_rate"]?.number,
            copyRefusal: fields["copy_refusal"]?.string, copied: fields["copied"].flatMap { if case .bool(let b) = $0 { b } else { nil } })
    }
}

/// One line of a worker's stdout: an event as `--events json` writes it (docs/events.md), read
/// with one decoder. What the server takes from it: `progress` (`completed` of `total`), a
/// `failed` event's `message` and `kind`, the probe's `result` (`probe`, stage
/// `ServeWorker.probeStage`).
struct WorkerEventLine: Decodable, Sendable, Equatable {
    var stage: String
    var event: String
    var completed: Double?
    var total: Double?
    var message: String?
    /// A `failed` event's kind (nil: none given, or one this server does not know).
    var kind: FailureKind?
    /// The probe's `result`.
    var probe: WorkerProbe?

    private enum CodingKeys: String, CodingKey { case stage, event, completed, total, message, kind }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        stage = try c.decode(String.self, forKey: .stage)
        event = try c.decode(String.self, forKey: .event)
        completed = try c.decodeIfPresent(Double.self, forKey: .completed)
        total = try c.decodeIfPresent(Double.self, forKey: .total)
        message = try c.decodeIfPresent(String.self, forKey: .message)
        kind = (try? c.decodeIfPresent(String.self, forKey: .kind)).flatMap { $0.flatMap(FailureKind.init(rawValue:)) }
        if event == "result", stage == ServeWorker.probeStage { probe = try WorkerProbe(from: decoder) }
    }

    /// The line `text`, or nil when it is not an event.
    static func read(_ text: String) -> WorkerEventLine? { try? JSONDecoder().decode(Self.self, from: Data(text.utf8)) }

    /// A `progress` event's fraction done (0 to 1), nil for any other event or an unknown total.
    var fraction: Double? {
        guard event == "progress", let completed, let total, total > 0 else { return nil }
        return min(1, max(0, completed / total))
    }
}

/// A job's ladder step as a pipeline: the JSON file `clipflow serve-worker PIPELINE` runs, in the
/// format `clipflow run` validates and runs (docs/pipelines.md), so any step can be run again by
/// hand (`clipflow run PIPELINE`): the upload (`files`, stage `ServeWorker.uploadStage`) into
/// an `hls` ladder (stage `ServeWorker.ladderStage`, profile `feed`), with the renditions it takes
/// from a complete ladder (`reuse`, `reuse-renditions`).
public enum StepPipeline {
    /// The pipeline's text.
    public static func text(input: String, output: String, ladder choice: LadderChoice, reuse: (folder: String, tracks: [String])? = nil) -> String {
        let pipeline = File(
            version: 1,
            stages: [
                Stage(id: ServeWorker.uploadStage, kind: "files", paths: [input]),
                Stage(
                    id: ServeWorker.ladderStage, kind: HLSStage.kind.name, inputs: [ServeWorker.uploadStage], output: output, ladder: ladderField(choice),
                    profile: "feed", reuse: reuse?.folder, reuseRenditions: reuse?.tracks.joined(separator: ","))
            ])
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(pipeline)) ?? Data(), as: UTF8.self) + "\n"
    }

    /// The pipeline file: its version and stages (fields left out when nil).
    private struct File: Encodable {
        var version: Int
        var stages: [Stage]
    }

    private struct Stage: Encodable {
        var id: String
        var kind: String
        var paths: [String]? = nil
        var inputs: [String]? = nil
        var output: String? = nil
        var ladder: String? = nil
        var profile: String? = nil
        var reuse: String? = nil
        var reuseRenditions: String? = nil

        enum CodingKeys: String, CodingKey {
            case id, kind, paths, inputs, output, ladder, profile, reuse
            case reuseRenditions = "reuse-renditions"
        }
    }

    /// The pipeline of the rungs `rungs` names (`choice(rungs:)`), or nil when it names none.
    static func text(input: String, output: String, rungs: String) -> String? {
        choice(rungs: rungs).map { text(input: input, output: output, ladder: $0) }
    }

    /// The stage whose progress is the step's (`HLSLadder.progressStage`): `ladder.decode`, or
    /// `ladder.copy` for a remux.
    static func progressStage(_ choice: LadderChoice) -> String {
        HLSLadder(output: "", ladder: choice, schedule: .feed).progressStage(id: ServeWorker.ladderStage)
    }

    /// The rungs of `choice` as the server names them on a worker's command line (`--rungs`).
    public static func rungs(_ choice: LadderChoice) -> String {
        choice.copy ? "copy" : (choice.rungs ?? []).map(\.name).joined(separator: ",")
    }

    /// The rungs as the server named them on a worker's command line (`--rungs`): names of
    /// `LadderRung.standard` ("360p,720p"), or "copy" for a remux; nil when they are not.
    public static func choice(rungs argument: String) -> LadderChoice? {
        if argument == "copy" { return LadderChoice(rungs: [], copy: true) }
        let names = argument.split(separator: ",").map(String.init)
        let rungs = names.compactMap { name in LadderRung.standard.first { $0.name == name } }
        return rungs.isEmpty || rungs.count != names.count ? nil : LadderChoice(rungs: rungs)
    }

    /// The `hls` stage's `ladder` for `choice`: its rungs' heights (`720,360`), with `copy`.
    static func ladderField(_ choice: LadderChoice) -> String {
        ((choice.copy ? ["copy"] : []) + (choice.rungs.map { $0.map { String($0.height) } } ?? ["auto"])).joined(separator: ",")
    }
}
