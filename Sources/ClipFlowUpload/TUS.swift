import Foundation
import ClipFlowCore
import Synchronization

// TUS 1.0 client (https://tus.io/protocols/resumable-upload): OPTIONS feature detection, creation
// (with upload when offered), chunked PATCH streamed from the file, checksum, termination and
// expiration extensions, resume across processes through `ResumeStore`.
//
// Flow of one `upload` call (all on the caller's thread, one `CurlTransport` per call):
//
//   OPTIONS ──> stale records? DELETE them ──> record? ──yes──> HEAD url ──404/410/expired──┐
//                                                │no                   │ offset            │
//                                                v                     v                   │
//                                    POST (first chunk inside) ──> PATCH loop <────────────┘ (create anew)
//                                                                   │  error: retry policy, then HEAD
//                                                                   v
//                                                         finished: record dropped
//
// 401/403 (or a 400 saying the token expired) on any request: `credentialsExpired`, fresh headers
// from `refreshHeaders`, the same request again (same upload URL). Refused again right after a
// refresh: fails with http-401/403, the record kept. Only 404/410 mean the upload is gone.

/// Options of a TUS upload destination. Holds no secrets (credentials come through the
/// uploader's `headers` hook), so it can live in a pipeline spec.
public struct TUSOptions: Codable, Sendable, Equatable {
    public enum Checksum: String, Codable, Sendable {
        /// sha256, else sha1, when the server offers the checksum extension with one of them.
        case auto
        case off
        /// Only this algorithm: the upload fails when the server does not offer it.
        case sha1
        case sha256
    }

    /// The creation URL (e.g. `https://tus.example.com/files/`).
    public var endpoint: String
    /// Bytes per PATCH. Memory does not depend on it: bodies are streamed from the file through the
    /// transport's upload buffer.
    ///
    /// Default 16 MiB. Every chunk ends with a wait for the server's answer (one round trip with
    /// the link idle, and TCP may shrink its window after the idle), so small chunks waste a
    /// large share of a fast link: at 1 Gbit/s and 30 ms RTT, 8 MiB chunks keep it busy ~70% of
    /// the time, 16 MiB ~80%, 64 MiB ~95%. Bigger is not free either: servers that store a chunk
    /// only when it arrives whole (PyPI resumable-upload; tusd keeps partial bytes) resend a cut
    /// chunk from its start, and some read a whole chunk into memory — a Python server then
    /// gets a fresh mmap per chunk from 32 MiB on (glibc's largest mmap threshold): measured over
    /// loopback, 16 and 24 MiB chunks were fastest (0.58 s for 512 MB), 32 MiB 0.82 s, 8 MiB 1.06 s.
    public static let defaultChunkSize: Int64 = 16 << 20
    public var chunkSize: Int64 = TUSOptions.defaultChunkSize
    public var checksum: Checksum = .auto
    /// Extra non-secret headers sent with every request.
    public var headers: [String: String] = [:]
    public var retry: RetryPolicy = RetryPolicy()
    public var transport: TransportSettings = TransportSettings()
    /// Send the first chunk in the creation POST when the server offers creation-with-upload.
    public var creationWithUpload: Bool = true
    /// On cancel, DELETE the upload on the server (termination extension) before dropping the record.
    public var deleteOnCancel: Bool = true
    /// Sends of one chunk the server rejects with 460 (checksum mismatch) before giving up.
    public var maxChecksumAttempts: Int = 3
    /// Minimum seconds between progress events (the last one is always sent).
    public var progressInterval: Double = 0.25

    public init(endpoint: String, chunkSize: Int64 = TUSOptions.defaultChunkSize, checksum: Checksum = .auto, headers: [String: String] = [:],
                retry: RetryPolicy = RetryPolicy(), transport: TransportSettings = TransportSettings(),
                creationWithUpload: Bool = true, deleteOnCancel: Bool = true, maxChecksumAttempts: Int = 3) {
        self.endpoint = endpoint
        self.chunkSize = chunkSize
        self.checksum = checksum
        self.headers = headers
        self.retry = retry
        self.transport = transport
        self.creationWithUpload = creationWithUpload
        self.deleteOnCancel = deleteOnCancel
        self.maxChecksumAttempts = maxChecksumAttempts
    }

