import ArgumentParser
import ClipFlowCore
import ClipFlowUpload
import Foundation
import Synchronization
#if canImport(Glibc)
    import Glibc
#endif

/// `clipflow upload ...`: send files, and manage the persistent upload queue.
struct Upload: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Upload files resumably (TUS, Gcore-style hosting, S3/OSS multipart) through a persistent queue.",
        discussion: """
            `clipflow upload FILE... --to tus|gcore|s3 --endpoint URL` adds the files to the queue and uploads \
            them, resuming any earlier partial upload of the same file. Ctrl-C pauses: the uploads stay queued \
            and `clipflow upload run` continues them where the server stopped. Credentials are never stored: \
            they come from the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN for S3, \
            CLIPFLOW_UPLOAD_TOKEN/CLIPFLOW_UPLOAD_REFRESH_TOKEN for tokens), a command or a URL, and are asked \
            for again when the server says they expired.
            """,
        subcommands: [
            UploadSend.self, UploadList.self, UploadRun.self, UploadPause.self, UploadResume.self,
            UploadCancel.self, UploadPrune.self
        ],
        defaultSubcommand: UploadSend.self
    )
}

struct QueueFlags: ParsableArguments {
    @Option(name: .customLong("queue"), help: ArgumentHelp("Upload queue directory (default $XDG_STATE_HOME/clipflow/uploads).", valueName: "DIR"))
    var directory: String?

    @Option(help: "Uploads at once.")
    var concurrency: Int = 2

    var path: String { directory ?? UploadQueue.defaultDirectory }

    func validate() throws {
        guard (1...16).contains(concurrency) else { throw ValidationError("--concurrency must be from 1 to 16") }
    }

    func makeQueue(observer: UploadObserver = NoUploadObserver(), cancellation: CancellationFlag? = nil) throws -> UploadQueue {
        try UploadQueue(directory: path, concurrency: concurrency, observer: observer, cancellation: cancellation) { d, store in
            try d.makeUploader(store: store)
        }
    }
}

struct DestinationFlags: ParsableArguments {
    @Option(name: .customLong("to"), help: "tus, gcore or s3.")
    var method: String?

    @Option(help: "tus: creation URL (https://host/files); gcore: API base URL; s3: service URL.")
    var endpoint: String?

    @Option(help: "s3: bucket.") var bucket: String?
    @Option(help: "s3: signing region (default us-east-1).") var region: String?
    @Option(name: .customLong("key-prefix"), help: "s3: object key prefix.") var keyPrefix: String?
    @Option(help: "s3: path or virtual addressing.") var addressing: String?
    @Option(name: .customLong("upload-url"), help: "gcore: TUS URL template with {hostname} (default https://{hostname}/upload).")
    var uploadURLTemplate: String?
    @Option(name: .customLong("chunk-size"), help: "TUS chunk / S3 part size in bytes (default automatic).") var chunkSize: Int64?
    @Option(name: .customLong("min-part-size"), help: "s3: the backend's smallest part (S3 5242880, OSS 102400).") var minimumPartSize: Int64?
    @Option(help: "TUS checksum: auto (the best the server offers), off, or sha1/sha256 (fails if the server does not offer it).") var checksum: String?
    @Option(name: .customLong("stall-timeout"), help: "Seconds without a byte moving before a request is retried (default 30).")
    var stallTimeout: Int?
    @Option(name: .customLong("response-timeout"), help: "Seconds an answer may take once a request is sent, even while bytes keep arriving (default 300).")
    var responseTimeout: Double?
    @Option(help: "Failed requests in a row without progress before giving up (default 8).") var retries: Int?
    @Option(name: .customLong("retry-delay"), help: "First retry delay in seconds (default 0.5).") var retryDelay: Double?
    @Option(name: .customLong("ca-bundle"), help: "Extra CA certificates (PEM) to trust.") var caBundle: String?
    @Option(name: .customLong("credentials-command"), help: "Shell command printing credentials JSON; run at start and when they expire.")
    var credentialsCommand: String?
    @Option(name: .customLong("credentials-url"), help: "URL returning credentials JSON; called at start and when they expire.")
    var credentialsURL: String?

    @Option(help: "Metadata: title (gcore: the video name).") var title: String?
    @Option(help: "Metadata: description.") var description: String?
    @Option(name: .customLong("tag"), help: "Metadata: a tag (repeatable).") var tags: [String] = []
    @Option(help: "Metadata: category.") var category: String?
    @Option(name: .customLong("cover-url"), help: "Metadata: cover image URL.") var coverURL: String?

