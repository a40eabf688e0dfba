import Foundation
import ClipFlowCore
import Synchronization

/// One object as `S3ObjectStore` reports it.
public struct S3ObjectInfo: Sendable, Equatable {
    public var key: String
    public var size: Int64
    /// As the server sends it (quoted).
    public var etag: String
    /// User metadata: `x-amz-meta-*` names without the prefix, values decoded
    /// (`S3Uploader.decodeMetadataValue`). Empty in `list` answers, which carry none.
    public var metadata: [String: String]
    /// When the object was written, as `list` answers it (nil elsewhere).
    public var modified: Date?

    public init(key: String, size: Int64, etag: String, metadata: [String: String] = [:], modified: Date? = nil) {
        self.key = key
        self.size = size
        self.etag = etag
        self.metadata = metadata
        self.modified = modified
    }
}

/// The body bytes an `S3ObjectStore` moved since it was made: `read`, the bodies of its
/// answers (objects fetched, listings); `written`, the bodies of its requests (objects and parts
/// sent). Headers are not counted, nor an attempt that broke off without an answer; an attempt
/// answered and then retried is. A multipart `upload(file:)` counts the file once it completes.
/// Thread-safe.
public final class S3Traffic: Sendable {
    private let readBytes = Atomic<Int64>(0)
    private let writtenBytes = Atomic<Int64>(0)

    public init() {}

    public var read: Int64 { readBytes.load(ordering: .relaxed) }
    public var written: Int64 { writtenBytes.load(ordering: .relaxed) }

    func count(read: Int64, written: Int64) {
        if read > 0 { readBytes.add(read, ordering: .relaxed) }
        if written > 0 { writtenBytes.add(written, ordering: .relaxed) }
    }
}

/// Lists, reads, writes, copies and deletes objects in S3-compatible storage: the inputs and
/// outputs of pipelines that name `s3://` locations, and `clipflow serve`'s bucket. The bytes
/// its calls move are counted (`traffic`).
///
/// Every call runs on the caller's thread with a `CurlTransport` of its own; calls may run at once
/// from several threads. Requests are signed with `SigV4Signer` by one shared `S3Uploader`, which
/// holds the current credentials and renews them through `access.provider` when the server
/// refuses them as expired. Network failures, stalls, 5xx and throttling are retried per
/// `access.retry`. Errors are `UploadError`s: a missing object or bucket is `.badInput` (retrying
/// cannot help); everything else (network, 5xx, refused credentials) is another kind. No message
/// holds a secret key, session token or signature.
public final class S3ObjectStore: Sendable {
    public let access: S3Access
    /// Keys asked for per ListObjectsV2 page (S3 answers at most 1000).
    let pageSize: Int
    /// Bytes per upload part; nil: `S3Options.partSize(forFileSize:)` decides.
    let partSize: Int64?
    /// The `ResumeStore` file of uploads: a later upload of the same (unchanged) file to the same
    /// key continues the parts an interrupted one left on the server.
    let resumeStorePath: String
    /// Signs every request and holds the current credentials (made on first use).
    private let signer = Mutex<S3Uploader?>(nil)
    /// The body bytes this store's calls moved.
    public let traffic = S3Traffic()

    /// Upload resume records go to `$TMPDIR/clipflow-s3-objectstore-<uid>/resume.json`.
    public convenience init(access: S3Access) {
        self.init(access: access, pageSize: 1000, partSize: nil, resumeStorePath: nil)
    }

    init(access: S3Access, pageSize: Int, partSize: Int64?, resumeStorePath: String?) {
        self.access = access
        self.pageSize = max(1, min(1000, pageSize))
        self.partSize = partSize
        self.resumeStorePath =
            resumeStorePath
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("clipflow-s3-objectstore-\(getuid())/resume.json").path
    }

    /// The shared signer (an `S3Uploader` with no object of its own), made on first use.
    func sharedSigner() throws -> S3Uploader {
        try signer.withLock { s in
            if let s { return s }
            let made = S3Uploader(
                options: access.options(bucket: ""), store: try ResumeStore(path: resumeStorePath), credentials: access.credentials,
                provider: access.provider)
            s = made
            return made
        }
    }

    // MARK: Listing

