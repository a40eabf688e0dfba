import Foundation
import ClipFlowCore

/// Why a step must be redone: what one TUS answer means. `step` hands the first three to the
/// request executor; `gone` ends the step.
enum TUSRedo: Error {
    /// A retryable failure: wait per the retry policy, then (in the PATCH loop) HEAD.
    case retry(code: UploadErrorCode, reason: String, retryAfter: Double?)
    /// 409: our offset is stale; HEAD at once.
    case conflict
    /// 401/403, or a 400 saying the token expired: `what` was refused with `status`.
    case refused(status: Int, what: String)
    /// 404/410: the upload is gone on the server; create a new one.
    case gone(String)

    /// A failed PATCH that needs a HEAD before the next one (a refusal resends the same PATCH).
    var needsHead: Bool {
        switch self {
        case .retry, .conflict: return true
        case .refused, .gone: return false
        }
    }
}

/// The state of one `upload` call. Confined to the caller's thread.
final class TUSSession {
    let up: TUSUploader
    let options: TUSOptions
    let file: String
    let id: String
    let userMetadata: [String: String]
    let control: UploadControl
    let observer: UploadObserver
    let target: ([String: String]?) throws -> TUSTarget
    /// Renews the credentials behind `target` after a refusal (see `TUSUploader.run`).
    let renew: ((String) throws -> Void)?
    let transport: CurlTransport
    var stamp: FileStamp
    var fingerprint: FileFingerprint
    var size: Int64 { stamp.size }
    /// Retries, backoff and credential refreshes of this upload's requests.
    let requests: RequestExecutor
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

    init(
        uploader: TUSUploader, file: String, id: String, userMetadata: [String: String], control: UploadControl,
        observer: UploadObserver, target: @escaping ([String: String]?) throws -> TUSTarget,
        renew: ((String) throws -> Void)? = nil
    ) throws {
        up = uploader
        options = uploader.options
        self.file = URL(fileURLWithPath: file).standardizedFileURL.path
        self.id = id
        self.userMetadata = userMetadata
        self.control = control
        self.observer = observer
        self.target = target
        self.renew = renew
        stamp = try FileStamp.of(self.file)
        fingerprint = try FileFingerprint.of(self.file)
        requests = RequestExecutor(policy: options.retry, id: id, control: control, observer: observer)
        meter = ProgressMeter(total: stamp.size, interval: options.progressInterval)
        transport = try CurlTransport(settings: options.transport, shouldAbort: { [control] in control.shouldStop })
    }

    func emit(_ e: UploadEvent) { observer.upload(e) }

    // MARK: Main sequence

    func run() throws -> UploadResult {
        guard options.chunkSize > 0 else {
            throw UploadError(.badInput, message: "TUS chunkSize must be positive (got \(options.chunkSize))")
        }
        try control.check()
        record = up.store.record(for: fingerprint, destination: up.destination)
        let endpoint = try discoveryEndpoint()
        try step { try discover(endpoint) }
        if let max = caps.maxSize, max > 0, size > max {
            throw UploadError(
                .tooLarge,
                message:
                    "\(file): \(size) bytes is more than the server accepts (Tus-Max-Size \(max) bytes at \(displayURL(endpoint))); upload a smaller file or raise the server's limit"
            )
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
                try step { try head() }
            } catch TUSRedo.gone {
                try forgetUpload()
            }
        }
        if url == nil {
            if !started { announceStart() }  // a new upload starts at 0 (the POST may carry the first chunk)
            try step { try create() }
        }
        up.note { $0.uploadURL = self.url }
        if !started { announceStart() }
        try patchLoop()
        guard let url else { throw UploadError(.internal, message: "no upload URL after upload") }
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