    func destination() throws -> UploadDestination {
        guard let methodName = method else { throw ValidationError("--to tus|gcore|s3 is required") }
        guard let m = UploadDestination.Method(rawValue: methodName) else {
            throw ValidationError("--to must be tus, gcore or s3 (got '\(methodName)')")
        }
        guard let endpoint else { throw ValidationError("--endpoint URL is required") }
        var d = UploadDestination(
            method: m, endpoint: endpoint,
            credentials: CredentialSource(command: credentialsCommand.map { ["/bin/sh", "-c", $0] }, url: credentialsURL))
        d.bucket = bucket
        d.region = region
        d.keyPrefix = keyPrefix
        if let addressing {
            guard let a = S3Options.AddressingStyle(rawValue: addressing) else {
                throw ValidationError("--addressing: must be \"path\" or \"virtual\"")
            }
            d.addressing = a
        }
        d.uploadURLTemplate = uploadURLTemplate
        d.chunkSize = chunkSize
        d.minimumPartSize = minimumPartSize
        if let checksum {
            guard let c = TUSOptions.Checksum(rawValue: checksum) else {
                throw ValidationError("--checksum: must be auto, off, sha1 or sha256")
            }
            d.checksum = c
        }
        d.stallTimeout = stallTimeout
        d.responseTimeout = responseTimeout
        d.maxRetries = retries
        d.retryDelay = retryDelay
        d.caBundle = caBundle
        if let p = d.problems().first { throw ValidationError("--\(p.field): \(p.message)") }
        return d
    }

    var metadata: [String: String] {
        var m: [String: String] = [:]
        if let title { m["title"] = title }
        if let description { m["description"] = description }
        if !tags.isEmpty { m["tags"] = tags.joined(separator: ",") }
        if let category { m["category"] = category }
        if let coverURL { m["cover-url"] = coverURL }
        return m
    }
}

enum UploadEventFormat: String, ExpressibleByArgument { case text, json }

struct UploadSend: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Add files to the queue and upload them (the default: `clipflow upload FILE... --to ...`)."
    )

    @Argument(help: "Files to upload.") var files: [String] = []
    @OptionGroup var destination: DestinationFlags
    @OptionGroup var queue: QueueFlags
    @Flag(name: .customLong("no-wait"), help: "Only add to the queue; `clipflow upload run` uploads later.") var noWait = false
    @Option(help: "Event output: text (progress on stderr) or json (one JSON object per line on stdout).")
    var events: UploadEventFormat = .text
    @OptionGroup var flags: OutputFlags

    func validate() throws {
        if files.isEmpty { throw ValidationError("give at least one file to upload") }
    }

    func run() throws {
        let d = try destination.destination()
        let printer = UploadPrinter(format: events, quiet: flags.quiet)
        let stop = SignalHandling.install()
        try printer.reportingErrors {
            let q = try queue.makeQueue(observer: printer, cancellation: stop)
            var ids: [String] = []
            for f in files {
                let e = try q.add(file: f, destination: d, metadata: destination.metadata)
                ids.append(e.id)
                printer.say("queued \(e.id): \(e.file)")
            }
            if noWait { return }
            let ended = try q.run(ids: Set(ids))
            try printer.conclude(ended, queue: queue.path, interrupted: stop.isCancelled)
        }
    }
}

struct UploadRun: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run", abstract: "Upload everything queued (continuing paused-by-Ctrl-C and interrupted uploads).")
    @OptionGroup var queue: QueueFlags
    @Option(help: "Event output: text or json.") var events: UploadEventFormat = .text
    @OptionGroup var flags: OutputFlags

    func run() throws {
        let printer = UploadPrinter(format: events, quiet: flags.quiet)
        let stop = SignalHandling.install()
        try printer.reportingErrors {
            let q = try queue.makeQueue(observer: printer, cancellation: stop)
            let before = Set(try q.list().filter { [.queued, .running].contains($0.state) }.map(\.id))
            let ended = try q.run()
            try printer.conclude(ended.filter { before.contains($0.id) }, queue: queue.path, interrupted: stop.isCancelled)
        }
    }
}

struct UploadList: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List the queue.")
    @OptionGroup var queue: QueueFlags
    @Flag(help: "JSON output.") var json = false

    func run() throws {
        let printer = UploadPrinter(format: .text, quiet: false)
        try printer.reportingErrors {
            let entries = try queue.makeQueue().list()
            if json {
                let enc = JSONEncoder()
                enc.outputFormatting = [.prettyPrinted, .sortedKeys]
                enc.dateEncodingStrategy = .iso8601
                // Secret-looking query parameters (e.g. in a credentials URL) are blanked.
                print(Secrets.shared.redact(String(decoding: try enc.encode(entries), as: UTF8.self)))
                return
            }
            if entries.isEmpty { print("the upload queue is empty (\(queue.path))"); return }
            for e in entries {
                let pct = e.total > 0 ? Int(Double(e.acknowledged) * 100 / Double(e.total)) : 100
                var line =
                    "\(e.id)  \(e.state.rawValue.padding(toLength: 9, withPad: " ", startingAt: 0)) \(String(format: "%3d%%", pct))  \(e.file)  -> \(e.destination.name)"
                if let m = e.errorMessage { line += "\n          error: \(m)" }
                if let r = e.result { line += "\n          " + UploadPrinter.describe(r) }
                print(line)
            }
        }
    }
}

