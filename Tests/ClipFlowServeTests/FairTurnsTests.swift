import ClipFlowTestSupport
import Foundation
import XCTest

@testable import ClipFlowServe

/// Jobs are taken in fair turns among clients (`FairTurns`), in SQLite and PostgreSQL alike: a
/// client that queued first does not keep the lanes; a bound on a client's running jobs holds.
final class FairTurnsTests: XCTestCase {
    let fx = Fixtures.shared

    func testSQLiteTakesJobsInTurns() async throws {
        let store = try SQLiteStore(path: fx.scratch("fair-turns").appendingPathComponent("db.sqlite").path)
        try await checkTurns(store)
    }

    func testPostgresTakesJobsInTurns() async throws {
        let server = try PostgresServer.start()
        defer { server.stop() }
        let store = try PostgresStore(login: PostgresLogin(url: server.url, source: "--database", environment: [:]))
        let connection = Task { await store.run() }
        defer { connection.cancel() }
        try await store.migrate()
        try await checkTurns(store)
    }

    /// Uploads for `client`, queued in order; their video ids.
    private func queue(_ store: any ServeStore, client: Int64, count: Int) async throws -> [Int64] {
        var ids: [Int64] = []
        for n in 0..<count {
            let v = try await store.insert(
                VideoRow(
                    id: nil, name: "c\(client)-\(n)", description: nil, clientID: client, status: .pending, mode: .ladder, error: nil, duration: nil,
                    uploadID: nil, published: "", renditions: "", createdAt: 1))
            try await store.uploaded(video: v.id!, upload: "u-\(client)-\(n)", trace: nil)
            ids.append(v.id!)
        }
        return ids
    }

    private func checkTurns(_ store: any ServeStore) async throws {
        let a = try await queue(store, client: 7, count: 5)
        let b = try await queue(store, client: 8, count: 1)
        var now = 100.0
        func take(_ perClient: Int = 0) async throws -> JobRow? {
            now += 1
            return try await store.takeJob(owner: "me", now: now, steps: [.playable, .ladder], perClient: perClient)
        }
        // A queued first, so A's oldest goes first; then B, served never, before A's second.
        let first = try await take()
        XCTAssertEqual(first?.videoID, a[0])
        try await store.finishJob(first!.id!, failed: false)
        let second = try await take()
        XCTAssertEqual(second?.videoID, b[0], "B's one upload is not held back by A's five")
        // With a bound of one running job per client: A runs one, and no second beside it.
        let third = try await take(1)
        XCTAssertEqual(third?.videoID, a[1])
        let none = try await take(1)
        XCTAssertNil(none, "A has one running and B has one running: both at the bound")
        try await store.finishJob(second!.id!, failed: false)
        try await store.finishJob(third!.id!, failed: false)
        // Without a bound, a playable step of A's goes before any ladder step.
        try await store.queueLadder(second!.id!, plan: "{}")
        let fourth = try await take()
        XCTAssertEqual(fourth?.videoID, a[2])
        XCTAssertEqual(fourth?.step, .playable)
    }
}