    /// The PATCH loop: after a retryable failure (or a 409), wait per the policy, HEAD, and continue
    /// from the server's offset; after 404/410, create the upload anew (twice at most).
    func patchLoop() throws {
        var recreations = 0
        while true {
            do {
                try control.check()
                // The stamp is checked before each chunk and once more after the last acknowledged one:
                // a file that changed while its last chunk was sent must not be reported as uploaded.
                try stamp.verifyUnchanged(file)
                if offset >= size { return }
                var needHead = false
                try step {
                    if needHead {
                        try head()
                        needHead = false
                        return
                    }
                    do {
                        try patch()
                    } catch let redo as TUSRedo where redo.needsHead {
                        needHead = true
                        throw redo
                    }
                }
            } catch TUSRedo.gone(let why) {
                recreations += 1
                guard recreations <= 2 else {
                    throw UploadError(
                        .gone, message: "\(displayURL(url ?? options.endpoint)): \(why), again after creating it anew; giving up", retryable: true)
                }
                try forgetUpload()
                up.note { $0.recreated += 1 }
                try step { try create() }
            } catch let e as UploadError where e.kind == .fileChanged {
                throw fileChanged(e)
            }
        }
    }

    func fileChanged(_ e: UploadError) -> UploadError {
        if let u = url { _ = try? up.terminate(u, cleanupTransport()) }
        if let r = record { try? up.store.remove(r) }
        record = nil
        return UploadError(
            .fileChanged,
            message: "\(file): the file changed while it was being uploaded; the partial upload was deleted on the server. Upload it again once it is complete."
        )
    }

    /// Runs one protocol step (which may send several requests) through the request executor
    /// until it goes through: a retryable failure waits per the policy and runs it again, a refusal
    /// refreshes the credentials and runs it again. `TUSRedo.gone` and errors end it.
    func step(_ body: () throws -> Void) throws {
        try requests.perform(progress: { meter.acknowledged }, resumedAt: { started ? offset : nil }) {
            do {
                try body()
                return .accepted(())
            } catch TUSRedo.retry(let code, let reason, let retryAfter) {
                return .retryable(retryable(code, reason, retryAfter: retryAfter))
            } catch TUSRedo.conflict {
                return .retryable(retryable(.conflict, "the server's offset differs from ours (409)", immediate: true))
            } catch TUSRedo.refused(let status, let what) {
                return .refused(refused(status, what))
            }
        }
    }

    func retryable(_ code: UploadErrorCode, _ reason: String, retryAfter: Double? = nil, immediate: Bool = false) -> Retryable {
        // Where it was going: the upload's URL, else the creation endpoint (a Gcore upload learns
        // its endpoint from the API: `pendingTarget`), else the uploader's destination.
        let place = url ?? pendingTarget?.endpoint ?? (options.endpoint.isEmpty ? nil : options.endpoint)
        let shown = place.map(displayURL) ?? up.destination
        return Retryable(reason: reason, retryAfter: retryAfter, immediate: immediate) { [file] retry in
            UploadError(
                code,
                message: "\(file): upload to \(shown) failed \(retry.failures) times in a row without progress; last: \(reason). It can be resumed later.",
                retryable: true)
        }
    }

    /// Fresh credential headers from the uploader's `refreshHeaders`, which override its `headers`
    /// for the rest of the upload; else `renew` and, for a creation not yet made, a fresh target.
    /// Neither: the refusal is final.
    func refused(_ status: Int, _ what: String) -> Refused {
        var refresh: (() throws -> Void)?
        if let refreshHeaders = up.refreshHeaders {
            refresh = { [self] in
                let fresh = try refreshHeaders("TUS \(what)")
                for v in fresh.values { Secrets.shared.register(v) }
                freshHeaders = fresh
                up.note { $0.credentialRefreshes += 1 }
            }
        } else if let renew {
            refresh = { [self] in
                try renew("TUS \(what)")
                if url == nil, let p = pendingTarget { pendingTarget = try target(p.extra) }
                up.note { $0.credentialRefreshes += 1 }
            }
        }
        return Refused(refresh: refresh) { [file] why in
            let hint = why == .refusedAfterRefresh ? "; the credentials were refused again right after a refresh" : ""
            return UploadError(.http(status), message: "\(file): \(what)\(hint)")
        }
    }

    // MARK: Requests

