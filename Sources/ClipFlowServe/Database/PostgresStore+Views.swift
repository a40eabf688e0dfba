import Foundation
import PostgresNIO

extension PostgresStore {
    func recordView(_ v: ViewReport, at: Double) async throws {
        try await query(
            """
            INSERT INTO views (video_id, rendition, startup_ms, rebuffers, rebuffer_ms, watched_ms, error, at)
            VALUES (\(v.video), \(v.rendition), \(v.startupMs.map(Int64.init)), \(Int64(v.rebuffers)), \(Int64(v.rebufferMs)), \(Int64(v.watchedMs)), \(v.error), \(at))
            """)
    }

    func views(of video: Int64) async throws -> [(startup: Int?, rebufferMs: Int, watchedMs: Int, failed: Bool)] {
        let rows = try await query(
            "SELECT startup_ms, rebuffer_ms, watched_ms, error FROM views WHERE video_id = \(video) ORDER BY id DESC LIMIT \(ViewSummary.window)")
        var out: [(startup: Int?, rebufferMs: Int, watchedMs: Int, failed: Bool)] = []
        for try await (startup, stalled, watched, error) in rows.decode((Int64?, Int64, Int64, String?).self) {
            out.append((startup.map(Int.init), Int(stalled), Int(watched), error != nil))
        }
        return out
    }

    func pruneViews(before: Double) async throws {
        try await query(
            "DELETE FROM views WHERE at < \(before) OR NOT EXISTS (SELECT 1 FROM videos v WHERE v.id = views.video_id)")
    }
}
