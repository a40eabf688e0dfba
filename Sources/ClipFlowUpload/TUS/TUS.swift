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
// from `refreshHeaders` (Gcore: a renewed API token and a fresh upload token for a creation not
// yet made), the same request again (same upload URL). Refused again right after a
// refresh: fails with http-401/403, the record kept. Only 404/410 mean the upload is gone.

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

    public init(
        options: TUSOptions, store: ResumeStore, headers: (@Sendable () throws -> [String: String])? = nil,
        refreshHeaders: (@Sendable (_ reason: String) throws -> [String: String])? = nil
    ) {
        self.options = options
        self.store = store
        self.headers = headers
        self.refreshHeaders = refreshHeaders
        self.destination = "tus:" + options.endpoint
        self.method = "tus"
    }

    init(
        options: TUSOptions, store: ResumeStore, headers: (@Sendable () throws -> [String: String])?,
        refreshHeaders: (@Sendable (_ reason: String) throws -> [String: String])? = nil, destination: String, method: String
    ) {
        self.options = options
        self.store = store
        self.headers = headers
        self.refreshHeaders = refreshHeaders
        self.destination = destination
        self.method = method
    }

    public var lastRun: TUSRunStats { stats.withLock { $0 } }

    public func upload(
        file: String, id: String, metadata: [String: String], control: UploadControl,
        observer: UploadObserver
    ) throws -> UploadResult {
        let endpoint = options.endpoint
        return try run(
            file: file, id: id, metadata: metadata, control: control, observer: observer,
            target: { _ in TUSTarget(endpoint: endpoint) })
    }

    public func discard(file: String) throws {
        try discard(try FileFingerprint.of(file))
    }

    /// Drops the resume records of the file `fp` identifies (and any stale ones of its path) and
    /// terminates the uploads they name.
    func discard(_ fp: FileFingerprint) throws {
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
    /// and is called only when a new upload must be created. `renew` (when the uploader has no
    /// `refreshHeaders`) renews the credentials behind `target` after the server refused a
    /// request; a creation not yet made then asks `target` again with the same `extra`. `failing`
    /// gets a failure (not a pause or a cancel) before it is reported, and returns what is reported
    /// and thrown (the Gcore flow deletes its video there, and says so).
    func run(
        file: String, id: String, metadata: [String: String], control: UploadControl, observer: UploadObserver,
        target: @escaping (_ previousExtra: [String: String]?) throws -> TUSTarget,
        renew: ((_ reason: String) throws -> Void)? = nil,
        finish: ((inout UploadResult, ResumeRecord) -> Void)? = nil,
        failing: ((UploadError) -> UploadError)? = nil
    ) throws -> UploadResult {
        stats.withLock { $0 = TUSRunStats() }
        var session: TUSSession?
        defer { session?.digester?.stop() }
        do {
            let s = try TUSSession(
                uploader: self, file: file, id: id, userMetadata: metadata, control: control,
                observer: observer, target: target, renew: renew)
            session = s
            var result = try s.run()
            if let finish, let record = s.finalRecord { finish(&result, record) }
            observer.upload(.finished(id: id, result))
            return result
        } catch {
            let u: UploadError
            switch error {
            case let e as UploadError: u = e
            case let t as TransportError: u = UploadError(.transport, message: t.message, retryable: t.isRetryable)
            default: u = UploadError(.internal, message: "\(error)")
            }
            var e = u.concerning(URL(fileURLWithPath: file).standardizedFileURL.path)
            if let failing, e.kind != .paused, e.kind != .cancelled { e = failing(e) }
            if let session { session.conclude(e) } else { observer.upload(.failed(id: id, code: e.code, message: e.message)) }
            throw e
        }
    }

    func count(_ method: String) { stats.withLock { $0.requests[method, default: 0] += 1 } }
    func note(_ update: (inout TUSRunStats) -> Void) { stats.withLock { update(&$0) } }

    var cleanupSettings: TransportSettings {
        var s = options.transport
        s.stallTimeout = min(s.stallTimeout, 10)
        return s
    }

    /// Whether credential headers may go to `url`: only to the endpoint's own origin (scheme,
    /// host, port), whatever URL a server handed us.
    func mayAuthenticate(_ url: String) -> Bool {
        isSameOrigin(url, options.endpoint)
    }

    func requestHeaders(for url: String) throws -> [(name: String, value: String)] {
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

    func terminate(_ url: String, _ transport: HTTPTransport) throws -> Int {
        var req = HTTPRequest(method: "DELETE", url: url)
        for h in try requestHeaders(for: url) { req.setHeader(h.name, h.value) }
        count("DELETE")
        let r = try transport.perform(req)
        note { $0.terminated.append(url) }
        return r.status
    }
}
