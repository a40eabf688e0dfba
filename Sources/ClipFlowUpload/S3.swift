import Foundation
import ClipFlowCore
import Synchronization

// MARK: - Options

/// Where and how `S3Uploader` puts files: an S3-compatible endpoint (AWS S3, Alibaba OSS's S3
/// endpoint, MinIO, moto). Holds no secret (credentials are passed to `S3Uploader` separately),
/// so it can be written into a pipeline file.
public struct S3Options: Codable, Sendable, Equatable {
    public enum AddressingStyle: String, Codable, Sendable, Equatable {
        /// `https://endpoint/bucket/key` (MinIO, moto, any endpoint).
        case path
        /// `https://bucket.endpoint/key` (AWS's default, required by OSS).
        case virtual
    }

    /// e.g. `https://s3.eu-central-1.amazonaws.com`, `https://oss-cn-hangzhou.aliyuncs.com`,
    /// `http://127.0.0.1:9000`. A trailing `/` is ignored.
    public var endpoint: String
    public var region: String
    public var bucket: String
    /// The object key. nil: `keyPrefix` + the file's name.
    public var key: String?
    /// Prepended to the file name when `key` is nil (e.g. `videos/2025/`).
    public var keyPrefix: String
    public var addressingStyle: AddressingStyle
    /// Bytes per part. nil: automatic (see `partSize(forFileSize:)`).
    public var partSize: Int64?
    /// The backend's smallest allowed part (all parts but the last): 5 MiB for AWS S3, 100 KB
    /// for OSS; moto's `S3_UPLOAD_PART_MIN_SIZE`.
    public var minimumPartSize: Int64
    /// The backend's largest part count (10,000 for S3 and OSS).
    public var maximumParts: Int
    /// nil: from the file extension (`video/mp4`, `video/quicktime`, ...).
    public var contentType: String?
    /// User metadata sent as `x-amz-meta-<name>` with every upload (title, description, tags,
    /// category, cover-url, ...); the per-upload metadata given to `upload` is merged over it.
    /// See `S3Uploader.metadataHeaders` for how names and non-ASCII values are encoded.
    public var metadata: [String: String]
    public var retry: RetryPolicy
    /// Timeouts (stall, connect) and TLS.
    public var network: TransportSettings
    public var payloadSigning: PayloadSigning
    /// On resume, re-read each part the server already has and compare its MD5 with the part's
    /// ETag (skipped for ETags that are not a plain MD5, e.g. SSE-KMS); a mismatch re-uploads it.
    public var verifyResumedParts: Bool
    /// Credentials whose `expiration` is closer than this many seconds are refreshed (through the
    /// provider) before the next request.
    public var credentialRefreshMargin: Double

    public static let awsMinimumPartSize: Int64 = 5 << 20
    public static let ossMinimumPartSize: Int64 = 100 << 10

    public init(endpoint: String, region: String, bucket: String, key: String? = nil, keyPrefix: String = "",
                addressingStyle: AddressingStyle = .path, partSize: Int64? = nil,
                minimumPartSize: Int64 = S3Options.awsMinimumPartSize, maximumParts: Int = 10_000,
                contentType: String? = nil, metadata: [String: String] = [:], retry: RetryPolicy = RetryPolicy(),
                network: TransportSettings = TransportSettings(), payloadSigning: PayloadSigning = .signed,
                verifyResumedParts: Bool = true, credentialRefreshMargin: Double = 60) {
        self.endpoint = endpoint
        self.region = region
        self.bucket = bucket
        self.key = key
        self.keyPrefix = keyPrefix
        self.addressingStyle = addressingStyle
        self.partSize = partSize
        self.minimumPartSize = minimumPartSize
        self.maximumParts = maximumParts
        self.contentType = contentType
        self.metadata = metadata
        self.retry = retry
        self.network = network
        self.payloadSigning = payloadSigning
        self.verifyResumedParts = verifyResumedParts
        self.credentialRefreshMargin = credentialRefreshMargin
    }

