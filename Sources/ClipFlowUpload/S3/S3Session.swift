import Foundation
import ClipFlowCore

/// The state of one `upload` call. Confined to the caller's thread.
final class S3Session {
    let uploader: S3Uploader
    var options: S3Options { uploader.options }
    let path: String
    let id: String
    let control: UploadControl
    let observer: UploadObserver
    let transport: CurlTransport
    let stamp: FileStamp
    let fingerprint: FileFingerprint
    let key: String
    /// Retries, backoff and credential refreshes of this upload's requests (a refresh with no
    /// success since makes a second refusal final; `retryResumed` follows the next success).
    let requests: RequestExecutor
    let meter: ProgressMeter
    /// The resume record of the multipart upload in flight (nil before Create / after the end).
    var record: ResumeRecord?
    /// Hashes the next part (SHA-256 when payloads are signed, else MD5 for the ETag check) while
    /// the current one is sent.
    let digester: RangeDigester

    init(uploader: S3Uploader, path: String, id: String, control: UploadControl, observer: UploadObserver) throws {
        self.uploader = uploader
        self.path = path
        self.id = id
        self.control = control
        self.observer = observer
        stamp = try FileStamp.of(path)
        fingerprint = try FileFingerprint.of(path)
        key = uploader.options.objectKey(for: path)
        requests = RequestExecutor(policy: uploader.options.retry, id: id, control: control, observer: observer)
        meter = ProgressMeter(total: stamp.size)
        // Signed payloads: the server checks the part against its SHA-256, so no MD5 is needed.
        // Unsigned payloads: the part's MD5 is compared with the ETag instead.
        digester = RangeDigester(path: path, algorithms: uploader.options.payloadSigning == .signed ? [.sha256] : [.md5])
        do {
            transport = try CurlTransport(settings: uploader.options.network, shouldAbort: { control.shouldStop })
        } catch let e as TransportError {
            throw UploadError(.internal, message: e.message)
        }
    }

    /// Starts every message of this upload: the file first, as in the other uploaders.
    var what: String { "\(path): S3 upload to \(options.bucket)/\(key)" }

    // MARK: The flow

    func run(metadata: [String: String]) throws -> UploadResult {
        let metaHeaders = try S3Uploader.metadataHeaders(metadata)
        // A record for an older version of this file: its upload can never complete; abort it.
        for stale in uploader.store.staleRecords(path: path, destination: uploader.destination, current: fingerprint) {
            if let u = stale.uploadID, let k = stale.objectKey { uploader.abortQuietly(key: k, uploadID: u) }
            try? uploader.store.remove(stale)
        }
        if stamp.size == 0 { return try putEmptyObject(metaHeaders) }

        var done: [Int: (etag: String, size: Int64)] = [:]
        var partSize: Int64
        if let r = uploader.store.record(for: fingerprint, destination: uploader.destination),
            r.method == "s3", let uploadID = r.uploadID, r.objectKey == key, let ps = r.partSize, ps > 0
        {
            partSize = ps
            record = r
            if let listed = try listParts(uploadID: uploadID) {
                done = listed
            } else {
                // The server forgot the upload (completed elsewhere, aborted, expired): start anew.
                try? uploader.store.remove(r)
                record = nil
            }
        } else {
            partSize = try options.partSize(forFileSize: stamp.size)
        }
        if record == nil {
            partSize = try options.partSize(forFileSize: stamp.size)
            // A new upload sends part 1 first: hash it while CreateMultipartUpload is answered.
            digester.prefetch(offset: 0, length: min(partSize, stamp.size))
            let uploadID = try createUpload(metaHeaders)
            let r = ResumeRecord(
                method: "s3", fingerprint: fingerprint, destination: uploader.destination,
                uploadID: uploadID, objectKey: key, partSize: partSize)
            try uploader.store.save(r)
            record = r
        }
        guard let uploadID = record?.uploadID else { throw UploadError(.internal, message: "\(what): no UploadId") }

        let count = Int((stamp.size + partSize - 1) / partSize)
        guard count <= options.maximumParts else {
            throw UploadError(.badInput, message: "\(what): \(count) parts of \(partSize) bytes exceed the backend's \(options.maximumParts)")
        }
        func range(_ n: Int) -> (offset: Int64, length: Int64) {
            let offset = Int64(n - 1) * partSize
            return (offset, min(partSize, stamp.size - offset))
        }
        // Keep only parts the server holds whole (right size, and the right bytes when checked).
        var etags: [Int: String] = [:]
        var confirmed: Int64 = 0
        for (n, part) in done where n >= 1 && n <= count {
            let r = range(n)
            guard part.size == r.length else { continue }
            if options.verifyResumedParts, let md5 = S3Session.plainMD5(part.etag) {
                try control.check()
                let local = try Digest.hash(.md5, file: path, offset: r.offset, length: r.length).hex
                guard local == md5 else { continue }
            }
            etags[n] = part.etag
            confirmed += r.length
        }
        observer.upload(.started(id: id, file: path, bytes: stamp.size, resumedAt: confirmed))
        if let p = meter.acknowledge(confirmed, force: true) { observer.upload(.progress(id: id, p)) }

        defer { digester.stop() }
        let missing = (1...count).filter { etags[$0] == nil }
        for (i, n) in missing.enumerated() {
            try control.check()
            try stamp.verifyUnchanged(path)
            let r = range(n)
            let next = i + 1 < missing.count ? range(missing[i + 1]) : nil
            etags[n] = try uploadPart(n, uploadID: uploadID, offset: r.offset, length: r.length, next: next)
            confirmed += r.length
            if let p = meter.acknowledge(confirmed) { observer.upload(.progress(id: id, p)) }
        }
        try control.check()
        try stamp.verifyUnchanged(path)
        let etag = try complete(uploadID: uploadID, etags: (1...count).map { ($0, etags[$0]!) })
        if let r = record { try? uploader.store.remove(r) }
        record = nil
        if let p = meter.acknowledge(stamp.size, force: true) { observer.upload(.progress(id: id, p)) }
        return UploadResult(method: "s3", bytes: stamp.size, url: options.objectURL(key: key), etag: etag, uploadID: uploadID)
    }

