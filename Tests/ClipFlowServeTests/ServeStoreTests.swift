import ClipFlowTestSupport
import Foundation
import XCTest

@testable import ClipFlowServe

/// Both stores against what a server's crash or a failed insert must never leave: a video made
/// for a plain TUS upload exists exactly when its upload does.
final class ServeStoreTests: XCTestCase {
    func testAnUploadAndTheVideoItCarriesAreStoredTogetherInSQLite() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("serve-store-\(UUID().uuidString).sqlite").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let store = try SQLiteStore(path: path)
        try await checkCarriedVideos(store)
        try await checkMarks(store)
    }

    func testAnUploadAndTheVideoItCarriesAreStoredTogetherInPostgres() async throws {
        let server = try PostgresServer.start()
        defer { server.stop() }
        let store = try PostgresStore(login: PostgresLogin(url: server.url, source: "--database", environment: [:]))
        let connection = Task { await store.run() }
        defer { connection.cancel() }
        try await store.migrate()
        try await checkCarriedVideos(store)
        try await checkMarks(store)
    }

    /// An upload's mark moves only from the mark it has, offset and partial part's token both, and
    /// is read back as it was set.
    private func checkMarks(_ store: any ServeStore) async throws {
        _ = try await store.insert(UploadRow(id: "m1", length: 100, offset: 0, metadata: "", createdAt: 1, expiresAt: 2), carrying: nil)
        let first = UploadMark(offset: 30, partial: "aa")
        let moved = try await store.setOffset("m1", from: UploadMark(offset: 0), to: first, completedAt: nil)
        XCTAssertTrue(moved)
        let stale = try await store.setOffset("m1", from: UploadMark(offset: 0), to: UploadMark(offset: 20, partial: "bb"), completedAt: nil)
        XCTAssertFalse(stale, "a request that started from 0 lost the upload")
        let otherToken = try await store.setOffset("m1", from: UploadMark(offset: 30, partial: "bb"), to: UploadMark(offset: 40), completedAt: nil)
        XCTAssertFalse(otherToken, "the partial part must be the one the row names")
        let read = try await store.upload("m1")
        XCTAssertEqual(read?.mark, first)
        let whole = try await store.setOffset("m1", from: first, to: UploadMark(offset: 100), completedAt: 5)
        XCTAssertTrue(whole)
        let done = try await store.upload("m1")
        XCTAssertEqual(done?.mark, UploadMark(offset: 100))
        XCTAssertEqual(done?.completedAt, 5)
    }

    private func checkCarriedVideos(_ store: any ServeStore) async throws {
        let upload = UploadRow(id: "u1", length: 10, offset: 0, metadata: "", createdAt: 1, expiresAt: 2, completedAt: nil)
        let stored = try await store.insert(upload, carrying: Self.video("first"))
        let carried = try XCTUnwrap(stored.videoID, "the stored upload names the video made with it")
        let video = try await store.video(carried)
        XCTAssertEqual(video?.name, "first")
        XCTAssertEqual(video?.status, .pending)
        let read = try await store.upload("u1")
        XCTAssertEqual(read?.videoID, carried)

        // The same upload ID again: the upload cannot be stored, so neither is its video.
        do {
            _ = try await store.insert(upload, carrying: Self.video("second"))
            XCTFail("a second upload under the same ID was stored")
        } catch {}
        let (videos, total) = try await store.videos(page: 1, perPage: 50)
        XCTAssertEqual(total, 1, "no video without its upload")
        XCTAssertEqual(videos.map(\.name), ["first"])

        // An upload that carries an existing video (or none) is stored as it is.
        let plain = try await store.insert(UploadRow(id: "u2", length: 5, offset: 0, metadata: "", createdAt: 1, expiresAt: 2, videoID: carried), carrying: nil)
        XCTAssertEqual(plain.videoID, carried)
        let (_, after) = try await store.videos(page: 1, perPage: 50)
        XCTAssertEqual(after, 1)
    }

    private static func video(_ name: String) -> VideoRow {
        VideoRow(
            id: nil, name: name, description: nil, clientID: 1, status: .pending, mode: .ladder, error: nil, duration: nil, uploadID: nil, published: "",
            renditions: "", createdAt: 1)
    }
}
