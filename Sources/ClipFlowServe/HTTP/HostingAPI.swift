import ClipFlowCore
import ClipFlowMedia
import ClipFlowUpload
import Foundation
import HTTPTypes
import Hummingbird

/// The hosting API, shaped as Gcore's video API so that `clipflow upload --to gcore` (and clients
/// written for it) work against this server unchanged; its bodies are the client's own types
/// (`Gcore`: `Refresh`, `Tokens`, `NewVideo`, `Video`, `UploadTarget`, `Refusal`):
///
///     POST   /auth/refresh        {"refresh": API key}      -> {"access"}  (an access token, 1 h)
///     POST   /videos              {"name", "description"?, "client_id"?, "mode"?: "ladder"|"copy", "recording"?: true,
///                                  "access"?: "public"|"signed"} -> 201 video
///     PATCH  /videos/{id}         {"name"?, "access"?}  rename, make private or public -> video
///     GET    /videos/{id}/views   what viewers saw of its last 1000 views (`ViewSummary`): views, startup_p50_ms,
///                                 startup_p95_ms, rebuffer_ratio, errors
///     POST   /videos/{id}/token   {"expires_in"?: seconds, "path"?: "/media/ID/..."} -> {"token", "expires_at", "hls_url", "screenshot"}
///                                 a playback token for the video's media (or the folder `path` names), as `MediaAccess` checks it
///     POST   /videos/{id}/end     {"fragments": N}  a recording's recorder stopped after N fragments -> 202 video
///     GET    /videos?page=&per_page=                         -> [video]  (newest first; X-Total-Count)
///     GET    /videos/{id}                                    -> video
///     DELETE /videos/{id}                                    -> 204 (its upload and media removed)
///     GET    /videos/{id}/upload  -> {"servers": [{"id", "hostname"}], "token", "video": {"id", "client_id"}}
///     GET    /videos/{id}/download  its source file, ranges too: a recording's lossless merge (MP4), an
///                                 upload as it was sent (404 before there is one, or with a bucket)
///     GET    /feed.json           every viewable or ready video's feed entry (public)
///     GET    /, /v/{id}           the feed page (public); GET /videos asked for as HTML: the list page
///                                 (`Pages`; the API key as a Bearer token or a Basic password)
///     GET    /favicon.ico         the icon (public)
///     GET    /studio              the studio page (`StudioPage`; the API key as a Basic password), and
///                                 /studio/token, a fresh access token for it
///
/// A recording (`"recording": true`) takes its fragments as TUS uploads whose metadata adds
/// `fragment` (the index from 0) to `video_id` and `token`, and plays while it is recorded
/// (`LiveRecordings`).
/// A video: `id, name, description, client_id, status (pending, recording, processing, viewable, ready,
/// error), error, duration, screenshot, hls_url, renditions [{name, status}], progress,
/// created_at, access`; a `signed` video's `hls_url` and `screenshot` carry a playback token good
/// for `describedTokenLifetime`. The feed (`/feed.json`, `/`) lists public videos only; `/v/ID?token=T`
/// opens a signed video's page when T opens its media. The management routes need `Authorization: Bearer` with the API key or an access
/// token when the server has a key (401 otherwise); the upload's TUS creation carries the upload
/// token in its metadata, or the API key (on a server with one) to make a video of a plain TUS
/// upload (`admit`). Bodies above 64 KiB are refused (413); POST bodies must be
/// `application/json` (415), and each field of the right type and range (400 naming the field;
/// fields the API does not know are ignored).
/// Query numbers out of range or not whole numbers are refused (400 naming the parameter).
/// Answers are not to be cached (`no-store`; the public feed: `no-cache`), and no answer shows an
/// absolute path of the data folder.
struct HostingAPI: Sendable {
    let database: any ServeStore
    let tokens: Tokens
    let processor: Processor
    let uploads: any UploadStorage
    let recordings: LiveRecordings
    let access: VideoAccess
    static let maxBody = 64 << 10
    /// Seconds a token in a video's description (`hls_url`, `screenshot`) lives.
    static let describedTokenLifetime = 3600.0
    /// The longest a playback token may live (`POST /videos/{id}/token`'s `expires_in`).
    static let longestTokenLifetime = 7 * 86400
    static let maxPage = 1_000_000_000