    /// Aborts the multipart upload in flight (if any) and drops its record.
    func abandon() {
        guard let r = record else { return }
        if let u = r.uploadID, let k = r.objectKey { uploader.abortQuietly(key: k, uploadID: u) }
        try? uploader.store.remove(r)
        record = nil
    }

    // MARK: Requests

    func objectRequest(
        _ method: String, query: [(String, String?)] = [], headers: [(name: String, value: String)] = [],
        body: HTTPBody = .empty
    ) -> HTTPRequest {
        var url = options.objectURL(key: key)
        if !query.isEmpty {
            url +=
                "?"
                + query.map { name, value in
                    let n = SigV4Signer.uriEncode(name, keepSlash: false)
                    guard let value else { return n }
                    return n + "=" + SigV4Signer.uriEncode(value, keepSlash: false)
                }.joined(separator: "&")
        }
        return HTTPRequest(method: method, url: url, headers: headers, body: body)
    }

    func putEmptyObject(_ metaHeaders: [(name: String, value: String)]) throws -> UploadResult {
        observer.upload(.started(id: id, file: path, bytes: 0, resumedAt: 0))
        let req = objectRequest("PUT", headers: [("Content-Type", options.contentType(for: path))] + metaHeaders, body: .bytes(Data()))
        let r = try send(req, payloadHash: SigV4Signer.emptyPayloadHash, step: "PutObject")
        guard r.isSuccess else { throw failure(r, step: "PutObject") }
        if let p = meter.acknowledge(0, force: true) { observer.upload(.progress(id: id, p)) }
        return UploadResult(method: "s3", bytes: 0, url: options.objectURL(key: key), etag: r.header("etag"), uploadID: nil)
    }

    func createUpload(_ metaHeaders: [(name: String, value: String)]) throws -> String {
        let req = objectRequest("POST", query: [("uploads", nil)], headers: [("Content-Type", options.contentType(for: path))] + metaHeaders)
        let r = try send(req, payloadHash: SigV4Signer.emptyPayloadHash, step: "CreateMultipartUpload")
        guard r.isSuccess else { throw failure(r, step: "CreateMultipartUpload") }
        guard let uploadID = XML.first("UploadId", in: r.text), !uploadID.isEmpty else {
            throw UploadError(.protocol, message: "\(what): CreateMultipartUpload answered without an UploadId", retryable: true)
        }
        return uploadID
    }