struct IDFlags: ParsableArguments {
    @Argument(help: "Upload ids (see `clipflow upload list`).") var ids: [String] = []
    @Flag(help: "All uploads.") var all = false
    func validate() throws {
        if ids.isEmpty == !all { throw ValidationError("give upload ids or --all (not both)") }
    }
}

struct UploadPause: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "pause", abstract: "Hold uploads (a running one stops, resumable).")
    @OptionGroup var target: IDFlags
    @OptionGroup var queue: QueueFlags
    func run() throws {
        try UploadPrinter(format: .text, quiet: false).reportingErrors {
            let q = try queue.makeQueue()
            if target.all { try q.pauseAll() } else { for id in target.ids { try q.pause(id) } }
        }
    }
}

struct UploadResume: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "resume", abstract: "Put paused or failed uploads back in the queue, then upload them.")
    @OptionGroup var target: IDFlags
    @OptionGroup var queue: QueueFlags
    @Flag(name: .customLong("no-wait"), help: "Only requeue; do not upload now.") var noWait = false
    @Option(help: "Event output: text or json.") var events: UploadEventFormat = .text
    @OptionGroup var flags: OutputFlags
    func run() throws {
        let printer = UploadPrinter(format: events, quiet: flags.quiet)
        let stop = SignalHandling.install()
        try printer.reportingErrors {
            let q = try queue.makeQueue(observer: printer, cancellation: stop)
            var ids = target.ids
            if target.all {
                ids = try q.list().filter { [.paused, .failed, .queued].contains($0.state) }.map(\.id)
                try q.resumeAll()
            } else {
                for id in ids { try q.resume(id) }
            }
            if noWait || ids.isEmpty { return }
            try printer.conclude(try q.run(ids: Set(ids)), queue: queue.path, interrupted: stop.isCancelled)
        }
    }
}

struct UploadCancel: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "cancel", abstract: "Cancel uploads and delete them on the server.")
    @OptionGroup var target: IDFlags
    @OptionGroup var queue: QueueFlags
    func run() throws {
        try UploadPrinter(format: .text, quiet: false).reportingErrors {
            let q = try queue.makeQueue()
            let ids = target.all ? try q.list().filter { !$0.isDone }.map(\.id) : target.ids
            for id in ids { try q.cancel(id) }
        }
    }
}

struct UploadPrune: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "prune", abstract: "Remove finished and cancelled uploads from the list.")
    @OptionGroup var queue: QueueFlags
    func run() throws {
        try UploadPrinter(format: .text, quiet: false).reportingErrors { try queue.makeQueue().prune() }
    }
}

/// Prints upload events: a progress line per upload on stderr (every 10%, or a redrawn line on a
/// terminal), retries and results; or JSON lines on stdout. Thread-safe.
final class UploadPrinter: UploadObserver, Sendable {
    let format: UploadEventFormat
    let quiet: Bool
    /// Held while one event is written, so lines from concurrent uploads do not interleave; holds
    /// the last tenth printed per upload.
    private let lastTenth = Mutex<[String: Int]>([:])
    private let isTTY = isatty(2) == 1

    init(format: UploadEventFormat, quiet: Bool) {
        self.format = format
        self.quiet = quiet
    }

    func upload(_ event: UploadEvent) {
        lastTenth.withLock { lastTenth in write(event, &lastTenth) }
    }

    private func write(_ event: UploadEvent, _ lastTenth: inout [String: Int]) {
        if format == .json {
            FileHandle.standardOutput.write((Self.json(event) + "\n").data(using: .utf8)!)
            return
        }
        guard !quiet else { return }
        switch event {
        case .started(let id, let file, let bytes, let at):
            err("\(id): uploading \(file) (\(bytes) bytes\(at > 0 ? ", resuming at \(at)" : ""))")
        case .progress(let id, let p):
            let tenth = Int(p.fraction * 10)
            if isTTY {
                FileHandle.standardError.write("\r\(id): \(Self.progressText(p))\u{1B}[K".data(using: .utf8)!)
            } else if tenth != lastTenth[id] {
                lastTenth[id] = tenth
                err("\(id): \(Self.progressText(p))")
            }
        case .finished(let id, let r):
            err("\(isTTY ? "\n" : "")\(id): finished: \(Self.describe(r))")
        case .failed(let id, let code, let message):
            err("\(id): failed (\(code)): \(message)")
        case .credentialsExpired(let id):
            err("\(id): credentials expired; asking for fresh ones")
        case .retryStarted(let id, let attempt, let delay, let reason):
            err("\(id): retry \(attempt) in \(String(format: "%.1f", delay)) s: \(reason)")
        case .retryResumed(let id, _, let offset):
            err("\(id): resumed at byte \(offset)")
        case .paused(let id):
            err("\(id): paused")
        case .cancelled(let id):
            err("\(id): cancelled")
        }
    }