    /// ListObjectsV2 under `prefix`, every page, in the server's (key) order. With a `delimiter`,
    /// keys that continue past it are rolled up into `prefixes` (each ending in the delimiter).
    public func list(bucket: String, prefix: String, delimiter: String? = nil) throws -> (objects: [S3ObjectInfo], prefixes: [String]) {
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: prefix))
        var objects: [S3ObjectInfo] = [], prefixes: [String] = []
        var token: String?
        for _ in 0..<1_000_000 {
            var query: [(String, String?)] = [("list-type", "2"), ("max-keys", String(pageSize)), ("prefix", prefix)]
            if let delimiter { query.append(("delimiter", delimiter)) }
            if let token { query.append(("continuation-token", token)) }
            let text = try call.send("ListObjectsV2", request: { HTTPRequest(method: "GET", url: bucketURL(bucket, query: query)) }) { r in
                guard r.isSuccess else { throw call.failure(r, step: "ListObjectsV2") }
                return .accepted(r.text)
            }
            for c in XML.all("Contents", in: text) {
                guard let key = XML.first("Key", in: c) else { continue }
                objects.append(
                    S3ObjectInfo(
                        key: key, size: XML.first("Size", in: c).flatMap { Int64($0) } ?? 0, etag: XML.first("ETag", in: c) ?? "",
                        modified: XML.first("LastModified", in: c).flatMap(Self.isoDate)))
            }
            for p in XML.all("CommonPrefixes", in: text) { if let s = XML.first("Prefix", in: p) { prefixes.append(s) } }
            guard XML.first("IsTruncated", in: text)?.lowercased() == "true" else { return (objects, prefixes) }
            guard let next = XML.first("NextContinuationToken", in: text), !next.isEmpty, next != token else {
                throw UploadError(.protocol, message: "\(call.location): ListObjectsV2 is truncated but gives no new continuation token", retryable: true)
            }
            token = next
        }
        throw UploadError(.protocol, message: "\(call.location): ListObjectsV2 did not end after 1,000,000 pages", retryable: true)
    }

    /// Multipart uploads begun under `prefix` and neither completed nor aborted
    /// (ListMultipartUploads, every page).
    public func pendingUploads(bucket: String, prefix: String) throws -> [(key: String, uploadID: String)] {
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: prefix))
        var out: [(key: String, uploadID: String)] = []
        var keyMarker: String?, idMarker: String?
        for _ in 0..<1_000_000 {
            var query: [(String, String?)] = [("uploads", nil), ("prefix", prefix)]
            if let keyMarker { query.append(("key-marker", keyMarker)) }
            if let idMarker { query.append(("upload-id-marker", idMarker)) }
            let text = try call.send("ListMultipartUploads", request: { HTTPRequest(method: "GET", url: bucketURL(bucket, query: query)) }) { r in
                guard r.isSuccess else { throw call.failure(r, step: "ListMultipartUploads") }
                return .accepted(r.text)
            }
            for u in XML.all("Upload", in: text) {
                if let key = XML.first("Key", in: u), let id = XML.first("UploadId", in: u) { out.append((key, id)) }
            }
            guard XML.first("IsTruncated", in: text)?.lowercased() == "true" else { return out }
            let nextKey = XML.first("NextKeyMarker", in: text), nextID = XML.first("NextUploadIdMarker", in: text)
            guard nextKey != nil || nextID != nil, nextKey != keyMarker || nextID != idMarker else {
                throw UploadError(.protocol, message: "\(call.location): ListMultipartUploads is truncated but gives no new marker", retryable: true)
            }
            keyMarker = nextKey
            idMarker = nextID
        }
        throw UploadError(.protocol, message: "\(call.location): ListMultipartUploads did not end after 1,000,000 pages", retryable: true)
    }

    /// AbortMultipartUpload: the parts are dropped (S3 answers an unknown upload with 404,
    /// taken as done).
    public func abortUpload(bucket: String, key: String, uploadID: String) throws {
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: key))
        let url = objectURL(bucket, key) + "?uploadId=" + SigV4Signer.uriEncode(uploadID, keepSlash: false)
        try call.send("AbortMultipartUpload", request: { HTTPRequest(method: "DELETE", url: url) }) { r in
            guard r.isSuccess || r.status == 404 else { throw call.failure(r, step: "AbortMultipartUpload") }
            return .accepted(())
        }
    }

    // MARK: Objects

    /// HeadObject: size, ETag and user metadata; nil when there is no such object.
    public func head(bucket: String, key: String) throws -> S3ObjectInfo? {
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: key))
        return try call.send("HeadObject", request: { HTTPRequest(method: "HEAD", url: objectURL(bucket, key)) }) { r in
            if r.status == 404 { return .accepted(nil) }
            guard r.isSuccess else { throw call.failure(r, step: "HeadObject") }
            return .accepted(Self.info(key: key, r, size: r.header("content-length").flatMap { Int64($0) } ?? 0))
        }
    }

    /// Deletes the object (S3 answers a missing key with success too).
    public func delete(bucket: String, key: String) throws {
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: key))
        try call.send("DeleteObject", request: { HTTPRequest(method: "DELETE", url: objectURL(bucket, key)) }) { r in
            guard r.isSuccess else { throw call.failure(r, step: "DeleteObject") }
            return .accepted(())
        }
    }

    /// Streams the object to `path`: written to a temporary name in the same folder (never held
    /// in memory) and renamed onto `path` once its size matches the object's and, when the ETag is
    /// a plain MD5, its MD5 matches too. A transfer cut part-way continues with a Range request
    /// from the bytes already on disk (from the start if the object changed meanwhile). A missing
    /// object or bucket is `.badInput` ("s3://b/k: no such object"); `shouldAbort` returning true
    /// stops the download (`.cancelled`), leaving nothing at `path`.
    @discardableResult
    public func download(
        bucket: String, key: String, to path: String, shouldAbort: @escaping @Sendable () -> Bool = { false }
    ) throws -> S3ObjectInfo {
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: key), shouldAbort: shouldAbort)
        defer { call.finish() }
        let target = URL(fileURLWithPath: path)
        let temp = target.deletingLastPathComponent()
            .appendingPathComponent(".\(target.lastPathComponent).download-\(getpid())-\(UInt32.random(in: 0...UInt32.max))").path
        guard FileManager.default.createFile(atPath: temp, contents: nil) else {
            throw UploadError(.output, message: "\(call.location): cannot write \(temp): \(String(cString: strerror(errno)))")
        }
        defer { if FileManager.default.fileExists(atPath: temp) { try? FileManager.default.removeItem(atPath: temp) } }
        // What the first answer said about the object, and where the current request's range starts.
        var object: S3ObjectInfo?
        var from: Int64 = 0
        let url = objectURL(bucket, key)
        let info: S3ObjectInfo = try call.send("GetObject", progress: { Self.size(of: temp) }) {
            var req = HTTPRequest(method: "GET", url: url)
            from = Self.size(of: temp)
            if from > 0 { req.setHeader("Range", "bytes=\(from)-") }
            req.responseBodyFile = ResponseBodyFile(path: temp, offset: from)
            return req
        } read: { r in
            switch r.status {
            case 200:
                object = Self.info(key: key, r, size: r.header("content-length").flatMap { Int64($0) } ?? r.bodyBytesWritten)
            case 206:
                // A continuation. The object must be the one the bytes on disk came from (same size
                // and ETag as the first answer, when that answer's headers arrived).
                let range = Self.contentRange(r.header("content-range"))
                let now = Self.info(key: key, r, size: range?.total ?? -1)
                guard let range, range.first == from, object == nil || (object?.size == now.size && object?.etag == now.etag) else {
                    object = nil
                    truncate(temp, 0)
                    return .retryable(call.retryable("GetObject: the object changed during the download; starting over"))
                }
                if object == nil { object = now }
            case 416 where object != nil && from == object?.size:
                break  // every byte was already here (the answer to the last range was lost)
            case 416:
                object = nil
                truncate(temp, 0)
                return .retryable(call.retryable("GetObject: the server refused the range from byte \(from); starting over"))
            default:
                guard r.isSuccess else { throw call.failure(r, step: "GetObject") }
                return .retryable(call.retryable("GetObject: unexpected HTTP \(r.status)"))
            }
            guard let known = object else { return .retryable(call.retryable("GetObject: HTTP \(r.status) without the object's size")) }
            let got = Self.size(of: temp)
            guard got == known.size else {
                return .retryable(call.retryable("GetObject: the answer ended at byte \(got) of \(known.size)"))
            }
            if let md5 = S3Session.plainMD5(known.etag) {
                let local = try Digest.hash(.md5, file: temp, offset: 0, length: got).hex
                guard local == md5 else {
                    object = nil
                    truncate(temp, 0)
                    return .retryable(call.retryable("GetObject: the bytes received have MD5 \(local), the object's ETag says \(md5); fetching again"))
                }
            }
            return .accepted(known)
        }
        guard rename(temp, path) == 0 else {
            throw UploadError(.output, message: "\(call.location): cannot move the download to \(path): \(String(cString: strerror(errno)))")
        }
        return info
    }

    /// The largest object one PutObject may carry (S3's limit: 5 GiB); `put(file:)` sends a
    /// larger file as a multipart `upload(file:)`.
    public static let largestPut: Int64 = 5 << 30

    /// PutObject of `file`, its bytes streamed from the disk (never held in memory; hashed for
    /// the signature as they are read), or a multipart `upload(file:)` above `largestPut`.
    public func put(file: String, bucket: String, key: String, contentType: String = "application/octet-stream") throws {
        var st = stat()
        guard stat(file, &st) == 0 else {
            throw UploadError(.badInput, message: "\(file): cannot read it: \(String(cString: strerror(errno)))")
        }
        let size = Int64(st.st_size)
        if size > Self.largestPut { return try upload(file: file, bucket: bucket, key: key) }
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: key))
        let url = objectURL(bucket, key)
        try call.send("PutObject") {
            HTTPRequest(method: "PUT", url: url, headers: [("Content-Type", contentType)], body: .file(path: file, offset: 0, length: size))
        } read: { r in
            guard r.isSuccess else { throw call.failure(r, step: "PutObject") }
            return .accepted(())
        }
    }

    /// CopyObject: the object `from` of `bucket` copied to `to` by the server (no byte passes
    /// through this machine), its content type and metadata with it. A missing source is
    /// `.badInput` naming it.
    public func copy(bucket: String, from: String, to: String) throws {
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: to))
        let url = objectURL(bucket, to), source = "/" + SigV4Signer.uriEncode(bucket + "/" + from, keepSlash: true)
        try call.send("CopyObject") {
            HTTPRequest(method: "PUT", url: url, headers: [("x-amz-copy-source", source)])
        } read: { r -> Verdict<Void> in
            guard r.isSuccess else {
                if r.status == 404, S3ErrorInfo(r).code != "NoSuchBucket" {
                    throw UploadError(.badInput, message: "\(S3Location(bucket: bucket, key: from)): no such object (the source of a copy)")
                }
                throw call.failure(r, step: "CopyObject")
            }
            // S3 may answer 200 and put an <Error> in the body (it failed after the headers went out).
            if r.text.contains("<Error>") { return .retryable(call.retryable("CopyObject: HTTP 200 with an error in its body")) }
            return .accepted(())
        }
    }

    /// Multipart upload of `file` through `S3Uploader` (parts, retries, credential renewal as
    /// `clipflow upload` does); the object appears only when complete, with `metadata` as
    /// `x-amz-meta-*`. `shouldAbort` returning true stops it (`.cancelled`); the parts sent so far
    /// stay on the server and a later upload of the unchanged file to the same key continues them.
    public func upload(
        file: String, bucket: String, key: String, metadata: [String: String] = [:],
        shouldAbort: @escaping @Sendable () -> Bool = { false }
    ) throws {
        let location = S3Location(bucket: bucket, key: key)
        let signer = try sharedSigner()
        var options = access.options(bucket: bucket, key: key)
        options.partSize = partSize
        let uploader = S3Uploader(options: options, store: signer.store, credentials: signer.currentCredentials(), provider: access.provider)
        let control = UploadControl()
        let watch = AbortWatch(control: control, shouldAbort: shouldAbort)
        defer { watch.stop() }
        do {
            let sent = try uploader.upload(file: file, id: location.description, metadata: metadata, control: control, observer: NoUploadObserver())
            traffic.count(read: 0, written: sent.bytes)
        } catch let e as UploadError where e.kind == .paused {
            throw UploadError(
                .cancelled, message: "\(file): upload to \(location) interrupted; the parts sent so far stay on the server for a later upload to continue")
        }
    }

    // MARK: Pieces

    func objectURL(_ bucket: String, _ key: String) -> String { access.options(bucket: bucket).objectURL(key: key) }

    /// The bucket's URL with `query` (names and values encoded as SigV4 wants them).
    func bucketURL(_ bucket: String, query: [(String, String?)]) -> String {
        var url = access.options(bucket: bucket).objectURL(key: "")
        if access.addressingStyle == .path, url.hasSuffix("/") { url.removeLast() }
        let q = query.map { name, value in
            let n = SigV4Signer.uriEncode(name, keepSlash: false)
            return value.map { n + "=" + SigV4Signer.uriEncode($0, keepSlash: false) } ?? n
        }
        return q.isEmpty ? url : url + "?" + q.joined(separator: "&")
    }

    static func info(key: String, _ r: HTTPResponse, size: Int64) -> S3ObjectInfo {
        var metadata: [String: String] = [:]
        for (name, value) in r.headers where name.hasPrefix("x-amz-meta-") {
            metadata[String(name.dropFirst("x-amz-meta-".count))] = S3Uploader.decodeMetadataValue(value)
        }
        return S3ObjectInfo(key: key, size: size, etag: r.header("etag") ?? "", metadata: metadata)
    }

    /// An ISO 8601 time as S3 lists write it (`2026-11-26T21:37:01.000Z`, fraction optional).
    static func isoDate(_ text: String) -> Date? {
        let f = ISO8601DateFormatter()
        f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
        if let d = f.date(from: text) { return d }
        f.formatOptions = [.withInternetDateTime]
        return f.date(from: text)
    }

    /// `bytes FIRST-LAST/TOTAL` -> (first, total).
    static func contentRange(_ value: String?) -> (first: Int64, total: Int64)? {
        guard let value, value.hasPrefix("bytes "), let dash = value.firstIndex(of: "-"), let slash = value.firstIndex(of: "/"),
            let first = Int64(value[value.index(value.startIndex, offsetBy: 6)..<dash]),
            let total = Int64(value[value.index(after: slash)...])
        else { return nil }
        return (first, total)
    }

    static func size(of path: String) -> Int64 {
        var st = stat()
        return stat(path, &st) == 0 ? Int64(st.st_size) : 0
    }
}

