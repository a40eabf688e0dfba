import Foundation
import HTTPTypes
import Hummingbird
import Synchronization

/// `POST /beacon`: a player's report of one view (`ViewReport`), from the feed page, open to
/// anyone as the page is. A body is JSON of at most `maxBody` bytes naming a video that plays (a
/// signed one with its playback token);
/// each client address may send `BeaconLimiter`'s share (429 with `Retry-After` beyond), so a
/// flood costs bounded memory and bounded writes. A report goes to `/metrics` (`ViewerMetrics`)
/// and to the store, for the studio's figures (`GET /videos/{id}/views`). 204 when taken.
struct ViewerBeacons: Sendable {
    let database: any ServeStore
    let metrics: ViewerMetrics
    let limiter: BeaconLimiter
    let tokens: Tokens
    static let maxBody = 2048
    /// How long the store keeps a view.
    static let keepFor = 30 * 86400.0
    private let pruned = PruneClock()

    init(database: any ServeStore, tokens: Tokens, metrics: ViewerMetrics, limiter: BeaconLimiter = BeaconLimiter()) {
        self.tokens = tokens
        self.database = database
        self.metrics = metrics
        self.limiter = limiter
    }

    func addRoutes<Context: RemoteAddressRequestContext>(to router: Router<Context>) {
        router.post("beacon") { request, context in try await beacon(request, from: context.remoteAddress?.ipAddress ?? "") }
    }

    func beacon(_ request: Request, from address: String) async throws -> Response {
        guard limiter.take(address) else {
            var r = refusal(.tooManyRequests, "too many reports; send fewer")
            r.headers[.retryAfter] = "5"
            return r
        }
        let type = request.headers[.contentType]?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        guard type == "application/json" || type == "text/plain" else { return refusal(.unsupportedMediaType, "Content-Type: expected application/json") }
        var r = request
        let buffer: ByteBuffer
        do { buffer = try await r.collectBody(upTo: Self.maxBody) } catch { return refusal(.contentTooLarge, "the body is above \(Self.maxBody) bytes") }
        let body: ViewReport.Body
        do { body = try JSONDecoder().decode(ViewReport.Body.self, from: Data(buffer.readableBytesView)) } catch {
            return refusal(
                .badRequest,
                "\(HostingAPI.field(of: error).map { "\($0): " } ?? "")expected {\"video\", \"startup_ms\", \"rebuffers\", \"rebuffer_ms\", \"watched_ms\", \"rendition\", \"error\"}"
            )
        }
        // A signed video's views come with its token; without, it is as absent as a video that is.
        guard let v = try await database.video(body.video), !v.published.isEmpty,
            v.access == .public
                || tokens.checkPlayback(body.token ?? "", path: "\(MediaServing.prefix)\(v.id!)/\(v.published)/master.m3u8") == .valid
        else { return refusal(.notFound, "video: no such video plays") }
        let report: ViewReport
        do { report = try ViewReport(body, renditions: Set(v.renditions.split(separator: ",").map(String.init))) } catch {
            return refusal(.badRequest, error.reason)
        }
        metrics.add(report)
        let now = Date().timeIntervalSince1970
        try await database.recordView(report, at: now)
        if pruned.due(now) { try? await database.pruneViews(before: now - Self.keepFor) }
        return Response(status: .noContent)
    }

    private func refusal(_ status: HTTPResponse.Status, _ reason: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; charset=utf-8"
        headers[.cacheControl] = "no-store"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: reason + "\n")))
    }
}

/// Whether an hour passed since the last time it said so.
final class PruneClock: Sendable {
    private let last = Mutex(0.0)
    func due(_ now: Double) -> Bool {
        last.withLock { t in
            guard now - t > 3600 else { return false }
            t = now
            return true
        }
    }
}