    private enum CodingKeys: String, CodingKey {
        case endpoint, chunkSize, checksum, headers, retry, transport, creationWithUpload, deleteOnCancel, maxChecksumAttempts, progressInterval
    }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(endpoint: try c.decode(String.self, forKey: .endpoint))
        chunkSize = try c.decodeIfPresent(Int64.self, forKey: .chunkSize) ?? chunkSize
        checksum = try c.decodeIfPresent(Checksum.self, forKey: .checksum) ?? checksum
        headers = try c.decodeIfPresent([String: String].self, forKey: .headers) ?? headers
        retry = try c.decodeIfPresent(RetryPolicy.self, forKey: .retry) ?? retry
        transport = try c.decodeIfPresent(TransportSettings.self, forKey: .transport) ?? transport
        creationWithUpload = try c.decodeIfPresent(Bool.self, forKey: .creationWithUpload) ?? creationWithUpload
        deleteOnCancel = try c.decodeIfPresent(Bool.self, forKey: .deleteOnCancel) ?? deleteOnCancel
        maxChecksumAttempts = try c.decodeIfPresent(Int.self, forKey: .maxChecksumAttempts) ?? maxChecksumAttempts
        progressInterval = try c.decodeIfPresent(Double.self, forKey: .progressInterval) ?? progressInterval
        guard chunkSize > 0 else {
            throw DecodingError.dataCorruptedError(forKey: .chunkSize, in: c, debugDescription: "chunkSize must be positive")
        }
    }
}

/// What the server said in answer to OPTIONS.
public struct TUSCapabilities: Sendable, Equatable {
    public var versions: [String]
    public var extensions: Set<String>
    public var checksumAlgorithms: [String]
    public var maxSize: Int64?

    public func offers(_ ext: String) -> Bool { extensions.contains(ext) }
}

/// Where a new TUS upload is created and what it carries. Plain TUS uses the options' endpoint;
/// the Gcore flow asks its API for a per-video URL and token.
public struct TUSTarget: Sendable {
    public var endpoint: String
    /// Upload-Metadata beyond filename/filetype (which the uploader adds unless present).
    public var metadata: [String: String]
    /// Kept in the resume record (e.g. the hosting's video id).
    public var extra: [String: String]

    public init(endpoint: String, metadata: [String: String] = [:], extra: [String: String] = [:]) {
        self.endpoint = endpoint
        self.metadata = metadata
        self.extra = extra
    }
}

/// Counters of the last `upload` call (diagnostics and tests).
public struct TUSRunStats: Sendable, Equatable {
    public var requests: [String: Int] = [:]
    public var checksumResends = 0
    public var recreated = 0
    public var credentialRefreshes = 0
    public var terminated: [String] = []
    public var checksumAlgorithm: String?
    public var uploadURL: String?
}

/// A TUS 1.0 uploader. Sendable and reusable: each `upload` call builds its own transport and
/// state on the calling thread; only the resume store and the stats are shared.
public final class TUSUploader: FileUploader, Sendable {
    public let options: TUSOptions
    public let store: ResumeStore
    /// Extra headers per request (e.g. `Authorization`); their values are registered as secrets.
    public let headers: (@Sendable () throws -> [String: String])?
    /// Asked for fresh credential headers when the server refuses the current ones (401/403 or an
    /// ExpiredToken-like answer); they replace `headers`' values for the rest of the upload. Without
    /// it, a refusal fails the upload at once.
    public let refreshHeaders: (@Sendable (_ reason: String) throws -> [String: String])?
    public let destination: String
    let method: String
    private let stats = Mutex(TUSRunStats())
    /// Test seam: called with each chunk's checksum value before it is sent; may return another.
    let checksumHook: Mutex<(@Sendable (String) -> String)?> = Mutex(nil)

    public init(options: TUSOptions, store: ResumeStore, headers: (@Sendable () throws -> [String: String])? = nil,
                refreshHeaders: (@Sendable (_ reason: String) throws -> [String: String])? = nil) {
        self.options = options
        self.store = store
        self.headers = headers
        self.refreshHeaders = refreshHeaders
        self.destination = "tus:" + options.endpoint
        self.method = "tus"
    }

    init(options: TUSOptions, store: ResumeStore, headers: (@Sendable () throws -> [String: String])?,
         refreshHeaders: (@Sendable (_ reason: String) throws -> [String: String])? = nil, destination: String, method: String) {
        self.options = options
        self.store = store
        self.headers = headers
        self.refreshHeaders = refreshHeaders
        self.destination = destination
        self.method = method
    }

    public var lastRun: TUSRunStats { stats.withLock { $0 } }

    public func upload(file: String, id: String, metadata: [String: String], control: UploadControl,
                       observer: UploadObserver) throws -> UploadResult {
        let endpoint = options.endpoint
        return try run(file: file, id: id, metadata: metadata, control: control, observer: observer,
                       target: { _ in TUSTarget(endpoint: endpoint) })
    }

    public func discard(file: String) throws {
        let fp = try FileFingerprint.of(file)
        let transport = try CurlTransport(settings: cleanupSettings)
        var records = store.staleRecords(path: fp.path, destination: destination, current: fp)
        if let r = store.record(for: fp, destination: destination) { records.append(r) }
        for r in records {
            if let url = r.uploadURL { _ = try? terminate(url, transport) }
            try store.remove(r)
        }
    }