/// The requests of one `S3ObjectStore` call on one object or prefix: its transport, its retry and
/// credential-renewal decisions (`RequestExecutor`), and the caller's abort poll. Confined to the
/// caller's thread.
final class S3Call {
    let location: S3Location
    let signer: S3Uploader
    let transport: CurlTransport
    let control: UploadControl
    let requests: RequestExecutor
    /// The store's counts of body bytes, which every answer adds to.
    let traffic: S3Traffic
    private let watch: AbortWatch?

    /// `maxResponseBody`: the largest answer held in memory (nil: the store's network settings).
    init(store: S3ObjectStore, location: S3Location, shouldAbort: (@Sendable () -> Bool)? = nil, maxResponseBody: Int? = nil) throws {
        let control = UploadControl()
        self.location = location
        self.control = control
        signer = try store.sharedSigner()
        traffic = store.traffic
        requests = RequestExecutor(policy: store.access.retry, id: location.description, control: control, observer: NoUploadObserver())
        do {
            var network = store.access.network
            if let maxResponseBody { network.maxResponseBody = max(network.maxResponseBody, maxResponseBody) }
            transport = try CurlTransport(settings: network, shouldAbort: { control.shouldStop })
        } catch let e as TransportError {
            throw UploadError(.libraries, message: "\(location): \(e.message)")
        }
        watch = shouldAbort.map { AbortWatch(control: control, shouldAbort: $0) }
    }

