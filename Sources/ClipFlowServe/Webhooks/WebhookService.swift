import ClipFlowCore
import ClipFlowUpload
import Foundation
import ServiceLifecycle

/// What the operator asked of webhooks (`--webhook`, `CLIPFLOW_WEBHOOK_SECRET`,
/// `--webhook-allow-private`).
public struct WebhookOptions: Sendable {
    /// The receivers' URLs; each is told of every event.
    public var endpoints: [String] = []
    /// The key receivers check signatures with.
    public var secret: String?
    /// Whether a receiver's host name may resolve to a loopback, private or link-local address.
    public var allowPrivate = false

    public init() {}

    /// The receivers, checked (throws naming the URL or the missing secret).
    func checked() throws -> [WebhookEndpoint] {
        let endpoints = try endpoints.map(WebhookEndpoint.init)
        if !endpoints.isEmpty, (secret ?? "").count < 16 {
            throw ClipFlowError.badInput(
                "--webhook: set CLIPFLOW_WEBHOOK_SECRET to a key of at least 16 characters; receivers check each request's signature with it")
        }
        return endpoints
    }
}

/// How one attempt at a delivery ended.
enum WebhookOutcome: String, Sendable, CaseIterable {
    /// The receiver answered 2xx.
    case delivered
    /// It did not; the delivery is tried again later.
    case retry
    /// It did not, and the delivery's time is over: given up.
    case failed
}

/// Tells webhook receivers of each video's events, from the database: every server with
/// receivers fans new events out into deliveries (`WebhookStore`), takes the ones due under a
/// lease (several servers deliver each once) and posts each as JSON, signed. A receiver sees a
/// video's events in order (an event waits while an earlier one of its video is pending); one
/// that does not answer 2xx is tried again after 1, 2, 4 … seconds, at most an hour apart, for
/// `retryFor` after its event; each has an id (`evt_N`), the same on every attempt, so a
/// receiver drops one it has seen. Processing never waits for it: the event is a row written by
/// the database's trigger, delivered by this service on its own time.
///
/// A request: `POST` with `Content-Type: application/json`, `ClipFlow-Event-Id: evt_N` and
/// `ClipFlow-Signature: t=UNIX,v1=HEX`, HEX the HMAC-SHA256 of `UNIX.BODY` under the secret
/// (as Stripe signs), the body
/// `{"id", "type", "created_at", "video": {"id", "name", "client_id", "status", "error"}}`.
struct WebhookService: Service {
    let store: any ServeStore
    let endpoints: [WebhookEndpoint]
    let secret: [UInt8]
    let allowPrivate: Bool
    let log: ServeLog
    let metrics: ServeMetrics
    /// Takes paths of the data folder out of a video's error.
    let scrub: @Sendable (String) -> String

    static let poll = 0.5
    static let lease = 60.0
    static let batch = 16
    /// How long after its event a delivery is tried.
    static let retryFor = 3 * 86400.0
    /// How long events and finished deliveries are kept.
    static let keepFor = 7 * 86400.0
    static let longestWait = 3600.0

    /// Gives every receiver its starting point (events from now on), before the server takes
    /// requests.
    func start() async throws {
        try await store.fanOutWebhooks(to: endpoints.map(\.url), now: Date().timeIntervalSince1970)
    }

