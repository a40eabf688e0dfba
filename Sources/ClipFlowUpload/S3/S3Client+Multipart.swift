import ClipFlowCore
import Foundation

// Multipart uploads: the steps (create, part, list parts, complete, abort), each one method that
// both the one driver of a file (`FileUpload`) and callers that send parts of their own (`clipflow
// serve`'s uploads, each part as TUS PATCHes fill it) use.

extension S3Client {
    // MARK: The steps, public

    /// CreateMultipartUpload; its upload ID.
    public func createMultipartUpload(bucket: String, key: String, contentType: String = "application/octet-stream") throws -> String {
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: key))
        return try createMultipartUpload(call, headers: [("Content-Type", contentType)])
    }

    /// UploadPart `number` (1...10000) of `data`, replacing a part of that number sent before;
    /// its ETag. The payload is signed with its SHA-256, which the server checks the bytes
    /// against (so no MD5 of them is needed).
    @discardableResult
    public func uploadPart(_ data: Data, number: Int, bucket: String, key: String, uploadID: String) throws -> String {
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: key))
        return try uploadPart(call, number: number, uploadID: uploadID, body: .bytes(data), payloadHash: nil, md5: nil)
    }

    /// ListParts, every page: the parts the server holds, by number. An unknown upload is
    /// `.s3NoSuchUpload`.
    public func parts(bucket: String, key: String, uploadID: String) throws -> [Int: (etag: String, size: Int64)] {
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: key))
        guard let parts = try listParts(call, uploadID: uploadID) else {
            throw UploadError(.s3NoSuchUpload, message: "\(call.location): ListParts: the server no longer knows the multipart upload (aborted or expired)")
        }
        return parts
    }

    /// CompleteMultipartUpload of `etags` (by part number, in order): the object appears.
    public func completeMultipartUpload(bucket: String, key: String, uploadID: String, etags: [(Int, String)]) throws {
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: key))
        _ = try completeMultipartUpload(call, uploadID: uploadID, etags: etags, size: nil)
    }

    /// AbortMultipartUpload: the parts are dropped (S3 answers an unknown upload with 404,
    /// taken as done).
    public func abortUpload(bucket: String, key: String, uploadID: String) throws {
        let call = try Call(client: self, location: S3Location(bucket: bucket, key: key))
        try call.send("AbortMultipartUpload", request: { HTTPRequest(method: "DELETE", url: objectURL(bucket, key, query: [("uploadId", uploadID)])) }) { r in
            guard r.isSuccess || r.status == 404 else { throw call.failure(r, step: "AbortMultipartUpload") }
            return .accepted(())
        }
    }

    // MARK: The steps, on a call

    /// CreateMultipartUpload of the call's object with `headers` (content type, metadata).
    func createMultipartUpload(_ call: Call, headers: [(name: String, value: String)]) throws -> String {
        let url = objectURL(call.location.bucket, call.location.key, query: [("uploads", nil)])
        return try call.send(
            "CreateMultipartUpload", payloadHash: SigV4Signer.emptyPayloadHash, request: { HTTPRequest(method: "POST", url: url, headers: headers) }
        ) { r in
            guard r.isSuccess else { throw call.failure(r, step: "CreateMultipartUpload") }
            guard let id = XML.first("UploadId", in: r.text), !id.isEmpty else {
                throw UploadError(.protocol, message: "\(call.what): CreateMultipartUpload answered without an UploadId", retryable: true)
            }
            return .accepted(id)
        }
    }

    /// UploadPart `number` of `body`, signed with `payloadHash` (nil: hashed from the body; or
    /// `UNSIGNED-PAYLOAD`); its ETag. With `md5`, an ETag that is a plain MD5 must be it (else the
    /// part is sent again). An unknown upload is `.s3NoSuchUpload`.
    func uploadPart(_ call: Call, number: Int, uploadID: String, body: HTTPBody, payloadHash: String?, md5: String?) throws -> String {
        let url = objectURL(call.location.bucket, call.location.key, query: [("partNumber", String(number)), ("uploadId", uploadID)])
        let step = "UploadPart \(number)"
        return try call.send(step, payloadHash: payloadHash, request: { HTTPRequest(method: "PUT", url: url, body: body) }) { r in
            guard r.isSuccess else {
                if r.status == 404 && S3ErrorInfo(r).code == "NoSuchUpload" {
                    throw UploadError(
                        .s3NoSuchUpload,
                        message: "\(call.what): \(step): the server no longer knows the multipart upload (aborted or expired); it will start anew",
                        retryable: true)
                }
                throw call.failure(r, step: step)
            }
            guard let etag = r.header("etag"), !etag.isEmpty else {
                throw UploadError(.protocol, message: "\(call.what): \(step) answered \(r.status) without an ETag", retryable: true)
            }
            if let md5, let got = FileUpload.plainMD5(etag), got != md5 {
                // The server stored other bytes than we read: send the part again.
                return .retryable(call.retryable("\(step): the server's ETag \(got) is not the part's MD5 \(md5)"))
            }
            return .accepted(etag)
        }
    }

    /// Every part the server holds (all ListParts pages), or nil when it does not know the upload.
    func listParts(_ call: Call, uploadID: String) throws -> [Int: (etag: String, size: Int64)]? {
        var parts: [Int: (etag: String, size: Int64)] = [:]
        var marker: String?
        for _ in 0..<200 {  // 200 pages x 1000 parts: beyond S3's 10,000-part limit
            var query: [(String, String?)] = [("uploadId", uploadID)]
            if let marker { query.append(("part-number-marker", marker)) }
            let url = objectURL(call.location.bucket, call.location.key, query: query)
            let text: String? = try call.send("ListParts", payloadHash: SigV4Signer.emptyPayloadHash, request: { HTTPRequest(method: "GET", url: url) }) { r in
                if r.status == 404 && S3ErrorInfo(r).code != "NoSuchBucket" { return .accepted(nil) }
                guard r.isSuccess else { throw call.failure(r, step: "ListParts") }
                return .accepted(r.text)
            }
            guard let text else { return nil }
            for part in XML.all("Part", in: text) {
                guard let n = XML.first("PartNumber", in: part).flatMap({ Int($0) }), let etag = XML.first("ETag", in: part),
                    let size = XML.first("Size", in: part).flatMap({ Int64($0) })
                else { continue }
                parts[n] = (etag, size)
            }
            guard XML.first("IsTruncated", in: text)?.lowercased() == "true" else { return parts }
            guard let next = XML.first("NextPartNumberMarker", in: text), !next.isEmpty, next != marker else {
                throw UploadError(.protocol, message: "\(call.what): ListParts is truncated but gives no new NextPartNumberMarker", retryable: true)
            }
            marker = next
        }
        throw UploadError(.protocol, message: "\(call.what): ListParts did not end after 200 pages", retryable: true)
    }

    /// CompleteMultipartUpload of `etags`; the object's ETag when the answer gives one. A
    /// NoSuchUpload answer (an earlier Complete, sent again after a lost answer, may have worked)
    /// is a success when the object is the one those parts make (`size` bytes when given).
    func completeMultipartUpload(_ call: Call, uploadID: String, etags: [(Int, String)], size: Int64?) throws -> String? {
        var xml = "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        for (n, etag) in etags { xml += "<Part><PartNumber>\(n)</PartNumber><ETag>\(XML.escape(etag))</ETag></Part>" }
        xml += "</CompleteMultipartUpload>"
        let data = Data(xml.utf8), url = objectURL(call.location.bucket, call.location.key, query: [("uploadId", uploadID)])
        let step = "CompleteMultipartUpload"
        return try call.send(
            step, payloadHash: SigV4Signer.payloadHash(data),
            request: { HTTPRequest(method: "POST", url: url, headers: [("Content-Type", "application/xml")], body: .bytes(data)) }
        ) { r -> Verdict<String?> in
            if r.status == 404 && S3ErrorInfo(r).code == "NoSuchUpload" {
                if let etag = try completedObjectETag(call, parts: etags, size: size) { return .accepted(etag) }
            }
            guard r.isSuccess else { throw call.failure(r, step: step) }
            // S3 may answer 200 and put an <Error> in the body (it failed after the headers went out).
            if r.text.contains("<Error>") {
                let info = S3ErrorInfo(HTTPResponse(status: 200, body: r.body))
                if ["InternalError", "SlowDown", "ServiceUnavailable"].contains(info.code) || info.code.isEmpty {
                    return .retryable(call.retryable("\(step): HTTP 200 with error \(info.code)"))
                }
                throw UploadError(.s3(info.code), message: "\(call.what): \(step) failed: \(info.code): \(info.message)")
            }
            return .accepted(XML.first("ETag", in: r.text) ?? r.header("etag"))
        }
    }

    /// HEAD of the object after a NoSuchUpload on a Complete that may have been applied: its ETag
    /// when the object has `size` bytes (when given) and is the multipart object made of exactly
    /// `parts` (ETag = MD5 of the parts' binary MD5s, `-N`). When a part's ETag is not a plain MD5
    /// (SSE-KMS) the multipart ETag cannot be computed and the size alone decides (nothing, when
    /// no size is given).
    func completedObjectETag(_ call: Call, parts: [(Int, String)], size: Int64?) throws -> String? {
        let url = objectURL(call.location.bucket, call.location.key)
        let r = try call.send("HeadObject", payloadHash: SigV4Signer.emptyPayloadHash, request: { HTTPRequest(method: "HEAD", url: url) }) { .accepted($0) }
        guard r.isSuccess, let etag = r.header("etag") else { return nil }
        if let size, r.header("content-length").flatMap({ Int64($0) }) != size { return nil }
        if let expected = FileUpload.multipartETag(parts.map(\.1)) {
            let got = etag.trimmingCharacters(in: CharacterSet(charactersIn: "\" ")).lowercased()
            guard got == expected else { return nil }
        } else if size == nil {
            return nil
        }
        return etag
    }

    // MARK: A file

    /// Multipart upload of `file` (parts, retries, credential renewal as `clipflow upload`
    /// does); the object appears only when complete, with `metadata` as `x-amz-meta-*`.
    /// `shouldAbort` returning true stops it (`.cancelled`); the parts sent so far stay on the
    /// server and a later upload of the unchanged file to the same key continues them.
    public func upload(
        file: String, bucket: String, key: String, metadata: [String: String] = [:],
        shouldAbort: @escaping @Sendable () -> Bool = { false }
    ) throws {
        let location = S3Location(bucket: bucket, key: key)
        var options = access.options(bucket: bucket, key: key)
        options.partSize = partSize
        let store = try uploadRecordStore()
        let control = UploadControl()
        let watch = AbortWatch(control: control, shouldAbort: shouldAbort)
        defer { watch.stop() }
        do {
            _ = try upload(
                file: file, options: options, id: location.description, metadata: metadata, store: store, control: control, observer: NoUploadObserver())
        } catch let e as UploadError where e.kind == .paused {
            throw UploadError(
                .cancelled, message: "\(file): upload to \(location) interrupted; the parts sent so far stay on the server for a later upload to continue")
        }
    }

    /// The resume store of `upload(file:)`, opened on first use.
    private func uploadRecordStore() throws -> ResumeStore {
        try uploadRecords.withLock { s in
            if let s { return s }
            let made = try ResumeStore(path: resumeStorePath)
            s = made
            return made
        }
    }

    /// Runs the multipart upload of `file` to `options`' bucket and key (`FileUpload`), reporting
    /// to `observer`: the one driver of `upload(file:)` and of `S3Uploader`. A cancelled upload,
    /// and one whose file changed, is aborted on the server and its record dropped; a paused one
    /// stays for a later call to continue. `options.metadata` with `metadata` over it is sent.
    func upload(
        file: String, options: S3Options, id: String, metadata: [String: String], store: ResumeStore, control: UploadControl,
        observer: UploadObserver
    ) throws -> UploadResult {
        let path = URL(fileURLWithPath: file).standardizedFileURL.path
        let session: FileUpload
        do {
            session = try FileUpload(client: self, options: options, path: path, id: id, store: store, control: control, observer: observer)
        } catch let e as UploadError {
            let e = e.concerning(path)
            observer.upload(.failed(id: id, code: e.code, message: e.message))
            throw e
        }
        do {
            let result = try session.run(metadata: options.metadata.merging(metadata) { _, new in new })
            observer.upload(.finished(id: id, result))
            return result
        } catch let e as UploadError {
            let e = e.concerning(path)
            switch e.kind {
            case .cancelled:
                session.abandon()
                observer.upload(.cancelled(id: id))
            case .paused:
                observer.upload(.paused(id: id))
            case .fileChanged:
                session.abandon()
                observer.upload(.failed(id: id, code: e.code, message: e.message))
            default:
                observer.upload(.failed(id: id, code: e.code, message: e.message))
            }
            throw e
        } catch {
            let e = UploadError(.internal, message: "S3 upload: \(error)").concerning(path)
            observer.upload(.failed(id: id, code: e.code, message: e.message))
            throw e
        }
    }

    /// Aborts the multipart uploads that `store`'s records for `file` and `destination` name and
    /// drops the records.
    func discardUploads(file: String, bucket: String, destination: String, store: ResumeStore) {
        let path = URL(fileURLWithPath: file).standardizedFileURL.path
        var records: [ResumeRecord] = []
        if let fp = try? FileFingerprint.of(path) {
            if let r = store.record(for: fp, destination: destination) { records.append(r) }
            records += store.staleRecords(path: path, destination: destination, current: fp)
        } else {
            records = store.all.filter { $0.fingerprint.path == path && $0.destination == destination }
        }
        for r in records {
            if let uploadID = r.uploadID, let key = r.objectKey { abortQuietly(bucket: bucket, key: key, uploadID: uploadID) }
            try? store.remove(r)
        }
    }

    /// The multipart upload of one file: the one driver. Confined to the caller's thread.
    ///
    /// Flow: CreateMultipartUpload (the UploadId, key and part size are saved in the `ResumeStore`
    /// at once) -> UploadPart for each part not yet on the server (body streamed from the file
    /// range, signed with its real SHA-256 unless `payloadSigning` is `.unsigned`; the returned
    /// ETag is checked against the part's MD5 when it is a plain MD5; up to `S3Client.partsInFlight`
    /// parts at once, each hashed and sent on a thread with a call of its own) -> CompleteMultipartUpload ->
    /// record dropped. A later upload of the same file to the same destination asks ListParts
    /// (all pages) and sends only what is missing; a record whose upload the server no longer
    /// knows (404 NoSuchUpload) starts anew. A zero-byte file is sent with one PutObject
    /// (multipart needs at least one part). Every request goes through a `Call` of the client's.
    ///
    /// Confined to the caller's thread, but for `sendParts`, whose threads share the progress
    /// (`meter`, the observer) under `partsLock`: hence `@unchecked Sendable`.
    final class FileUpload: @unchecked Sendable {
        let client: S3Client
        let options: S3Options
        let path: String
        let id: String
        let control: UploadControl
        let observer: UploadObserver
        /// The resume records, and the destination they are filed under.
        let store: ResumeStore
        let destination: String
        let call: Call
        let stamp: FileStamp
        let fingerprint: FileFingerprint
        let key: String
        let meter: ProgressMeter
        /// The resume record of the multipart upload in flight (nil before Create / after the end).
        var record: ResumeRecord?
        /// Held by a thread of `sendParts` while it touches `meter` or the observer.
        private let partsLock = NSLock()

        init(
            client: S3Client, options: S3Options, path: String, id: String, store: ResumeStore, control: UploadControl,
            observer: UploadObserver
        ) throws {
            self.client = client
            self.options = options
            self.path = path
            self.id = id
            self.store = store
            self.control = control
            self.observer = observer
            destination = options.destination
            stamp = try FileStamp.of(path)
            fingerprint = try FileFingerprint.of(path)
            key = options.objectKey(for: path)
            meter = ProgressMeter(total: stamp.size)
            call = try Call(
                client: client, location: S3Location(bucket: options.bucket, key: key), what: "\(path): S3 upload to \(options.bucket)/\(key)",
                audience: .fileUpload, id: id, control: control, observer: observer)
            call.progress = { [partsLock, meter] in partsLock.withLock { meter.acknowledged } }
            call.resumedAt = call.progress
            call.file = (path, stamp)
        }

        /// A call like `call`, with a connection of its own (one per thread of `sendParts`).
        private func makeCall() throws -> Call {
            let made = try Call(
                client: client, location: call.location, what: call.what, audience: .fileUpload, id: id, control: control, observer: observer)
            (made.progress, made.resumedAt, made.file) = (call.progress, call.resumedAt, call.file)
            return made
        }

        var what: String { call.what }

        func run(metadata: [String: String]) throws -> UploadResult {
            let metaHeaders = try S3Client.metadataHeaders(metadata)
            // A record for an older version of this file: its upload can never complete; abort it.
            for stale in store.staleRecords(path: path, destination: destination, current: fingerprint) {
                if let u = stale.uploadID, let k = stale.objectKey { client.abortQuietly(bucket: options.bucket, key: k, uploadID: u) }
                try? store.remove(stale)
            }
            if stamp.size == 0 { return try putEmptyObject(metaHeaders) }

            var done: [Int: (etag: String, size: Int64)] = [:]
            var partSize: Int64
            if let r = store.record(for: fingerprint, destination: destination),
                r.method == "s3", let uploadID = r.uploadID, r.objectKey == key, let ps = r.partSize, ps > 0
            {
                partSize = ps
                record = r
                if let listed = try client.listParts(call, uploadID: uploadID) {
                    done = listed
                } else {
                    // The server forgot the upload (completed elsewhere, aborted, expired): start anew.
                    try? store.remove(r)
                    record = nil
                }
            } else {
                partSize = try options.partSize(forFileSize: stamp.size)
            }
            if record == nil {
                partSize = try options.partSize(forFileSize: stamp.size)
                let uploadID = try client.createMultipartUpload(call, headers: [("Content-Type", options.contentType(for: path))] + metaHeaders)
                let r = ResumeRecord(method: "s3", fingerprint: fingerprint, destination: destination, uploadID: uploadID, objectKey: key, partSize: partSize)
                try store.save(r)
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
                if options.verifyResumedParts, let md5 = Self.plainMD5(part.etag) {
                    try control.check()
                    let local = try Digest.hash(.md5, file: path, offset: r.offset, length: r.length).hex
                    guard local == md5 else { continue }
                }
                etags[n] = part.etag
                confirmed += r.length
            }
            observer.upload(.started(id: id, file: path, bytes: stamp.size, resumedAt: confirmed))
            if let p = meter.acknowledge(confirmed, force: true) { observer.upload(.progress(id: id, p)) }

            let missing = (1...count).filter { etags[$0] == nil }
            etags.merge(try sendParts(missing, uploadID: uploadID, range: range, confirmed: confirmed)) { _, sent in sent }
            try control.check()
            try stamp.verifyUnchanged(path)
            let etag = try client.completeMultipartUpload(call, uploadID: uploadID, etags: (1...count).map { ($0, etags[$0]!) }, size: stamp.size)
            if let r = record { try? store.remove(r) }
            record = nil
            if let p = meter.acknowledge(stamp.size, force: true) { observer.upload(.progress(id: id, p)) }
            return UploadResult(method: "s3", bytes: stamp.size, url: options.objectURL(key: key), etag: etag, uploadID: uploadID)
        }

        /// Aborts the multipart upload in flight (if any) and drops its record.
        func abandon() {
            guard let r = record else { return }
            if let u = r.uploadID, let k = r.objectKey { client.abortQuietly(bucket: options.bucket, key: k, uploadID: u) }
            try? store.remove(r)
            record = nil
        }

        func putEmptyObject(_ metaHeaders: [(name: String, value: String)]) throws -> UploadResult {
            observer.upload(.started(id: id, file: path, bytes: 0, resumedAt: 0))
            let url = options.objectURL(key: key)
            let headers = [("Content-Type", options.contentType(for: path))] + metaHeaders
            let r = try call.send("PutObject", payloadHash: SigV4Signer.emptyPayloadHash) {
                HTTPRequest(method: "PUT", url: url, headers: headers, body: .bytes(Data()))
            } read: {
                .accepted($0)
            }
            guard r.isSuccess else { throw call.failure(r, step: "PutObject") }
            if let p = meter.acknowledge(0, force: true) { observer.upload(.progress(id: id, p)) }
            return UploadResult(method: "s3", bytes: 0, url: url, etag: r.header("etag"), uploadID: nil)
        }

        /// Sends parts `numbers`, up to `S3Client.partsInFlight` at once in their order, each on a
        /// thread with a call of its own; their ETags by number. `confirmed`: the bytes the server
        /// held already, to which each part sent adds for the progress. The first failure stops
        /// the threads from starting more parts and is thrown once the parts in flight end.
        func sendParts(_ numbers: [Int], uploadID: String, range: (Int) -> (offset: Int64, length: Int64), confirmed: Int64) throws -> [Int: String] {
            let shared = SentParts(ranges: numbers.map { ($0, range($0)) }, confirmed: confirmed)
            let threads = HelperThreads()
            for _ in 0..<min(S3Client.partsInFlight, numbers.count) {
                threads.start("clipflow.s3.parts") { [self] in
                    do {
                        let call = try makeCall()
                        while let (n, r) = partsLock.withLock({ shared.take() }) {
                            try control.check()
                            try stamp.verifyUnchanged(path)
                            let etag = try uploadPart(n, uploadID: uploadID, offset: r.offset, length: r.length, call: call)
                            partsLock.withLock {
                                shared.etags[n] = etag
                                shared.confirmed += r.length
                                if let p = meter.acknowledge(shared.confirmed) { observer.upload(.progress(id: id, p)) }
                            }
                        }
                    } catch {
                        partsLock.withLock { shared.failure = shared.failure ?? error }
                    }
                }
            }
            threads.wait()
            if let failure = shared.failure { throw failure }
            return shared.etags
        }

        /// What the threads of `sendParts` share, touched only with `partsLock` held.
        private final class SentParts: @unchecked Sendable {
            let ranges: [(Int, (offset: Int64, length: Int64))]
            var next = 0
            var confirmed: Int64
            var etags: [Int: String] = [:]
            var failure: Error?

            init(ranges: [(Int, (offset: Int64, length: Int64))], confirmed: Int64) {
                self.ranges = ranges
                self.confirmed = confirmed
            }

            /// The next part to send; nil once every one is taken or a thread failed.
            func take() -> (Int, (offset: Int64, length: Int64))? {
                guard failure == nil, next < ranges.count else { return nil }
                next += 1
                return ranges[next - 1]
            }
        }

        /// Sends part `n` (hashed first: SHA-256 for a signed payload, which the server verifies
        /// the bytes against, else MD5 to check the ETag) through `call`.
        func uploadPart(_ n: Int, uploadID: String, offset: Int64, length: Int64, call: Call) throws -> String {
            let d: [[UInt8]]
            do {
                d = try Digest.hash(
                    [options.payloadSigning == .signed ? .sha256 : .md5], file: path, offset: offset, length: length, stop: { [control] in control.shouldStop })
            } catch let e as UploadError {
                throw e
            } catch is DigestCancelled {
                try control.check()
                throw UploadError.cancelled
            } catch {
                throw UploadError(.internal, message: "\(what): hashing bytes \(offset)..<\(offset + length): \(error)")
            }
            let signed = options.payloadSigning == .signed
            return try client.uploadPart(
                call, number: n, uploadID: uploadID, body: .file(path: path, offset: offset, length: length),
                payloadHash: signed ? d[0].hex : SigV4Signer.unsignedPayload, md5: signed ? nil : d[0].hex)
        }

        /// The MD5 (hex) inside a plain ETag (`"<32 hex>"`), nil for multipart/KMS-style ETags.
        static func plainMD5(_ etag: String) -> String? {
            let t = etag.trimmingCharacters(in: CharacterSet(charactersIn: "\" ")).lowercased()
            guard t.count == 32, t.allSatisfy({ $0.isHexDigit }) else { return nil }
            return t
        }

        /// The ETag S3 gives a multipart object (without quotes): hex MD5 of the concatenated
        /// binary MD5s of the parts, then `-<number of parts>`. Nil when a part's ETag is not a
        /// plain MD5.
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
    }
}
