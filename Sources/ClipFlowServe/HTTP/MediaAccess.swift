import Foundation
import HTTPTypes
import Hummingbird
import Synchronization

/// Who may read `/media`, in front of the media files: a `public` video's files are anyone's; a
/// `signed` video's only with a playback token (`?token=`, `Tokens.checkPlayback`). A request
/// carrying a token that is forged, expired, or for another video or folder gets 403, whether
/// or not the file exists, so a token tells nothing of what is there; a signed video's files
/// asked for without a token are 404, as if absent. With a valid token, a playlist or storyboard
/// is answered with the token added to each URI in it, so a player that resolves them against
/// the playlist's URL (which drops its query) carries the token on through the ladder; token
/// answers are `Cache-Control: private`.
struct MediaAccess<Context: RequestContext>: RouterMiddleware {
    let tokens: Tokens
    let access: VideoAccess
    let media: any MediaStorage

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        // The path as the media files will read it (percent-decoded, checked): what is checked
        // here is what is served. A path they would refuse goes on to their refusal. (A path
        // without `%` is its own decoding: a public video's files skip the work.)
        let raw = request.uri.path
        guard raw.hasPrefix(MediaServing.prefix) else { return try await next(request, context) }
        let token = request.uri.queryParameters.get("token")
        let plain = token == nil && !raw.contains("%")
        guard
            let relative = plain
                ? String(raw.dropFirst(MediaServing.prefix.count)) : MediaServing.relativePath(String(raw.dropFirst(MediaServing.prefix.count))),
            let slash = relative.firstIndex(of: "/")
        else { return try await next(request, context) }
        let path = MediaServing.prefix + relative
        // A folder that is not a video's number (`05`, `+5`) holds no video's media.
        guard relative[..<slash].allSatisfy(\.isASCII) && relative[..<slash].allSatisfy(\.isNumber), let video = Int64(relative[..<slash]),
            String(video) == relative[..<slash]
        else { return MediaServing.refusal(.notFound, "no such media file") }
        guard let token else {
            // What is remembered is answered without leaving the request's thread.
            let signed: Bool
            if let known = access.remembered(video) { signed = known } else { signed = await access.isSigned(video) }
            if signed { return MediaServing.refusal(.notFound, "no such media file") }
            return try await next(request, context)
        }
        guard tokens.checkPlayback(token, path: path) == .valid else {
            return MediaServing.refusal(.forbidden, "the token does not open this file")
        }
        let inside = String(relative[relative.index(after: slash)...])
        let ext = URL(fileURLWithPath: inside).pathExtension.lowercased()
        if request.method == .get || request.method == .head, ext == "m3u8" || ext == "vtt" {
            guard let data = await media.read(video, inside) else { return MediaServing.refusal(.notFound, "no such media file") }
            let text = Self.carrying(token, in: String(decoding: data, as: UTF8.self), playlist: ext == "m3u8")
            var headers = HTTPFields()
            headers[.contentType] = MediaServing.contentType(inside)
            headers[.cacheControl] = "private, no-cache"
            headers[.contentLength] = String(text.utf8.count)
            headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
            guard request.method == .get else { return Response(status: .ok, headers: headers) }
            return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
        }
        var answer = try await next(request, context)
        // What a token opened is this viewer's: no shared cache keeps it (a redirect to a
        // bucket's presigned URL keeps its own, shorter, private lifetime).
        if answer.status.code < 300 { answer.headers[.cacheControl] = "private, max-age=3600" }
        return answer
    }

    /// `text` with `token` added to each relative URI: in a playlist, every URI line and every
    /// `URI="..."` attribute; in a storyboard (WebVTT), every cue's image.
    static func carrying(_ token: String, in text: String, playlist: Bool) -> String {
        func add(_ uri: Substring) -> String {
            // Only a relative path: not one from the root, nor one with a scheme (`https:`, `data:`).
            let scheme = uri.prefix { $0 != "/" && $0 != "?" && $0 != "#" }.contains(":")
            if scheme || uri.hasPrefix("/") || uri.isEmpty { return String(uri) }
            let (base, fragment) = uri.firstIndex(of: "#").map { (uri[..<$0], uri[$0...]) } ?? (uri, "")
            return "\(base)\(base.contains("?") ? "&" : "?")token=\(token)\(fragment)"
        }
        func rewrite(_ line: Substring) -> String {
            if playlist {
                if line.hasPrefix("#") {
                    guard let start = line.range(of: "URI=\"") else { return String(line) }
                    guard let end = line[start.upperBound...].firstIndex(of: "\"") else { return String(line) }
                    return String(line[..<start.upperBound]) + add(line[start.upperBound..<end]) + String(line[end...])
                }
                return line.trimmingCharacters(in: .whitespaces).isEmpty ? String(line) : add(line)
            }
            // A cue's payload in a storyboard: an image, with its region after `#`.
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            let image = [".jpg", ".jpeg", ".png"].contains { trimmed.lowercased().split(separator: "#").first?.hasSuffix($0) ?? false }
            return image && !trimmed.contains(" ") ? add(Substring(trimmed)) : String(line)
        }
        // Lines end in LF or CRLF (one Character to Swift), and keep their ending.
        let crlf = text.contains("\r\n")
        let lines = text.replacingOccurrences(of: "\r\n", with: "\n").split(separator: "\n", omittingEmptySubsequences: false).map(rewrite)
        return lines.joined(separator: crlf ? "\r\n" : "\n")
    }
}

/// Whether a video is `signed`, as the store says, remembered a second so that serving media
/// does not ask the database at every segment (a change of access takes that long, and at most
/// `ttl`, to reach this server's media; this server's own edits at once).
final class VideoAccess: Sendable {
    let database: any ServeStore
    static let ttl = 1.0
    private let known = Mutex([Int64: (signed: Bool, at: Double)]())

    init(database: any ServeStore) { self.database = database }

    /// What is remembered of `video`, if it is fresh (nil: ask `isSigned`).
    func remembered(_ video: Int64) -> Bool? {
        let now = Date().timeIntervalSince1970
        guard let k = known.withLock({ $0[video] }), now - k.at < Self.ttl else { return nil }
        return k.signed
    }

    func isSigned(_ video: Int64) async -> Bool {
        let now = Date().timeIntervalSince1970
        if let signed = remembered(video) { return signed }
        // A database that does not answer keeps the files closed (nothing remembered).
        let row: VideoRow?
        do { row = try await database.video(video) } catch { return true }
        let signed = row?.access == .signed
        known.withLock { map in
            if map.count > 10_000 { map.removeAll() }
            map[video] = (signed, now)
        }
        return signed
    }

    /// Forgets what was remembered of `video` (its access changed here).
    func forget(_ video: Int64) { _ = known.withLock { $0.removeValue(forKey: video) } }
}
