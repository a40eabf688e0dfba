import ClipFlowCore
import ClipFlowUpload
import Foundation
import HTTPTypes
import Hummingbird
import Tracing
import Logging
import Synchronization

/// What the TUS server allows.
public struct TUSLimits: Sendable {
    /// Largest upload accepted (Tus-Max-Size), bytes.
    public var maxSize: Int64 = 16 << 30
    /// Seconds an unfinished upload is kept after it was created (Upload-Expires).
    public var expiration: Double = 24 * 3600
    public init() {}
}

extension HTTPField.Name {
    static let tusResumable = Self("Tus-Resumable")!
    static let tusVersion = Self("Tus-Version")!
    static let tusExtension = Self("Tus-Extension")!
    static let tusMaxSize = Self("Tus-Max-Size")!
    static let tusChecksumAlgorithm = Self("Tus-Checksum-Algorithm")!
    static let uploadOffset = Self("Upload-Offset")!
    static let uploadLength = Self("Upload-Length")!
    static let uploadMetadata = Self("Upload-Metadata")!
    static let uploadExpires = Self("Upload-Expires")!
    static let uploadChecksum = Self("Upload-Checksum")!
    static let uploadDeferLength = Self("Upload-Defer-Length")!
}

extension HTTPResponse.Status {
    /// TUS checksum extension: the body did not match Upload-Checksum.
    static let checksumMismatch = HTTPResponse.Status(code: 460, reasonPhrase: "Checksum Mismatch")
    /// WebDAV's Insufficient Storage: the server's disk (or database) is full.
    static let insufficientStorage = HTTPResponse.Status(code: 507, reasonPhrase: "Insufficient Storage")
    /// WebDAV's Locked: the upload is busy with another request (as tusd answers).
    static let locked = HTTPResponse.Status(code: 423, reasonPhrase: "Locked")
}

/// Who holds each upload on this server: one request at a time. A request for an upload another
/// holds takes it over, as tusd does: the holder is interrupted (a PATCH stops reading its body,
/// makes what arrived durable, records it and lets go) and the newcomer goes on once it has let
/// go, at the offset recorded then. So a client that vanished mid-PATCH never keeps its upload
/// from resuming. Across servers sharing a database, the offset's compare-and-set keeps order
/// (409).
actor UploadLocks {
    private var holders: [String: (token: UInt64, interrupt: @Sendable () -> Void)] = [:]
    private var issued: UInt64 = 0

    /// Seconds a newcomer waits for an interrupted holder to let go before it gives up (423).
    static let patience: Double = 10

    private func take(_ id: String, interrupt: @escaping @Sendable () -> Void) -> UInt64? {
        if let holder = holders[id] {
            holder.interrupt()
            return nil
        }
        issued += 1
        holders[id] = (issued, interrupt)
        return issued
    }

    private func release(_ id: String, _ token: UInt64) {
        if holders[id]?.token == token { holders[id] = nil }
    }

    /// Runs `body` holding upload `id`, taking it over from its holder if any; released however
    /// `body` ends. `body` runs in a task of its own, cancelled if another request takes the
    /// upload over (work it must finish, such as recording an offset, runs in `uncancelled`).
    /// Nil, without running `body`, when the holder did not let go within `patience` seconds.
    nonisolated func holding<T: Sendable>(_ id: String, _ body: @escaping @Sendable () async throws -> T) async throws -> T? {
        let interruption = Interruption()
        let deadline = Date().addingTimeInterval(Self.patience)
        var token = await take(id, interrupt: interruption.interrupt)
        while token == nil {
            guard Date() < deadline, !Task.isCancelled else { return nil }
            try? await Task.sleep(for: .milliseconds(10))
            token = await take(id, interrupt: interruption.interrupt)
        }
        let work = Task { try await body() }
        interruption.attach { work.cancel() }
        let result = await withTaskCancellationHandler {
            await work.result
        } onCancel: {
            work.cancel()
        }
        await release(id, token!)
        return try result.get()
    }
}