    /// The automatic part size aims at this (files of 1 GiB and more), see `partSize(forFileSize:)`.
    public static let targetPartSize: Int64 = 64 << 20

    /// The part size for a file of `size` bytes. Automatic: a sixteenth of the file, but at most
    /// `targetPartSize` (64 MiB), rounded up to a multiple of 1 MiB, and never below
    /// `minimumPartSize` or so small that the file needs more than `maximumParts` parts (above
    /// 640 GiB the parts grow past 64 MiB). Parts are sent one after another and each ends with a
    /// wait for the answer, so few big parts keep a fast link busy (5 MiB parts at 1 Gbit/s and
    /// 30 ms RTT: ~60% busy; 64 MiB: ~95%); a sixteenth keeps mid-size files at ~16 parts, so a
    /// cut part (resent whole) costs at most ~6% of the file. An explicit `partSize`
    /// is used as given (it may be below 1 MiB, for backends that allow it) but raised when the
    /// file would need more than `maximumParts` parts; below `minimumPartSize` it is refused.
    public func partSize(forFileSize size: Int64) throws -> Int64 {
        let maxParts = Int64(max(1, maximumParts))
        let floorForCount = (size + maxParts - 1) / maxParts
        if let p = partSize {
            guard p >= minimumPartSize, p > 0 else {
                throw UploadError(code: "bad-input", message: "S3 part size \(p) is below the backend's minimum of \(minimumPartSize) bytes; raise partSize or lower minimumPartSize")
            }
            return max(p, floorForCount)
        }
        let mib: Int64 = 1 << 20
        let want = max(minimumPartSize, floorForCount, min(S3Options.targetPartSize, (size + 15) / 16), 1)
        return (want + mib - 1) / mib * mib
    }

    /// The key for `file`.
    public func objectKey(for file: String) -> String {
        key ?? (keyPrefix + URL(fileURLWithPath: file).lastPathComponent)
    }

    var trimmedEndpoint: String {
        var e = endpoint
        while e.hasSuffix("/") { e.removeLast() }
        return e
    }

    /// The object's URL (no query), with the key encoded for the path.
    public func objectURL(key: String) -> String {
        let encodedKey = SigV4Signer.uriEncode(key, keepSlash: true)
        switch addressingStyle {
        case .path:
            return "\(trimmedEndpoint)/\(SigV4Signer.uriEncode(bucket, keepSlash: false))/\(encodedKey)"
        case .virtual:
            guard let r = trimmedEndpoint.range(of: "://") else { return "\(bucket).\(trimmedEndpoint)/\(encodedKey)" }
            return "\(trimmedEndpoint[..<r.upperBound])\(bucket).\(trimmedEndpoint[r.upperBound...])/\(encodedKey)"
        }
    }

    /// The content type to send for `file`.
    public func contentType(for file: String) -> String {
        contentType ?? mimeType(forExtension: URL(fileURLWithPath: file).pathExtension)
    }
}

// MARK: - Uploader