    /// The TUS upload, parametrised by how a new upload's URL/metadata are obtained. `target` gets
    /// the `extra` of the record being replaced (or of a resumable record without URL), if any,
    /// and is called only when a new upload must be created.
    func run(file: String, id: String, metadata: [String: String], control: UploadControl, observer: UploadObserver,
             target: @escaping (_ previousExtra: [String: String]?) throws -> TUSTarget,
             finish: ((inout UploadResult, ResumeRecord) -> Void)? = nil) throws -> UploadResult {
        stats.withLock { $0 = TUSRunStats() }
        var session: Session?
        defer { session?.digester?.stop() }
        do {
            let s = try Session(uploader: self, file: file, id: id, userMetadata: metadata, control: control,
                                observer: observer, target: target)
            session = s
            var result = try s.run()
            if let finish, let record = s.finalRecord { finish(&result, record) }
            observer.upload(.finished(id: id, result))
            return result
        } catch {
            let e: UploadError
            switch error {
            case let u as UploadError: e = u
            case let t as TransportError: e = UploadError(code: "transport", message: t.message, retryable: t.isRetryable)
            default: e = UploadError(code: "internal", message: "\(file): \(error)")
            }
            if let session { session.conclude(e) } else { observer.upload(.failed(id: id, code: e.code, message: e.message)) }
            throw e
        }
    }

    fileprivate func count(_ method: String) { stats.withLock { $0.requests[method, default: 0] += 1 } }
    fileprivate func note(_ update: (inout TUSRunStats) -> Void) { stats.withLock { update(&$0) } }

    fileprivate var cleanupSettings: TransportSettings {
        var s = options.transport
        s.stallTimeout = min(s.stallTimeout, 10)
        return s
    }

    /// Whether credential headers may go to `url`: only to the endpoint's own origin (scheme,
    /// host, port), whatever URL a server handed us.
    fileprivate func mayAuthenticate(_ url: String) -> Bool {
        isSameOrigin(url, options.endpoint)
    }

    fileprivate func requestHeaders(for url: String) throws -> [(name: String, value: String)] {
        var out: [(name: String, value: String)] = [("Tus-Resumable", "1.0.0")]
        for (k, v) in options.headers.sorted(by: { $0.key < $1.key }) { out.append((k, v)) }
        if let headers, mayAuthenticate(url) {
            for (k, v) in try headers().sorted(by: { $0.key < $1.key }) {
                Secrets.shared.register(v)
                out.append((k, v))
            }
        }
        return out
    }

    fileprivate func terminate(_ url: String, _ transport: HTTPTransport) throws -> Int {
        var req = HTTPRequest(method: "DELETE", url: url)
        for h in try requestHeaders(for: url) { req.setHeader(h.name, h.value) }
        count("DELETE")
        let r = try transport.perform(req)
        note { $0.terminated.append(url) }
        return r.status
    }
}

// MARK: - One upload

/// Why a step must be redone (internal control flow of the PATCH loop).
private enum Redo: Error {
    /// A retryable failure: wait per the retry policy, then HEAD.
    case retry(code: String, reason: String, retryAfter: Double?)
    /// 409: our offset is stale; HEAD at once.
    case conflict
    /// 404/410: the upload is gone on the server; create a new one.
    case gone(String)
}

private final class Session {
    let up: TUSUploader
    let options: TUSOptions
    let file: String
    let id: String
    let userMetadata: [String: String]
    let control: UploadControl
    let observer: UploadObserver
    let target: ([String: String]?) throws -> TUSTarget
    let transport: CurlTransport
    var stamp: FileStamp
    var fingerprint: FileFingerprint
    var size: Int64 { stamp.size }
    var retry: RetryState
    let meter: ProgressMeter
    var caps = TUSCapabilities(versions: [], extensions: [], checksumAlgorithms: [], maxSize: nil)
    var algorithm: DigestAlgorithm? {
        didSet { digester = algorithm.map { RangeDigester(path: file, algorithms: [$0]) } }
    }
    /// Hashes the next chunk while the current one is sent (when checksums are on).
    var digester: RangeDigester?
    var record: ResumeRecord?
    var url: String?
    var offset: Int64 = 0
    var finalRecord: ResumeRecord?
    var started = false
    /// The target of the upload being created: kept until a creation POST succeeds, so a retried
    /// creation reuses it (for Gcore: the same video) instead of asking for a new one.
    var pendingTarget: TUSTarget?
    /// Credential headers from the last refresh; they override the uploader's `headers`.
    var freshHeaders: [String: String]?
    /// Set by a refresh, cleared by the next accepted answer: a refusal while set is final.
    var justRefreshed = false