    deinit { watch?.stop() }

    func finish() { watch?.stop() }

    var interrupted: UploadError { UploadError(.cancelled, message: "\(location): interrupted") }

    /// Sends the request `request` builds (built and signed afresh for each attempt) until `read`
    /// accepts an answer or throws. Transport failures, throttling, 5xx and expired credentials are
    /// handled here; every other answer goes to `read`. `progress` is the bytes held so far
    /// (progress resets the count of failed attempts).
    @discardableResult
    func send<T>(
        _ step: String, progress: () -> Int64 = { 0 }, request: () throws -> HTTPRequest,
        read: (HTTPResponse) throws -> Verdict<T>
    ) throws -> T {
        do {
            return try requests.perform(progress: progress, resumedAt: { nil }) {
                if signer.proactiveRefreshDue() {
                    _ = try? signer.refreshCredentials(reason: "credentials expire within \(Int(signer.options.credentialRefreshMargin)) s")
                }
                var req = try request()
                signer.sign(&req, payloadHash: try SigV4Signer.payloadHash(req.body))
                let r: HTTPResponse
                do {
                    r = try transport.perform(req)
                    traffic.count(read: Int64(r.body.count) + r.bodyBytesWritten, written: r.bytesSent)
                } catch let e as TransportError {
                    if e.kind == .cancelled || control.shouldStop { throw interrupted }
                    guard e.isRetryable else {
                        let kind: UploadErrorCode = e.kind == .tls ? .tls : e.kind == .fileRead ? .output : e.kind == .oversized ? .badResponse : .invalid
                        throw UploadError(kind, message: "\(location): \(step): \(e.message)")
                    }
                    return .retryable(retryable("\(step): \(e.message)", code: e.kind == .stalled ? .stalled : .network))
                }
                if r.isSuccess { return try read(r) }
                let info = S3ErrorInfo(r)
                // A HEAD answer has no body to name its error: with a provider, a bare 400/403
                // there may be expired keys, and gets the one renewal allowed.
                let bareHeadRefusal = req.method == "HEAD" && info.code.isEmpty && [400, 403].contains(r.status) && signer.provider != nil
                if info.isExpiry || bareHeadRefusal {
                    return .refused(
                        Refused(refresh: refresh("\(step): \(info.code.isEmpty ? "HTTP \(info.status)" : info.code)")) { [location] why in
                            UploadError(
                                .credentialsExpired,
                                message: why == .noProvider
                                    ? "\(location): \(step): the server refused the credentials as expired (\(info.summary)); set fresh ones or give a credentials command"
                                    : "\(location): \(step): the server refused the credentials (\(info.summary)) again right after they were renewed; check the credential command",
                                retryable: true)
                        })
                }
                if info.code == "InvalidAccessKeyId", signer.provider != nil {
                    return .refused(Refused(refresh: refresh("\(step): \(info.code)")) { [self] _ in failure(r, step: step) })
                }
                if info.isRetryable {
                    return .retryable(retryable("\(step): \(info.summary)", retryAfter: retryAfterSeconds(r), code: .http(r.status)))
                }
                return try read(r)
            }
        } catch let e as UploadError where e.kind == .paused || e.kind == .cancelled {
            throw interrupted
        }
    }