    func request(_ method: String, _ url: String, body: HTTPBody = .empty) throws -> HTTPRequest {
        var req = HTTPRequest(method: method, url: url, body: body)
        for h in try up.requestHeaders(for: url) { req.setHeader(h.name, h.value) }
        if let freshHeaders, up.mayAuthenticate(url) { for (k, v) in freshHeaders { req.setHeader(k, v) } }
        return req
    }

    /// 401/403, or a 400 whose text says the token expired: the credentials were refused.
    func isRefusal(_ r: HTTPResponse) -> Bool {
        if r.status == 401 || r.status == 403 { return true }
        guard r.status == 400 else { return false }
        let t = r.text.prefix(2000).lowercased()
        return ["expiredtoken", "tokenexpired", "token expired", "token has expired"].contains { t.contains($0) }
    }

    /// Sends one request and reads its status: transport failures and retryable statuses become
    /// `TUSRedo.retry` (or a final error when not retryable), refusals `TUSRedo.refused`, 404/410
    /// `TUSRedo.gone` (when `goneOK`), 409 `TUSRedo.conflict`. Other non-2xx statuses fail with the
    /// server's message. `accept` lists extra statuses the caller handles itself.
    func send(_ req: HTTPRequest, accept: Set<Int> = [], goneOK: Bool = true) throws -> HTTPResponse {
        up.count(req.method)
        let response: HTTPResponse
        do {
            response = try transport.perform(req)
        } catch let e as TransportError {
            switch e.kind {
            case .cancelled: try control.check(); throw UploadError.paused
            case .connect, .network: throw TUSRedo.retry(code: .network, reason: e.message, retryAfter: nil)
            case .stalled: throw TUSRedo.retry(code: .stalled, reason: e.message, retryAfter: nil)
            case .fileRead:
                if (try? stamp.verifyUnchanged(file)) == nil {
                    throw UploadError(.fileChanged, message: e.message)
                }
                throw UploadError(.fileRead, message: e.message)
            case .oversized: throw UploadError(.badResponse, message: e.message)
            case .tls, .invalid: throw UploadError(e.kind == .tls ? .tls : .invalid, message: e.message)
            }
        }
        if response.isSuccess || accept.contains(response.status) { return response }
        let what = "\(req.method) \(displayURL(req.url)): HTTP \(response.status)\(serverText(response))"
        if isRefusal(response) { throw TUSRedo.refused(status: response.status, what: what) }
        if isRetryableStatus(response.status) {
            throw TUSRedo.retry(code: .http(response.status), reason: what, retryAfter: retryAfterSeconds(response))
        }
        if goneOK && (response.status == 404 || response.status == 410) { throw TUSRedo.gone(what) }
        if response.status == 409 { throw TUSRedo.conflict }
        throw UploadError(.http(response.status), message: "\(file): \(what)")
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
        caps = TUSCapabilities(
            versions: list("tus-version"), extensions: Set(list("tus-extension")),
            checksumAlgorithms: list("tus-checksum-algorithm").map { $0.lowercased() },
            maxSize: r.header("tus-max-size").flatMap { Int64($0.trimmingCharacters(in: .whitespaces)) })
        if !caps.versions.isEmpty && !caps.versions.contains("1.0.0") {
            throw UploadError(
                .unsupported,
                message: "\(displayURL(endpoint)): the server speaks TUS \(caps.versions.joined(separator: ", ")), not 1.0.0")
        }
        algorithm = nil
        switch options.checksum {
        case .off: break
        case .auto:
            if caps.offers("checksum") {
                if caps.checksumAlgorithms.contains("sha256") { algorithm = .sha256 } else if caps.checksumAlgorithms.contains("sha1") { algorithm = .sha1 }
            }
        case .sha1, .sha256:
            let wanted = options.checksum.rawValue
            guard caps.offers("checksum"), caps.checksumAlgorithms.contains(wanted) else {
                let offered =
                    caps.offers("checksum")
                    ? (caps.checksumAlgorithms.isEmpty ? "no algorithms" : caps.checksumAlgorithms.joined(separator: ", ")) : "no checksum extension"
                throw UploadError(
                    .unsupported,
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
            throw UploadError(.protocol, message: "HEAD \(displayURL(url)): no valid Upload-Offset in the answer (got \(r.header("upload-offset") ?? "none"))")
        }
        if let len = r.header("upload-length").flatMap({ Int64($0.trimmingCharacters(in: .whitespaces)) }), len != size {
            throw TUSRedo.gone("HEAD \(displayURL(url)): the server's Upload-Length \(len) is not the file's size \(size)")
        }
        offset = o
        noteExpires(r)
        acknowledge(o)
        if !started { announceStart() }
    }

    func create() throws {
        let t: TUSTarget
        if let p = pendingTarget {
            t = p
        } else {
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
        req.setHeader("Upload-Metadata", TUSMetadata.encode(meta))
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
                throw UploadError(
                    .checksumMismatch,
                    message:
                        "\(file): the server rejected the checksum of bytes 0..<\(req.body.length) \(attempts) times; the file may be changing or the network corrupting data",
                    retryable: true)
            }
            try stamp.verifyUnchanged(file)
        }
        guard r.status == 201 || r.isSuccess, let location = r.header("location"), !location.isEmpty else {
            throw UploadError(.protocol, message: "POST \(displayURL(t.endpoint)): HTTP \(r.status) without a Location header")
        }
        let u = resolveURL(location, against: t.endpoint)
        // The upload URL gets every later request (and, for plain TUS, its credentials): it must be
        // on the creation endpoint's origin. Refused rather than followed without credentials: a
        // URL elsewhere is a misconfigured proxy (it would not accept the data either) or a server
        // sending the file somewhere it was not meant to go; either way the user has to decide.
        guard isSameOrigin(u, t.endpoint) else {
            let sameHost = urlOrigin(u) != nil && urlOrigin(u) == urlOrigin(t.endpoint)
            let why =
                sameHost
                ? "a URL with other user info than the endpoint's"
                : "\(displayURL(u)), which is not on the endpoint's origin \(urlOrigin(t.endpoint) ?? displayURL(t.endpoint)) (scheme, host and port must match)"
            throw UploadError(
                .crossOrigin,
                message:
                    "POST \(displayURL(t.endpoint)): the server put the upload at \(why); refused so that neither credentials nor the file go anywhere but the endpoint's origin"
            )
        }
        url = u
        pendingTarget = nil
        offset = r.header("upload-offset").flatMap { Int64($0.trimmingCharacters(in: .whitespaces)) } ?? 0
        var extra = t.extra
        extra["tus_endpoint"] = t.endpoint
        var rec = ResumeRecord(
            method: up.method, fingerprint: fingerprint, destination: up.destination, uploadURL: u,
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
                    throw UploadError(
                        .checksumMismatch,
                        message:
                            "\(file): the server rejected the checksum of bytes \(offset)..<\(offset + length) \(attempts) times; the file may be changing or the network corrupting data",
                        retryable: true)
                }
                try control.check()
                try stamp.verifyUnchanged(file)
                continue
            }
            guard let value = r.header("upload-offset"), let o = Int64(value.trimmingCharacters(in: .whitespaces)) else {
                // Not a TUS answer: ask the server where it stands.
                throw TUSRedo.retry(code: .protocol, reason: "PATCH \(displayURL(url)): HTTP \(r.status) without Upload-Offset", retryAfter: nil)
            }
            guard o >= offset, o <= size else {
                throw TUSRedo.conflict
            }
            guard o > offset || length == 0 else {
                // Accepted but nothing stored: through the retry backoff, so it ends after
                // maxAttemptsWithoutProgress instead of looping for ever.
                throw TUSRedo.retry(
                    code: .noProgress,
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
                throw UploadError(.fileChanged, message: "\(file): changed while bytes \(offset)..<\(offset + length) were hashed")
            }
            throw UploadError(.fileRead, message: "\(file): cannot read bytes \(offset)..<\(offset + length) for the checksum: \(error)")
        }
        guard !digest.isEmpty else {
            throw UploadError(.fileRead, message: "\(file): no \(algorithm.rawValue) digest for bytes \(offset)..<\(offset + length)")
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
        switch e.kind {
        case .paused:
            emit(.paused(id: id))
        case .cancelled:
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
