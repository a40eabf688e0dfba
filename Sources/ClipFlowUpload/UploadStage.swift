import ClipFlowCore
import Foundation

public enum UploadStages {
    public static func register(into r: StageRegistry) {
        r.register(UploadStage.kind)
        r.register(UploadQueueStage.kind)
        r.register(PublishStage.kind)
    }

    /// Reads an `UploadDestination` and metadata from stage parameters (shared with the CLI's
    /// flag names: the same words in both places).
    static func destination(_ p: StageParams) -> UploadDestination {
        let method = UploadDestination.Method(rawValue: p.string("method") ?? "tus") ?? .tus
        var d = UploadDestination(method: method, endpoint: p.string("endpoint") ?? "")
        d.bucket = p.string("bucket")
        d.region = p.string("region")
        d.keyPrefix = p.string("key-prefix")
        d.addressing = p.string("addressing").flatMap(S3Options.AddressingStyle.init(rawValue:))
        d.uploadURLTemplate = p.string("upload-url")
        d.chunkSize = p.int("chunk-size").map(Int64.init)
        d.minimumPartSize = p.int("min-part-size").map(Int64.init)
        d.checksum = p.string("checksum").flatMap(TUSOptions.Checksum.init(rawValue:))
        d.stallTimeout = p.int("stall-timeout")
        d.maxRetries = p.int("retries")
        d.retryDelay = p.double("retry-delay")
        d.verifyTLS = p.bool("verify-tls")
        d.caBundle = p.string("ca-bundle")
        d.credentials = CredentialSource(
            command: p.string("credentials-command").map { ["/bin/sh", "-c", $0] },
            url: p.string("credentials-url"))
        return d
    }

    static func metadata(_ p: StageParams) -> [String: String] {
        var m: [String: String] = [:]
        for k in ["title", "description", "category", "cover-url"] { if let v = p.string(k) { m[k] = v } }
        if let tags = p.strings("tags"), !tags.isEmpty { m["tags"] = tags.joined(separator: ",") }
        return m
    }
}

/// Sink: uploads every file it receives (the merged video, its cover) through the persistent
/// upload queue, resumably, and reports progress, retries and results as pipeline events.
/// A graceful stop (first SIGINT) that comes while files may still arrive is for the stages
/// before it (a recording ends, a merge joins what was recorded): the files that then arrive are
/// uploaded. A stop that comes once every input has ended (the uploads are the work left), a
/// cancel (second SIGINT, the stop's deadline) or another stage's failure pauses the running
/// uploads at once and every upload of this stage stays queued: `clipflow upload run` (or the
/// next pipeline run) continues them where the server stopped.
/// Belongs to its stage queue; a stop or cancel reaches only the upload queue's own controls
/// (thread-safe; see `StageUploads.openQueue`).
public final class UploadStage: Stage {
    public let id: String
    public let destination: UploadDestination
    public let metadata: [String: String]
    public let queueDirectory: String
    public let concurrency: Int
    public let wait: Bool
    private let makeUploader: @Sendable (UploadDestination, ResumeStore) throws -> FileUploader
    private var queue: UploadQueue?
    private var ids: [String] = []
    /// Raised (`cancel()`) once every input has ended (`drain`): a stop from then on pauses the
    /// uploads. Read by the stop handler on the stopping thread.
    private let inputsEnded = CancellationFlag()
    public var inputTypes: Set<PortType> { [.video, .image, .clips] }
    public var outputType: PortType? { nil }

