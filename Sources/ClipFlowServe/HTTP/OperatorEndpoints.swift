import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// What an operator's tools ask the server, with no key (they answer counts, never a name, a
/// path or a token):
///
///     GET /healthz  -> 200 "ok" when the database answers within `healthLimit` seconds; 503
///                      with the reason otherwise
///     GET /metrics  -> the Prometheus text exposition of `ServeMetrics`, with the jobs by state
///                      and the queue by step as the database answers within `healthLimit`
struct OperatorEndpoints: Sendable {
    let database: any ServeStore
    let metrics: ServeMetrics
    /// Seconds the database has to answer a health check.
    var healthLimit: Double = 2

    func addRoutes<Context: RequestContext>(to router: Router<Context>) {
        router.get("healthz") { _, _ in await health() }
        router.get("metrics") { _, _ in await exposition() }
    }

    func health() async -> Response {
        do {
            _ = try await jobStats()
            return Self.text(.ok, "ok\n")
        } catch {
            return Self.text(.serviceUnavailable, "the database does not answer\n")
        }
    }

    func exposition() async -> Response {
        let text = metrics.exposition(jobs: try? await jobStats())
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; version=0.0.4; charset=utf-8"
        headers[.cacheControl] = "no-store"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    /// The store's view of the jobs, or an error after `healthLimit` seconds.
    private func jobStats() async throws -> JobStats {
        try await withThrowingTaskGroup(of: JobStats?.self) { group in
            group.addTask { try await database.jobStats() }
            group.addTask {
                try await Task.sleep(for: .seconds(healthLimit))
                return nil
            }
            defer { group.cancelAll() }
            guard let first = try await group.next(), let counts = first else { throw CancellationError() }
            return counts
        }
    }

    private static func text(_ status: HTTPResponse.Status, _ body: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; charset=utf-8"
        headers[.cacheControl] = "no-store"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: body)))
    }
}