    func run() async {
        var pruned = 0.0
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            let now = Date().timeIntervalSince1970
            var took = 0
            do {
                try await store.fanOutWebhooks(to: endpoints.map(\.url), now: now)
                if now - pruned > 3600 {
                    try await store.pruneWebhooks(before: now - Self.keepFor)
                    pruned = now
                }
                let due = try await store.takeWebhookDeliveries(endpoints: endpoints.map(\.url), now: now, lease: Self.lease, limit: Self.batch)
                took = due.count
                await withTaskGroup(of: Void.self) { group in
                    for d in due { group.addTask { await deliver(d) } }
                }
            } catch {
                log.warning("webhooks: the database: \(scrub(String(describing: error)).prefix(300))")
            }
            if took == Self.batch { continue }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(Self.poll)) }
        }
    }

    /// One attempt at `d`, recorded in the store (a failure to record leaves the lease to run
    /// out, and the delivery is tried again: a receiver may see an id twice).
    func deliver(_ d: WebhookDelivery) async {
        guard let endpoint = endpoints.first(where: { $0.url == d.endpoint }) else { return }
        let attempt = d.attempts + 1
        let problem = await Self.blocking { post(d, to: endpoint) }
        let now = Date().timeIntervalSince1970
        var retryAt: Double? = nil
        if problem != nil {
            let wait = min(pow(2, Double(attempt - 1)), Self.longestWait) * Double.random(in: 0.9...1.1)
            if now + wait <= d.createdAt + Self.retryFor { retryAt = now + wait }
        }
        let outcome: WebhookOutcome = problem == nil ? .delivered : retryAt == nil ? .failed : .retry
        metrics.webhookAttempt(outcome)
        log.line([
            ("event", .string("webhook")), ("id", .string("evt_\(d.eventID)")), ("type", .string(d.type)), ("video", .int(Int(d.videoID))),
            ("endpoint", .string(endpoint.display)), ("attempt", .int(attempt)), ("outcome", .string(outcome.rawValue)),
            ("reason", problem.map { .string($0) } ?? .null), ("retry_in", retryAt.map { .seconds($0 - now) } ?? .null)
        ])
        try? await store.finishWebhookDelivery(d, delivered: problem == nil, retryAt: retryAt, error: problem)
    }

    /// Posts `d` to `endpoint`; nil when it answered 2xx, else why not.
    func post(_ d: WebhookDelivery, to endpoint: WebhookEndpoint) -> String? {
        do {
            let addresses = try endpoint.connectAddresses(allowPrivate: allowPrivate)
            let body = try Self.body(d, scrub: scrub)
            let timestamp = Int64(Date().timeIntervalSince1970)
            var settings = TransportSettings()
            settings.connectTimeout = 5
            settings.stallTimeout = 10
            settings.responseTimeout = 10
            settings.maxResponseBody = 64 << 10
            var request = HTTPRequest(
                method: "POST", url: endpoint.url,
                headers: [
                    ("Content-Type", "application/json"), ("User-Agent", "clipflow-webhooks"), ("ClipFlow-Event-Id", "evt_\(d.eventID)"),
                    ("ClipFlow-Signature", "t=\(timestamp),v1=\(Self.signature(secret: secret, timestamp: timestamp, body: body))")
                ], body: .bytes(body))
            request.connectAddresses = addresses
            let answer = try CurlTransport(settings: settings).perform(request)
            return (200..<300).contains(answer.status) ? nil : "answered \(answer.status)"
        } catch let refusal as WebhookRefusal {
            return refusal.description
        } catch let error as TransportError {
            return "no answer (\(error.kind))"
        } catch {
            return "\(error)".prefix(200).description
        }
    }

    /// The JSON body of `d` (keys sorted; the same bytes on every attempt).
    static func body(_ d: WebhookDelivery, scrub: (String) -> String) throws -> Data {
        struct Video: Encodable {
            var id: Int64, name: String, client_id: Int64, status: String, error: String?
        }
        struct Body: Encodable {
            var id: String, type: String, created_at: Double, video: Video
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return try encoder.encode(
            Body(
                id: "evt_\(d.eventID)", type: d.type, created_at: d.createdAt,
                video: Video(id: d.videoID, name: d.name, client_id: d.clientID, status: d.status, error: d.error.map(scrub))))
    }

    /// The `v1` signature: lower-case hex of HMAC-SHA256(`secret`, "TIMESTAMP.BODY").
    static func signature(secret: [UInt8], timestamp: Int64, body: Data) -> String {
        Digest.hmacSHA256(key: secret, Data("\(timestamp).".utf8) + body).map { String(format: "%02x", $0) }.joined()
    }

    /// `work` on a thread of its own (it blocks), its result awaited.
    static func blocking<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { c in DispatchQueue.global().async { c.resume(returning: work()) } }
    }
}
