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
        abstract: "Upload files resumably (TUS, clipflow serve, Gcore-style hosting, S3/OSS multipart) through a persistent queue.",
        discussion: """
            `clipflow upload FILE... --to tus|clipflow|gcore|s3 --endpoint URL` adds the files to the queue and \
            uploads them, resuming any earlier partial upload of the same file. Ctrl-C pauses: the uploads stay \
            queued and `clipflow upload run` continues them where the server stopped. `--to clipflow --endpoint \
            http://127.0.0.1:8080` sends a video to a `clipflow serve` and prints the page where it plays; a token \
            is needed only when that server has an API key (CLIPFLOW_UPLOAD_TOKEN set to it). Credentials are \
            never stored: they come from the environment (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY/AWS_SESSION_TOKEN \
            for S3, CLIPFLOW_UPLOAD_TOKEN/CLIPFLOW_UPLOAD_REFRESH_TOKEN for tokens), a command or a URL, and are \
            asked for again when the server says they expired.
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

    var path: String { directory ?? UploadQueue.defaultDirectory }

    /// The queue, for changing it (adding, pausing, listing); uploads run in `UploadQueueStage`.
    func makeQueue() throws -> UploadQueue {
        try UploadQueue(directory: path, concurrency: 1) { d, store in
            try d.makeUploader(store: store)
        }
    }
}

/// `--concurrency`, on the commands that upload (send, run, resume).
struct ConcurrencyFlag: ParsableArguments {
    @Option(help: "Uploads at once (1 to 16).")
    var concurrency: Int = 2

    func validate() throws {
        guard (1...16).contains(concurrency) else { throw ValidationError("--concurrency must be from 1 to 16") }
    }
}

struct DestinationFlags: ParsableArguments {
    @Option(name: .customLong("to"), help: "tus, clipflow (a clipflow serve), gcore or s3.")
    var method: String?

    @Option(help: "tus: creation URL (https://host/files); clipflow: the server's URL (http://127.0.0.1:8080); gcore: API base URL; s3: service URL.")
    var endpoint: String?

    @Option(help: "s3: bucket.") var bucket: String?
    @Option(help: "s3: signing region (default us-east-1).") var region: String?
    @Option(name: .customLong("key-prefix"), help: "s3: object key prefix.") var keyPrefix: String?
    @Option(help: "s3: path or virtual addressing.") var addressing: String?
    @Option(
        name: .customLong("upload-url"),
        help: "gcore, clipflow: TUS URL template with {hostname} (default https://{hostname}/upload; http:// when --endpoint is http://).")
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

    @Option(
        name: .customLong("title"),
        help: ArgumentHelp(
            "Metadata: title (gcore, clipflow: the video name). Uploading several files: give one per file, in their order.", valueName: "title"))
    var titles: [String] = []
    @Option(help: "Metadata: description.") var description: String?
    @Option(name: .customLong("tag"), help: "Metadata: a tag (repeatable).") var tags: [String] = []
    @Option(help: "Metadata: category.") var category: String?
    @Option(name: .customLong("cover-url"), help: "Metadata: cover image URL.") var coverURL: String?

    func destination() throws -> UploadDestination {
        guard let methodName = method else { throw ValidationError("--to tus|clipflow|gcore|s3 is required") }
        guard let m = UploadDestination.Method(rawValue: methodName) else {
            throw ValidationError("--to must be tus, clipflow, gcore or s3 (got '\(methodName)')")
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

    /// Refuses titles that do not go one to a file (a title names one video).
    func checkTitles(files: Int) throws {
        guard !titles.isEmpty, titles.count != files else { return }
        throw ValidationError(
            "--title: \(titles.count) title\(titles.count == 1 ? "" : "s") for \(files) files; give one per file, in their order, or none (a title names one video)"
        )
    }

    /// The metadata of the `index`th file (its own title).
    func metadata(file index: Int) -> [String: String] {
        var m: [String: String] = [:]
        if titles.indices.contains(index) { m["title"] = titles[index] }
        if let description { m["description"] = description }
        if !tags.isEmpty { m["tags"] = tags.joined(separator: ",") }
        if let category { m["category"] = category }
        if let coverURL { m["cover-url"] = coverURL }
        return m
    }
}

/// Runs the uploads `ids` name (nil: everything queued) as a graph of one `upload-queue` stage,
/// and concludes: 0 when none failed (uploads paused or cancelled on request are not failures),
/// 130 when interrupted (the paused uploads stay queued), 1 when one failed (each named, with
/// the command that retries it).
func runUploads(_ ids: [String]?, queue: QueueFlags, concurrency: ConcurrencyFlag, door: FrontDoor) throws {
    let path = queue.path, concurrency = concurrency.concurrency
    let node = StageNode("upload") { UploadQueueStage(id: "upload", directory: path, concurrency: concurrency, ids: ids ?? []) }
    let (outcome, _) = try door.run(nodes: [node], edges: [], grace: 10)
    if outcome == .interrupted {
        let paused = door.log.result(UploadQueueSummary.self, of: "upload")?.paused ?? 0
        throw ClipFlowError(
            .interrupted, "stopped: \(paused) upload(s) paused and kept in the queue; `clipflow upload run --queue \(path)` continues them")
    }
    // Each failure was told as it happened (with its reason): the closing error sums up.
    if case .failed(_, let e) = outcome, door.showsItems, let ids = door.log.result(UploadQueueSummary.self, of: "upload")?.failedIDs, !ids.isEmpty {
        let n = ids.count
        throw ClipFlowError(
            e.kind, "\(n) upload\(n == 1 ? "" : "s") failed (above); `clipflow upload resume \(ids.joined(separator: " ")) --queue \(path)` retries")
    }
    if let e = ErrorReport.error(outcome) { throw e }
}

struct UploadSend: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "send",
        abstract: "Add files to the queue and upload them (the default: `clipflow upload FILE... --to ...`)."
    )

    @Argument(help: "Files to upload.") var files: [String] = []
    @OptionGroup var destination: DestinationFlags
    @OptionGroup var queue: QueueFlags
    @OptionGroup var concurrency: ConcurrencyFlag
    @Flag(name: .customLong("no-wait"), help: "Only add to the queue; `clipflow upload run` uploads later.") var noWait = false
    @OptionGroup var flags: OutputFlags

    func validate() throws {
        if files.isEmpty { throw ValidationError("give at least one file to upload") }
        // `clipflow upload lsit`: a misspelt command reads as a file name.
        if files.count == 1, !FileManager.default.fileExists(atPath: files[0]),
            let meant = didYouMean(files[0], in: Upload.configuration.subcommands.map { $0._commandName })
        {
            throw ValidationError("'\(files[0])' is neither a file nor an upload command; did you mean 'clipflow upload \(meant)'?")
        }
        try destination.checkTitles(files: files.count)
        _ = try destination.destination()
    }

    func run() throws {
        let d = try destination.destination()
        let door = FrontDoor(flags)
        try ErrorReport.run {
            let q = try queue.makeQueue()
            var ids: [String] = []
            for (n, f) in files.enumerated() {
                let e = try q.add(file: f, destination: d, metadata: destination.metadata(file: n))
                ids.append(e.id)
                door.say("queued \(e.id): \(e.file)")
            }
            if noWait { return }
            try runUploads(ids, queue: queue, concurrency: concurrency, door: door)
        }
    }
}

struct UploadRun: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run", abstract: "Upload everything queued (continuing paused-by-Ctrl-C and interrupted uploads).")
    @OptionGroup var queue: QueueFlags
    @OptionGroup var concurrency: ConcurrencyFlag
    @OptionGroup var flags: OutputFlags

    func run() throws {
        let door = FrontDoor(flags)
        try ErrorReport.run { try runUploads(nil, queue: queue, concurrency: concurrency, door: door) }
    }
}

struct UploadList: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "list", abstract: "List the queue.")
    @OptionGroup var queue: QueueFlags
    @Flag(help: "JSON output.") var json = false

    func run() throws {
        try ErrorReport.run {
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
                if let r = e.result { line += "\n          " + r.summary }
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
        try ErrorReport.run {
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
    @OptionGroup var concurrency: ConcurrencyFlag
    @OptionGroup var flags: OutputFlags
    func run() throws {
        let door = FrontDoor(flags)
        try ErrorReport.run {
            let q = try queue.makeQueue()
            var ids = target.ids
            if target.all {
                ids = try q.list().filter { [.paused, .failed, .queued].contains($0.state) }.map(\.id)
                try q.resumeAll()
            } else {
                for id in ids { try q.resume(id) }
            }
            if noWait || ids.isEmpty { return }
            try runUploads(ids, queue: queue, concurrency: concurrency, door: door)
        }
    }
}

struct UploadCancel: ParsableCommand {
    static let configuration = CommandConfiguration(commandName: "cancel", abstract: "Cancel uploads and delete them on the server.")
    @OptionGroup var target: IDFlags
    @OptionGroup var queue: QueueFlags
    func run() throws {
        try ErrorReport.run {
            let q = try queue.makeQueue()
            let ids = target.all ? try q.list().filter { !$0.isDone }.map(\.id) : target.ids
            for id in ids { try q.cancel(id) }
        }
    }
}

struct UploadPrune: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "prune", abstract: "Remove finished and cancelled uploads from the list (and failed ones, with --failed).")
    @OptionGroup var queue: QueueFlags
    @Flag(
        help:
            "Remove failed uploads too. What they left on the server stays: uploading the same file again resumes it; `clipflow upload cancel` deletes it."
    )
    var failed = false
    func run() throws {
        try ErrorReport.run { try queue.makeQueue().prune(failed: failed) }
    }
}
