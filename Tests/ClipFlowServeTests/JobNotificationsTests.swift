import ClipFlowTestSupport
import Foundation
import Synchronization
import XCTest

@testable import ClipFlowServe

/// PostgreSQL tells a listening server of every job that becomes queued (the schema's trigger,
/// `JobNotifications`): a real server, one store queueing and another listening, as an API server
/// and a worker do.
final class JobNotificationsTests: XCTestCase {
    func testEveryJobThatBecomesQueuedWakesAListeningServer() async throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let queueing = try PostgresStore(login: PostgresLogin(url: pg.url, source: "--database", environment: [:]))
        let listening = try PostgresStore(login: PostgresLogin(url: pg.url, source: "--database", environment: [:]))
        let connections = Task {
            await withTaskGroup(of: Void.self) { group in
                group.addTask { await queueing.run() }
                group.addTask { await listening.run() }
            }
        }
        defer { connections.cancel() }
        try await queueing.migrate()
        try await listening.migrate()

        let wakes = WakeCount()
        let listener = Task { await JobNotifications(client: listening.client, wake: { wakes.count.withLock { $0 += 1 } }).run() }
        defer { listener.cancel() }
        func woken(atLeast n: Int, _ what: String) async throws {
            let deadline = Date().addingTimeInterval(20)
            while wakes.count.withLock({ $0 }) < n, Date() < deadline { try await Task.sleep(for: .milliseconds(20)) }
            XCTAssertGreaterThanOrEqual(wakes.count.withLock { $0 }, n, what)
        }
        try await woken(atLeast: 1, "a listener looks for jobs once it listens")
        try await Task.sleep(for: .milliseconds(300))
        let before = wakes.count.withLock { $0 }

        // Queued: an upload completed.
        let video = try await queueing.insert(
            VideoRow(
                id: nil, name: "n", description: nil, clientID: 1, status: .pending, mode: .ladder, error: nil, duration: nil, uploadID: nil,
                published: "", renditions: "", createdAt: 1))
        try await queueing.uploaded(video: video.id!, upload: "u1", trace: nil)
        try await woken(atLeast: before + 1, "a job inserted as queued")

        // Taken: no notification. Then its ladder step queued, then requeued after a crash.
        let job = try await XCTUnwrapAsync(try await queueing.takeJob(owner: "a", now: Date().timeIntervalSince1970, steps: [.playable], perClient: 0))
        try await Task.sleep(for: .milliseconds(500))
        XCTAssertEqual(wakes.count.withLock { $0 }, before + 1, "taking a job tells nobody")
        try await queueing.queueLadder(job.id!, plan: "{}")
        try await woken(atLeast: before + 2, "a ladder step queued")
        _ = try await XCTUnwrapAsync(try await queueing.takeJob(owner: "a", now: Date().timeIntervalSince1970, steps: [.ladder], perClient: 0))
        try await queueing.releaseJobs(owner: "a")
        try await woken(atLeast: before + 3, "a job handed back")
    }

    private func XCTUnwrapAsync<T>(_ value: T?, file: StaticString = #filePath, line: UInt = #line) async throws -> T {
        try XCTUnwrap(value, file: file, line: line)
    }
}

private final class WakeCount: Sendable {
    let count = Mutex(0)
}