    public static let kind = StageKind(
        name: "upload",
        summary: "sink: upload every file it receives (TUS, clipflow serve, Gcore-style hosting, S3/OSS multipart), resumably, through the upload queue",
        inputs: [.video, .image, .clips], minInputs: 1, output: nil,
        params: [
            ParamSpec(
                "method", .choice(UploadDestination.Method.allCases.map(\.rawValue)), required: true,
                help:
                    "tus: a TUS 1.0 server; clipflow: a clipflow serve (a token only when it has an API key); gcore: Gcore-style video hosting API, then TUS; s3: S3/OSS multipart"
            ),
            ParamSpec(
                "endpoint", .string, required: true,
                help:
                    "tus: the creation URL (https://host/files); clipflow: the server's URL (http://127.0.0.1:8080); gcore: the API base URL; s3: the service URL"
            ),
            ParamSpec("bucket", .string, help: "s3: the bucket"),
            ParamSpec("region", .string, help: "s3: the signing region (default us-east-1)"),
            ParamSpec("key-prefix", .string, help: "s3: prefix of object keys (the key is prefix + file name)"),
            ParamSpec(
                "addressing", .choice(S3Options.AddressingStyle.allCases.map(\.rawValue)),
                help: "s3: path style (endpoint/bucket/key, default) or virtual-hosted (bucket.endpoint/key)"),
            ParamSpec(
                "upload-url", .string,
                help: "gcore, clipflow: TUS URL template, {hostname} replaced (default https://{hostname}/upload; http:// when the endpoint is http://)"),
            ParamSpec("chunk-size", .integer(min: 1, max: nil), help: "TUS chunk / S3 part size in bytes (default: automatic)"),
            ParamSpec("min-part-size", .integer(min: 1, max: nil), help: "s3: the backend's smallest part (S3 5242880, OSS 102400)"),
            ParamSpec(
                "checksum", .choice(TUSOptions.Checksum.allCases.map(\.rawValue)),
                help:
                    "TUS checksum per chunk: auto (sha256 or sha1 when the server offers one; default), off, or sha1/sha256 (the upload fails if the server does not offer it)"
            ),
            ParamSpec("stall-timeout", .integer(min: 1, max: nil), help: "seconds without a byte moving before a request is retried (default 30)"),
            ParamSpec("retries", .integer(min: 0, max: nil), help: "failed requests in a row without progress before giving up (default 8)"),
            ParamSpec("retry-delay", .number(min: 0, max: nil), help: "first retry delay in seconds, doubled per failure, jittered (default 0.5)"),
            ParamSpec("verify-tls", .boolean, help: "verify the server's TLS certificate (default true)"),
            ParamSpec("ca-bundle", .path, help: "extra CA certificates (PEM) to trust"),
            ParamSpec(
                "credentials-command", .string,
                help: "shell command printing credentials JSON, run at start and whenever they expire (default: from the environment)"),
            ParamSpec("credentials-url", .string, help: "URL returning credentials JSON, called at start and whenever they expire"),
            ParamSpec("title", .string, help: "metadata: title (gcore, clipflow: the video name; default the file name)"),
            ParamSpec("description", .string, help: "metadata: description"),
            ParamSpec("tags", .stringList, help: "metadata: tags"),
            ParamSpec("category", .string, help: "metadata: category"),
            ParamSpec("cover-url", .string, help: "metadata: cover image URL")
        ] + StageUploads.queueParams + [
            ParamSpec(
                "wait", .boolean, default: .bool(true),
                help: "wait for the uploads to finish (false: leave them queued for `clipflow upload run`)")
        ],
        check: { p, path in
            UploadStages.destination(p).problems().map { PipelineIssue("\(path).\($0.field)", $0.message) }
        },
        make: { id, p in
            UploadStage(
                id: id, destination: UploadStages.destination(p), metadata: UploadStages.metadata(p),
                queueDirectory: StageUploads.directory(p), concurrency: StageUploads.concurrency(p), wait: p.bool("wait") ?? true)
        })

    public init(
        id: String, destination: UploadDestination, metadata: [String: String] = [:],
        queueDirectory: String = UploadQueue.defaultDirectory, concurrency: Int = 2, wait: Bool = true,
        makeUploader: @escaping @Sendable (UploadDestination, ResumeStore) throws -> FileUploader = { try $0.makeUploader(store: $1) }
    ) {
        self.id = id
        self.destination = destination
        self.metadata = metadata
        self.queueDirectory = queueDirectory
        self.concurrency = concurrency
        self.wait = wait
        self.makeUploader = makeUploader
    }

    public func prepare(_ context: StageContext) throws {
        let ended = inputsEnded
        queue = try StageUploads.openQueue(
            queueDirectory, concurrency: concurrency, makeUploader: makeUploader, context, stopPauses: { ended.isCancelled })
    }

    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        guard let path = item.path, let queue else { return .ok }
        do {
            let entry = try queue.add(file: path, destination: destination, metadata: metadata)
            ids.append(entry.id)
            context.emit(.notice("queued \((path as NSString).lastPathComponent) for upload (\(destination.name)), id \(entry.id)"))
        } catch let e as UploadError {
            throw ClipFlowError.badInput(e.message)
        }
        return .ok
    }

    public func drain(_ context: StageContext) throws {
        inputsEnded.cancel()
        guard let queue, !ids.isEmpty else { return }
        guard wait else {
            context.emit(.notice("\(ids.count) upload(s) left in the queue \(queueDirectory); run `clipflow upload run --queue \(queueDirectory)`"))
            return
        }
        try StageUploads.run(queue, ids: Set(ids), directory: queueDirectory, context)
    }
}

