import ArgumentParser
import ClipFlowBatch
import ClipFlowCore
import ClipFlowMedia
import ClipFlowUpload
import Foundation
import Synchronization
#if canImport(Glibc)
    import Glibc
#endif

struct Batch: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Run a pipeline once per row of a table (CSV, JSON lines) or per sub-folder, resumably.",
        discussion: """
            Each row's columns are pipeline variables (${CLIPS}, ${OUT}, ...; ${ROW} is the row's index). \
            Rows whose outputs are already complete (read back, not just present) are skipped, so \
            running the same batch again finishes what is left. Paths may be s3://BUCKET/KEY URLs \
            (inputs are fetched to a scratch folder, outputs uploaded by multipart when the row's run \
            completes); the endpoint and keys come from AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL, \
            AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and AWS_REGION, or from \
            --credentials-command. As the unit of work of a batch engine, one task runs one row: \
            --index, else JOB_COMPLETION_INDEX (Kubernetes), SLURM_ARRAY_TASK_ID or \
            AWS_BATCH_JOB_ARRAY_INDEX. Exit status: 0 every row done or skipped; 65 a row failed \
            for good (bad input: fix it, do not retry); 75 a row failed in a way a retry may fix \
            (network, storage) or was stopped; 130 interrupted; 64 a bad command line.
            """)

    @Argument(help: "Pipeline JSON file.") var pipeline: String
    @Option(help: ArgumentHelp("The rows: CSV with a header line naming the variables, or JSON lines (.jsonl).", valueName: "FILE"))
    var rows: String?
    @Option(
        name: .customLong("each-dir"),
        help: ArgumentHelp("One row per sub-folder of DIR (a folder or an s3:// prefix), with ${DIR} and ${NAME}.", valueName: "DIR"))
    var eachDir: String?
    @Option(help: "Rows run at once on this machine (default: the number of cores).") var jobs: Int?
    @Option(help: "Run this row only (0-based). Default: the batch engine's array index, if one is set.") var index: Int?
    @Option(name: .customLong("index-count"), help: "With an index I: run rows I, I+N, I+2N, ... (arrays with fewer tasks than rows).")
    var indexCount: Int?
    @Option(help: ArgumentHelp("Run every N-th row starting at I.", valueName: "I/N")) var shard: String?
    @Option(
        help: ArgumentHelp(
            "Where to write the JSON summary, the batch's own report, written anew on each run (default: next to the rows file).", valueName: "FILE"))
    var summary: String?
    @Flag(help: "Run every row, even those whose outputs are complete.") var force = false
    @Option(help: ArgumentHelp("Folder for rows' object-storage inputs and outputs while they run (default: $TMPDIR or /tmp).", valueName: "DIR"))
    var scratch: String?
    @Option(name: .customLong("credentials-command"), help: "Shell command printing S3 credentials JSON; run at start and when they expire.")
    var credentialsCommand: String?
    @Option(help: "Seconds to let running rows finish after the first signal before cancelling.") var grace: Double = 30
    @OptionGroup var vars: VariableFlags
    @OptionGroup var flags: OutputFlags

    func validate() throws {
        if (rows == nil) == (eachDir == nil) { throw ValidationError("give --rows FILE or --each-dir DIR (one of them)") }
        if let jobs, jobs < 1 { throw ValidationError("--jobs must be 1 or more (got \(jobs))") }
        if grace < 0 { throw ValidationError("--grace must be 0 or more") }
    }

    func run() throws {
        MediaProcess.tuneAllocator()
        let environment = ProcessInfo.processInfo.environment
        var exit = ExitStatus.success
        // Each row's span is sent before the command ends.
        var tracing: (@Sendable () -> Void)?
        try ErrorReport.run { tracing = try Telemetry.tracing(environment).map(Telemetry.background) }
        defer { tracing?() }
        try ErrorReport.run {
            let selection = try RowSelection.resolve(index: index, shard: shard, indexCount: indexCount, environment: environment)
            let text = try readPipelineText(pipeline)
            let access = StoreAccess(environment: environment, credentialsCommand: credentialsCommand)
            let table = try loadRows(access)
            let selected = try selection.indices(of: table.count)
            let renderer = flags.renderer()
            let view = BatchView(renderer: renderer, json: flags.events == .json)
            let runner = BatchRunner(
                plan: .init(
                    registry: makeRegistry(), pipelineFile: pipeline, pipelineText: text, rows: table, selected: selected,
                    jobs: jobs ?? ProcessInfo.processInfo.activeProcessorCount, variables: try vars.variables(), environment: environment, force: force,
                    scratchParent: scratch ?? environment["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp", grace: grace),
                sink: view, store: access.store)
            view.tallied = { runner.tally }
            _ = renderer.showStatusLine { view.statusLine() }
            Signals.install(stop: { runner.stop(deadline: grace) }, cancel: { runner.cancel() })
            renderer.say(
                "batch: \(selected.count) of \(table.count) row(s) (\(selection)), \(min(jobs ?? ProcessInfo.processInfo.activeProcessorCount, max(1, selected.count))) at once"
            )
            let results = runner.run()
            renderer.end()
            let summaryPath = summary ?? defaultSummaryPath(selection)
            try BatchSummary(pipeline: pipeline, rows: rows ?? eachDir ?? "", selection: selection.description, total: selected.count, results: results)
                .write(to: summaryPath)
            let t = runner.tally
            let notRun = selected.count - results.count
            renderer.say(
                "batch: \(t.ok) done, \(t.skipped) skipped, \(t.failed) failed" + (t.interrupted > 0 ? ", \(t.interrupted) stopped" : "")
                    + (notRun > 0 ? ", \(notRun) not started" : "") + "; summary: \(summaryPath)")
            exit = runner.wasStopped ? .interrupted : Self.status(results)
            if exit == .interrupted { throw ClipFlowError(.interrupted, "stopped: rows that completed are kept; run the batch again to finish the rest") }
        }
        if exit != .success { throw exit.exitCode }
    }

    /// 0 when every row is done or skipped; 75 when any failure may pass on a retry; 65 when
    /// every failure needs its row fixed. (A signal: 130, whatever the rows.)
    static func status(_ results: [RowResult]) -> ExitStatus {
        let bad = results.filter { $0.status == .failed || $0.status == .interrupted }
        if bad.isEmpty { return .success }
        return bad.contains(where: \.retryable) ? .retryable : .badInput
    }

    func loadRows(_ access: StoreAccess) throws -> [BatchRow] {
        if let rows { return try BatchRows.read(rows) }
        let dir = eachDir ?? ""
        guard let loc = S3Location(url: dir) else { return try BatchRows.eachDirectory(dir) }
        let prefix = loc.key.isEmpty || loc.key.hasSuffix("/") ? loc.key : loc.key + "/"
        do {
            let names = try access.store().list(bucket: loc.bucket, prefix: prefix, delimiter: "/").prefixes.map { p -> String in
                var name = String(p.dropFirst(prefix.count))
                while name.hasSuffix("/") { name.removeLast() }
                return name
            }
            return BatchRows.eachFolder(named: names.filter { !$0.isEmpty }, under: "s3://\(loc.bucket)/\(prefix)")
        } catch let e as UploadError { throw e.asClipFlowError }
    }

    func defaultSummaryPath(_ selection: RowSelection) -> String {
        let base: String
        if let rows {
            base = rows
        } else if let eachDir, !S3Location.isS3URL(eachDir) {
            base = eachDir.hasSuffix("/") ? String(eachDir.dropLast()) : eachDir
        } else {
            base = "batch"
        }
        guard selection.source != nil else { return base + ".summary.json" }
        return base + ".summary-\(selection.first)\(selection.step > 0 ? "-of-\(selection.step)" : "").json"
    }
}