/// Uploads files to S3-compatible storage with multipart upload, resumable across processes.
///
/// One `upload` call runs on the caller's thread, with its own `CurlTransport` (one connection,
/// reused between requests). Several uploads may run at once on one `S3Uploader`; they share the
/// current credentials (a refresh made by one is used by all).
///
/// Flow: CreateMultipartUpload (the UploadId, key and part size are saved in the `ResumeStore`
/// at once) -> UploadPart for each part not yet on the server (body streamed from the file range,
/// signed with its real SHA-256 unless `payloadSigning` is `.unsigned`; the returned ETag is
/// checked against the part's MD5 when it is a plain MD5) -> CompleteMultipartUpload -> record
/// dropped. A later call for the same file and destination asks ListParts (all pages) and sends
/// only what is missing; a record whose upload the server no longer knows (404 NoSuchUpload)
/// starts anew. A zero-byte file is sent with one PutObject (multipart needs at least one part).
///
/// Failures: network errors, stalls, 5xx, 503 SlowDown and 429 are retried per `RetryPolicy`
/// (`retryStarted`/`retryResumed` events). 401 and 400/403 `ExpiredToken`, `InvalidToken`,
/// `TokenRefreshRequired`, `SecurityTokenExpired` (OSS) ask the `CredentialProvider` for fresh
/// credentials (`credentialsExpired` event) and continue the same UploadId; so does an `expiration`
/// closer than `credentialRefreshMargin`. `InvalidAccessKeyId` (which OSS answers for expired STS
/// keys) gets one refresh when a provider is configured, then fails with code `credentials`;
/// `SignatureDoesNotMatch` fails at once (a wrong key is not fixed by asking again), and so does
/// `RequestTimeTooSkewed` (code `clock-skew`). Messages show access key ids masked (`AKIA…WXYZ`).
/// Cancel aborts the multipart
/// upload and drops the record; a file that changes mid-upload (size or mtime) does the same and
/// fails with `file-changed`. No message or event contains a secret key, session token or
/// signature.
public final class S3Uploader: FileUploader, Sendable {
    public let options: S3Options
    public let store: ResumeStore
    public let provider: CredentialProvider?
    private let credentialsBox: Mutex<AWSCredentials>
    /// When the last proactive (expiration-driven) refresh happened, to ask at most every 30 s.
    private let lastProactiveRefresh = Mutex<Date?>(nil)

    public init(options: S3Options, store: ResumeStore, credentials: AWSCredentials, provider: CredentialProvider? = nil) {
        self.options = options
        self.store = store
        self.provider = provider
        self.credentialsBox = Mutex(credentials)
    }

    /// The credentials currently in use (after any refresh).
    public var credentials: AWSCredentials { credentialsBox.withLock { $0 } }

    public var destination: String {
        "s3 \(options.trimmedEndpoint) bucket=\(options.bucket) key=\(options.key ?? options.keyPrefix + "<file name>")"
    }

    // MARK: Metadata

    /// `x-amz-meta-*` headers for `metadata`. Names are lower-cased and every character outside
    /// `a-z 0-9 -` becomes `-` (`cover URL` -> `x-amz-meta-cover-url`). Values of printable ASCII
    /// are sent as they are; any other value (non-ASCII, control characters such as newlines, or
    /// one that itself starts with `=?`) is sent as one RFC 2047 encoded word,
    /// `=?UTF-8?B?<base64 of the UTF-8>?=` — the form AWS S3 itself uses when it returns non-ASCII
    /// metadata, and which readers decode with any MIME library. Empty values are skipped. S3
    /// limits user metadata to 2 KB (names plus values, as sent); more is refused up front.
    public static func metadataHeaders(_ metadata: [String: String]) throws -> [(name: String, value: String)] {
        var out: [(String, String)] = []
        var total = 0
        for (rawName, rawValue) in metadata.sorted(by: { $0.key < $1.key }) {
            let value = rawValue.trimmingCharacters(in: .whitespaces)
            if value.isEmpty { continue }
            var name = String(rawName.lowercased().unicodeScalars.map { s -> Character in
                (s >= "a" && s <= "z") || (s >= "0" && s <= "9") || s == "-" ? Character(s) : "-"
            })
            while name.contains("--") { name = name.replacingOccurrences(of: "--", with: "-") }
            name = name.trimmingCharacters(in: CharacterSet(charactersIn: "-"))
            if name.isEmpty { continue }
            let encoded = encodeMetadataValue(value)
            total += name.utf8.count + encoded.utf8.count
            out.append(("x-amz-meta-\(name)", encoded))
        }
        if total > 2048 {
            throw UploadError(code: "bad-input", message: "S3 user metadata is \(total) bytes as sent; S3 allows 2048 (shorten the description or tags)")
        }
        return out
    }