    init(uploader: TUSUploader, file: String, id: String, userMetadata: [String: String], control: UploadControl,
         observer: UploadObserver, target: @escaping ([String: String]?) throws -> TUSTarget) throws {
        up = uploader
        options = uploader.options
        self.file = URL(fileURLWithPath: file).standardizedFileURL.path
        self.id = id
        self.userMetadata = userMetadata
        self.control = control
        self.observer = observer
        self.target = target
        stamp = try FileStamp.of(self.file)
        fingerprint = try FileFingerprint.of(self.file)
        retry = RetryState(policy: options.retry)
        meter = ProgressMeter(total: stamp.size, interval: options.progressInterval)
        transport = try CurlTransport(settings: options.transport, shouldAbort: { [control] in control.shouldStop })
    }

    func emit(_ e: UploadEvent) { observer.upload(e) }

    // MARK: Main sequence

    func run() throws -> UploadResult {
        guard options.chunkSize > 0 else {
            throw UploadError(code: "bad-input", message: "TUS chunkSize must be positive (got \(options.chunkSize))")
        }
        try control.check()
        record = up.store.record(for: fingerprint, destination: up.destination)
        let endpoint = try discoveryEndpoint()
        try withRetries { try self.discover(endpoint) }
        if let max = caps.maxSize, max > 0, size > max {
            throw UploadError(code: "too-large",
                              message: "\(file): \(size) bytes is more than the server accepts (Tus-Max-Size \(max) bytes at \(displayURL(endpoint))); upload a smaller file or raise the server's limit")
        }
        dropStaleRecords()
        if let r = record, let expires = r.expires, expires <= Date() {
            // Expired: the server may still answer HEAD, but must not be trusted to keep the data.
            if let u = r.uploadURL { _ = try? up.terminate(u, cleanupTransport()) }
            try up.store.remove(r)
            record = ResumeRecord(method: r.method, fingerprint: r.fingerprint, destination: r.destination, uploadURL: nil, extra: r.extra)
        }
        if let r = record, let u = r.uploadURL {
            url = u
            do {
                try withRetries { try self.head() }
            } catch Redo.gone {
                try forgetUpload()
            }
        }
        if url == nil {
            if !started { announceStart() }  // a new upload starts at 0 (the POST may carry the first chunk)
            try withRetries { try self.create() }
        }
        up.note { $0.uploadURL = self.url }
        if !started { announceStart() }
        try patchLoop()
        guard let url else { throw UploadError(code: "internal", message: "no upload URL after upload") }
        if let r = record {
            finalRecord = r
            try? up.store.remove(r)
        }
        if size == 0, let p = meter.acknowledge(0, force: true) { emit(.progress(id: id, p)) }
        return UploadResult(method: up.method == "gcore" ? "gcore" : "tus", bytes: size, url: url)
    }

    func announceStart() {
        started = true
        emit(.started(id: id, file: file, bytes: size, resumedAt: offset))
        if let p = meter.acknowledge(offset, force: true), offset > 0 { emit(.progress(id: id, p)) }
    }

    /// The PATCH loop with retries: after any failure, wait (policy), HEAD, continue from the
    /// server's offset.
    func patchLoop() throws {
        var needHead = false
        var recreations = 0
        while true {
            do {
                try control.check()
                if needHead {
                    try head()
                    needHead = false
                    emit(.retryResumed(id: id, attempt: retry.attempts, offset: offset))
                }
                // The stamp is checked before each chunk and once more after the last acknowledged one:
                // a file that changed while its last chunk was sent must not be reported as uploaded.
                try stamp.verifyUnchanged(file)
                if offset >= size { return }
                try patch()
            } catch let redo as Redo {
                switch redo {
                case .retry(let code, let reason, let retryAfter):
                    try backoff(code: code, reason: reason, retryAfter: retryAfter)
                    needHead = true
                case .conflict:
                    try backoff(code: "conflict", reason: "the server's offset differs from ours (409)", retryAfter: nil, immediate: true)
                    needHead = true
                case .gone(let why):
                    recreations += 1
                    guard recreations <= 2 else {
                        throw UploadError(code: "gone", message: "\(displayURL(url ?? options.endpoint)): \(why), again after creating it anew; giving up", retryable: true)
                    }
                    try forgetUpload()
                    up.note { $0.recreated += 1 }
                    try withRetries { try self.create() }
                    needHead = false
                }
            } catch let e as UploadError where e.code == "file-changed" {
                throw fileChanged(e)
            }
        }
    }

    func fileChanged(_ e: UploadError) -> UploadError {
        if let u = url { _ = try? up.terminate(u, cleanupTransport()) }
        if let r = record { try? up.store.remove(r) }
        record = nil
        return UploadError(code: "file-changed",
                           message: "\(file): the file changed while it was being uploaded; the partial upload was deleted on the server. Upload it again once it is complete.")
    }