/// Turns every upload event into an item event of the stage: the upload's id, the event's name
/// (`started`, `progress`, `finished`, `failed`, `credentials-expired`, `retry-started`,
/// `retry-resumed`, `paused`, `cancelled`), its fields, and the line a person reads. Every string
/// is redacted (`Secrets`).
struct StageUploadObserver: UploadObserver {
    let context: StageContext

    func upload(_ event: UploadEvent) {
        let (fields, text) = Self.describe(event)
        context.emit(.item(id: event.uploadID, name: event.name, fields: fields.map(Self.redacted), text: Secrets.shared.redact(text)))
    }

    static func describe(_ event: UploadEvent) -> ([EventField], String) {
        switch event {
        case .started(_, let file, let bytes, let at):
            return (
                [EventField("file", .string(file)), EventField("bytes", .integer(bytes)), EventField("resumed_at", .integer(at))],
                "uploading \(file) (\(bytes) bytes\(at > 0 ? ", resuming at \(at)" : ""))"
            )
        case .progress(_, let p):
            var f = [
                EventField("acknowledged", .integer(p.acknowledged)), EventField("total", .integer(p.total)),
                EventField("bytes_per_second", .number((p.bytesPerSecond * 10).rounded() / 10))
            ]
            if let eta = p.eta { f.append(EventField("eta", .number((eta * 10).rounded() / 10))) }
            return (f, progressText(p))
        case .finished(_, let r):
            var d = [EventField("method", .string(r.method)), EventField("bytes", .integer(r.bytes))]
            if let v = r.url { d.append(EventField("url", .string(v))) }
            if let v = r.videoID { d.append(EventField("video_id", .string(v))) }
            if let v = r.etag { d.append(EventField("etag", .string(v))) }
            if let v = r.uploadID { d.append(EventField("upload_id", .string(v))) }
            if let v = r.playbackURL { d.append(EventField("playback_url", .string(v))) }
            if let v = r.watchURL { d.append(EventField("watch_url", .string(v))) }
            return ([EventField("result", .object(d))], "finished: \(r.summary)")
        case .failed(_, let code, let message):
            return ([EventField("code", .string(code)), EventField("message", .string(message))], "failed (\(code)): \(message)")
        case .credentialsExpired:
            return ([], "credentials expired; asking for fresh ones")
        case .retryStarted(_, let attempt, let delay, let reason):
            return (
                [
                    EventField("attempt", .integer(Int64(attempt))), EventField("delay", .number((delay * 1000).rounded() / 1000)),
                    EventField("reason", .string(reason))
                ],
                "retry \(attempt) in \(String(format: "%.1f", delay)) s: \(reason)"
            )
        case .retryResumed(_, let attempt, let offset):
            return ([EventField("attempt", .integer(Int64(attempt))), EventField("offset", .integer(offset))], "resumed at byte \(offset)")
        case .paused: return ([], "paused")
        case .cancelled: return ([], "cancelled")
        }
    }

    /// "42% 4.2/10.0 MB 1.3 MB/s ETA 5 s".
    static func progressText(_ p: UploadProgress) -> String {
        var s = String(format: "%3d%% %.1f/%.1f MB", Int(p.fraction * 100), Double(p.acknowledged) / 1e6, Double(p.total) / 1e6)
        if p.bytesPerSecond > 0 { s += String(format: " %.1f MB/s", p.bytesPerSecond / 1e6) }
        if let eta = p.eta, p.acknowledged < p.total { s += String(format: " ETA %.0f s", eta) }
        return s
    }

    private static func redacted(_ f: EventField) -> EventField {
        switch f.value {
        case .string(let s): return EventField(f.key, .string(Secrets.shared.redact(s)))
        case .object(let o): return EventField(f.key, .object(o.map(redacted)))
        default: return f
        }
    }
}

extension UploadResult {
    /// "1000 bytes, URL, video ID, watch URL, playback URL, etag", for people.
    public var summary: String {
        var parts = ["\(bytes) bytes"]
        if let u = url { parts.append(u) }
        if let v = videoID { parts.append("video \(v)") }
        if let w = watchURL { parts.append("watch \(w)") }
        if let p = playbackURL { parts.append("playback \(p)") }
        if let e = etag { parts.append("etag \(e)") }
        return parts.joined(separator: ", ")
    }
}
