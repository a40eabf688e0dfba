import Foundation
import ClipFlowCore
import Synchronization

/// One object as `S3Client` reports it.
public struct S3ObjectInfo: Sendable, Equatable {
    public var key: String
    public var size: Int64
    /// As the server sends it (quoted).
    public var etag: String
    /// User metadata: `x-amz-meta-*` names without the prefix, values decoded
    /// (`S3Client.decodeMetadataValue`). Empty in `list` answers, which carry none.
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

/// The body bytes an `S3Client` moved since it was made: `read`, the bodies of its
/// answers (objects fetched, listings); `written`, the bodies of its requests (objects and parts
/// sent). Headers are not counted, nor an attempt that broke off without an answer; an attempt
/// answered and then retried is (a multipart upload counts each part as it is answered).
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

/// Listing, reading, writing, copying and deleting objects: the inputs and outputs of pipelines
/// that name `s3://` locations, and `clipflow serve`'s bucket. Errors are `UploadError`s: a
/// missing object or bucket is `.badInput` (retrying cannot help); everything else (network, 5xx,
/// refused credentials) is another kind.
extension S3Client {
    // MARK: Listing

    /// ListObjectsV2 under `prefix`, every page, in the server's (key) order. With a `delimiter`,
    /// keys that continue past it are rolled up into `prefixes` (each ending in the delimiter).
    public func list(bucket: String, prefix: String, delimiter: String? = nil) throws -> (objects: [S3ObjectInfo], prefixes: [String]) {
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: prefix))
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
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: prefix))
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

    // MARK: Objects

    /// HeadObject: size, ETag and user metadata; nil when there is no such object.
    public func head(bucket: String, key: String) throws -> S3ObjectInfo? {
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: key))
        return try call.send("HeadObject", request: { HTTPRequest(method: "HEAD", url: objectURL(bucket, key)) }) { r in
            if r.status == 404 { return .accepted(nil) }
            guard r.isSuccess else { throw call.failure(r, step: "HeadObject") }
            return .accepted(Self.info(key: key, r, size: r.header("content-length").flatMap { Int64($0) } ?? 0))
        }
    }

    /// Deletes the object (S3 answers a missing key with success too).
    public func delete(bucket: String, key: String) throws {
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: key))
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
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: key), shouldAbort: shouldAbort)
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
            if let md5 = FileUpload.plainMD5(known.etag) {
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
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: key))
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
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: to))
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

    // MARK: Pieces

    static func info(key: String, _ r: HTTPResponse, size: Int64) -> S3ObjectInfo {
        var metadata: [String: String] = [:]
        for (name, value) in r.headers where name.hasPrefix("x-amz-meta-") {
            metadata[String(name.dropFirst("x-amz-meta-".count))] = S3Client.decodeMetadataValue(value)
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

    /// PutObject of `data`.
    public func put(_ data: Data, bucket: String, key: String, contentType: String = "application/octet-stream") throws {
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: key))
        let url = objectURL(bucket, key)
        try call.send("PutObject", request: { HTTPRequest(method: "PUT", url: url, headers: [("Content-Type", contentType)], body: .bytes(data)) }) { r in
            guard r.isSuccess else { throw call.failure(r, step: "PutObject") }
            return .accepted(())
        }
    }

    /// GetObject into memory: the first `length` bytes (nil: all of it, at most the network
    /// settings' `maxResponseBody`). An object shorter than `length` is an error naming both sizes.
    public func read(bucket: String, key: String, length: Int64? = nil) throws -> Data {
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: key), maxResponseBody: length.map { Int($0) })
        let url = objectURL(bucket, key)
        if length == 0 { return Data() }
        let data: Data = try call.send("GetObject") {
            var req = HTTPRequest(method: "GET", url: url)
            if let length { req.setHeader("Range", "bytes=0-\(length - 1)") }
            return req
        } read: { r in
            guard r.isSuccess else { throw call.failure(r, step: "GetObject") }
            return .accepted(r.body)
        }
        if let length, Int64(data.count) != length {
            throw UploadError(.protocol, message: "\(call.location): expected the first \(length) bytes, the object gave \(data.count)", retryable: true)
        }
        return data
    }

    /// Deletes every object under `prefix` and aborts every unfinished multipart upload there;
    /// returns how many objects went.
    @discardableResult
    public func deleteAll(bucket: String, prefix: String) throws -> Int {
        let objects = try list(bucket: bucket, prefix: prefix).objects
        for o in objects { try delete(bucket: bucket, key: o.key) }
        for u in try pendingUploads(bucket: bucket, prefix: prefix) { try abortUpload(bucket: bucket, key: u.key, uploadID: u.uploadID) }
        return objects.count
    }

    /// The origin (`scheme://host[:port]`) of `bucket`'s object URLs, presigned ones included.
    public func objectOrigin(bucket: String) -> String? {
        guard let u = URLComponents(string: objectURL(bucket, "x")), let scheme = u.scheme, let host = u.host else { return nil }
        return "\(scheme)://\(host)" + (u.port.map { ":\($0)" } ?? "")
    }

    /// A URL that GETs the object without credentials for `expires` seconds.
    public func presignedGET(bucket: String, key: String, expires: Int) throws -> String {
        SigV4Signer(credentials: credentials, region: access.region)
            .presign(method: "GET", url: objectURL(bucket, key), expires: expires)
    }
}
