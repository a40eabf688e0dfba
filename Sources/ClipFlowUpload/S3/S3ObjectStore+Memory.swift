import ClipFlowCore
import Foundation

/// Objects and multipart uploads whose bytes are in memory (small objects, one part at a time),
/// and presigned URLs: what a server keeping its files in a bucket needs besides whole-file
/// transfers. Same contract as the rest of `S3ObjectStore`: blocking, retried per `access.retry`,
/// errors are `UploadError`s without secrets. An unknown multipart upload is `.s3NoSuchUpload`.
extension S3ObjectStore {
    /// PutObject of `data`.
    public func put(_ data: Data, bucket: String, key: String, contentType: String = "application/octet-stream") throws {
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: key))
        let url = objectURL(bucket, key)
        try call.send("PutObject", request: { HTTPRequest(method: "PUT", url: url, headers: [("Content-Type", contentType)], body: .bytes(data)) }) { r in
            guard r.isSuccess else { throw call.failure(r, step: "PutObject") }
            return .accepted(())
        }
    }

    /// GetObject into memory: the first `length` bytes (nil: all of it, at most the network
    /// settings' `maxResponseBody`). An object shorter than `length` is an error naming both sizes.
    public func read(bucket: String, key: String, length: Int64? = nil) throws -> Data {
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: key), maxResponseBody: length.map { Int($0) })
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

    /// A URL that GETs the object without credentials for `expires` seconds.
    /// The origin (`scheme://host[:port]`) of `bucket`'s object URLs, presigned ones included.
    public func objectOrigin(bucket: String) -> String? {
        guard let u = URLComponents(string: objectURL(bucket, "x")), let scheme = u.scheme, let host = u.host else { return nil }
        return "\(scheme)://\(host)" + (u.port.map { ":\($0)" } ?? "")
    }

    public func presignedGET(bucket: String, key: String, expires: Int) throws -> String {
        let signer = try sharedSigner()
        return SigV4Signer(credentials: signer.currentCredentials(), region: access.options(bucket: bucket).region)
            .presign(method: "GET", url: objectURL(bucket, key), expires: expires)
    }

    // MARK: Multipart uploads, one part at a time

    /// CreateMultipartUpload; its upload ID.
    public func createMultipartUpload(bucket: String, key: String, contentType: String = "application/octet-stream") throws -> String {
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: key))
        let url = objectURL(bucket, key) + "?uploads"
        return try call.send("CreateMultipartUpload", request: { HTTPRequest(method: "POST", url: url, headers: [("Content-Type", contentType)]) }) { r in
            guard r.isSuccess else { throw call.failure(r, step: "CreateMultipartUpload") }
            guard let id = XML.first("UploadId", in: r.text), !id.isEmpty else {
                throw UploadError(.protocol, message: "\(call.location): CreateMultipartUpload answered without an UploadId", retryable: true)
            }
            return .accepted(id)
        }
    }

    /// UploadPart `number` (1...10000) of `data`, replacing a part of that number sent before;
    /// its ETag. The server's ETag must be the part's MD5 when it is a plain MD5 (else it is sent
    /// again).
    @discardableResult
    public func uploadPart(_ data: Data, number: Int, bucket: String, key: String, uploadID: String) throws -> String {
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: key))
        let url = multipartURL(bucket, key, uploadID) + "&partNumber=\(number)"
        let md5 = Digest.hash(.md5, data).hex
        return try call.send("UploadPart \(number)", request: { HTTPRequest(method: "PUT", url: url, body: .bytes(data)) }) { r in
            guard r.isSuccess else { throw Self.multipartFailure(call, r, step: "UploadPart \(number)") }
            guard let etag = r.header("etag"), !etag.isEmpty else {
                throw UploadError(.protocol, message: "\(call.location): UploadPart \(number) answered without an ETag", retryable: true)
            }
            if let got = S3Session.plainMD5(etag), got != md5 {
                return .retryable(call.retryable("UploadPart \(number): the server's ETag \(got) is not the part's MD5 \(md5)"))
            }
            return .accepted(etag)
        }
    }

    /// ListParts, every page: the parts the server holds, by number.
    public func parts(bucket: String, key: String, uploadID: String) throws -> [Int: (etag: String, size: Int64)] {
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: key))
        var parts: [Int: (etag: String, size: Int64)] = [:]
        var marker: String?
        for _ in 0..<200 {  // 200 pages of 1000: past S3's 10,000 parts
            let url = multipartURL(bucket, key, uploadID) + (marker.map { "&part-number-marker=\($0)" } ?? "")
            let text = try call.send("ListParts", request: { HTTPRequest(method: "GET", url: url) }) { r in
                guard r.isSuccess else { throw Self.multipartFailure(call, r, step: "ListParts") }
                return .accepted(r.text)
            }
            for part in XML.all("Part", in: text) {
                guard let n = XML.first("PartNumber", in: part).flatMap({ Int($0) }), let etag = XML.first("ETag", in: part),
                    let size = XML.first("Size", in: part).flatMap({ Int64($0) })
                else { continue }
                parts[n] = (etag, size)
            }
            guard XML.first("IsTruncated", in: text)?.lowercased() == "true" else { return parts }
            guard let next = XML.first("NextPartNumberMarker", in: text), !next.isEmpty, next != marker else {
                throw UploadError(.protocol, message: "\(call.location): ListParts is truncated but gives no new marker", retryable: true)
            }
            marker = next
        }
        throw UploadError(.protocol, message: "\(call.location): ListParts did not end after 200 pages", retryable: true)
    }

    /// CompleteMultipartUpload of `etags` (by part number, in order): the object appears.
    public func completeMultipartUpload(bucket: String, key: String, uploadID: String, etags: [(Int, String)]) throws {
        let call = try S3Call(store: self, location: S3Location(bucket: bucket, key: key))
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for (n, etag) in etags { xml += "<Part><PartNumber>\(n)</PartNumber><ETag>\(XML.escape(etag))</ETag></Part>" }
        xml += "</CompleteMultipartUpload>"
        let data = Data(xml.utf8), url = multipartURL(bucket, key, uploadID)
        try call.send(
            "CompleteMultipartUpload", request: { HTTPRequest(method: "POST", url: url, headers: [("Content-Type", "application/xml")], body: .bytes(data)) }
        ) { r -> Verdict<Void> in
            guard r.isSuccess else { throw Self.multipartFailure(call, r, step: "CompleteMultipartUpload") }
            // S3 may answer 200 and put an <Error> in the body (it failed after the headers went out).
            if r.text.contains("<Error>") {
                return .retryable(call.retryable("CompleteMultipartUpload: HTTP 200 with error \(S3ErrorInfo(HTTPResponse(status: 200, body: r.body)).code)"))
            }
            return .accepted(())
        }
    }

    private func multipartURL(_ bucket: String, _ key: String, _ uploadID: String) -> String {
        objectURL(bucket, key) + "?uploadId=" + SigV4Signer.uriEncode(uploadID, keepSlash: false)
    }

    private static func multipartFailure(_ call: S3Call, _ r: HTTPResponse, step: String) -> UploadError {
        if r.status == 404, S3ErrorInfo(r).code == "NoSuchUpload" {
            return UploadError(.s3NoSuchUpload, message: "\(call.location): \(step): the server no longer knows the multipart upload (aborted or expired)")
        }
        return call.failure(r, step: step)
    }
}