/// The interruption of one holder of an upload: `interrupt` cancels its work, at once or as soon
/// as the work is attached. Thread-safe.
private final class Interruption: Sendable {
    private let state = Mutex<(interrupted: Bool, cancel: (@Sendable () -> Void)?)>((false, nil))

    @Sendable func interrupt() {
        let cancel = state.withLock { s in
            s.interrupted = true
            return s.cancel
        }
        cancel?()
    }

    func attach(_ cancel: @escaping @Sendable () -> Void) {
        let interrupted = state.withLock { s in
            s.cancel = cancel
            return s.interrupted
        }
        if interrupted { cancel() }
    }
}

/// Runs `body` to its end even when the calling task is cancelled (an unstructured task does not
/// inherit cancellation): for work that records what was already done.
func uncancelled<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await Task { try await body() }.value
}

/// The video a new upload carries, as its admission decides.
enum UploadCarrier: Sendable {
    /// None: the upload is kept as a file.
    case none
    /// One made before (`POST /videos`), waiting for its upload.
    case video(Int64)
    /// One to be made with the upload, in the same transaction.
    case newVideo(VideoRow)

    var existing: Int64? { if case .video(let id) = self { id } else { nil } }
    var newVideo: VideoRow? { if case .newVideo(let v) = self { v } else { nil } }
}

/// A TUS 1.0.0 server (https://tus.io/protocols/resumable-upload): core protocol plus creation,
/// creation-with-upload, termination, checksum (sha1, sha256) and expiration, under `/files` and
/// `/upload` (`paths`).
///
/// Durability: a PATCH writes its bytes at the upload's offset (`UploadStorage`: a file, or a
/// bucket's multipart upload), makes them durable (fsync; parts and a partial part's object of its
/// own) and only then records the new offset (and that object) in the database by compare-and-set,
/// which is the truth: after a crash the upload resumes at the last recorded offset and bytes
/// written past it are overwritten or never read, so nothing is lost or duplicated. A PATCH cut
/// short keeps what arrived (unless it carries a checksum, which covers the whole body).
/// Unfinished uploads past their expiry are refused (410) and removed by `sweep`. `completed` is
/// told of every upload whose last byte arrived. Thread-safe; `Sendable`.
public final class TUSServer: Sendable {
    let database: any ServeStore
    let files: any UploadStorage
    let limits: TUSLimits
    var locks: UploadLocks { files.locks }
    /// Decides whether an upload with this metadata and `Authorization` header may be created
    /// (throws a `HTTPRefusal`); returns the video it will carry.
    let admit: @Sendable (_ metadata: [String: String], _ authorization: String?) async throws -> UploadCarrier
    /// An upload became complete.
    let completed: @Sendable (UploadRow) async -> Void
    /// An upload was removed before it was complete (terminated or expired).
    let abandoned: @Sendable (UploadRow) async -> Void
    /// Another request (on another server sharing the database) moved the upload's offset while
    /// this one wrote: this one's bytes are not recorded.
    static let movedElsewhere = HTTPRefusal(.conflict, "the upload's offset moved while this PATCH was written (another request); HEAD it and resume")
    /// Bytes gathered from the request body before one write.
    static let writeChunk = 1 << 20
    /// A long PATCH without a checksum records its progress every this many bytes, so a crash
    /// loses at most this much of it.
    static let commitEvery: Int64 = 64 << 20

    init(
        database: any ServeStore, files: any UploadStorage, limits: TUSLimits,
        admit: @escaping @Sendable (_ metadata: [String: String], _ authorization: String?) async throws -> UploadCarrier = { _, _ in .none },
        completed: @escaping @Sendable (UploadRow) async -> Void = { _ in }, abandoned: @escaping @Sendable (UploadRow) async -> Void = { _ in }
    ) {
        self.database = database
        self.files = files
        self.limits = limits
        self.admit = admit
        self.completed = completed
        self.abandoned = abandoned
    }

    /// Where uploads are created: `/files` (tusd's usual path) and `/upload` (where Gcore's
    /// clients send them). The same protocol on each; an upload's URL is under the path it was
    /// created on, and either path reaches it.
    static let paths = ["files", "upload"]