    /// See `metadataHeaders`.
    public static func encodeMetadataValue(_ value: String) -> String {
        let plain = value.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value <= 0x7E } && !value.hasPrefix("=?")
        if plain { return value }
        return "=?UTF-8?B?\(Data(value.utf8).base64EncodedString())?="
    }

    /// Decodes a value made by `encodeMetadataValue` (returns other values unchanged).
    public static func decodeMetadataValue(_ value: String) -> String {
        guard value.hasPrefix("=?UTF-8?B?"), value.hasSuffix("?="),
              let data = Data(base64Encoded: String(value.dropFirst(10).dropLast(2))) else { return value }
        return String(decoding: data, as: UTF8.self)
    }

    // MARK: FileUploader

    public func upload(file: String, id: String, metadata: [String: String], control: UploadControl,
                       observer: UploadObserver) throws -> UploadResult {
        let path = URL(fileURLWithPath: file).standardizedFileURL.path
        let session: S3Session
        do {
            session = try S3Session(uploader: self, path: path, id: id, control: control, observer: observer)
        } catch let e as UploadError {
            observer.upload(.failed(id: id, code: e.code, message: e.message))
            throw e
        }
        do {
            let merged = options.metadata.merging(metadata) { _, new in new }
            let result = try session.run(metadata: merged)
            observer.upload(.finished(id: id, result))
            return result
        } catch let e as UploadError {
            switch e.code {
            case "cancelled":
                session.abandon()
                observer.upload(.cancelled(id: id))
            case "paused":
                observer.upload(.paused(id: id))
            case "file-changed":
                session.abandon()
                observer.upload(.failed(id: id, code: e.code, message: e.message))
            default:
                observer.upload(.failed(id: id, code: e.code, message: e.message))
            }
            throw e
        } catch {
            let e = UploadError(code: "internal", message: "\(path): S3 upload: \(error)")
            observer.upload(.failed(id: id, code: e.code, message: e.message))
            throw e
        }
    }

    public func discard(file: String) throws {
        let path = URL(fileURLWithPath: file).standardizedFileURL.path
        var records: [ResumeRecord] = []
        if let fp = try? FileFingerprint.of(path) {
            if let r = store.record(for: fp, destination: destination) { records.append(r) }
            records += store.staleRecords(path: path, destination: destination, current: fp)
        } else {
            records = store.all.filter { $0.fingerprint.path == path && $0.destination == destination }
        }
        for r in records {
            if let uploadID = r.uploadID, let key = r.objectKey { abortQuietly(key: key, uploadID: uploadID) }
            try? store.remove(r)
        }
    }

    // MARK: Shared plumbing (used by S3Session)

    func currentCredentials() -> AWSCredentials { credentialsBox.withLock { $0 } }

    /// Asks the provider for fresh credentials. Returns false when there is no provider.
    func refreshCredentials(reason: String) throws -> Bool {
        guard let provider else { return false }
        let fresh = try provider.refresh(reason: reason)
        guard let aws = fresh.aws else {
            throw UploadError(code: "credentials", message: "the credential provider returned a bearer token; S3 needs AccessKeyId/SecretAccessKey")
        }
        credentialsBox.withLock { $0 = aws }
        return true
    }

    /// True when the credentials expire within the margin and a proactive refresh is due (at most
    /// one every 30 s, so a provider that hands out short-lived credentials cannot loop us).
    func proactiveRefreshDue() -> Bool {
        guard provider != nil, let exp = currentCredentials().expiration,
              exp.timeIntervalSinceNow < options.credentialRefreshMargin else { return false }
        return lastProactiveRefresh.withLock { last in
            if let l = last, Date().timeIntervalSince(l) < 30 { return false }
            last = Date()
            return true
        }
    }

    func sign(_ request: inout HTTPRequest, payloadHash: String) {
        SigV4Signer(credentials: currentCredentials(), region: options.region).sign(&request, payloadHash: payloadHash)
    }

    /// AbortMultipartUpload with a transport of its own (the upload's is stopped by the cancel),
    /// best effort: a short timeout, errors ignored.
    func abortQuietly(key: String, uploadID: String) {
        var settings = options.network
        settings.connectTimeout = 5
        settings.stallTimeout = 10
        guard let transport = try? CurlTransport(settings: settings) else { return }
        var req = HTTPRequest(method: "DELETE", url: options.objectURL(key: key) + "?uploadId=" + SigV4Signer.uriEncode(uploadID, keepSlash: false))
        for attempt in 0..<2 {
            sign(&req, payloadHash: SigV4Signer.emptyPayloadHash)
            guard let r = try? transport.perform(req) else { continue }
            if r.isSuccess || r.status == 404 { return }
            if attempt == 0, [400, 401, 403].contains(r.status), S3ErrorInfo(r).isExpiry {
                _ = try? refreshCredentials(reason: "abort refused: \(S3ErrorInfo(r).code)")
                continue
            }
            return
        }
    }
}