    let viewers: ViewerMetrics

    init(
        database: any ServeStore, tokens: Tokens, processor: Processor, uploads: any UploadStorage, recordings: LiveRecordings,
        viewers: ViewerMetrics
    ) {
        self.viewers = viewers
        self.recordings = recordings
        self.database = database
        self.tokens = tokens
        self.processor = processor
        self.uploads = uploads
        access = VideoAccess(database: database)
    }

    func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        router.get("/") { _, _ in try await feedPage(opening: nil, token: nil) }
        router.get("v/:id") { request, context in
            try await feedPage(opening: context.parameters.get("id").flatMap { Int64($0) }, token: request.uri.queryParameters.get("token"))
        }
        router.get("favicon.ico") { _, _ in Pages.favicon() }
        let studio = router.group("studio").add(middleware: APIKeyAuth<Context>(tokens: tokens))
        studio.get { _, _ in Pages.studio(token: tokens.access(), mediaOrigin: processor.media.mediaOrigin) }
        studio.get("token") { _, _ in JSONAnswer(value: Gcore.Tokens(access: tokens.access())) }
        let api = router.group().add(middleware: JSONRefusals<Context>())
        api.post("auth/refresh") { request, _ in try await refresh(request) }
        api.get("feed.json") { request, _ in try await feed(request) }
        let videos = api.group("videos").add(middleware: APIKeyAuth<Context>(tokens: tokens))
        videos.post { request, _ in try await create(request) }
        videos.get { request, context in
            // A browser asking for the page gets the list page (`APIKeyAuth` let it in as one).
            if APIKeyAuth<Context>.wantsPage(request) { return try await listPage(request) }
            return try await list(request).response(from: request, context: context)
        }
        videos.get(":id") { request, context in JSONAnswer(value: try await describe(try await video(context), request)) }
        videos.delete(":id") { _, context in try await remove(try await video(context)) }
        videos.patch(":id") { request, context in try await edit(try await video(context), request) }
        videos.get(":id/views") { _, context in JSONAnswer(value: ViewSummary(try await database.views(of: try await video(context).id!))) }
        videos.post(":id/token") { request, context in try await playbackToken(try await video(context), request) }
        videos.get(":id/upload") { request, context in try uploadTarget(try await video(context), request) }
        videos.post(":id/end") { request, context in try await end(try await video(context), request) }
        videos.get(":id/download") { request, context in try await download(try await video(context), request) }
    }

    // MARK: routes

    private func refresh(_ request: Request) async throws -> JSONAnswer<Gcore.Tokens> {
        let body = try await jsonBody(request, as: Gcore.Refresh.self, expecting: ["refresh": "a string"])
        if tokens.apiKey != nil {
            guard let refresh = body.refresh, tokens.isAPIKey(refresh) else {
                throw HTTPRefusal(.unauthorized, "refresh: unknown refresh token")
            }
        }
        return JSONAnswer(value: Gcore.Tokens(access: tokens.access()))
    }

    private func create(_ request: Request) async throws -> JSONAnswer<VideoResource> {
        let body = try NewVideoBody(try await jsonBody(request, as: Gcore.NewVideo.self, expecting: NewVideoBody.expected))
        if body.recording, let reason = recordings.unsupported { throw HTTPRefusal(.notImplemented, "recording: \(reason)") }
        let row = try await database.insert(
            VideoRow(
                id: nil, name: body.name, description: body.description, clientID: body.clientID, status: body.recording ? .recording : .pending,
                mode: body.mode, error: nil,
                duration: nil,
                uploadID: nil, published: "", renditions: "", createdAt: Date().timeIntervalSince1970, access: body.access))
        return JSONAnswer(value: try await describe(row, request), status: .created)
    }

    private func list(_ request: Request) async throws -> JSONAnswer<[VideoResource]> {
        let page = try Self.queryNumber(request, "page", in: 1...Self.maxPage) ?? 1
        let perPage = try Self.queryNumber(request, "per_page", in: 1...100) ?? 25
        let (rows, total) = try await database.videos(page: page, perPage: perPage)
        var out: [VideoResource] = []
        for r in rows { out.append(try await describe(r, request)) }
        return JSONAnswer(value: out, headers: [(HTTPField.Name("X-Total-Count")!, String(total))])
    }

    /// The list page: the newest 100 videos.
    private func listPage(_ request: Request) async throws -> Response {
        let (rows, _) = try await database.videos(page: 1, perPage: 100)
        var described: [VideoResource] = []
        for r in rows { described.append(try await describe(r, request)) }
        return Pages.list(described, mediaOrigin: processor.media.mediaOrigin)
    }

    /// A rename, a change of access, or both; the video as it is then.
    private func edit(_ v: VideoRow, _ request: Request) async throws -> JSONAnswer<VideoResource> {
        let body = try await jsonBody(request, as: VideoEdit.self, expecting: VideoEdit.expected)
        if let name = body.name, name.isEmpty || name.count > 500 { throw HTTPRefusal(.badRequest, "name: expected \(VideoEdit.expected["name"]!)") }
        var access: VideoRow.Access?
        if let text = body.access {
            guard let a = VideoRow.Access(rawValue: text) else { throw HTTPRefusal(.badRequest, "access: expected \(VideoEdit.expected["access"]!)") }
            access = a
        }
        guard let edited = try await database.edit(v.id!, name: body.name, access: access) else { throw HTTPRefusal(.notFound, "no such video") }
        self.access.forget(v.id!)
        return JSONAnswer(value: try await describe(edited, request))
    }

    /// A playback token for the video's media, or the folder `path` names under it.
    private func playbackToken(_ v: VideoRow, _ request: Request) async throws -> JSONAnswer<PlaybackToken> {
        let body = try await jsonBody(request, as: PlaybackTokenRequest.self, expecting: PlaybackTokenRequest.expected)
        let lifetime = body.expiresIn ?? Int(Self.describedTokenLifetime)
        guard (1...Self.longestTokenLifetime).contains(lifetime) else {
            throw HTTPRefusal(.badRequest, "expires_in: expected \(PlaybackTokenRequest.expected["expires_in"]!)")
        }
        let media = "\(MediaServing.prefix)\(v.id!)/"
        if let path = body.path,
            !(path.hasPrefix(media) && path.hasSuffix("/") && MediaServing.relativePath(String(path.dropFirst(MediaServing.prefix.count)) + "x.m3u8") != nil)
        {
            throw HTTPRefusal(.badRequest, "path: expected a folder of the video's media, as \(media)FOLDER/")
        }
        let expires = (Date().timeIntervalSince1970 + Double(lifetime)).rounded(.down)
        let token = tokens.playback(video: v.id!, prefix: body.path, expires: expires)
        let described = try await describe(v, request, token: token)
        return JSONAnswer(value: PlaybackToken(token: token, expiresAt: expires, hlsURL: described.hlsURL, screenshot: described.screenshot))
    }

    private func remove(_ v: VideoRow) async throws -> Response {
        try await processor.removeVideo(v.id!)
        viewers.remove(video: v.id!)
        return Response(status: .noContent)
    }

    /// A recording's end: its recorder made `fragments` fragments (a second end with the same
    /// count is answered the same; another count, fewer than play already, or a video that is
    /// not being recorded: 409).
    private func end(_ v: VideoRow, _ request: Request) async throws -> JSONAnswer<VideoResource> {
        let body = try await jsonBody(request, as: RecordingEnd.self, expecting: ["fragments": RecordingEnd.expected])
        guard let n = body.fragments, (1...Int64(LiveRecordings.maxFragment + 1)).contains(n) else {
            throw HTTPRefusal(.badRequest, "fragments: expected \(RecordingEnd.expected)")
        }
        if let refusal = try await recordings.end(v.id!, fragments: n) { throw HTTPRefusal(.conflict, refusal) }
        return JSONAnswer(value: try await describe(try await database.video(v.id!) ?? v, request), status: .accepted)
    }

    /// The video's source file: its upload, which for a recording is the lossless merge of its
    /// fragments (an MP4). Served as a media file is (ranges, `ETag`), private to those who may
    /// see the video, as an attachment.
    private func download(_ v: VideoRow, _ request: Request) async throws -> Response {
        guard let key = v.uploadID, let files = uploads as? UploadFiles else {
            throw HTTPRefusal(.notFound, "video \(v.id!) has no source file on this server (yet)")
        }
        let path = files.path(key)
        let file: OpenMediaFile
        do { file = try await MediaServing.io.perform { try OpenMediaFile(path) } } catch {
            throw HTTPRefusal(.notFound, "video \(v.id!) has no source file on this server")
        }
        var answer = MediaServing.answer(request, file, relative: "")
        let merged = (try? TUSMetadata.decode((try await database.upload(key))?.metadata ?? ""))?[LiveRecordings.mergedKey] != nil
        answer.headers[.contentType] = merged ? "video/mp4" : "application/octet-stream"
        answer.headers[.cacheControl] = "private, no-cache"
        answer.headers[HTTPField.Name("Content-Disposition")!] = "attachment; filename=\"video-\(v.id!)\(merged ? ".mp4" : "")\""
        return answer
    }

    private func uploadTarget(_ v: VideoRow, _ request: Request) throws -> JSONAnswer<Gcore.UploadTarget> {
        guard v.status == .pending || v.status == .recording else { throw HTTPRefusal(.conflict, "video \(v.id!) was uploaded already") }
        return JSONAnswer(
            value: Gcore.UploadTarget(
                servers: [.init(id: 1, hostname: request.head.authority ?? "127.0.0.1")], token: tokens.upload(video: v.id!),
                video: .init(id: .number(v.id!), clientID: .number(v.clientID))))
    }

    private func feed(_ request: Request) async throws -> JSONAnswer<HostedFeed> {
        JSONAnswer(value: try await feedDocument(), cache: "no-cache")
    }

    /// The feed page opened at video `opening` (nil, or not in the feed: the first), carrying the
    /// feed as `/feed.json` has it and preloading that video's first fetches; a signed video
    /// comes first when `token` opens its media (its URIs carry the token).
    private func feedPage(opening: Int64?, token: String?) async throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var feed = try await feedDocument()
        if let opening, let token, let v = try await database.video(opening), v.access == .signed, !v.published.isEmpty,
            tokens.checkPlayback(token, path: "\(MediaServing.prefix)\(opening)/\(v.published)/master.m3u8") == .valid,
            let entry = await feedEntry(v, query: "?token=\(token)")
        {
            feed.videos.insert(entry, at: 0)
        }
        let start = feed.videos.first { $0.id == opening } ?? feed.videos.first
        return Pages.feed(
            try encoder.encode(feed), preload: start.map { FeedPage.firstFetches($0.media) } ?? [], mediaOrigin: processor.media.mediaOrigin)
    }

    /// Every public playable video's feed entry, in the store's order, its URIs under
    /// `/media/ID/FOLDER/`.
    private func feedDocument() async throws -> HostedFeed {
        var entries: [HostedFeed.Entry] = []
        for v in try await database.playable() where v.access == .public {
            if let entry = await feedEntry(v) { entries.append(entry) }
        }
        return HostedFeed(videos: entries)
    }

    /// Video `v`'s feed entry, its URIs under `/media/ID/FOLDER/` followed by `query`; nil while
    /// its folder has none.
    private func feedEntry(_ v: VideoRow, query: String = "") async -> HostedFeed.Entry? {
        guard let data = await processor.media.read(v.id!, "\(v.published)/feed.json"),
            let entry = (try? JSONDecoder().decode(FeedManifest.self, from: data))?.videos.first
        else { return nil }
        return HostedFeed.Entry(id: v.id!, name: v.name, status: v.status, media: entry.rebased("/media/\(v.id!)/\(v.published)/", query: query))
    }

    // MARK: helpers

    /// The query parameter `name` as a whole number in `range` (nil when absent); anything else
    /// is refused naming the parameter.
    static func queryNumber(_ request: Request, _ name: String, in range: ClosedRange<Int>) throws -> Int? {
        let values = request.uri.queryParameters.getAll(name)
        guard let text = values.first else { return nil }
        guard values.count == 1, text.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }), let n = Int(text), range.contains(n) else {
            throw HTTPRefusal(.badRequest, "\(name): expected a whole number from \(range.lowerBound) to \(range.upperBound), got '\(text.prefix(40))'")
        }
        return n
    }

    private func video<Context: RequestContext>(_ context: Context) async throws -> VideoRow {
        guard let id = Int64(try context.parameters.require("id")), let v = try await database.video(id) else {
            throw HTTPRefusal(.notFound, "no such video")
        }
        return v
    }

    /// The video as the API shows it; a signed video's URLs carry `token` (nil: a new one, good
    /// for `describedTokenLifetime`).
    func describe(_ v: VideoRow, _ request: Request, token: String? = nil) async throws -> VideoResource {
        let host = TUSServer.origin(of: request) ?? ""
        let base = v.published.isEmpty ? nil : "\(host)/media/\(v.id!)/\(v.published)/"
        var query = ""
        if v.access == .signed {
            query = "?token=" + (token ?? tokens.playback(video: v.id!, expires: Date().timeIntervalSince1970 + Self.describedTokenLifetime))
        }
        let published = Set(v.renditions.split(separator: ",").map(String.init))
        var renditions = LadderRung.ordered(published).map { VideoResource.Rendition(name: $0, status: "ready") }
        var progress = v.status == .ready ? 1.0 : 0
        if v.status == .viewable || v.status == .processing {
            // This server's own worker knows it best; another server's recorded it in the store.
            let recorded = (try? await database.progress(ofVideo: v.id!)) ?? 0
            progress = max(processor.progress(of: v.id!) ?? 0, recorded)
            renditions.append(.init(name: "ladder", status: "processing", progress: progress))
        }
        return VideoResource(
            id: v.id!, name: v.name, description: v.description, clientID: v.clientID, status: v.status, mode: v.mode,
            error: v.error.map(processor.dataPaths.scrub), duration: v.duration, screenshot: base.map { $0 + "poster.jpg" + query } ?? "",
            hlsURL: base.map { $0 + "master.m3u8" + query } ?? "", renditions: renditions, progress: progress, createdAt: v.createdAt, access: v.access)
    }

    /// The body as `Body`: `application/json`, at most `maxBody` bytes, a JSON object (an empty
    /// body is `{}`) whose fields have `Body`'s types; a field that does not is refused naming it
    /// and what it expects (`expecting`, by field).
    private func jsonBody<Body: Decodable>(_ request: Request, as: Body.Type, expecting: [String: String]) async throws -> Body {
        let type = request.headers[.contentType]?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        guard type == "application/json" else {
            throw HTTPRefusal(.unsupportedMediaType, "Content-Type: expected application/json, got '\((request.headers[.contentType] ?? "").prefix(60))'")
        }
        var r = request
        let buffer: ByteBuffer
        do { buffer = try await r.collectBody(upTo: Self.maxBody) } catch { throw HTTPRefusal(.contentTooLarge, "the body is above 64 KiB") }
        let data = buffer.readableBytes > 0 ? Data(buffer.readableBytesView) : Data("{}".utf8)
        do { return try JSONDecoder().decode(Body.self, from: data) } catch {
            if let field = Self.field(of: error), let expected = expecting[field] { throw HTTPRefusal(.badRequest, "\(field): expected \(expected)") }
            throw HTTPRefusal(.badRequest, "the body is not a JSON object")
        }
    }

    /// The body field a decoding error is about (nil: the body as a whole). `Gcore`'s request types
    /// report every failure of a field at the field, a number out of its type's range too.
    static func field(of error: any Error) -> String? {
        let path: [any CodingKey]
        switch error as? DecodingError {
        case .keyNotFound(let key, let context)?: path = context.codingPath + [key]
        case .typeMismatch(_, let context)?, .valueNotFound(_, let context)?, .dataCorrupted(let context)?: path = context.codingPath
        default: return nil
        }
        return path.first?.stringValue
    }

}