    /// Every part the server holds (all ListParts pages), or nil for NoSuchUpload.
    func listParts(uploadID: String) throws -> [Int: (etag: String, size: Int64)]? {
        var parts: [Int: (etag: String, size: Int64)] = [:]
        var marker: String? = nil
        for _ in 0..<200 {  // 200 pages x 1000 parts: beyond S3's 10,000-part limit
            var query: [(String, String?)] = [("uploadId", uploadID)]
            if let marker { query.append(("part-number-marker", marker)) }
            let r = try send(objectRequest("GET", query: query), payloadHash: SigV4Signer.emptyPayloadHash, step: "ListParts")
            if r.status == 404 && S3ErrorInfo(r).code != "NoSuchBucket" { return nil }
            guard r.isSuccess else { throw failure(r, step: "ListParts") }
            let text = r.text
            for part in XML.all("Part", in: text) {
                guard let n = XML.first("PartNumber", in: part).flatMap({ Int($0) }),
                    let etag = XML.first("ETag", in: part),
                    let size = XML.first("Size", in: part).flatMap({ Int64($0) })
                else { continue }
                parts[n] = (etag, size)
            }
            guard XML.first("IsTruncated", in: text)?.lowercased() == "true" else { return parts }
            guard let next = XML.first("NextPartNumberMarker", in: text), !next.isEmpty, next != marker else {
                throw UploadError(.protocol, message: "\(what): ListParts is truncated but gives no new NextPartNumberMarker", retryable: true)
            }
            marker = next
        }
        throw UploadError(.protocol, message: "\(what): ListParts did not end after 200 pages", retryable: true)
    }

    /// Sends part `n`. `next` is the range of the part that will be sent after it, hashed in the
    /// background meanwhile.
    func uploadPart(
        _ n: Int, uploadID: String, offset: Int64, length: Int64,
        next: (offset: Int64, length: Int64)? = nil
    ) throws -> String {
        let body = HTTPBody.file(path: path, offset: offset, length: length)
        // SHA-256 for a signed payload (the server verifies the bytes against it), else MD5 to
        // check the ETag.
        let (sha256, md5) = try partDigests(offset: offset, length: length)
        if let next { digester.prefetch(offset: next.offset, length: next.length) }
        let payloadHash = options.payloadSigning == .signed ? sha256 : SigV4Signer.unsignedPayload
        let req = objectRequest("PUT", query: [("partNumber", String(n)), ("uploadId", uploadID)], body: body)
        return try send(req, payloadHash: payloadHash, step: "UploadPart \(n)") { r in
            guard r.isSuccess else {
                if r.status == 404 && S3ErrorInfo(r).code == "NoSuchUpload" {
                    throw UploadError(
                        .s3NoSuchUpload, message: "\(what): the server no longer knows the multipart upload (aborted or expired); it will start anew",
                        retryable: true)
                }
                throw failure(r, step: "UploadPart \(n)")
            }
            guard let etag = r.header("etag"), !etag.isEmpty else {
                throw UploadError(.protocol, message: "\(what): UploadPart \(n) answered \(r.status) without an ETag", retryable: true)
            }
            if let md5, let got = S3Session.plainMD5(etag), got != md5 {
                // The server stored other bytes than we read: send the part again.
                return .retryable(retryable("UploadPart \(n): the server's ETag \(got) is not the part's MD5 \(md5)"))
            }
            return .accepted(etag)
        }
    }

    func complete(uploadID: String, etags: [(Int, String)]) throws -> String? {
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for (n, etag) in etags { xml += "<Part><PartNumber>\(n)</PartNumber><ETag>\(XML.escape(etag))</ETag></Part>" }
        xml += "</CompleteMultipartUpload>"
        let data = Data(xml.utf8)
        let req = objectRequest("POST", query: [("uploadId", uploadID)], headers: [("Content-Type", "application/xml")], body: .bytes(data))
        return try send(req, payloadHash: SigV4Signer.payloadHash(data), step: "CompleteMultipartUpload") { r in
            if r.status == 404 && S3ErrorInfo(r).code == "NoSuchUpload" {
                // An earlier Complete (this one, sent again after a network error or a retryable
                // answer) may have worked and its answer been lost: look at the object.
                if let etag = try completedObjectETag(parts: etags) { return .accepted(etag) }
            }
            guard r.isSuccess else { throw failure(r, step: "CompleteMultipartUpload") }
            // S3 may answer 200 and put an <Error> in the body (it failed after the headers went out).
            if r.text.contains("<Error>") {
                let info = S3ErrorInfo(HTTPResponse(status: 200, body: r.body))
                if ["InternalError", "SlowDown", "ServiceUnavailable"].contains(info.code) || info.code.isEmpty {
                    return .retryable(retryable("CompleteMultipartUpload: HTTP 200 with error \(info.code)"))
                }
                throw UploadError(.s3(info.code), message: "\(what): CompleteMultipartUpload failed: \(info.code): \(info.message)")
            }
            return .accepted(XML.first("ETag", in: r.text) ?? r.header("etag"))
        }
    }