    func refresh(_ reason: String) -> (() throws -> Void)? {
        guard signer.provider != nil else { return nil }
        return { [signer] in _ = try signer.refreshCredentials(reason: reason) }
    }

    /// A retryable failure; the policy's give-up error names the location and `reason`.
    func retryable(_ reason: String, retryAfter: Double? = nil, code: UploadErrorCode = .retry) -> Retryable {
        Retryable(reason: reason, retryAfter: retryAfter) { [location] retry in
            UploadError(
                code, message: "\(location): \(reason); gave up after \(retry.policy.maxAttemptsWithoutProgress) attempts without progress",
                retryable: true)
        }
    }

    /// The error for a final answer that is not a success. A missing object or bucket is
    /// `.badInput` ("s3://b/k: no such object"); nothing else is.
    func failure(_ r: HTTPResponse, step: String) -> UploadError {
        let info = S3ErrorInfo(r)
        let keyID = maskAccessKeyID(signer.currentCredentials().accessKeyID)
        if let refusal = S3Location.dotSegmentRefusal(key: location.key, status: r.status, serverCode: info.code, what: "\(location): \(step)") {
            return refusal
        }
        switch info.code {
        case "NoSuchBucket":
            return UploadError(.badInput, message: "\(location): no such bucket")
        case "NoSuchKey":
            return UploadError(.badInput, message: "\(location): no such object")
        case "SignatureDoesNotMatch":
            return UploadError(
                .credentials,
                message:
                    "\(location): \(step): the server refused the request signature (\(info.code)): the secret access key for access key \(keyID) is wrong (or the region '\(signer.options.region)' is not the bucket's)"
            )
        case "InvalidAccessKeyId":
            return UploadError(.credentials, message: "\(location): \(step): the server does not know access key \(keyID) (\(info.code))")
        case "RequestTimeTooSkewed":
            return UploadError(.clockSkew, message: "\(location): \(step): the server refused the request time (\(info.summary)): this machine's clock is off")
        case "AccessDenied":
            return UploadError(.http(403), message: "\(location): \(step): access denied (\(info.summary)); the credentials lack permission")
        default:
            if r.status == 404 && info.code.isEmpty { return UploadError(.badInput, message: "\(location): no such object") }
            return UploadError(.http(r.status), message: "\(location): \(step): \(info.summary)", retryable: isRetryableStatus(r.status))
        }
    }
}

/// Turns a caller's `shouldAbort` poll into a pause of `control`, checked about every 50 ms
/// (`RepeatingTimer`), so that waits between retries stop too. `stop` ends the checks.
final class AbortWatch: Sendable {
    private let timer: RepeatingTimer

    init(control: UploadControl, shouldAbort: @escaping @Sendable () -> Bool) {
        timer = RepeatingTimer(every: 0.05, label: "clipflow.upload.abort-watch") {
            guard shouldAbort() else { return true }
            control.pause()
            return false
        }
    }

    func stop() { timer.stop() }
}