extension HostingAPI {
    /// Whether a TUS upload may be created, and the video it will carry:
    /// - one that names a video (`video_id`) must carry that video's upload token (another
    ///   video's or a forged one: 403; an expired one: 401) and the video must still wait for its
    ///   upload (409): it carries that video;
    /// - one that names none carries a new video (`pending`), stored with the upload, named by its
    ///   `title` metadata, else `filename`, else `name` (as Uppy sends), else "untitled". On a
    ///   server with an API key it must be sent with `Authorization: Bearer` (the API key or an
    ///   access token; 401 otherwise); on one without (loopback only), anything passes, as on the
    ///   management routes.
    func admit(_ metadata: [String: String], authorization: String?) async throws -> UploadCarrier {
        guard let vid = metadata["video_id"] else {
            if metadata[LiveRecordings.fragmentKey] != nil { throw HTTPRefusal(.badRequest, "fragment: a recording's fragment names its video (video_id)") }
            if authorization == nil, tokens.apiKey != nil {
                throw HTTPRefusal(.unauthorized, "an upload token (Upload-Metadata video_id and token) or the API key (Authorization: Bearer) is needed")
            }
            try tokens.authorize(authorization)
            let named = ["title", "filename", "name"].compactMap { metadata[$0]?.trimmingCharacters(in: .whitespacesAndNewlines) }.first { !$0.isEmpty }
            return .newVideo(
                VideoRow(
                    id: nil, name: String((named ?? "untitled").prefix(500)), description: nil, clientID: 1, status: .pending, mode: .ladder, error: nil,
                    duration: nil, uploadID: nil, published: "", renditions: "", createdAt: Date().timeIntervalSince1970))
        }
        guard let id = Int64(vid), let v = try await database.video(id) else { throw HTTPRefusal(.notFound, "video_id: no such video") }
        switch tokens.checkUpload(metadata["token"], video: id) {
        case .valid: break
        case .expired: throw HTTPRefusal(.unauthorized, "the upload token expired; ask GET /videos/\(id)/upload for a new one")
        case .wrong: throw HTTPRefusal(.forbidden, "the upload token is not this video's")
        }
        if let text = metadata[LiveRecordings.fragmentKey] {
            try admitFragment(text, of: v)
            return .video(id)
        }
        guard v.status == .pending else {
            throw HTTPRefusal(
                .conflict, v.status == .recording ? "video \(id) is a recording: each upload names its fragment" : "video \(id) was uploaded already")
        }
        return .video(id)
    }

