import ClipFlowCore
import Foundation
import HTTPTypes
import Hummingbird

/// The hosting API, shaped as Gcore's video API so that `clipflow upload --to gcore` (and clients
/// written for it) work against this server unchanged:
///
///     POST   /auth/refresh        {"refresh": API key}      -> {"access"}  (an access token, 1 h)
///     POST   /videos              {"name", "description"?, "client_id"?, "mode"?: "ladder"|"copy"} -> 201 video
///     GET    /videos?page=&per_page=                         -> [video]  (newest first; X-Total-Count)
///     GET    /videos/{id}                                    -> video
///     DELETE /videos/{id}                                    -> 204 (its upload and media removed)
///     GET    /videos/{id}/upload  -> {"servers": [{"id", "hostname"}], "token", "video": {"id", "client_id"}}
///     GET    /feed.json           every viewable or ready video's feed entry (public)
///     GET    /                    the feed page; GET /videos asked for as HTML: the list page (`Pages`)
///
/// A video: `id, name, description, client_id, status (pending, processing, viewable, ready,
/// error), error, duration, screenshot, hls_url, renditions [{name, status}], progress,
/// created_at`. The management routes need `Authorization: Bearer` with the API key or an access
/// token when the server has a key (401 otherwise); the upload's TUS creation carries the upload
/// token in its metadata (`TUSAdmission`). Bodies above 64 KiB are refused (413).
struct HostingAPI: Sendable {
    let database: any ServeStore
    let tokens: Tokens
    let processor: Processor
    let uploads: UploadFiles
    static let maxBody = 64 << 10

