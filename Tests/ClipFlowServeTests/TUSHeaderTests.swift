import ClipFlowUpload
import XCTest

@testable import ClipFlowServe

/// The TUS headers the server parses, and the database it keeps its truth in.
final class TUSHeaderTests: XCTestCase {
    /// The server reads Upload-Metadata with the client's codec (`TUSMetadata`, tested in
    /// `TUSMetadataTests`); what it refuses it answers 400 (`ServeCLITests`).
    func testUploadMetadataIsCheckedAndDecoded() {
        XCTAssertEqual(try TUSMetadata.decode(""), [:])
        XCTAssertEqual(try TUSMetadata.decode("filename aGVsbG8udHh0,is_confidential"), ["filename": "hello.txt", "is_confidential": ""])
        XCTAssertThrowsError(try TUSMetadata.decode("filename not*base64")) { XCTAssertEqual("\($0)", "the value of \"filename\" is not base64") }
        XCTAssertThrowsError(try TUSMetadata.decode("a YQ==,a Yg==")) { XCTAssertEqual("\($0)", "key \"a\" appears twice") }
        XCTAssertThrowsError(try TUSMetadata.decode("a b c"))
        XCTAssertThrowsError(try TUSMetadata.decode("ключ YQ=="))
        XCTAssertEqual(TUSMetadata.removing("token", from: "video_id MQ==,token dA==, title"), "video_id MQ==, title")
    }

    func testUploadChecksumHeader() throws {
        XCTAssertNil(try TUSServer.checksum(nil))
        let c = try XCTUnwrap(try TUSServer.checksum("sha256 \(Data(repeating: 1, count: 32).base64EncodedString())"))
        XCTAssertEqual(c.algorithm, .sha256)
        XCTAssertEqual(c.expected, [UInt8](repeating: 1, count: 32))
        for bad in ["md5 AAAA", "sha1", "sha1 ***"] {
            XCTAssertThrowsError(try TUSServer.checksum(bad), bad) { e in XCTAssertEqual((e as? HTTPRefusal)?.status.code, 400) }
        }
    }

    func testOffsetsSurviveReopeningTheDatabase() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("serve-db-\(UUID().uuidString).sqlite").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        let row = UploadRow(id: "abc", length: 10, offset: 0, metadata: "", createdAt: 1, expiresAt: 2, completedAt: nil)
        do {
            let db = try SQLiteStore(path: path)
            _ = try await db.insert(row, carrying: nil)
            let moved = try await db.setOffset("abc", from: UploadMark(offset: 0), to: UploadMark(offset: 4, partial: "t1"), completedAt: nil)
            XCTAssertTrue(moved)
            let stale = try await db.setOffset("abc", from: UploadMark(offset: 0), to: UploadMark(offset: 8), completedAt: nil)
            XCTAssertFalse(stale, "only from the offset it has")
            let otherPartial = try await db.setOffset("abc", from: UploadMark(offset: 4, partial: "t0"), to: UploadMark(offset: 8), completedAt: nil)
            XCTAssertFalse(otherPartial, "only from the partial part it names")
        }
        let again = try SQLiteStore(path: path)
        let read = try await again.upload("abc")
        XCTAssertEqual(read?.mark, UploadMark(offset: 4, partial: "t1"))
        let late = try await again.expired(before: 3), early = try await again.expired(before: 1.5)
        XCTAssertEqual(late.map(\.id), ["abc"])
        XCTAssertEqual(early.map(\.id), [])
    }

    func testOptionsProblems() {
        var o = ServeOptions(data: URL(fileURLWithPath: "/tmp/x"))
        XCTAssertNil(o.problem)
        o.port = 70000
        XCTAssertNotNil(o.problem)
        o.port = 0
        o.maxConnections = 0
        XCTAssertNotNil(o.problem)
        for beyond in [ServeOptions.maxConnectionsBound + 1, Int.max] {
            o.maxConnections = beyond
            XCTAssertTrue(o.problem?.contains("--max-connections") ?? false, "\(beyond): \(o.problem ?? "accepted")")
        }
        o.maxConnections = ServeOptions.maxConnectionsBound
        XCTAssertNil(o.problem)
    }
}