    /// Adds the routes to `router` under each of `paths`.
    func addRoutes<Context: RequestContext>(to router: Router<Context>, paths: [String] = TUSServer.paths) {
        for path in paths { addRoutes(to: router, path: path) }
    }

    private func addRoutes<Context: RequestContext>(to router: Router<Context>, path: String) {
        router.on(RouterPath(path), method: .options) { _, _ in self.options() }
        router.post(RouterPath(path)) { request, context in await self.respond(context.logger) { try await self.create(request, base: path) } }
        router.on(RouterPath("\(path)/:id"), method: .head) { request, context in
            await self.respond(context.logger) { try await self.head(request, id: try context.parameters.require("id")) }
        }
        router.patch(RouterPath("\(path)/:id")) { request, context in
            await self.respond(context.logger) { try await self.patch(request, id: try context.parameters.require("id")) }
        }
        router.delete(RouterPath("\(path)/:id")) { request, context in
            await self.respond(context.logger) { try await self.terminate(request, id: try context.parameters.require("id")) }
        }
    }

    private func headers(_ extra: [(HTTPField.Name, String)] = []) -> HTTPFields {
        var h = HTTPFields()
        h[.tusResumable] = "1.0.0"
        h[.cacheControl] = "no-store"
        for (k, v) in extra { h[k] = v }
        return h
    }

    /// The answer of `body`, or its error as the client reads it; an error of the server's (5xx, not
    /// a refusal made on purpose) is logged with its cause (never a secret: messages hold none).
    private func respond(_ logger: Logger, _ body: () async throws -> Response) async -> Response {
        do { return try await body() } catch {
            let refusal = error as? HTTPRefusal ?? Self.refusal(error, database: database)
            if !(error is HTTPRefusal), refusal.status.code >= 500 { logger.error("upload request failed (\(refusal.status.code)): \(error)") }
            return Response(
                status: refusal.status, headers: headers([(.contentType, "text/plain; charset=utf-8")]),
                body: .init(byteBuffer: ByteBuffer(string: refusal.reason + "\n")))
        }
    }

    /// An error as the client reads it: a full disk or database is 507 (the upload keeps what was
    /// recorded and resumes once there is space); anything else 500.
    static func refusal(_ error: Error, database: any ServeStore) -> HTTPRefusal {
        if UploadFiles.isDiskFull(error) || database.isFull(error) {
            return HTTPRefusal(.insufficientStorage, "the server's disk is full; what was recorded is kept: resume once there is space")
        }
        if (error as? UploadFileError)?.code == ENOENT { return HTTPRefusal(.notFound, "the upload was removed") }
        if error is UploadError {
            return HTTPRefusal(.serviceUnavailable, "the object storage cannot be used now; what was recorded is kept: resume later")
        }
        return HTTPRefusal(.internalServerError, (error as? ClipFlowError)?.message ?? "\(error)")
    }

    private func options() -> Response {
        Response(
            status: .noContent,
            headers: headers([
                (.tusVersion, "1.0.0"), (.tusMaxSize, String(limits.maxSize)),
                (.tusExtension, "creation,creation-with-upload,termination,checksum,expiration"), (.tusChecksumAlgorithm, "sha1,sha256")
            ]))
    }

    private func requireTUS(_ request: Request) throws {
        guard request.headers[.tusResumable] == "1.0.0" else {
            throw HTTPRefusal(.preconditionFailed, "Tus-Resumable: this server speaks TUS 1.0.0")
        }
    }

    /// The upload, refused as a client would need to know: unknown (404) or expired (410).
    private func existing(_ id: String) async throws -> UploadRow {
        guard let row = try await database.upload(Self.key(id)) else { throw HTTPRefusal(.notFound, "no upload \(id)") }
        if row.completedAt == nil, row.expiresAt < Date().timeIntervalSince1970 {
            throw HTTPRefusal(.gone, "upload \(id) expired")
        }
        return row
    }

    private func expiresHeader(_ row: UploadRow) -> [(HTTPField.Name, String)] {
        row.completedAt == nil ? [(.uploadExpires, Self.httpDate(row.expiresAt))] : []
    }