// MARK: - S3 error bodies and XML

/// The `<Code>` and `<Message>` of an S3 error body (other elements, such as the
/// `CanonicalRequest` some servers echo, are never read: they can carry the session token).
struct S3ErrorInfo {
    var status: Int
    var code: String
    var message: String

    init(_ r: HTTPResponse) {
        status = r.status
        code = XML.first("Code", in: r.text) ?? ""
        message = XML.first("Message", in: r.text) ?? ""
    }

    /// Credentials that expired or a token the server no longer takes: ask for fresh ones.
    var isExpiry: Bool {
        status == 401 || ["ExpiredToken", "InvalidToken", "TokenRefreshRequired", "ExpiredTokenException",
                          "RequestExpired", "SecurityTokenExpired"].contains(code)
    }

    /// Throttling or a server error: try the same request again.
    var isRetryable: Bool {
        // RequestTimeTooSkewed is not here: the clock stays off however often we ask.
        code != "RequestTimeTooSkewed"
            && (isRetryableStatus(status) || ["SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout"].contains(code))
    }

    var summary: String {
        let c = code.isEmpty ? "" : " \(code)"
        let m = message.isEmpty ? "" : ": \(message)"
        return "HTTP \(status)\(c)\(m)"
    }
}

/// The little XML S3 answers with is flat and regular; these helpers read element texts by name
/// (entities decoded) without a DOM. Not a general XML parser.
enum XML {
    /// Inner texts of every `<tag>...</tag>` (or `<tag attr=...>`), in order.
    static func all(_ tag: String, in text: String) -> [String] {
        var out: [String] = []
        var rest = Substring(text)
        while let open = rest.range(of: "<\(tag)") {
            let after = rest[open.upperBound...]
            guard let next = after.first, next == ">" || next == " " || next == "/" else { rest = after; continue }
            guard let gt = after.firstIndex(of: ">") else { break }
            if gt > after.startIndex, after[after.index(before: gt)] == "/" { out.append(""); rest = after[gt...]; continue }
            let body = after[after.index(after: gt)...]
            guard let close = body.range(of: "</\(tag)>") else { break }
            out.append(decode(body[..<close.lowerBound]))
            rest = body[close.upperBound...]
        }
        return out
    }

    static func first(_ tag: String, in text: String) -> String? { all(tag, in: text).first }

    static func decode(_ s: Substring) -> String {
        guard s.contains("&") else { return String(s) }
        var out = String(s)
        for (entity, ch) in [("&quot;", "\""), ("&#34;", "\""), ("&apos;", "'"), ("&#39;", "'"), ("&lt;", "<"), ("&gt;", ">")] {
            out = out.replacingOccurrences(of: entity, with: ch)
        }
        return out.replacingOccurrences(of: "&amp;", with: "&")
    }

    static func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}