    func say(_ s: String) {
        guard format == .text, !quiet else { return }
        lastTenth.withLock { _ in err(s) }
    }

    /// Exit status from how the uploads ended: 0 when none failed (uploads paused or cancelled on
    /// request are not failures), 130 when interrupted, 1 otherwise.
    func conclude(_ ended: [QueueEntry], queue: String, interrupted: Bool) throws {
        let unfinished = ended.filter { $0.state == .queued || $0.state == .running || $0.state == .paused }
        if interrupted {
            err("interrupted: \(unfinished.count) upload(s) paused and kept in the queue; `clipflow upload run --queue \(queue)` continues them")
            throw ExitCode(130)
        }
        let failed = ended.filter { $0.state == .failed }
        for e in failed {
            // Most messages already start with the file; name it once.
            let message = e.errorMessage ?? "upload failed"
            let text = message.hasPrefix(e.file + ":") ? message : "\(e.file): \(message)"
            err("error: \(text) (id \(e.id); `clipflow upload resume \(e.id) --queue \(queue)` retries)")
        }
        if !failed.isEmpty { throw ExitCode(1) }
    }

    func reportingErrors(_ body: () throws -> Void) throws {
        do {
            try body()
        } catch let e as UploadError {
            err("error: \(e.message)")
            throw ExitCode(1)
        } catch let e as ClipFlowError {
            err("error: \(Secrets.shared.redact(e.description))")
            throw ExitCode(e.exitCode)
        }
    }

    private func err(_ s: String) {
        FileHandle.standardError.write((s + "\n").data(using: .utf8)!)
    }

    static func progressText(_ p: UploadProgress) -> String {
        var s = String(format: "%3d%% %.1f/%.1f MB", Int(p.fraction * 100), Double(p.acknowledged) / 1e6, Double(p.total) / 1e6)
        if p.bytesPerSecond > 0 { s += String(format: " %.1f MB/s", p.bytesPerSecond / 1e6) }
        if let eta = p.eta, p.acknowledged < p.total { s += String(format: " ETA %.0f s", eta) }
        return s
    }

    static func describe(_ r: UploadResult) -> String {
        var parts = ["\(r.bytes) bytes"]
        if let u = r.url { parts.append(u) }
        if let v = r.videoID { parts.append("video \(v)") }
        if let p = r.playbackURL { parts.append("playback \(p)") }
        if let e = r.etag { parts.append("etag \(e)") }
        return parts.joined(separator: ", ")
    }

    static func json(_ event: UploadEvent) -> String {
        var o: [String: Any] = ["event": event.name, "id": event.uploadID]
        switch event {
        case .started(_, let file, let bytes, let at):
            o["file"] = file; o["bytes"] = bytes; o["resumed_at"] = at
        case .progress(_, let p):
            o["acknowledged"] = p.acknowledged; o["total"] = p.total
            o["bytes_per_second"] = (p.bytesPerSecond * 10).rounded() / 10
            if let eta = p.eta { o["eta"] = (eta * 10).rounded() / 10 }
        case .finished(_, let r):
            var d: [String: Any] = ["method": r.method, "bytes": r.bytes]
            if let v = r.url { d["url"] = v }
            if let v = r.videoID { d["video_id"] = v }
            if let v = r.etag { d["etag"] = v }
            if let v = r.uploadID { d["upload_id"] = v }
            if let v = r.playbackURL { d["playback_url"] = v }
            o["result"] = d
        case .failed(_, let code, let message):
            o["code"] = code; o["message"] = message
        case .retryStarted(_, let attempt, let delay, let reason):
            o["attempt"] = attempt; o["delay"] = (delay * 1000).rounded() / 1000; o["reason"] = reason
        case .retryResumed(_, let attempt, let offset):
            o["attempt"] = attempt; o["offset"] = offset
        case .credentialsExpired, .paused, .cancelled:
            break
        }
        let data = (try? JSONSerialization.data(withJSONObject: o, options: [.sortedKeys])) ?? Data("{}".utf8)
        return Secrets.shared.redact(String(decoding: data, as: UTF8.self))
    }
}