    private func create(_ request: Request, base: String) async throws -> Response {
        try requireTUS(request)
        if request.headers[.uploadDeferLength] != nil { throw HTTPRefusal(.badRequest, "Upload-Defer-Length is not supported; send Upload-Length") }
        guard let text = request.headers[.uploadLength], let length = Int64(text), length >= 0 else {
            throw HTTPRefusal(.badRequest, "Upload-Length: expected a size in bytes")
        }
        guard length <= limits.maxSize else { throw HTTPRefusal(.contentTooLarge, "Upload-Length \(length) is above Tus-Max-Size \(limits.maxSize)") }
        let header = request.headers[.uploadMetadata] ?? ""
        let metadata: [String: String]
        do { metadata = try TUSMetadata.decode(header) } catch { throw HTTPRefusal(.badRequest, "Upload-Metadata: \(error)") }
        let carrier = try await admit(metadata, request.headers[.authorization])
        // The upload's trace starts here (or joins the client's).
        let span = startSpan(
            "clipflow.upload", context: ServeTracing.context(carrying: request.headers[HTTPField.Name(ServeTracing.header)!]), ofKind: .server)
        defer { span.end() }
        span.attributes["clipflow.upload.length"] = length
        let now = Date().timeIntervalSince1970
        let id = Self.newID(), key = Self.key(id)
        // The token did its work (admission): it is neither kept nor ever echoed.
        var row = UploadRow(
            id: key, length: length, offset: 0, metadata: TUSMetadata.removing("token", from: header), createdAt: now, expiresAt: now + limits.expiration,
            completedAt: length == 0 ? now : nil, videoID: carrier.existing, trace: ServeTracing.carried(span.context))
        try await files.create(key, length: length)
        do { row = try await database.insert(row, carrying: carrier.newVideo) } catch {
            try? await files.remove(key)
            throw error
        }
        let location = "/\(base)/\(id)"
        var extra: [(HTTPField.Name, String)] = [(.location, Self.absolute(location, request))]
        if length == 0 { await completed(row) }
        // creation-with-upload: the body is the first PATCH.
        if request.headers[.contentType] == "application/offset+octet-stream" {
            let first = row
            guard let received = try await locks.holding(key, { try await self.receive(request, into: first) }) else {
                throw HTTPRefusal(.locked, "upload \(id) is busy")
            }
            row = received
            extra.append((.uploadOffset, String(row.offset)))
        }
        return Response(status: .created, headers: headers(extra + expiresHeader(row)))
    }

    /// HEAD takes the upload over as a PATCH does (as tusd does): a PATCH in progress records what
    /// arrived and lets go, so the offset answered is what a resume must send.
    private func head(_ request: Request, id: String) async throws -> Response {
        try requireTUS(request)
        guard let row = try await locks.holding(Self.key(id), { try await self.existing(id) }) else { throw HTTPRefusal(.locked, "upload \(id) is busy") }
        var extra: [(HTTPField.Name, String)] = [(.uploadOffset, String(row.offset)), (.uploadLength, String(row.length))]
        if !row.metadata.isEmpty { extra.append((.uploadMetadata, row.metadata)) }
        return Response(status: .ok, headers: headers(extra + expiresHeader(row)))
    }

    private func patch(_ request: Request, id: String) async throws -> Response {
        try requireTUS(request)
        guard request.headers[.contentType] == "application/offset+octet-stream" else {
            throw HTTPRefusal(.unsupportedMediaType, "Content-Type: expected application/offset+octet-stream")
        }
        guard let text = request.headers[.uploadOffset], let offset = Int64(text) else { throw HTTPRefusal(.badRequest, "Upload-Offset: expected a number") }
        let received = try await locks.holding(Self.key(id)) {
            let current = try await self.existing(id)
            guard offset == current.offset else {
                throw HTTPRefusal(.conflict, "Upload-Offset \(offset) does not match the upload's offset \(current.offset)")
            }
            return try await withSpan("clipflow.upload.patch", context: ServeTracing.context(carrying: current.trace), ofKind: .server) { span in
                let row = try await self.receive(request, into: current)
                span.attributes["clipflow.upload.offset"] = row.offset
                span.attributes["clipflow.upload.received"] = row.offset - current.offset
                return row
            }
        }
        guard let row = received else { throw HTTPRefusal(.locked, "upload \(id) is busy") }
        return Response(status: .noContent, headers: headers([(.uploadOffset, String(row.offset))] + expiresHeader(row)))
    }

