import ClipFlowCore
import ClipFlowUpload
import Foundation
import HTTPTypes
import Hummingbird

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
    /// WebDAV's Locked: the upload is busy with another request (as tusd answers).
    static let locked = HTTPResponse.Status(code: 423, reasonPhrase: "Locked")
}

/// A request refused: the status and the reason, sent as text (never a secret).
struct TUSRefusal: Error {
    var status: HTTPResponse.Status
    var reason: String
    init(_ status: HTTPResponse.Status, _ reason: String) {
        self.status = status
        self.reason = reason
    }
}

/// Uploads in progress on this server, so that one upload takes one PATCH at a time (another gets
/// 423); across servers sharing a database, the offset's compare-and-set does it (409).
actor UploadLocks {
    private var busy: Set<String> = []
    func acquire(_ id: String) -> Bool { busy.insert(id).inserted }
    func release(_ id: String) { busy.remove(id) }

    /// Runs `body` holding upload `id`, released however `body` ends; nil, without running it,
    /// when another request holds the upload.
    nonisolated func holding<T: Sendable>(_ id: String, _ body: () async throws -> T) async throws -> T? {
        guard await acquire(id) else { return nil }
        do {
            let result = try await body()
            await release(id)
            return result
        } catch {
            await release(id)
            throw error
        }
    }
}

/// A TUS 1.0.0 server (https://tus.io/protocols/resumable-upload): core protocol plus creation,
/// creation-with-upload, termination, checksum (sha1, sha256) and expiration, under `/files`.
///
/// Durability: a PATCH writes its bytes at the upload's offset, makes them durable (fsync) and
/// only then records the new offset in the database, which is the truth: after a crash the
/// upload resumes at the last recorded offset and bytes written past it are overwritten, so
/// nothing is lost or duplicated. A PATCH cut short keeps what arrived (unless it carries a
/// checksum, which covers the whole body). Unfinished uploads past their expiry are refused
/// (410) and removed by `sweep`. `completed` is told of every upload whose last byte arrived.
/// Thread-safe; `Sendable`.
public final class TUSServer: Sendable {
    let database: any ServeStore
    let files: UploadFiles
    let limits: TUSLimits
    let locks = UploadLocks()
    /// Decides whether an upload with this metadata may be created (throws a `TUSRefusal`).
    let admit: @Sendable ([String: String]) async throws -> Void
    let completed: @Sendable (UploadRow) async -> Void
    /// Another request (on another server sharing the database) moved the upload's offset while
    /// this one wrote: this one's bytes are not recorded.
    static let movedElsewhere = TUSRefusal(.conflict, "the upload's offset moved while this PATCH was written (another request); HEAD it and resume")
    /// Bytes gathered from the request body before one write.
    static let writeChunk = 1 << 20
    /// A long PATCH without a checksum records its progress every this many bytes, so a crash
    /// loses at most this much of it.
    static let commitEvery: Int64 = 64 << 20

    init(
        database: any ServeStore, files: UploadFiles, limits: TUSLimits, admit: @escaping @Sendable ([String: String]) async throws -> Void = { _ in },
        completed: @escaping @Sendable (UploadRow) async -> Void = { _ in }
    ) {
        self.database = database
        self.files = files
        self.limits = limits
        self.admit = admit
        self.completed = completed
    }

    /// Adds the routes to `router` under `path`.
    func addRoutes<Context: RequestContext>(to router: Router<Context>, path: String = "files") {
        router.on(RouterPath(path), method: .options) { _, _ in self.options() }
        router.post(RouterPath(path)) { request, _ in await self.respond { try await self.create(request, base: path) } }
        router.on(RouterPath("\(path)/:id"), method: .head) { request, context in
            await self.respond { try await self.head(request, id: try context.parameters.require("id")) }
        }
        router.patch(RouterPath("\(path)/:id")) { request, context in
            await self.respond { try await self.patch(request, id: try context.parameters.require("id")) }
        }
        router.delete(RouterPath("\(path)/:id")) { request, context in
            await self.respond { try await self.terminate(request, id: try context.parameters.require("id")) }
        }
    }

    private func headers(_ extra: [(HTTPField.Name, String)] = []) -> HTTPFields {
        var h = HTTPFields()
        h[.tusResumable] = "1.0.0"
        h[.cacheControl] = "no-store"
        for (k, v) in extra { h[k] = v }
        return h
    }

