import ClipFlowMedia
import ClipFlowUpload
import Foundation
import HTTPTypes
import Hummingbird

/// A video as the hosting API shows it: Gcore's fields (`Gcore.Video`, the type the upload
/// client reads), every field present, absent values as `null`.
typealias VideoResource = Gcore.Video

extension Gcore.Video {
    /// A video of this server, every field set from its row's values.
    init(
        id: Int64, name: String, description: String?, clientID: Int64, status: VideoRow.Status, mode: VideoRow.Mode, error: String?,
        duration: Double?, screenshot: String, hlsURL: String, renditions: [Rendition], progress: Double, createdAt: Double, access: VideoRow.Access
    ) {
        self.init(
            id: .number(id), name: name, description: description, clientID: .number(clientID), status: status.rawValue, mode: mode.rawValue,
            error: error, duration: duration, screenshot: screenshot, hlsURL: hlsURL, renditions: renditions, progress: progress, createdAt: createdAt,
            access: access.rawValue)
    }
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

/// The hosting API's refusals as JSON (`Gcore.Refusal`: `{"detail": reason}`, `no-store`); an error that is not a
/// refusal is a bare 500 (its cause may name server paths).
struct JSONRefusals<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        do { return try await next(request, context) } catch let refusal as HTTPRefusal {
            return try JSONAnswer(value: Gcore.Refusal(detail: refusal.reason), status: refusal.status).response(from: request, context: context)
        } catch {
            return Response(status: .internalServerError)
        }
    }
}