    func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        router.post("auth/refresh") { request, _ in await respond { try await refresh(request) } }
        router.post("videos") { request, _ in
            await respond {
                try authorize(request)
                return try await create(request)
            }
        }
        router.get("videos") { request, _ in
            await respond {
                // A browser asking for the page gets the list page (public, read-only).
                if (request.headers[.accept] ?? "").contains("text/html"), request.headers[.authorization] == nil {
                    let (rows, _) = try await database.videos(page: 1, perPage: 100)
                    var described: [[String: Any]] = []
                    for r in rows { described.append(try await describe(r, request)) }
                    return Pages.list(described)
                }
                try authorize(request)
                return try await list(request)
            }
        }
        router.get("/") { _, _ in Pages.feed() }
        router.get("videos/:id") { request, context in
            await respond {
                try authorize(request)
                return try json(try await describe(try await video(context), request))
            }
        }
        router.delete("videos/:id") { request, context in
            await respond {
                try authorize(request)
                return try await remove(try await video(context))
            }
        }
        router.get("videos/:id/upload") { request, context in
            await respond {
                try authorize(request)
                return try uploadTarget(try await video(context), request)
            }
        }
        router.get("feed.json") { request, _ in await respond { try await feed(request) } }
    }

    // MARK: routes

    private func refresh(_ request: Request) async throws -> Response {
        let body = try await jsonBody(request)
        guard tokens.apiKey != nil else { return try json(["access": tokens.access()]) }
        guard let refresh = body["refresh"] as? String, tokens.isAPIKey(refresh) else {
            throw TUSRefusal(.unauthorized, "refresh: unknown refresh token")
        }
        return try json(["access": tokens.access()])
    }

    private func create(_ request: Request) async throws -> Response {
        let body = try await jsonBody(request)
        guard let name = body["name"] as? String, !name.isEmpty, name.count <= 500 else {
            throw TUSRefusal(.badRequest, "name: expected a non-empty string of at most 500 characters")
        }
        let mode: VideoRow.Mode
        switch body["mode"] as? String {
        case nil, "ladder": mode = .ladder
        case "copy": mode = .copy
        default: throw TUSRefusal(.badRequest, "mode: expected \"ladder\" or \"copy\"")
        }
        let description = body["description"] as? String
        let client = (body["client_id"] as? NSNumber)?.int64Value ?? 1
        let row = try await database.insert(
            VideoRow(
                id: nil, name: name, description: description, clientID: client, status: .pending, mode: mode, error: nil, duration: nil,
                uploadID: nil, published: "", renditions: "", createdAt: Date().timeIntervalSince1970))
        return try json(try await describe(row, request), status: .created)
    }

    private func list(_ request: Request) async throws -> Response {
        let q = request.uri.queryParameters
        let page = q.get("page", as: Int.self) ?? 1, perPage = q.get("per_page", as: Int.self) ?? 25
        guard page >= 1, (1...100).contains(perPage) else { throw TUSRefusal(.badRequest, "page >= 1 and per_page 1 to 100") }
        let (rows, total) = try await database.videos(page: page, perPage: perPage)
        var out: [Any] = []
        for r in rows { out.append(try await describe(r, request)) }
        var response = try json(out)
        response.headers[HTTPField.Name("X-Total-Count")!] = String(total)
        return response
    }

    private func remove(_ v: VideoRow) async throws -> Response {
        try await processor.removeVideo(v.id!)
        return Response(status: .noContent)
    }

    private func uploadTarget(_ v: VideoRow, _ request: Request) throws -> Response {
        guard v.status == .pending else { throw TUSRefusal(.conflict, "video \(v.id!) was uploaded already") }
        return try json([
            "servers": [["id": 1, "hostname": request.head.authority ?? "127.0.0.1"]], "token": tokens.upload(video: v.id!),
            "video": ["id": v.id!, "client_id": v.clientID]
        ])
    }

    private func feed(_ request: Request) async throws -> Response {
        var entries: [Any] = []
        for v in try await database.playable() {
            let base = "/media/\(v.id!)/\(v.published)/"
            guard let data = FileManager.default.contents(atPath: processor.media.appendingPathComponent("\(v.id!)/\(v.published)/feed.json").path),
                let doc = try? JSONSerialization.jsonObject(with: data) as? [String: Any], var e = (doc["videos"] as? [[String: Any]])?.first
            else { continue }
            e["id"] = v.id!
            e["name"] = v.name
            e["status"] = v.status.rawValue
            for key in ["cover", "master"] { if let s = e[key] as? String { e[key] = base + s } }
            e["prefetch"] = (e["prefetch"] as? [[String: String]] ?? []).map { $0.mapValues { base + $0 } }
            entries.append(e)
        }
        return try json(["videos": entries])
    }

    // MARK: helpers

    private func authorize(_ request: Request) throws {
        let header = request.headers[.authorization] ?? ""
        let bearer = header.hasPrefix("Bearer ") ? String(header.dropFirst(7)) : nil
        switch tokens.checkBearer(bearer) {
        case .valid: return
        case .expired: throw TUSRefusal(.unauthorized, "token expired")
        case .wrong: throw TUSRefusal(.unauthorized, "an API key or access token is needed (Authorization: Bearer)")
        }
    }

    private func video<Context: RequestContext>(_ context: Context) async throws -> VideoRow {
        guard let id = Int64(try context.parameters.require("id")), let v = try await database.video(id) else {
            throw TUSRefusal(.notFound, "no such video")
        }
        return v
    }

    func describe(_ v: VideoRow, _ request: Request) async throws -> [String: Any] {
        let host = request.head.authority.map { "http://\($0)" } ?? ""
        let base = v.published.isEmpty ? nil : "\(host)/media/\(v.id!)/\(v.published)/"
        let published = Set(v.renditions.split(separator: ",").map(String.init))
        var renditions: [[String: Any]] = published.sorted().map { ["name": $0, "status": "ready"] }
        if v.status == .viewable || v.status == .processing {
            renditions.append(["name": "ladder", "status": "processing", "progress": processor.progress(of: v.id!) ?? 0])
        }
        return [
            "id": v.id!, "name": v.name, "description": v.description ?? NSNull(), "client_id": v.clientID, "status": v.status.rawValue,
            "mode": v.mode.rawValue, "error": v.error ?? NSNull(), "duration": v.duration ?? NSNull(),
            "screenshot": base.map { $0 + "poster.jpg" } ?? "", "hls_url": base.map { $0 + "master.m3u8" } ?? "", "renditions": renditions,
            "progress": v.status == .ready ? 1 : processor.progress(of: v.id!) ?? 0, "created_at": v.createdAt
        ]
    }

    private func jsonBody(_ request: Request) async throws -> [String: Any] {
        var r = request
        let buffer: ByteBuffer
        do { buffer = try await r.collectBody(upTo: Self.maxBody) } catch { throw TUSRefusal(.contentTooLarge, "the body is above 64 KiB") }
        guard buffer.readableBytes > 0 else { return [:] }
        guard let obj = try? JSONSerialization.jsonObject(with: Data(buffer.readableBytesView)) as? [String: Any] else {
            throw TUSRefusal(.badRequest, "the body is not a JSON object")
        }
        return obj
    }

    private func json(_ value: Any, status: HTTPResponse.Status = .ok) throws -> Response {
        let data = try JSONSerialization.data(withJSONObject: value, options: [.sortedKeys])
        var headers = HTTPFields()
        headers[.contentType] = "application/json"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    private func respond(_ body: () async throws -> Response) async -> Response {
        do { return try await body() } catch let r as TUSRefusal {
            var headers = HTTPFields()
            headers[.contentType] = "application/json"
            let data = (try? JSONSerialization.data(withJSONObject: ["detail": r.reason])) ?? Data()
            return Response(status: r.status, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
        } catch {
            return Response(status: .internalServerError)
        }
    }
}

extension HostingAPI {
    /// Whether a TUS upload may be created: one that names a video must carry that video's
    /// upload token (another video's or a forged one: 403; an expired one: 401) and the video must
    /// still wait for its upload (409); without a video, only a server without an API key takes it.
    func admit(_ metadata: [String: String]) async throws {
        guard let vid = metadata["video_id"] else {
            if tokens.apiKey != nil { throw TUSRefusal(.unauthorized, "an upload token is needed (Upload-Metadata video_id and token)") }
            return
        }
        guard let id = Int64(vid), let v = try await database.video(id) else { throw TUSRefusal(.notFound, "video_id: no such video") }
        switch tokens.checkUpload(metadata["token"], video: id) {
        case .valid: break
        case .expired: throw TUSRefusal(.unauthorized, "the upload token expired; ask GET /videos/\(id)/upload for a new one")
        case .wrong: throw TUSRefusal(.forbidden, "the upload token is not this video's")
        }
        guard v.status == .pending else { throw TUSRefusal(.conflict, "video \(id) was uploaded already") }
    }

    /// A finished upload that names a video: bound to it and queued for processing.
    func completed(_ upload: UploadRow) async {
        guard let vid = TUSServer.metadata(upload.metadata)["video_id"].flatMap({ Int64($0) }) else { return }
        try? await database.uploaded(video: vid, upload: upload.id)
    }

    /// Finished uploads whose video a crash left unbound (between the last byte and the binding).
    func reconcile() async throws {
        for upload in try await database.completedUploads() { await completed(upload) }
    }
}