    /// HEAD of the object after a NoSuchUpload on a Complete that may have been applied: its ETag
    /// when the object has our size and is the multipart object made of exactly our parts (ETag =
    /// MD5 of the parts' binary MD5s, `-N`). When a part's ETag is not a plain MD5 (SSE-KMS) the
    /// multipart ETag cannot be computed and the size alone decides.
    func completedObjectETag(parts: [(Int, String)]) throws -> String? {
        let r = try send(objectRequest("HEAD"), payloadHash: SigV4Signer.emptyPayloadHash, step: "HeadObject")
        guard r.isSuccess, r.header("content-length").flatMap({ Int64($0) }) == stamp.size,
            let etag = r.header("etag")
        else { return nil }
        if let expected = S3Session.multipartETag(parts.map(\.1)) {
            let got = etag.trimmingCharacters(in: CharacterSet(charactersIn: "\" ")).lowercased()
            guard got == expected else { return nil }
        }
        return etag
    }

    /// The ETag S3 gives a multipart object (without quotes): hex MD5 of the concatenated binary
    /// MD5s of the parts, then `-<number of parts>`. Nil when a part's ETag is not a plain MD5.
    static func multipartETag(_ partETags: [String]) -> String? {
        var joined = [UInt8]()
        for e in partETags {
            guard let hex = plainMD5(e) else { return nil }
            var chars = Array(hex.utf8)[...]
            while chars.count >= 2 {
                guard let b = UInt8(String(decoding: chars.prefix(2), as: UTF8.self), radix: 16) else { return nil }
                joined.append(b)
                chars = chars.dropFirst(2)
            }
        }
        let d = Digest(.md5)
        d.update(Data(joined))
        return "\(d.finish().hex)-\(partETags.count)"
    }

    // MARK: Sending with retries and credential refresh

    /// Sends `request` (signed afresh for each attempt) until it gets an answer that is not a
    /// retryable failure or a credential refusal. Returns that answer, success or not.
    func send(_ request: HTTPRequest, payloadHash: String, step: String) throws -> HTTPResponse {
        try send(request, payloadHash: payloadHash, step: step) { .accepted($0) }
    }

    /// Sends `request` through the request executor: transport failures, retryable S3 errors and
    /// refusals are handled here; every other answer goes to `read`, which says what it means.
    func send<T>(
        _ request: HTTPRequest, payloadHash: String, step: String, read: (HTTPResponse) throws -> Verdict<T>
    ) throws -> T {
        try requests.perform(progress: { meter.acknowledged }, resumedAt: { meter.acknowledged }) {
            try refreshIfExpiring()
            var req = request
            uploader.sign(&req, payloadHash: payloadHash)
            let r: HTTPResponse
            do {
                r = try transport.perform(req)
            } catch let e as TransportError {
                if e.kind == .cancelled || control.shouldStop {
                    try control.check()
                    throw UploadError.cancelled
                }
                if e.kind == .fileRead {
                    try stamp.verifyUnchanged(path)
                    throw UploadError(.fileChanged, message: "\(what): \(e.message)")
                }
                guard e.isRetryable else {
                    throw UploadError(e.kind == .tls ? .tls : e.kind == .oversized ? .badResponse : .network, message: "\(what): \(step): \(e.message)")
                }
                return .retryable(retryable("\(step): \(e.message)", code: e.kind == .stalled ? .stalled : .network))
            }
            if r.isSuccess { return try read(r) }
            let info = S3ErrorInfo(r)
            if info.isExpiry {
                return .refused(
                    Refused(refresh: refresh("\(step): \(info.code.isEmpty ? "HTTP \(info.status)" : info.code)")) { [what] why in
                        why == .noProvider
                            ? UploadError(
                                .credentialsExpired,
                                message:
                                    "\(what): \(step): the server refused the credentials as expired (\(info.summary)) and no credential provider is configured to renew them",
                                retryable: false)
                            : UploadError(
                                .credentialsExpired,
                                message:
                                    "\(what): \(step): the server refused the credentials (\(info.summary)) again right after they were renewed; check the credential provider",
                                retryable: true)
                    })
            }
            if info.code == "InvalidAccessKeyId", uploader.provider != nil {
                // OSS answers this for expired STS keys: ask once for fresh ones; `failure` reports
                // it if the server still refuses them.
                return .refused(Refused(refresh: refresh("\(step): \(info.code)")) { [self] _ in failure(r, step: step) })
            }
            if info.isRetryable {
                return .retryable(retryable("\(step): \(info.summary)", retryAfter: retryAfterSeconds(r), code: .http(r.status)))
            }
            return try read(r)
        }
    }

