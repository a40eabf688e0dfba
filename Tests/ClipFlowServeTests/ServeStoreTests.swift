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
        try await checkCarriedVideos(try SQLiteStore(path: path))
    }

    func testAnUploadAndTheVideoItCarriesAreStoredTogetherInPostgres() async throws {
        let server = try PostgresServer.start()
        defer { server.stop() }
        let store = try PostgresStore(url: server.url)
        let connection = Task { await store.run() }
        defer { connection.cancel() }
        try await store.migrate()
        try await checkCarriedVideos(store)
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