    /// Whether fragment `text` of recording `v` may be uploaded: a whole number within the
    /// recording (its end, once known). One sent again (its answer was lost) is taken, and stored
    /// once (`LiveRecordings`).
    private func admitFragment(_ text: String, of v: VideoRow) throws {
        guard let index = Int(text), (0...LiveRecordings.maxFragment).contains(index), String(index) == text else {
            throw HTTPRefusal(.badRequest, "fragment: expected a whole number from 0 to \(LiveRecordings.maxFragment), got '\(text.prefix(20))'")
        }
        guard v.status == .recording, v.fragments.map({ index < $0 }) ?? true else {
            throw HTTPRefusal(.conflict, "video \(v.id!) is not being recorded (or ended before fragment \(index))")
        }
    }

    /// A finished upload that carries a video: bound to it and queued for processing; a
    /// recording's fragment goes to its live folder.
    func completed(_ upload: UploadRow) async {
        guard let vid = upload.videoID else { return }
        if LiveRecordings.fragmentIndex(upload) != nil {
            recordings.arrived(vid)
            return
        }
        try? await database.uploaded(video: vid, upload: upload.id, trace: upload.trace)
        processor.wake()
    }

    /// An upload removed unfinished: the video made for it at its creation (`admit`), still
    /// waiting for it, is deleted with it; a video made by `POST /videos` stays (its client may
    /// upload again).
    func abandoned(_ upload: UploadRow) async {
        guard (try? TUSMetadata.decode(upload.metadata))?["video_id"] == nil, let vid = upload.videoID,
            let v = try? await database.video(vid), v.status == .pending, v.uploadID == nil
        else { return }
        try? await database.deleteVideo(vid)
    }

