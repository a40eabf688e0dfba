import Foundation
import PostgresNIO

extension PostgresStore {
    /// As SQLite's, in one transaction per endpoint; servers fanning out at once insert each row
    /// once (its key), and a cursor moved back by a slower one only looks at rows again. Events
    /// settle by the database's clock, which stamped them (`now` is unused).
    func fanOutWebhooks(to endpoints: [String], now: Double) async throws {
        for endpoint in endpoints {
            let name = WebhookEvent.cursorName(endpoint)
            try await transaction { db in
                var cursor: Int64?
                for try await text in try await db.query("SELECT value FROM settings WHERE name = \(name)", logger: logger).decode(String.self) {
                    cursor = Int64(text)
                }
                guard let cursor else {
                    try await db.query(
                        """
                        INSERT INTO settings (name, value) SELECT \(name), CAST(COALESCE(MAX(id), 0) AS TEXT) FROM webhook_events
                        ON CONFLICT (name) DO NOTHING
                        """, logger: logger)
                    return
                }
                try await db.query(
                    """
                    INSERT INTO webhook_deliveries (event_id, endpoint, type, video_id, name, client_id, status, error, created_at, state, attempts, next_at)
                    SELECT e.id, \(endpoint), e.type, e.video_id, e.name, e.client_id, e.status, e.error, e.created_at, 'pending', 0, e.created_at
                    FROM webhook_events e WHERE e.id > \(cursor)
                    ON CONFLICT (event_id, endpoint) DO NOTHING
                    """, logger: logger)
                try await db.query(
                    """
                    UPDATE settings SET value = CAST(COALESCE(
                      (SELECT MAX(id) FROM webhook_events
                       WHERE id > \(cursor) AND created_at < extract(epoch from clock_timestamp()) - \(WebhookEvent.settleSeconds)), \(cursor)) AS TEXT)
                    WHERE name = \(name)
                    """, logger: logger)
            }
        }
    }

    func takeWebhookDeliveries(endpoints: [String], now: Double, lease: Double, limit: Int) async throws -> [WebhookDelivery] {
        guard !endpoints.isEmpty else { return [] }
        let rows = try await query(
            """
            UPDATE webhook_deliveries SET lease_until = \(now + lease)
            WHERE (event_id, endpoint) IN (
              SELECT d.event_id, d.endpoint FROM webhook_deliveries d
              WHERE d.state = 'pending' AND d.endpoint = ANY(\(endpoints)) AND d.next_at <= \(now) AND (d.lease_until IS NULL OR d.lease_until < \(now))
                AND NOT \(unescaped: WebhookEvent.waitsForAnEarlierOne)
              ORDER BY d.next_at, d.event_id LIMIT \(limit) FOR UPDATE OF d SKIP LOCKED)
            RETURNING \(unescaped: WebhookEvent.columns)
            """)
        var out: [WebhookDelivery] = []
        for try await (event, endpoint, type, video, name, client, status, error, created, attempts, lease) in rows.decode(
            (Int64, String, String, Int64, String, Int64, String, String?, Double, Int32, Double).self)
        {
            out.append(
                WebhookDelivery(
                    eventID: event, endpoint: endpoint, type: type, videoID: video, name: name, clientID: client, status: status, error: error,
                    createdAt: created, attempts: Int(attempts), lease: lease))
        }
        return out
    }

    func finishWebhookDelivery(_ delivery: WebhookDelivery, delivered: Bool, retryAt: Double?, error: String?) async throws {
        let state = delivered ? "delivered" : retryAt == nil ? "failed" : "pending"
        try await query(
            """
            UPDATE webhook_deliveries SET state = \(state), attempts = attempts + 1, next_at = \(retryAt ?? 0), lease_until = NULL, last_error = \(error)
            WHERE event_id = \(delivery.eventID) AND endpoint = \(delivery.endpoint) AND lease_until = \(delivery.lease)
            """)
    }

    func pruneWebhooks(before: Double) async throws {
        try await query("DELETE FROM webhook_events WHERE created_at < \(before)")
        try await query("DELETE FROM webhook_deliveries WHERE created_at < \(before)")
    }
}
