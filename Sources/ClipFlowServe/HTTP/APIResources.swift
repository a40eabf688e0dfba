import ClipFlowMedia
import Foundation
import HTTPTypes
import Hummingbird

/// A video as the hosting API shows it (Gcore's fields): every field present, absent values as
/// `null`.
struct VideoResource: Encodable, Sendable {
    var id: Int64
    var name: String
    var description: String?
    var clientID: Int64
    var status: VideoRow.Status
    var mode: VideoRow.Mode
    /// Why processing failed, without any path of the data folder.
    var error: String?
    var duration: Double?
    /// The poster's URL; empty until the video is published.
    var screenshot: String
    /// The master playlist's URL; empty until the video is published.
    var hlsURL: String
    var renditions: [RenditionState]
    /// 0 to 1, never moving back.
    var progress: Double
    var createdAt: Double

    struct RenditionState: Encodable, Sendable {
        var name: String
        var status: String
        var progress: Double?
    }

    enum CodingKeys: String, CodingKey {
        case id, name, description, status, mode, error, duration, screenshot, renditions, progress
        case clientID = "client_id", hlsURL = "hls_url", createdAt = "created_at"
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(id, forKey: .id)
        try c.encode(name, forKey: .name)
        try c.encode(description, forKey: .description)
        try c.encode(clientID, forKey: .clientID)
        try c.encode(status.rawValue, forKey: .status)
        try c.encode(mode.rawValue, forKey: .mode)
        try c.encode(error, forKey: .error)
        try c.encode(duration, forKey: .duration)
        try c.encode(screenshot, forKey: .screenshot)
        try c.encode(hlsURL, forKey: .hlsURL)
        try c.encode(renditions, forKey: .renditions)
        try c.encode(progress, forKey: .progress)
        try c.encode(createdAt, forKey: .createdAt)
    }
}

/// The answer of `GET /videos/{id}/upload`: where and with which token the video's upload goes
/// (Gcore's shape).
struct UploadTarget: Encodable, Sendable {
    var servers: [Server]
    var token: String
    var video: Video

    struct Server: Encodable, Sendable {
        var id: Int
        var hostname: String
    }

    struct Video: Encodable, Sendable {
        var id: Int64
        var clientID: Int64
        enum CodingKeys: String, CodingKey {
            case id
            case clientID = "client_id"
        }
    }
}

/// The answer of `POST /auth/refresh`.
struct AccessGrant: Encodable, Sendable {
    var access: String
}

/// The answer of a refused API request.
struct RefusalBody: Encodable, Sendable {
    var detail: String
}

/// `GET /feed.json`: each playable video's published manifest entry, its paths made absolute,
/// with the video's own id, name and status in place of the folder's id.
struct HostedFeed: Encodable, Sendable {
    var videos: [Entry]

    struct Entry: Encodable, Sendable {
        var id: Int64
        var name: String
        var status: VideoRow.Status
        var media: FeedEntry

        enum CodingKeys: String, CodingKey { case id, name, status }

        func encode(to encoder: any Encoder) throws {
            try media.encode(to: encoder)
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(id, forKey: .id)
            try c.encode(name, forKey: .name)
            try c.encode(status.rawValue, forKey: .status)
        }
    }
}

/// A JSON answer: `value` with keys sorted, never cached by default (`no-store`).
struct JSONAnswer<Value: Encodable & Sendable>: ResponseGenerator, Sendable {
    var value: Value
    var status: HTTPResponse.Status = .ok
    var cache = "no-store"
    var headers: [(HTTPField.Name, String)] = []

    func response(from request: Request, context: some RequestContext) throws -> Response {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        var fields = HTTPFields()
        fields[.contentType] = "application/json"
        fields[.cacheControl] = cache
        for (name, text) in headers { fields[name] = text }
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: try encoder.encode(value))))
    }
}

/// The hosting API's refusals as JSON (`{"detail": reason}`, `no-store`); an error that is not a
/// refusal is a bare 500 (its cause may name server paths).
struct JSONRefusals<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do { return try await next(request, context) } catch let refusal as HTTPRefusal {
            return try JSONAnswer(value: RefusalBody(detail: refusal.reason), status: refusal.status).response(from: request, context: context)
        } catch {
            return Response(status: .internalServerError)
        }
    }
}