    private func respond(_ body: () async throws -> Response) async -> Response {
        do { return try await body() } catch let r as TUSRefusal {
            return Response(
                status: r.status, headers: headers([(.contentType, "text/plain; charset=utf-8")]), body: .init(byteBuffer: ByteBuffer(string: r.reason + "\n")))
        } catch {
            return Response(
                status: .internalServerError, headers: headers([(.contentType, "text/plain; charset=utf-8")]),
                body: .init(byteBuffer: ByteBuffer(string: "\(error)\n")))
        }
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
            throw TUSRefusal(.preconditionFailed, "Tus-Resumable: this server speaks TUS 1.0.0")
        }
    }

    /// The upload, refused as a client would need to know: unknown (404) or expired (410).
    private func existing(_ id: String) async throws -> UploadRow {
        guard let row = try await database.upload(id) else { throw TUSRefusal(.notFound, "no upload \(id)") }
        if row.completedAt == nil, row.expiresAt < Date().timeIntervalSince1970 {
            throw TUSRefusal(.gone, "upload \(id) expired")
        }
        return row
    }

    private func expiresHeader(_ row: UploadRow) -> [(HTTPField.Name, String)] {
        row.completedAt == nil ? [(.uploadExpires, Self.httpDate(row.expiresAt))] : []
    }

    private func create(_ request: Request, base: String) async throws -> Response {
        try requireTUS(request)
        if request.headers[.uploadDeferLength] != nil { throw TUSRefusal(.badRequest, "Upload-Defer-Length is not supported; send Upload-Length") }
        guard let text = request.headers[.uploadLength], let length = Int64(text), length >= 0 else {
            throw TUSRefusal(.badRequest, "Upload-Length: expected a size in bytes")
        }
        guard length <= limits.maxSize else { throw TUSRefusal(.contentTooLarge, "Upload-Length \(length) is above Tus-Max-Size \(limits.maxSize)") }
        let metadata = request.headers[.uploadMetadata] ?? ""
        if let problem = Self.metadataProblem(metadata) { throw TUSRefusal(.badRequest, "Upload-Metadata: \(problem)") }
        try await admit(Self.metadata(metadata))
        let now = Date().timeIntervalSince1970
        let id = Self.newID()
        var row = UploadRow(
            id: id, length: length, offset: 0, metadata: metadata, createdAt: now, expiresAt: now + limits.expiration,
            completedAt: length == 0 ? now : nil)
        try await files.create(id)
        try await database.insert(row)
        let location = "/\(base)/\(id)"
        var extra: [(HTTPField.Name, String)] = [(.location, Self.absolute(location, request))]
        // creation-with-upload: the body is the first PATCH.
        if request.headers[.contentType] == "application/offset+octet-stream" {
            row = try await receive(request, into: row)
            extra.append((.uploadOffset, String(row.offset)))
        }
        if row.isComplete { await completed(row) }
        return Response(status: .created, headers: headers(extra + expiresHeader(row)))
    }

    private func head(_ request: Request, id: String) async throws -> Response {
        try requireTUS(request)
        let row = try await existing(id)
        var extra: [(HTTPField.Name, String)] = [(.uploadOffset, String(row.offset)), (.uploadLength, String(row.length))]
        if !row.metadata.isEmpty { extra.append((.uploadMetadata, row.metadata)) }
        return Response(status: .ok, headers: headers(extra + expiresHeader(row)))
    }

    private func patch(_ request: Request, id: String) async throws -> Response {
        try requireTUS(request)
        guard request.headers[.contentType] == "application/offset+octet-stream" else {
            throw TUSRefusal(.unsupportedMediaType, "Content-Type: expected application/offset+octet-stream")
        }
        guard let text = request.headers[.uploadOffset], let offset = Int64(text) else { throw TUSRefusal(.badRequest, "Upload-Offset: expected a number") }
        let received = try await locks.holding(id) {
            let current = try await existing(id)
            guard offset == current.offset else {
                throw TUSRefusal(.conflict, "Upload-Offset \(offset) does not match the upload's offset \(current.offset)")
            }
            return try await receive(request, into: current)
        }
        guard let row = received else { throw TUSRefusal(.locked, "upload \(id) is receiving another PATCH") }
        if row.isComplete { await completed(row) }
        return Response(status: .noContent, headers: headers([(.uploadOffset, String(row.offset))] + expiresHeader(row)))
    }

    private func terminate(_ request: Request, id: String) async throws -> Response {
        try requireTUS(request)
        let removed: Void? = try await locks.holding(id) {
            _ = try await existing(id)
            try await database.delete(id)
            try await files.remove(id)
        }
        guard removed != nil else { throw TUSRefusal(.locked, "upload \(id) is receiving a PATCH") }
        return Response(status: .noContent, headers: headers())
    }

    /// Appends the request body to the upload at its offset; returns the upload as recorded.
    /// A body cut short is kept up to what arrived, unless a checksum covers it; a checksum that
    /// does not match keeps nothing (460).
    private func receive(_ request: Request, into row: UploadRow) async throws -> UploadRow {
        let digest = try Self.checksum(request.headers[.uploadChecksum])
        let fd = try await files.openForWriting(row.id)
        var at = row.offset, committed = row.offset
        var pending: [UInt8] = []
        pending.reserveCapacity(Self.writeChunk)
        var failure: Error?
        do {
            for try await chunk in request.body {
                guard at + Int64(pending.count) + Int64(chunk.readableBytes) <= row.length else {
                    throw TUSRefusal(.contentTooLarge, "the body goes past Upload-Length \(row.length)")
                }
                chunk.withUnsafeReadableBytes { b in
                    pending.append(contentsOf: b)
                    digest?.digest.update(b)
                }
                if pending.count >= Self.writeChunk {
                    try await files.write(fd, pending, at: at)
                    at += Int64(pending.count)
                    pending.removeAll(keepingCapacity: true)
                    if digest == nil, at - committed >= Self.commitEvery, at < row.length {
                        try await files.sync(fd)
                        guard try await database.setOffset(row.id, from: committed, to: at, completedAt: nil) else { throw Self.movedElsewhere }
                        committed = at
                    }
                }
            }
            if !pending.isEmpty {
                try await files.write(fd, pending, at: at)
                at += Int64(pending.count)
            }
        } catch {
            failure = error
            // What arrived counts (checksums aside); what is pending was never written.
        }
        if let d = digest, failure == nil, d.digest.finish() != d.expected {
            files.close(fd)
            throw TUSRefusal(.checksumMismatch, "Upload-Checksum: the body's \(d.algorithm.rawValue) does not match; nothing was kept")
        }
        if digest != nil, failure != nil { at = row.offset }
        try await files.syncAndClose(fd)
        var updated = row
        updated.offset = committed
        if at != committed {
            updated.offset = at
            updated.completedAt = at == row.length ? Date().timeIntervalSince1970 : nil
            guard try await database.setOffset(row.id, from: committed, to: at, completedAt: updated.completedAt) else { throw Self.movedElsewhere }
        }
        if let failure { throw failure }
        return updated
    }

    /// Removes unfinished uploads whose time ran out; returns how many.
    @discardableResult
    func sweep(now: Double = Date().timeIntervalSince1970) async throws -> Int {
        let gone = try await database.expired(before: now)
        for row in gone {
            // One receiving a PATCH right now is left for the next sweep.
            _ = try await locks.holding(row.id) {
                try await database.delete(row.id)
                try await files.remove(row.id)
            }
        }
        return gone.count
    }
}