// MARK: - One upload

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
    var retry: RetryState
    let meter: ProgressMeter
    /// The resume record of the multipart upload in flight (nil before Create / after the end).
    var record: ResumeRecord?
    /// A refresh was made and no request has succeeded since (a second expiry then fails).
    var refreshedSinceSuccess = false
    /// The retry attempt to report in `retryResumed` once a request succeeds again.
    var pendingResume: Int?
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
        retry = RetryState(policy: uploader.options.retry)
        meter = ProgressMeter(total: stamp.size)
        // Signed payloads: the server checks the part against its SHA-256, so no MD5 is needed.
        // Unsigned payloads: the part's MD5 is compared with the ETag instead.
        digester = RangeDigester(path: path, algorithms: uploader.options.payloadSigning == .signed ? [.sha256] : [.md5])
        do {
            transport = try CurlTransport(settings: uploader.options.network, shouldAbort: { control.shouldStop })
        } catch let e as TransportError {
            throw UploadError(code: "internal", message: e.message)
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
           r.method == "s3", let uploadID = r.uploadID, r.objectKey == key, let ps = r.partSize, ps > 0 {
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
            let r = ResumeRecord(method: "s3", fingerprint: fingerprint, destination: uploader.destination,
                                 uploadID: uploadID, objectKey: key, partSize: partSize)
            try uploader.store.save(r)
            record = r
        }
        guard let uploadID = record?.uploadID else { throw UploadError(code: "internal", message: "\(what): no UploadId") }

        let count = Int((stamp.size + partSize - 1) / partSize)
        guard count <= options.maximumParts else {
            throw UploadError(code: "bad-input", message: "\(what): \(count) parts of \(partSize) bytes exceed the backend's \(options.maximumParts)")
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

    func objectRequest(_ method: String, query: [(String, String?)] = [], headers: [(name: String, value: String)] = [],
                       body: HTTPBody = .empty) -> HTTPRequest {
        var url = options.objectURL(key: key)
        if !query.isEmpty {
            url += "?" + query.map { name, value in
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
            throw UploadError(code: "protocol", message: "\(what): CreateMultipartUpload answered without an UploadId", retryable: true)
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
                      let size = XML.first("Size", in: part).flatMap({ Int64($0) }) else { continue }
                parts[n] = (etag, size)
            }
            guard XML.first("IsTruncated", in: text)?.lowercased() == "true" else { return parts }
            guard let next = XML.first("NextPartNumberMarker", in: text), !next.isEmpty, next != marker else {
                throw UploadError(code: "protocol", message: "\(what): ListParts is truncated but gives no new NextPartNumberMarker", retryable: true)
            }
            marker = next
        }
        throw UploadError(code: "protocol", message: "\(what): ListParts did not end after 200 pages", retryable: true)
    }

    /// Sends part `n`. `next` is the range of the part that will be sent after it, hashed in the
    /// background meanwhile.
    func uploadPart(_ n: Int, uploadID: String, offset: Int64, length: Int64,
                    next: (offset: Int64, length: Int64)? = nil) throws -> String {
        let body = HTTPBody.file(path: path, offset: offset, length: length)
        // SHA-256 for a signed payload (the server verifies the bytes against it), else MD5 to
        // check the ETag.
        let (sha256, md5) = try partDigests(offset: offset, length: length)
        if let next { digester.prefetch(offset: next.offset, length: next.length) }
        let payloadHash = options.payloadSigning == .signed ? sha256 : SigV4Signer.unsignedPayload
        let req = objectRequest("PUT", query: [("partNumber", String(n)), ("uploadId", uploadID)], body: body)
        while true {
            let r = try send(req, payloadHash: payloadHash, step: "UploadPart \(n)")
            guard r.isSuccess else {
                if r.status == 404 && S3ErrorInfo(r).code == "NoSuchUpload" {
                    throw UploadError(code: "s3-no-such-upload", message: "\(what): the server no longer knows the multipart upload (aborted or expired); it will start anew", retryable: true)
                }
                throw failure(r, step: "UploadPart \(n)")
            }
            guard let etag = r.header("etag"), !etag.isEmpty else {
                throw UploadError(code: "protocol", message: "\(what): UploadPart \(n) answered \(r.status) without an ETag", retryable: true)
            }
            if let md5, let got = S3Session.plainMD5(etag), got != md5 {
                // The server stored other bytes than we read: send the part again.
                try retryAfter(reason: "UploadPart \(n): the server's ETag \(got) is not the part's MD5 \(md5)", retryAfter: nil)
                continue
            }
            return etag
        }
    }

    func complete(uploadID: String, etags: [(Int, String)]) throws -> String? {
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for (n, etag) in etags { xml += "<Part><PartNumber>\(n)</PartNumber><ETag>\(XML.escape(etag))</ETag></Part>" }
        xml += "</CompleteMultipartUpload>"
        let data = Data(xml.utf8)
        let req = objectRequest("POST", query: [("uploadId", uploadID)], headers: [("Content-Type", "application/xml")], body: .bytes(data))
        var attempted = false
        while true {
            // Set before the send: a Complete the server applied but whose answer was lost (`send`
            // retries it itself after the network error) makes the repeat answer NoSuchUpload.
            attempted = true
            let r = try send(req, payloadHash: SigV4Signer.payloadHash(data), step: "CompleteMultipartUpload")
            if r.status == 404 && S3ErrorInfo(r).code == "NoSuchUpload" && attempted {
                // An earlier Complete may have worked and its answer been lost: look at the object.
                if let etag = try completedObjectETag(parts: etags) { return etag }
            }
            guard r.isSuccess else { throw failure(r, step: "CompleteMultipartUpload") }
            // S3 may answer 200 and put an <Error> in the body (it failed after the headers went out).
            if r.text.contains("<Error>") {
                let info = S3ErrorInfo(HTTPResponse(status: 200, body: r.body))
                if ["InternalError", "SlowDown", "ServiceUnavailable"].contains(info.code) || info.code.isEmpty {
                    try retryAfter(reason: "CompleteMultipartUpload: HTTP 200 with error \(info.code)", retryAfter: nil)
                    continue
                }
                throw UploadError(code: "s3-\(info.code)", message: "\(what): CompleteMultipartUpload failed: \(info.code): \(info.message)")
            }
            return XML.first("ETag", in: r.text) ?? r.header("etag")
        }
    }

    /// HEAD of the object after a NoSuchUpload on a Complete that may have been applied: its ETag
    /// when the object has our size and is the multipart object made of exactly our parts (ETag =
    /// MD5 of the parts' binary MD5s, `-N`). When a part's ETag is not a plain MD5 (SSE-KMS) the
    /// multipart ETag cannot be computed and the size alone decides.
    func completedObjectETag(parts: [(Int, String)]) throws -> String? {
        let r = try send(objectRequest("HEAD"), payloadHash: SigV4Signer.emptyPayloadHash, step: "HeadObject")
        guard r.isSuccess, r.header("content-length").flatMap({ Int64($0) }) == stamp.size,
              let etag = r.header("etag") else { return nil }
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
    /// retryable failure or an expired-credential refusal. Returns that answer, success or not.
    func send(_ request: HTTPRequest, payloadHash: String, step: String) throws -> HTTPResponse {
        while true {
            try control.check()
            if uploader.proactiveRefreshDue() {
                observer.upload(.credentialsExpired(id: id))
                do {
                    _ = try uploader.refreshCredentials(reason: "credentials expire within \(Int(options.credentialRefreshMargin)) s")
                } catch let e as UploadError {
                    // The current credentials may still work: go on, and refresh again on refusal.
                    if currentExpired() { throw e }
                }
            }
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
                    throw UploadError(code: "file-changed", message: "\(what): \(e.message)")
                }
                guard e.isRetryable else {
                    throw UploadError(code: e.kind == .tls ? "tls" : e.kind == .oversized ? "bad-response" : "network", message: "\(what): \(step): \(e.message)")
                }
                try retryAfter(reason: "\(step): \(e.message)", retryAfter: nil, code: e.kind == .stalled ? "stalled" : "network")
                continue
            }
            if r.isSuccess && !(step == "CompleteMultipartUpload" && r.text.contains("<Error>")) {
                refreshedSinceSuccess = false
                if let attempt = pendingResume {
                    pendingResume = nil
                    observer.upload(.retryResumed(id: id, attempt: attempt, offset: meter.acknowledged))
                }
                return r
            }
            if r.isSuccess { return r }
            let info = S3ErrorInfo(r)
            if info.isExpiry {
                guard uploader.provider != nil else {
                    throw UploadError(code: "credentials-expired", message: "\(what): \(step): the server refused the credentials as expired (\(info.summary)) and no credential provider is configured to renew them", retryable: false)
                }
                guard !refreshedSinceSuccess else {
                    throw UploadError(code: "credentials-expired", message: "\(what): \(step): the server refused the credentials (\(info.summary)) again right after they were renewed; check the credential provider", retryable: true)
                }
                observer.upload(.credentialsExpired(id: id))
                _ = try uploader.refreshCredentials(reason: "\(step): \(info.code.isEmpty ? "HTTP \(info.status)" : info.code)")
                refreshedSinceSuccess = true
                continue
            }
            if info.code == "InvalidAccessKeyId", uploader.provider != nil, !refreshedSinceSuccess {
                // OSS answers this for expired STS keys: ask once for fresh ones; `failure` reports
                // it if the server still refuses them.
                observer.upload(.credentialsExpired(id: id))
                _ = try uploader.refreshCredentials(reason: "\(step): \(info.code)")
                refreshedSinceSuccess = true
                continue
            }
            if info.isRetryable {
                try retryAfter(reason: "\(step): \(info.summary)", retryAfter: retryAfterSeconds(r), code: "http-\(r.status)")
                continue
            }
            return r
        }
    }

    func currentExpired() -> Bool {
        guard let exp = uploader.currentCredentials().expiration else { return false }
        return exp.timeIntervalSinceNow <= 0
    }

    /// Records a failure with the retry policy; waits, or throws when the policy gives up.
    func retryAfter(reason: String, retryAfter: Double?, code: String = "retry") throws {
        guard let delay = retry.failure(at: meter.acknowledged, retryAfter: retryAfter) else {
            throw UploadError(code: code, message: "\(what): \(reason); gave up after \(retry.policy.maxAttemptsWithoutProgress) attempts without progress", retryable: true)
        }
        observer.upload(.retryStarted(id: id, attempt: retry.attempts, delay: delay, reason: Secrets.shared.redact(reason)))
        pendingResume = retry.attempts
        try control.sleep(delay)
    }

    /// The error for a final, non-retryable answer.
    func failure(_ r: HTTPResponse, step: String) -> UploadError {
        let info = S3ErrorInfo(r)
        switch info.code {
        case "SignatureDoesNotMatch":
            let keyID = maskAccessKeyID(uploader.currentCredentials().accessKeyID)
            return UploadError(code: "credentials", message: "\(what): \(step): the server refused the request signature (\(info.code)): the secret access key for access key \(keyID) is wrong (or the region '\(options.region)' does not match the bucket's); check the credentials")
        case "InvalidAccessKeyId":
            let keyID = maskAccessKeyID(uploader.currentCredentials().accessKeyID)
            let renewed = refreshedSinceSuccess ? ", also after asking the credential provider for fresh keys" : ""
            return UploadError(code: "credentials", message: "\(what): \(step): the server does not know access key \(keyID) (\(info.code))\(renewed); check the credentials")
        case "RequestTimeTooSkewed":
            return UploadError(code: "clock-skew", message: "\(what): \(step): the server refused the request time (\(info.summary)): this machine's clock is off; set it right (e.g. enable NTP) and upload again")
        case "AccessDenied":
            return UploadError(code: "http-403", message: "\(what): \(step): access denied (\(info.summary)); the credentials lack permission for this bucket/key")
        case "NoSuchBucket":
            return UploadError(code: "bad-input", message: "\(what): \(step): the bucket '\(options.bucket)' does not exist at \(displayURL(options.trimmedEndpoint))")
        default:
            return UploadError(code: "http-\(r.status)", message: "\(what): \(step): \(info.summary)", retryable: isRetryableStatus(r.status))
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
            throw UploadError(code: "internal", message: "\(what): hashing bytes \(offset)..<\(offset + length): \(error)")
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
