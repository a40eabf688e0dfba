import ClipFlowCore
import ClipFlowUpload
import Foundation

/// The bytes of uploads in a bucket, so that any API server can take any PATCH of an upload:
/// each upload is an S3 multipart upload to `uploads/KEY` (made by its first PATCH and named in
/// its row), completed into that object when its last byte arrives.
///
/// Parts have a fixed size per upload (`partSize`), so the recorded offset alone says which part
/// holds what: part N (from 1) holds bytes `(N-1)·size ..< N·size`; a whole part holds the bytes
/// of its offsets, so sending it again replaces it with the same bytes. The bytes of the part not
/// yet whole (`offset % size` of them) are in an object written by the request that recorded
/// that offset, under a key of its own (`partialKey`: `uploads/KEY.part-N.TOKEN`, a token made by
/// that request) that the row names (`UploadRow.partial`) in the same compare-and-set that moves
/// the offset. So a request that lost the upload to another (on another server, its offset moved
/// meanwhile) writes only under its own token, which no row names and nothing reads: its object is
/// removed when its compare-and-set fails, the one a successful compare-and-set superseded is
/// removed then, and every `.part-` object is removed with the rest when the upload completes or
/// goes. A request checks before each whole part that the row is still as it left it, and stops
/// (409) once it is not. An upload whose object is whole while its row says otherwise (a server
/// died between completing it and recording that) is recorded whole by its next request.
final class BucketUploads: UploadStorage {
    let bucket: ServeBucket
    /// Where each upload's multipart upload and partial part are named.
    let database: any ServeStore
    let locks = UploadLocks()

    init(bucket: ServeBucket, database: any ServeStore) {
        self.bucket = bucket
        self.database = database
    }

    /// The smallest part: 8 MiB (S3's least is 5 MiB but for the last part).
    static let minimumPart: Int64 = 8 << 20

    /// The part size of an upload of `length` bytes: 8 MiB, or more so that it fits S3's 10,000
    /// parts (a whole number of MiB).
    static func partSize(length: Int64) -> Int64 {
        let mib: Int64 = 1 << 20
        return max(minimumPart, (length + 9_999) / 10_000 / mib * mib + mib)
    }

    func objectKey(_ key: String) -> String { bucket.key("uploads/\(key)") }

    /// The object holding the first bytes of part `part`, written by the request that made
    /// `token` (nil: the key without a token, which rows made before tokens name).
    func partialKey(_ key: String, part: Int64, token: String?) -> String {
        bucket.key("uploads/\(key).part-\(part)" + (token.map { ".\($0)" } ?? ""))
    }