    /// Runs `step` until it succeeds, retrying `Redo.retry` per the policy (used outside the PATCH
    /// loop: OPTIONS, creation, resume HEAD).
    func withRetries(_ step: () throws -> Void) throws {
        while true {
            do {
                try control.check()
                try step()
                return
            } catch Redo.retry(let code, let reason, let retryAfter) {
                try backoff(code: code, reason: reason, retryAfter: retryAfter)
                if started { emit(.retryResumed(id: id, attempt: retry.attempts, offset: offset)) }
            } catch Redo.conflict {
                try backoff(code: "conflict", reason: "409 conflict", retryAfter: nil, immediate: true)
            }
        }
    }

    func backoff(code: String, reason: String, retryAfter: Double?, immediate: Bool = false) throws {
        let reason = Secrets.shared.redact(reason)
        guard let delay = retry.failure(at: meter.acknowledged, retryAfter: retryAfter) else {
            throw UploadError(code: code,
                              message: "\(file): upload to \(displayURL(url ?? options.endpoint)) failed \(retry.failures) times in a row without progress; last: \(reason). It can be resumed later.",
                              retryable: true)
        }
        let wait = immediate ? 0 : delay
        emit(.retryStarted(id: id, attempt: retry.attempts, delay: wait, reason: reason))
        if wait > 0 { try control.sleep(wait) }
    }

    // MARK: Requests

    func request(_ method: String, _ url: String, body: HTTPBody = .empty) throws -> HTTPRequest {
        var req = HTTPRequest(method: method, url: url, body: body)
        for h in try up.requestHeaders(for: url) { req.setHeader(h.name, h.value) }
        if let freshHeaders, up.mayAuthenticate(url) { for (k, v) in freshHeaders { req.setHeader(k, v) } }
        return req
    }

    /// Performs a request; transport failures become `Redo.retry` (or a final error when not
    /// retryable); retryable statuses become `Redo.retry`; 404/410 `Redo.gone`; 409 `Redo.conflict`.
    /// Other non-2xx statuses fail with the server's message. `accept` lists extra statuses the
    /// caller handles itself.
    func send(_ request: HTTPRequest, accept: Set<Int> = [], goneOK: Bool = true) throws -> HTTPResponse {
        var req = request
        while true {
            let r = try sendOnce(req, accept: accept, goneOK: goneOK)
            guard isRefusal(r) else {
                justRefreshed = false
                return r
            }
            let what = "\(req.method) \(displayURL(req.url)): HTTP \(r.status)\(serverText(r))"
            guard let refresh = up.refreshHeaders, !justRefreshed else {
                let hint = justRefreshed ? "; the credentials were refused again right after a refresh" : ""
                throw UploadError(code: "http-\(r.status)", message: "\(file): \(what)\(hint)")
            }
            emit(.credentialsExpired(id: id))
            let fresh = try refresh("TUS \(what)")
            for v in fresh.values { Secrets.shared.register(v) }
            freshHeaders = fresh
            justRefreshed = true
            up.note { $0.credentialRefreshes += 1 }
            if up.mayAuthenticate(req.url) { for (k, v) in fresh { req.setHeader(k, v) } }
        }
    }

    /// 401/403, or a 400 whose text says the token expired: the credentials were refused.
    func isRefusal(_ r: HTTPResponse) -> Bool {
        if r.status == 401 || r.status == 403 { return true }
        guard r.status == 400 else { return false }
        let t = r.text.prefix(2000).lowercased()
        return ["expiredtoken", "tokenexpired", "token expired", "token has expired"].contains { t.contains($0) }
    }

    private func sendOnce(_ req: HTTPRequest, accept: Set<Int>, goneOK: Bool) throws -> HTTPResponse {
        up.count(req.method)
        let response: HTTPResponse
        do {
            response = try transport.perform(req)
        } catch let e as TransportError {
            switch e.kind {
            case .cancelled: try control.check(); throw UploadError.paused
            case .connect, .network: throw Redo.retry(code: "network", reason: e.message, retryAfter: nil)
            case .stalled: throw Redo.retry(code: "stalled", reason: e.message, retryAfter: nil)
            case .fileRead:
                if (try? stamp.verifyUnchanged(file)) == nil {
                    throw UploadError(code: "file-changed", message: e.message)
                }
                throw UploadError(code: "file-read", message: e.message)
            case .oversized: throw UploadError(code: "bad-response", message: e.message)
            case .tls, .invalid: throw UploadError(code: e.kind == .tls ? "tls" : "invalid", message: e.message)
            }
        }
        if response.isSuccess || accept.contains(response.status) || isRefusal(response) { return response }
        let what = "\(req.method) \(displayURL(req.url)): HTTP \(response.status)\(serverText(response))"
        if isRetryableStatus(response.status) {
            throw Redo.retry(code: "http-\(response.status)", reason: what, retryAfter: retryAfterSeconds(response))
        }
        if goneOK && (response.status == 404 || response.status == 410) { throw Redo.gone(what) }
        if response.status == 409 { throw Redo.conflict }
        throw UploadError(code: "http-\(response.status)", message: "\(file): \(what)")
    }

