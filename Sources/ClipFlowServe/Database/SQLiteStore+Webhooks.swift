import Foundation
import GRDB

extension WebhookDelivery: FetchableRecord {
    init(row: Row) {
        self.init(
            eventID: row["event_id"], endpoint: row["endpoint"], type: row["type"], videoID: row["video_id"], name: row["name"],
            clientID: row["client_id"], status: row["status"], error: row["error"], createdAt: row["created_at"], attempts: row["attempts"],
            lease: row["lease_until"])
    }
}

extension SQLiteStore {
    func fanOutWebhooks(to endpoints: [String], now: Double) async throws {
        try await writing { db in
            for endpoint in endpoints {
                let name = WebhookEvent.cursorName(endpoint)
                let latest = try Int64.fetchOne(db, sql: "SELECT COALESCE(MAX(id), 0) FROM webhook_events") ?? 0
                guard let text = try String.fetchOne(db, sql: "SELECT value FROM settings WHERE name = ?", arguments: [name]), let cursor = Int64(text)
                else {
                    try db.execute(sql: "INSERT INTO settings (name, value) VALUES (?, ?)", arguments: [name, String(latest)])
                    continue
                }
                try db.execute(
                    sql: """
                        INSERT INTO webhook_deliveries (event_id, endpoint, type, video_id, name, client_id, status, error, created_at, state, attempts, next_at)
                        SELECT e.id, ?, e.type, e.video_id, e.name, e.client_id, e.status, e.error, e.created_at, 'pending', 0, e.created_at
                        FROM webhook_events e
                        WHERE e.id > ? AND NOT EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.event_id = e.id AND d.endpoint = ?)
                        """, arguments: [endpoint, cursor, endpoint])
                let settled =
                    try Int64.fetchOne(
                        db, sql: "SELECT MAX(id) FROM webhook_events WHERE id > ? AND created_at < ?",
                        arguments: [cursor, now - WebhookEvent.settleSeconds]) ?? cursor
                try db.execute(sql: "UPDATE settings SET value = ? WHERE name = ?", arguments: [String(settled), name])
            }
        }
    }

    func takeWebhookDeliveries(endpoints: [String], now: Double, lease: Double, limit: Int) async throws -> [WebhookDelivery] {
        guard !endpoints.isEmpty else { return [] }
        return try await writing { db in
            let marks = endpoints.map { _ in "?" }.joined(separator: ", ")
            var arguments: StatementArguments = [now + lease]
            arguments += StatementArguments(endpoints)
            arguments += [now, now, limit]
            return try WebhookDelivery.fetchAll(
                db,
                sql: """
                    UPDATE webhook_deliveries SET lease_until = ?
                    WHERE (event_id, endpoint) IN (
                      SELECT d.event_id, d.endpoint FROM webhook_deliveries d
                      WHERE d.state = 'pending' AND d.endpoint IN (\(marks)) AND d.next_at <= ? AND (d.lease_until IS NULL OR d.lease_until < ?)
                        AND NOT \(WebhookEvent.waitsForAnEarlierOne)
                      ORDER BY d.next_at, d.event_id LIMIT ?)
                    RETURNING \(WebhookEvent.columns)
                    """, arguments: arguments)
        }
    }

    func finishWebhookDelivery(_ delivery: WebhookDelivery, delivered: Bool, retryAt: Double?, error: String?) async throws {
        try await writing { db in
            try db.execute(
                sql: """
                    UPDATE webhook_deliveries SET state = ?, attempts = attempts + 1, next_at = ?, lease_until = NULL, last_error = ?
                    WHERE event_id = ? AND endpoint = ? AND lease_until = ?
                    """,
                arguments: [
                    delivered ? "delivered" : retryAt == nil ? "failed" : "pending", retryAt ?? 0, error, delivery.eventID, delivery.endpoint,
                    delivery.lease
                ])
        }
    }

    func pruneWebhooks(before: Double) async throws {
        try await writing { db in
            try db.execute(sql: "DELETE FROM webhook_events WHERE created_at < ?", arguments: [before])
            try db.execute(sql: "DELETE FROM webhook_deliveries WHERE created_at < ?", arguments: [before])
        }
    }
}