    /// Finished uploads whose video a crash left unbound (between the last byte and the binding).
    func reconcile() async throws {
        for upload in try await database.completedUploads() { await completed(upload) }
    }
}

/// The body of `POST /videos` (`Gcore.NewVideo`, its types checked by `jsonBody`), each
/// field's value checked (400 naming it).
struct NewVideoBody {
    var name: String
    var description: String?
    var clientID: Int64
    var mode: VideoRow.Mode
    var recording: Bool
    var access: VideoRow.Access

    /// What each field must be.
    static let expected = [
        "name": "a non-empty string of at most 500 characters", "description": "a string or null",
        "client_id": "a whole number from 0 to \(Int64.max)", "mode": "\"ladder\" or \"copy\"", "recording": "true or false",
        "access": "\"public\" or \"signed\""
    ]

    init(_ body: Gcore.NewVideo) throws {
        func refuse(_ field: String) -> HTTPRefusal { HTTPRefusal(.badRequest, "\(field): expected \(Self.expected[field] ?? "")") }
        guard !body.name.isEmpty, body.name.count <= 500 else { throw refuse("name") }
        name = body.name
        description = body.description
        guard (body.clientID ?? 0) >= 0 else { throw refuse("client_id") }
        clientID = body.clientID ?? 1
        guard let m = VideoRow.Mode(rawValue: body.mode ?? "ladder") else { throw refuse("mode") }
        mode = m
        recording = body.recording ?? false
        guard let a = VideoRow.Access(rawValue: body.access ?? "public") else { throw refuse("access") }
        access = a
    }
}