    func serverText(_ r: HTTPResponse) -> String {
        let t = String(r.text.prefix(500)).trimmingCharacters(in: .whitespacesAndNewlines)
        return t.isEmpty ? "" : " (\(Secrets.shared.redact(t)))"
    }

    /// Where to send OPTIONS: the options' endpoint; for per-upload endpoints (Gcore) the one the
    /// resume record names, else the new target's (asked for now and kept for the creation).
    func discoveryEndpoint() throws -> String {
        if !options.endpoint.isEmpty { return options.endpoint }
        if let r = record, r.uploadURL != nil, let e = r.extra["tus_endpoint"] { return e }
        let t = try target(record?.extra)
        pendingTarget = t
        return t.endpoint
    }

    func discover(_ endpoint: String) throws {
        let r = try send(try request("OPTIONS", endpoint), accept: [], goneOK: false)
        func list(_ name: String) -> [String] {
            (r.header(name) ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        }
        caps = TUSCapabilities(versions: list("tus-version"), extensions: Set(list("tus-extension")),
                               checksumAlgorithms: list("tus-checksum-algorithm").map { $0.lowercased() },
                               maxSize: r.header("tus-max-size").flatMap { Int64($0.trimmingCharacters(in: .whitespaces)) })
        if !caps.versions.isEmpty && !caps.versions.contains("1.0.0") {
            throw UploadError(code: "unsupported",
                              message: "\(displayURL(endpoint)): the server speaks TUS \(caps.versions.joined(separator: ", ")), not 1.0.0")
        }
        algorithm = nil
        switch options.checksum {
        case .off: break
        case .auto:
            if caps.offers("checksum") {
                if caps.checksumAlgorithms.contains("sha256") { algorithm = .sha256 }
                else if caps.checksumAlgorithms.contains("sha1") { algorithm = .sha1 }
            }
        case .sha1, .sha256:
            let wanted = options.checksum.rawValue
            guard caps.offers("checksum"), caps.checksumAlgorithms.contains(wanted) else {
                let offered = caps.offers("checksum") ? (caps.checksumAlgorithms.isEmpty ? "no algorithms" : caps.checksumAlgorithms.joined(separator: ", ")) : "no checksum extension"
                throw UploadError(code: "unsupported",
                                  message: "\(displayURL(endpoint)): checksum \(wanted) was asked for, but the server offers \(offered); use checksum auto or off")
            }
            algorithm = wanted == "sha1" ? .sha1 : .sha256
        }
        let algo = algorithm?.rawValue
        up.note { $0.checksumAlgorithm = algo }
    }

    func head() throws {
        guard let url else { return }
        var req = try request("HEAD", url)
        req.setHeader("Cache-Control", "no-store")
        // Only 404/410 mean the upload is gone (in `send`); 401/403 are refused credentials.
        let r = try send(req)
        guard let value = r.header("upload-offset"), let o = Int64(value.trimmingCharacters(in: .whitespaces)), o >= 0, o <= size else {
            throw UploadError(code: "protocol", message: "HEAD \(displayURL(url)): no valid Upload-Offset in the answer (got \(r.header("upload-offset") ?? "none"))")
        }
        if let len = r.header("upload-length").flatMap({ Int64($0.trimmingCharacters(in: .whitespaces)) }), len != size {
            throw Redo.gone("HEAD \(displayURL(url)): the server's Upload-Length \(len) is not the file's size \(size)")
        }
        offset = o
        noteExpires(r)
        acknowledge(o)
        if !started { announceStart() }
    }

    func create() throws {
        let t: TUSTarget
        if let p = pendingTarget { t = p } else {
            t = try target(record?.extra)
            pendingTarget = t
        }
        var meta = t.metadata
        let name = (file as NSString).lastPathComponent
        for (k, v) in userMetadata where meta[k] == nil { meta[k] = v }
        if meta["filename"] == nil { meta["filename"] = name }
        if meta["filetype"] == nil { meta["filetype"] = mimeType(forExtension: (name as NSString).pathExtension) }
        var req = try request("POST", t.endpoint)
        req.setHeader("Upload-Length", String(size))
        req.setHeader("Upload-Metadata", encodeMetadata(meta))
        var withData = false
        if options.creationWithUpload && caps.offers("creation-with-upload") && size > 0 {
            withData = true
            let first = min(options.chunkSize, size)
            try stamp.verifyUnchanged(file)
            req.body = .file(path: file, offset: 0, length: first)
            req.setHeader("Content-Type", "application/offset+octet-stream")
        }
        var attempts = 0
        var r: HTTPResponse
        while true {
            attempts += 1
            if withData, let algorithm {
                req.setHeader("Upload-Checksum", try checksumHeader(algorithm, offset: 0, length: req.body.length))
                prefetchChecksum(after: 0, length: req.body.length)
            }
            r = try send(req, accept: withData ? [460] : [], goneOK: false)
            guard r.status == 460 else { break }
            up.note { $0.checksumResends += 1 }
            guard attempts < options.maxChecksumAttempts else {
                throw UploadError(code: "checksum-mismatch",
                                  message: "\(file): the server rejected the checksum of bytes 0..<\(req.body.length) \(attempts) times; the file may be changing or the network corrupting data",
                                  retryable: true)
            }
            try stamp.verifyUnchanged(file)
        }
        guard r.status == 201 || r.isSuccess, let location = r.header("location"), !location.isEmpty else {
            throw UploadError(code: "protocol", message: "POST \(displayURL(t.endpoint)): HTTP \(r.status) without a Location header")
        }
        let u = resolveURL(location, against: t.endpoint)
        // The upload URL gets every later request (and, for plain TUS, its credentials): it must be
        // on the creation endpoint's origin. Refused rather than followed without credentials: a
        // URL elsewhere is a misconfigured proxy (it would not accept the data either) or a server
        // sending the file somewhere it was not meant to go; either way the user has to decide.
        guard isSameOrigin(u, t.endpoint) else {
            let sameHost = urlOrigin(u) != nil && urlOrigin(u) == urlOrigin(t.endpoint)
            let why = sameHost ? "a URL with other user info than the endpoint's" : "\(displayURL(u)), which is not on the endpoint's origin \(urlOrigin(t.endpoint) ?? displayURL(t.endpoint)) (scheme, host and port must match)"
            throw UploadError(code: "cross-origin",
                              message: "POST \(displayURL(t.endpoint)): the server put the upload at \(why); refused so that neither credentials nor the file go anywhere but the endpoint's origin")
        }
        url = u
        pendingTarget = nil
        offset = r.header("upload-offset").flatMap { Int64($0.trimmingCharacters(in: .whitespaces)) } ?? 0
        var extra = t.extra
        extra["tus_endpoint"] = t.endpoint
        var rec = ResumeRecord(method: up.method, fingerprint: fingerprint, destination: up.destination, uploadURL: u,
                               partSize: options.chunkSize, extra: extra)
        rec.expires = parseHTTPDate(r.header("upload-expires"))
        record = rec
        try up.store.save(rec)
        acknowledge(offset)
    }

    func patch() throws {
        guard let url else { return }
        let length = min(options.chunkSize, size - offset)
        var attempts = 0
        while true {
            attempts += 1
            var req = try request("PATCH", url, body: .file(path: file, offset: offset, length: length))
            req.setHeader("Content-Type", "application/offset+octet-stream")
            req.setHeader("Upload-Offset", String(offset))
            if let algorithm {
                req.setHeader("Upload-Checksum", try checksumHeader(algorithm, offset: offset, length: length))
                prefetchChecksum(after: offset, length: length)
            }
            let r = try send(req, accept: [460])
            if r.status == 460 {
                up.note { $0.checksumResends += 1 }
                guard attempts < options.maxChecksumAttempts else {
                    throw UploadError(code: "checksum-mismatch",
                                      message: "\(file): the server rejected the checksum of bytes \(offset)..<\(offset + length) \(attempts) times; the file may be changing or the network corrupting data",
                                      retryable: true)
                }
                try control.check()
                try stamp.verifyUnchanged(file)
                continue
            }
            guard let value = r.header("upload-offset"), let o = Int64(value.trimmingCharacters(in: .whitespaces)) else {
                // Not a TUS answer: ask the server where it stands.
                throw Redo.retry(code: "protocol", reason: "PATCH \(displayURL(url)): HTTP \(r.status) without Upload-Offset", retryAfter: nil)
            }
            guard o >= offset, o <= size else {
                throw Redo.conflict
            }
            guard o > offset || length == 0 else {
                // Accepted but nothing stored: through the retry backoff, so it ends after
                // maxAttemptsWithoutProgress instead of looping for ever.
                throw Redo.retry(code: "no-progress",
                                 reason: "PATCH \(displayURL(url)): HTTP \(r.status) but Upload-Offset stayed at \(o) for \(length) bytes sent",
                                 retryAfter: nil)
            }
            offset = o
            noteExpires(r)
            acknowledge(o)
            return
        }
    }

    func checksumHeader(_ algorithm: DigestAlgorithm, offset: Int64, length: Int64) throws -> String {
        let digest: [UInt8]
        do {
            if let digester, digester.algorithms == [algorithm] {
                digest = try digester.digests(offset: offset, length: length).first ?? []
            } else {
                digest = try Digest.hash(algorithm, file: file, offset: offset, length: length)
            }
        } catch {
            if (try? stamp.verifyUnchanged(file)) == nil {
                throw UploadError(code: "file-changed", message: "\(file): changed while bytes \(offset)..<\(offset + length) were hashed")
            }
            throw UploadError(code: "file-read", message: "\(file): cannot read bytes \(offset)..<\(offset + length) for the checksum: \(error)")
        }
        guard !digest.isEmpty else {
            throw UploadError(code: "file-read", message: "\(file): no \(algorithm.rawValue) digest for bytes \(offset)..<\(offset + length)")
        }
        var value = digest.base64
        if let hook = up.checksumHook.withLock({ $0 }) { value = hook(value) }
        return "\(algorithm.rawValue) \(value)"
    }

    /// Starts hashing the chunk that follows `offset..<offset+length` (the next PATCH if the server
    /// takes this one whole) while this one is being sent.
    func prefetchChecksum(after offset: Int64, length: Int64) {
        let next = offset + length
        guard let digester, next < size else { return }
        digester.prefetch(offset: next, length: min(options.chunkSize, size - next))
    }

    func acknowledge(_ o: Int64) {
        guard started else { return }  // announceStart reports the first offset
        if let p = meter.acknowledge(o) { emit(.progress(id: id, p)) }
    }

    func noteExpires(_ r: HTTPResponse) {
        guard let e = parseHTTPDate(r.header("upload-expires")), var rec = record, rec.expires != e else { return }
        rec.expires = e
        record = rec
        try? up.store.save(rec)
    }

    /// Drops the current upload's record (keeping its `extra`, e.g. the video id, for the next
    /// creation) and clears the URL.
    func forgetUpload() throws {
        if let r = record {
            try up.store.remove(r)
            record = ResumeRecord(method: r.method, fingerprint: r.fingerprint, destination: r.destination, extra: r.extra)
        }
        url = nil
        offset = 0
    }

    func dropStaleRecords() {
        for r in up.store.staleRecords(path: fingerprint.path, destination: up.destination, current: fingerprint) {
            if let u = r.uploadURL { _ = try? up.terminate(u, cleanupTransport()) }
            try? up.store.remove(r)
        }
    }

    private var cleanup: CurlTransport?
    func cleanupTransport() throws -> CurlTransport {
        if let cleanup { return cleanup }
        let t = try CurlTransport(settings: up.cleanupSettings)
        cleanup = t
        return t
    }

    /// Reports a failure: events, termination on cancel.
    func conclude(_ e: UploadError) {
        switch e.code {
        case "paused":
            emit(.paused(id: id))
        case "cancelled":
            if options.deleteOnCancel, caps.offers("termination"), let u = url {
                _ = try? up.terminate(u, cleanupTransport())
            }
            if let r = record { try? up.store.remove(r) }
            emit(.cancelled(id: id))
        default:
            emit(.failed(id: id, code: e.code, message: e.message))
        }
    }
}

// MARK: - Helpers

/// `Upload-Metadata`: comma-separated `key base64(value)` pairs, keys sorted. Keys with spaces or
/// commas (not allowed by TUS) have them replaced by `_`.
public func encodeMetadata(_ metadata: [String: String]) -> String {
    metadata.sorted { $0.key < $1.key }.map { k, v in
        let key = String(k.map { $0 == " " || $0 == "," ? "_" : $0 })
        return v.isEmpty ? key : "\(key) \(Data(v.utf8).base64EncodedString())"
    }.joined(separator: ",")
}

/// Decodes `Upload-Metadata` (for tests and servers of ours).
public func decodeMetadata(_ header: String) -> [String: String] {
    var out: [String: String] = [:]
    for pair in header.split(separator: ",") {
        let parts = pair.trimmingCharacters(in: .whitespaces).split(separator: " ", maxSplits: 1)
        guard let k = parts.first else { continue }
        let v = parts.count > 1 ? Data(base64Encoded: String(parts[1])).map { String(decoding: $0, as: UTF8.self) } ?? "" : ""
        out[String(k)] = v
    }
    return out
}

/// Parses an HTTP date (RFC 7231 IMF-fixdate, as in `Upload-Expires`).
func parseHTTPDate(_ value: String?) -> Date? {
    guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
    let f = DateFormatter()
    f.locale = Locale(identifier: "en_US_POSIX")
    f.timeZone = TimeZone(identifier: "GMT")
    for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
        f.dateFormat = format
        if let d = f.date(from: value) { return d }
    }
    return ISO8601DateFormatter().date(from: value)
}