extension TUSServer {
    /// `Upload-Checksum: ALGORITHM BASE64`, nil when absent.
    static func checksum(_ header: String?) throws -> (algorithm: DigestAlgorithm, digest: Digest, expected: [UInt8])? {
        guard let header else { return nil }
        let parts = header.split(separator: " ", omittingEmptySubsequences: true)
        guard parts.count == 2 else { throw TUSRefusal(.badRequest, "Upload-Checksum: expected \"ALGORITHM BASE64\"") }
        let algorithm: DigestAlgorithm
        switch parts[0].lowercased() {
        case "sha1": algorithm = .sha1
        case "sha256": algorithm = .sha256
        default: throw TUSRefusal(.badRequest, "Upload-Checksum: \(parts[0]) is not supported (sha1, sha256)")
        }
        guard let expected = Data(base64Encoded: String(parts[1])) else { throw TUSRefusal(.badRequest, "Upload-Checksum: the checksum is not base64") }
        return (algorithm, Digest(algorithm), [UInt8](expected))
    }

    /// What is wrong with an Upload-Metadata header (nil: nothing): comma-separated pairs of a key
    /// (ASCII, no spaces or commas) and an optional base64 value, each key once.
    static func metadataProblem(_ s: String) -> String? {
        if s.isEmpty { return nil }
        var keys = Set<String>()
        for pair in s.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = pair.trimmingCharacters(in: .whitespaces).split(separator: " ", omittingEmptySubsequences: true)
            guard let key = parts.first, parts.count <= 2, key.allSatisfy({ $0.isASCII && !$0.isWhitespace && $0 != "," }) else {
                return "\"\(pair.prefix(40))\" is not KEY or KEY BASE64"
            }
            guard keys.insert(String(key)).inserted else { return "key \"\(key)\" appears twice" }
            if parts.count == 2, Data(base64Encoded: String(parts[1])) == nil { return "the value of \"\(key)\" is not base64" }
        }
        return nil
    }

    /// The metadata's values, decoded (invalid UTF-8 values left out).
    static func metadata(_ s: String) -> [String: String] {
        var out: [String: String] = [:]
        for pair in s.split(separator: ",") {
            let parts = pair.trimmingCharacters(in: .whitespaces).split(separator: " ")
            guard let key = parts.first else { continue }
            out[String(key)] = parts.count == 2 ? Data(base64Encoded: String(parts[1])).flatMap { String(data: $0, encoding: .utf8) } : ""
        }
        return out
    }

    static func newID() -> String {
        (0..<16).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }

    /// An absolute URL for `path` on the host the request was sent to.
    static func absolute(_ path: String, _ request: Request) -> String {
        guard let host = request.head.authority, !host.isEmpty else { return path }
        return "http://\(host)\(path)"
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