/// Reads a pipeline file's text with the errors `loadPipeline` gives.
func readPipelineText(_ file: String) throws -> String {
    do {
        let data = try Data(contentsOf: URL(fileURLWithPath: file))
        guard let s = String(data: data, encoding: .utf8) else { throw ClipFlowError.badInput("pipeline '\(file)' is not UTF-8 text") }
        return s
    } catch let e as ClipFlowError { throw e } catch {
        var isDir: ObjCBool = false
        if !FileManager.default.fileExists(atPath: file, isDirectory: &isDir) { throw ClipFlowError.badInput("pipeline '\(file)': no such file") }
        if isDir.boolValue { throw ClipFlowError.badInput("pipeline '\(file)' is a directory") }
        throw ClipFlowError.badInput("pipeline '\(file)': cannot read it (\(error.localizedDescription))")
    }
}

/// The object-storage client, made once on first use from the environment (or the credentials
/// command): a batch of local files never asks for keys.
final class StoreAccess: Sendable {
    let environment: [String: String]
    let credentialsCommand: String?
    private let made = Mutex<S3Client?>(nil)
    init(environment: [String: String], credentialsCommand: String?) {
        self.environment = environment
        self.credentialsCommand = credentialsCommand
    }
    @Sendable func store() throws -> S3Client {
        try made.withLock { m in
            if let m { return m }
            let s = S3Client(access: try S3Access.fromEnvironment(environment, credentialsCommand: credentialsCommand))
            m = s
            return s
        }
    }
}