    /// Removes an upload, files first (so a full disk is freed), unless it is a video's source
    /// (409: deleting the video removes it).
    private func terminate(_ request: Request, id: String) async throws -> Response {
        try requireTUS(request)
        let row = try await existing(id)
        if let video = row.videoID, let v = try await database.video(video) {
            if v.uploadID == row.id {
                throw HTTPRefusal(.conflict, "upload \(id) is the source of video \(video); delete the video (DELETE /videos/\(video)) to remove it")
            }
            if row.isComplete, v.uploadID == nil, LiveRecordings.fragmentIndex(row) != nil {
                throw HTTPRefusal(.conflict, "upload \(id) is a fragment of recording \(video), not merged yet; delete the video to remove it")
            }
        }
        guard try await files.discard(row.id, from: database) else { throw HTTPRefusal(.locked, "upload \(id) is busy") }
        if !row.isComplete { await abandoned(row) }
        return Response(status: .noContent, headers: headers())
    }

    /// Appends the request body to the upload at its offset; returns the upload as recorded.
    ///
    /// What arrived is kept however the body ends (cut short, interrupted by a request taking the
    /// upload over, past Upload-Length: the bytes up to the length are kept, then 413), unless a
    /// checksum covers the body: then a body cut short keeps nothing, and one that does not match
    /// keeps nothing (460). Kept bytes are made durable (fsync), then recorded; an upload whose
    /// recorded offset reaches its length is complete, and `completed` is told at once, whatever
    /// the request's outcome.
    private func receive(_ request: Request, into row: UploadRow) async throws -> UploadRow {
        let digest = try Self.checksum(request.headers[.uploadChecksum])
        if let text = request.headers[.contentLength], let declared = Int64(text), declared > row.length - row.offset {
            throw HTTPRefusal(.contentTooLarge, "the body (\(declared) bytes) goes past Upload-Length \(row.length) from offset \(row.offset)")
        }
        let writer = try await files.writer(for: row)
        var written = row.offset, committed = row.mark
        var pending: [UInt8] = []
        pending.reserveCapacity(Self.writeChunk)
        var failure: Error?
        do {
            for try await chunk in request.body {
                let room = Int(row.length - written) - pending.count
                chunk.withUnsafeReadableBytes { b in
                    let kept = UnsafeRawBufferPointer(rebasing: b.prefix(room))
                    pending.append(contentsOf: kept)
                    digest?.digest.update(kept)
                }
                if chunk.readableBytes > room {
                    failure = HTTPRefusal(.contentTooLarge, "the body goes past Upload-Length \(row.length); the bytes up to it are kept")
                    break
                }
                if pending.count >= Self.writeChunk {
                    // Handed over before the write: bytes a failed write took are not sent twice.
                    let batch = pending
                    pending.removeAll(keepingCapacity: true)
                    try await writer.append(batch)
                    written += Int64(batch.count)
                    if digest == nil, written - committed.offset >= Self.commitEvery, written < row.length {
                        let durable = try await writer.checkpoint()
                        if durable.offset > committed.offset {
                            try await record(row, from: committed, to: durable, writer: writer)
                            committed = durable
                        }
                    }
                }
            }
        } catch {
            failure = error
        }
        if let d = digest, failure == nil, d.digest.finish() != d.expected {
            await writer.abandon()
            throw HTTPRefusal(.checksumMismatch, "Upload-Checksum: the body's \(d.algorithm.rawValue) does not match; nothing was kept")
        }
        // From here on the work only records what arrived: an interruption does not stop it.
        let keep = digest == nil || failure == nil
        let tail = pending, (recorded, cause) = (committed, failure)
        return try await uncancelled {
            var end = recorded
            var failure = cause
            if keep {
                if !tail.isEmpty {
                    do { try await writer.append(tail) } catch { failure = failure ?? error }
                }
                // A failure here throws: nothing past the recorded offset is known to be durable.
                end = try await writer.finish()
            } else {
                await writer.abandon()
            }
            var updated = row
            (updated.offset, updated.partial) = (recorded.offset, recorded.partial)
            if end.offset != recorded.offset {
                updated = try await self.record(row, from: recorded, to: end, writer: writer)
            }
            if let failure { throw failure }
            return updated
        }
    }