/// The body of `PATCH /videos/{id}`.
struct VideoEdit: Decodable {
    var name: String?
    var access: String?
    static let expected = ["name": NewVideoBody.expected["name"]!, "access": NewVideoBody.expected["access"]!]
}

/// The body of `POST /videos/{id}/token`.
struct PlaybackTokenRequest: Decodable {
    var expiresIn: Int?
    var path: String?
    enum CodingKeys: String, CodingKey {
        case expiresIn = "expires_in", path
    }
    static let expected = [
        "expires_in": "a whole number of seconds from 1 to \(HostingAPI.longestTokenLifetime)", "path": "a folder of the video's media, /media/ID/FOLDER/"
    ]
}

/// The answer of `POST /videos/{id}/token`: the token, when it expires, and the video's
/// playlist and cover with the token on.
struct PlaybackToken: Encodable, Sendable {
    var token: String
    var expiresAt: Double
    var hlsURL: String
    var screenshot: String
    enum CodingKeys: String, CodingKey {
        case token, expiresAt = "expires_at", hlsURL = "hls_url", screenshot
    }
}

/// The body of `POST /videos/{id}/end`.
struct RecordingEnd: Decodable {
    var fragments: Int64?
    static let expected = "a whole number from 1 to \(LiveRecordings.maxFragment + 1)"
}