    /// Renews the credentials before they expire (within the margin). A failed renewal is final
    /// only when the current credentials have already expired; else they are used, and renewed
    /// again on refusal.
    func refreshIfExpiring() throws {
        guard uploader.proactiveRefreshDue() else { return }
        observer.upload(.credentialsExpired(id: id))
        do {
            _ = try uploader.refreshCredentials(reason: "credentials expire within \(Int(options.credentialRefreshMargin)) s")
        } catch let e as UploadError {
            if currentExpired() { throw e }
        }
    }

    /// Asks the credential provider for fresh keys; nil when there is no provider.
    func refresh(_ reason: String) -> (() throws -> Void)? {
        guard uploader.provider != nil else { return nil }
        return { [uploader] in _ = try uploader.refreshCredentials(reason: reason) }
    }

    func currentExpired() -> Bool {
        guard let exp = uploader.currentCredentials().expiration else { return false }
        return exp.timeIntervalSinceNow <= 0
    }

    /// A retryable failure; the policy's give-up error names the upload and `reason`.
    func retryable(_ reason: String, retryAfter: Double? = nil, code: UploadErrorCode = .retry) -> Retryable {
        Retryable(reason: reason, retryAfter: retryAfter) { [what] retry in
            UploadError(
                code, message: "\(what): \(reason); gave up after \(retry.policy.maxAttemptsWithoutProgress) attempts without progress", retryable: true)
        }
    }

    /// The error for a final, non-retryable answer.
    func failure(_ r: HTTPResponse, step: String) -> UploadError {
        let info = S3ErrorInfo(r)
        if let refusal = S3Location.dotSegmentRefusal(key: key, status: r.status, serverCode: info.code, what: "\(what): \(step)") {
            return refusal
        }
        switch info.code {
        case "SignatureDoesNotMatch":
            let keyID = maskAccessKeyID(uploader.currentCredentials().accessKeyID)
            return UploadError(
                .credentials,
                message:
                    "\(what): \(step): the server refused the request signature (\(info.code)): the secret access key for access key \(keyID) is wrong (or the region '\(options.region)' does not match the bucket's); check the credentials"
            )
        case "InvalidAccessKeyId":
            let keyID = maskAccessKeyID(uploader.currentCredentials().accessKeyID)
            let renewed = requests.refreshedSinceAccepted ? ", also after asking the credential provider for fresh keys" : ""
            return UploadError(
                .credentials, message: "\(what): \(step): the server does not know access key \(keyID) (\(info.code))\(renewed); check the credentials")
        case "RequestTimeTooSkewed":
            return UploadError(
                .clockSkew,
                message:
                    "\(what): \(step): the server refused the request time (\(info.summary)): this machine's clock is off; set it right (e.g. enable NTP) and upload again"
            )
        case "AccessDenied":
            return UploadError(.http(403), message: "\(what): \(step): access denied (\(info.summary)); the credentials lack permission for this bucket/key")
        case "NoSuchBucket":
            return UploadError(.badInput, message: "\(what): \(step): the bucket '\(options.bucket)' does not exist at \(displayURL(options.trimmedEndpoint))")
        default:
            return UploadError(.http(r.status), message: "\(what): \(step): \(info.summary)", retryable: isRetryableStatus(r.status))
        }
    }

    // MARK: Digests

    /// The MD5 (hex) inside a plain ETag (`"<32 hex>"`), nil for multipart/KMS-style ETags.
    static func plainMD5(_ etag: String) -> String? {
        let t = etag.trimmingCharacters(in: CharacterSet(charactersIn: "\" ")).lowercased()
        guard t.count == 32, t.allSatisfy({ $0.isHexDigit }) else { return nil }
        return t
    }

    /// SHA-256 (signed payloads; else empty) or MD5 (unsigned payloads; else nil), hex, of a part,
    /// from the digester (prefetched while the previous part was sent, else read now).
    func partDigests(offset: Int64, length: Int64) throws -> (sha256: String, md5: String?) {
        let d: [[UInt8]]
        do {
            d = try digester.digests(offset: offset, length: length)
        } catch let e as UploadError {
            throw e
        } catch {
            throw UploadError(.internal, message: "\(what): hashing bytes \(offset)..<\(offset + length): \(error)")
        }
        return options.payloadSigning == .signed ? (d[0].hex, nil) : ("", d[0].hex)
    }
}

/// An access key id for messages: its first 4 characters (the key type, e.g. `AKIA`/`ASIA`/`STS.`)
/// and last 4, e.g. `AKIA…WXYZ`; only `…` and the last 4 for short ids.
func maskAccessKeyID(_ id: String) -> String {
    guard id.count > 4 else { return "…" }
    return id.count >= 12 ? "\(id.prefix(4))…\(id.suffix(4))" : "…\(id.suffix(4))"
}
