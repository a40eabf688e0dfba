import Foundation
import GRDB

extension SQLiteStore {
    func recordView(_ v: ViewReport, at: Double) async throws {
        try await writing { db in
            try db.execute(
                sql: "INSERT INTO views (video_id, rendition, startup_ms, rebuffers, rebuffer_ms, watched_ms, error, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                arguments: [v.video, v.rendition, v.startupMs, v.rebuffers, v.rebufferMs, v.watchedMs, v.error, at])
        }
    }

    func views(of video: Int64) async throws -> [(startup: Int?, rebufferMs: Int, watchedMs: Int, failed: Bool)] {
        try await reading { db in
            try Row.fetchAll(
                db, sql: "SELECT startup_ms, rebuffer_ms, watched_ms, error FROM views WHERE video_id = ? ORDER BY id DESC LIMIT ?",
                arguments: [video, ViewSummary.window]
            ).map { row in (row["startup_ms"], row["rebuffer_ms"], row["watched_ms"], (row["error"] as String?) != nil) }
        }
    }

    func pruneViews(before: Double) async throws {
        try await writing { db in
            try db.execute(sql: "DELETE FROM views WHERE at < ? OR NOT EXISTS (SELECT 1 FROM videos v WHERE v.id = views.video_id)", arguments: [before])
        }
    }
}