    /// A token no other request makes: 16 random hex digits.
    static func newToken() -> String {
        (0..<8).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    func create(_ key: String, length: Int64) async throws {
        // A zero-length upload is whole at once: its object is there for processing.
        if length == 0 { try await bucket.perform { s, b in try s.put(Data(), bucket: b, key: self.objectKey(key)) } }
    }

    func writer(for upload: UploadRow) async throws -> any UploadWriter {
        // A whole upload takes no more bytes (the request's body is refused past the length).
        if upload.isComplete { return WholeUpload(length: upload.length) }
        let key = objectKey(upload.id)
        if upload.multipartUpload != nil, try await bucket.perform({ s, b in try s.head(bucket: b, key: key) })?.size == upload.length {
            return WholeUpload(length: upload.length)
        }
        let multipart: String
        if let existing = upload.multipartUpload {
            multipart = existing
        } else {
            let made = try await bucket.perform { s, b in try s.createMultipartUpload(bucket: b, key: key) }
            guard let stored = try await database.setMultipartUpload(upload.id, to: made) else {
                try? await bucket.perform { s, b in try s.abortUpload(bucket: b, key: key, uploadID: made) }
                throw UploadFileError(operation: "write the upload", code: ENOENT)
            }
            if stored != made { try? await bucket.perform { s, b in try s.abortUpload(bucket: b, key: key, uploadID: made) } }
            multipart = stored
        }
        let size = Self.partSize(length: upload.length)
        let part = upload.offset / size + 1, held = upload.offset % size
        let partial = partialKey(upload.id, part: part, token: upload.partial)
        let start = held == 0 ? Data() : try await bucket.perform { s, b in try s.read(bucket: b, key: partial, length: held) }
        return PartWriter(uploads: self, upload: upload, multipartUpload: multipart, partSize: size, part: part, held: start)
    }

    func remove(_ key: String) async throws {
        let prefix = objectKey(key)
        try await bucket.perform { s, b in try s.deleteAll(bucket: b, prefix: prefix) }
    }

    /// Downloaded (streamed to the file) as `SCRATCH/upload`, with what it is a copy of in
    /// `SCRATCH/upload.json`. One there already (kept from the job's earlier step,
    /// `MediaStorage.keep`) is used as it is when it is of the same upload and its object still
    /// has that size and ETag (a HEAD): a stale copy never is.
    func localFile(_ key: String, scratch: URL) async throws -> String {
        let path = scratch.appendingPathComponent("upload").path, record = scratch.appendingPathComponent("upload.json")
        let object = objectKey(key)
        if let copy = try? JSONDecoder().decode(LocalUpload.self, from: Data(contentsOf: record)), copy.key == key,
            ((try? FileManager.default.attributesOfItem(atPath: path)[.size]) as? NSNumber)?.int64Value == copy.size,
            let now = try await bucket.perform({ s, b in try s.head(bucket: b, key: object) }), now.size == copy.size, now.etag == copy.etag
        {
            return path
        }
        try? FileManager.default.removeItem(at: record)
        let info = try await bucket.perform { s, b in try s.download(bucket: b, key: object, to: path) }
        try? JSONEncoder().encode(LocalUpload(key: key, size: info.size, etag: info.etag)).write(to: record)
        return path
    }

    /// What a local copy of an upload is a copy of: the upload, and its object's size and ETag.
    private struct LocalUpload: Codable {
        var key: String
        var size: Int64
        var etag: String
    }
}

/// One request's bytes into an upload's multipart upload: whole parts are sent as they fill (each
/// once the row is found still at the mark this writer knows), up to `S3Client.partsInFlight` at
/// once while the body keeps arriving; at the end, the part not yet whole is kept as an object of
/// this writer's own token, or, when the upload is whole, sent as the last part and the upload
/// completed. The durable mark is the end of the whole parts sent with none missing before them.
private actor PartWriter: UploadWriter {
    private let uploads: BucketUploads
    private let upload: UploadRow
    private let multipartUpload: String
    private let partSize: Int64
    /// The part being filled (from 1) and its bytes so far.
    private var part: Int64
    private var held: Data
    /// Whole parts being sent, by number; each removes itself when its answer is in.
    private var sending: [Int64: Task<Void, Never>] = [:]
    /// Whole parts whose sending failed (with its bytes, sent again by `finish`), and the first
    /// failure, which `append` reports.
    private var failed: [Int64: Data] = [:]
    private var failure: Error?
    /// The row's mark as this writer knows it: the one it started from, then each of its own the
    /// row took.
    private var current: UploadMark
    /// Another request moved the row: this writer lost the upload and writes nothing more.
    private var lost = false

    init(uploads: BucketUploads, upload: UploadRow, multipartUpload: String, partSize: Int64, part: Int64, held: Data) {
        self.uploads = uploads
        self.upload = upload
        self.multipartUpload = multipartUpload
        self.partSize = partSize
        self.part = part
        self.held = held
        self.current = upload.mark
        self.held.reserveCapacity(Int(partSize))
    }

    private var end: Int64 { (part - 1) * partSize + Int64(held.count) }

    /// The first part not known to be on the server: every byte before it is.
    private var firstUnsent: Int64 { ([part] + sending.keys + failed.keys).min() ?? part }

    func append(_ bytes: [UInt8]) async throws {
        if lost { throw TUSServer.movedElsewhere }
        held.append(contentsOf: bytes)
        if let failure { throw failure }
        try await startWholeParts()
    }

    /// Starts sending the whole parts `held` begins with, waiting for room among the parts in
    /// flight; what is not whole yet stays held.
    private func startWholeParts() async throws {
        while held.count >= partSize {
            while sending.count >= S3Client.partsInFlight, let oldest = sending.keys.min() { await sending[oldest]?.value }
            if let failure { throw failure }
            try await checkStillHeld()
            start(takeWholePart(), as: part)
            part += 1
        }
    }

    /// The first `partSize` bytes of `held`, which keeps the rest (the part itself is not copied).
    private func takeWholePart() -> Data {
        var whole = held
        held = Data()
        held.reserveCapacity(Int(partSize))
        if whole.count > partSize {
            held.append(whole[(whole.startIndex + Int(partSize))...])
            whole.removeLast(whole.count - Int(partSize))
        }
        return whole
    }

    private func start(_ data: Data, as number: Int64) {
        sending[number] = Task {
            do {
                try await self.send(data, as: number)
                self.sent(number, failure: nil, data: data)
            } catch {
                self.sent(number, failure: error, data: data)
            }
        }
    }

    private func sent(_ number: Int64, failure: Error?, data: Data) {
        sending[number] = nil
        if let failure {
            failed[number] = data
            self.failure = self.failure ?? failure
        }
    }

    /// Waits for every part in flight to be answered.
    private func settle() async {
        while let next = sending.keys.min() { await sending[next]?.value }
    }

    /// Throws, and marks this writer lost, when the row is gone (404) or no longer at `current`
    /// (409: another request moved it).
    private func checkStillHeld() async throws {
        guard let row = try await uploads.database.upload(upload.id) else {
            lost = true
            throw UploadFileError(operation: "write the upload", code: ENOENT)
        }
        guard row.mark == current else {
            lost = true
            throw TUSServer.movedElsewhere
        }
    }

    func checkpoint() async throws -> UploadMark { UploadMark(offset: (firstUnsent - 1) * partSize) }

    func finish() async throws -> UploadMark {
        await settle()
        if lost { return current }
        // Parts whose sending failed are sent again, in order, once each.
        for number in failed.keys.sorted() {
            try await checkStillHeld()
            try await send(failed[number]!, as: number)
            failed[number] = nil
        }
        failure = nil
        try await startWholeParts()
        await settle()
        if let failure { throw failure }
        let end = self.end
        if end == current.offset { return current }
        let key = uploads.objectKey(upload.id), id = multipartUpload, bytes = held, number = part
        if end == upload.length {
            try await checkStillHeld()
            if !bytes.isEmpty || number == 1 { try await send(bytes, as: number) }
            let count = bytes.isEmpty && number > 1 ? number - 1 : number
            try await uploads.bucket.perform { s, b in
                let parts = try s.parts(bucket: b, key: key, uploadID: id)
                let etags = try (1...count).map { n -> (Int, String) in
                    guard let p = parts[Int(n)] else {
                        throw UploadError(.protocol, message: "s3://\(b)/\(key): part \(n) of the upload is missing", retryable: true)
                    }
                    return (Int(n), p.etag)
                }
                try s.completeMultipartUpload(bucket: b, key: key, uploadID: id, etags: etags)
                for partial in try s.list(bucket: b, prefix: key + ".part-").objects { try s.delete(bucket: b, key: partial.key) }
            }
            return UploadMark(offset: end)
        }
        if bytes.isEmpty { return UploadMark(offset: end) }
        let token = BucketUploads.newToken()
        let partial = uploads.partialKey(upload.id, part: number, token: token)
        try await uploads.bucket.perform { s, b in try s.put(bytes, bucket: b, key: partial) }
        return UploadMark(offset: end, partial: token)
    }

    func recorded(_ mark: UploadMark, taken: Bool) async {
        if taken {
            let superseded = current
            current = mark
            if let old = partialObject(superseded), old != partialObject(mark) { await delete(old) }
        } else {
            lost = true
            if mark.partial != nil, let own = partialObject(mark) { await delete(own) }
        }
    }

    /// Waits for the parts in flight (nothing of this writer's is written after it lets go).
    func abandon() async { await settle() }

    /// The key of the object holding `mark`'s part not yet whole; nil when there is none (the
    /// mark at a part's end, or the upload whole).
    private func partialObject(_ mark: UploadMark) -> String? {
        guard mark.offset % partSize != 0, mark.offset < upload.length else { return nil }
        return uploads.partialKey(upload.id, part: mark.offset / partSize + 1, token: mark.partial)
    }

    /// Removes an object no row names (one left behind is removed with the upload).
    private func delete(_ key: String) async {
        try? await uploads.bucket.perform { s, b in try s.delete(bucket: b, key: key) }
    }

    private func send(_ data: Data, as number: Int64) async throws {
        let key = uploads.objectKey(upload.id), id = multipartUpload
        try await uploads.bucket.perform { s, b in try s.uploadPart(data, number: Int(number), bucket: b, key: key, uploadID: id) }
    }
}

/// The writer of an upload whose bytes are all in the bucket already: what a request sends is
/// not needed, and the upload is recorded whole.
private final class WholeUpload: UploadWriter {
    let length: Int64
    init(length: Int64) { self.length = length }
    func append(_ bytes: [UInt8]) async throws {}
    func checkpoint() async throws -> UploadMark { UploadMark(offset: length) }
    func finish() async throws -> UploadMark { UploadMark(offset: length) }
    func recorded(_ mark: UploadMark, taken: Bool) async {}
    func abandon() async {}
}