    /// Records the upload's mark moving from `from` to `to` by compare-and-set (complete when it
    /// reaches the length: `completed` is told), and tells `writer` whether the row took it; the
    /// upload as recorded.
    @discardableResult
    private func record(_ row: UploadRow, from: UploadMark, to: UploadMark, writer: any UploadWriter) async throws -> UploadRow {
        var updated = row
        (updated.offset, updated.partial) = (to.offset, to.partial)
        updated.completedAt = to.offset == row.length ? Date().timeIntervalSince1970 : nil
        let taken = try await database.setOffset(row.id, from: from, to: to, completedAt: updated.completedAt)
        await writer.recorded(to, taken: taken)
        guard taken else {
            if try await database.upload(row.id) == nil { throw HTTPRefusal(.notFound, "the upload was terminated") }
            throw Self.movedElsewhere
        }
        if updated.isComplete { await completed(updated) }
        return updated
    }

    /// Removes unfinished uploads whose time ran out (each `abandoned`), and finished ones no video
    /// will take (their video was deleted, or took another upload); returns how many.
    @discardableResult
    func sweep(now: Double = Date().timeIntervalSince1970) async throws -> Int {
        let gone = try await database.expired(before: now) + database.unclaimedUploads()
        var removed = 0
        for row in gone where try await files.discard(row.id, from: database) {
            removed += 1
            if !row.isComplete { await abandoned(row) }
        }
        return removed
    }
}

extension TUSServer {
    /// `Upload-Checksum: ALGORITHM BASE64`, nil when absent.
    static func checksum(_ header: String?) throws -> (algorithm: DigestAlgorithm, digest: Digest, expected: [UInt8])? {
        guard let header else { return nil }
        let parts = header.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 2 else { throw HTTPRefusal(.badRequest, "Upload-Checksum: expected \"ALGORITHM BASE64\"") }
        let algorithm: DigestAlgorithm
        switch parts[0].lowercased() {
        case "sha1": algorithm = .sha1
        case "sha256": algorithm = .sha256
        default: throw HTTPRefusal(.badRequest, "Upload-Checksum: \(parts[0]) is not supported (sha1, sha256)")
        }
        guard let expected = Data(base64Encoded: String(parts[1])) else { throw HTTPRefusal(.badRequest, "Upload-Checksum: the checksum is not base64") }
        return (algorithm, Digest(algorithm), [UInt8](expected))
    }

    /// The key an upload is kept under (its row, its file): the SHA-256 of its id, in hex, so that
    /// neither the database nor the uploads folder holds the ids that give access to uploads.
    static func key(_ id: String) -> String {
        Digest.hash(.sha256, Data(id.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    static func newID() -> String {
        (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    /// An absolute URL for `path` on the host the request was sent to.
    static func absolute(_ path: String, _ request: Request) -> String {
        guard let origin = origin(of: request) else { return path }
        return origin + path
    }

    /// This server as the request's client reaches it: `https://` when a proxy in front ended TLS
    /// (`X-Forwarded-Proto: https`), else `http://`, and the request's host; nil without a host.
    /// The header only shapes the answer to the request that carries it.
    static func origin(of request: Request) -> String? {
        guard let host = request.head.authority, !host.isEmpty else { return nil }
        let forwarded = request.headers[HTTPField.Name("X-Forwarded-Proto")!]?.split(separator: ",").first?.trimmingCharacters(in: .whitespaces)
        return "\(forwarded?.lowercased() == "https" ? "https" : "http")://\(host)"
    }

    /// RFC 9110 date.
    static func httpDate(_ seconds: Double) -> String {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "GMT")
        f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return f.string(from: Date(timeIntervalSince1970: seconds))
    }
}
