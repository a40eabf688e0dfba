import HTTPTypes
import XCTest

@testable import ClipFlowServe

/// RFC 9110 section 14 (ranges) and 13 (conditions), as `MediaFiles` applies them, and which
/// media paths it serves.
final class MediaRangeTests: XCTestCase {
    func testRangeSetsAgainstAHundredBytes() {
        let table: [(String, ByteRanges)] = [
            ("bytes=-16", .range(84, 99)), ("bytes=10-", .range(10, 99)), ("bytes=0-0", .range(0, 0)), ("bytes=95-200", .range(95, 99)),
            ("bytes=-200", .range(0, 99)), ("bytes=0-99999999999999999999999", .range(0, 99)), ("Bytes = 1-2", .range(1, 2)),
            ("bytes=1-2, ", .range(1, 2)), ("bytes=0-1,200-300", .range(0, 1)), ("bytes=100-", .unsatisfiable), ("bytes=-0", .unsatisfiable),
            ("bytes=100-1,", .ignore), ("bytes=9223372036854775807-", .unsatisfiable), ("bytes=100-200,300-", .unsatisfiable),
            ("bytes=0-1,5-6", .ignore), ("bytes=5-2", .ignore), ("bytes=abc", .ignore), ("items=0-5", .ignore), ("bytes=", .ignore),
            ("bytes=,", .ignore), ("bytes=--1", .ignore), ("bytes=1-2-3", .ignore), ("bytes=+1-2", .ignore), ("bytes", .ignore),
            ("bytes=" + Array(repeating: "0-0", count: 101).joined(separator: ","), .ignore)
        ]
        for (header, expected) in table { XCTAssertEqual(ByteRanges.evaluate(header, length: 100), expected, header) }
        XCTAssertEqual(ByteRanges.evaluate("bytes=-5", length: 0), .ignore, "an empty file has no range to send")
    }

    func testConditions() {
        var h = HTTPFields()
        XCTAssertFalse(Conditions.notModified(h, etag: "\"a\"", modified: 100))
        h[.ifNoneMatch] = "\"b\", W/\"a\""
        XCTAssertTrue(Conditions.notModified(h, etag: "\"a\"", modified: 100))
        h[.ifNoneMatch] = "\"b\""
        h[.ifModifiedSince] = "Thu, 01 Jan 1970 00:01:40 GMT"
        XCTAssertFalse(Conditions.notModified(h, etag: "\"a\"", modified: 100), "If-None-Match decides when present")
        h[.ifNoneMatch] = nil
        XCTAssertTrue(Conditions.notModified(h, etag: "\"a\"", modified: 100))
        XCTAssertFalse(Conditions.notModified(h, etag: "\"a\"", modified: 101))
        XCTAssertTrue(Conditions.ifRangeHolds(nil, etag: "\"a\"", modified: 1))
        XCTAssertTrue(Conditions.ifRangeHolds("\"a\"", etag: "\"a\"", modified: 1))
        XCTAssertFalse(Conditions.ifRangeHolds("W/\"a\"", etag: "\"a\"", modified: 1), "If-Range compares strongly")
        XCTAssertTrue(Conditions.ifRangeHolds("Thu, 01 Jan 1970 00:01:40 GMT", etag: "\"a\"", modified: 100))
        XCTAssertFalse(Conditions.ifRangeHolds("junk", etag: "\"a\"", modified: 100))
    }

    func testOnlyPlainPathsOfServedTypes() {
        XCTAssertEqual(MediaServing.relativePath("1/a0-full/master.m3u8"), "1/a0-full/master.m3u8")
        XCTAssertEqual(MediaServing.relativePath("1/a0-full/360p/seg%2001.M4S"), "1/a0-full/360p/seg 01.M4S")
        for bad in [
            "", "1/../../token-secret", "%2e%2e/clipflow.sqlite", "1/.a1-full.clipflow-tmp-1-2/master.m3u8", "1//x.m3u8", "1/x.m3u8/", "1/x.txt",
            "1/x", "1/x.m3u8%00.txt", "1/x%00.m3u8", "1/..%2fx.m3u8", "%ff.m3u8", "1/a\\..\\x.m3u8", "1/m3u8"
        ] {
            XCTAssertNil(MediaServing.relativePath(bad), bad)
        }
    }

    /// Which failures to open a media file are 404 (nothing servable is there) and which are 503
    /// (it may be there but cannot be read now).
    func testOpenFailuresThatAreAbsentAndThoseThatAreNot() throws {
        for code in [ENOENT, ENOTDIR, ELOOP, ENAMETOOLONG, ENXIO] {
            XCTAssertEqual(MediaFileError(opening: code), .absent, String(cString: strerror(code)))
        }
        for code in [EACCES, EPERM, EMFILE, ENFILE, EIO, ENOMEM, EINTR] {
            XCTAssertEqual(MediaFileError(opening: code), .unavailable(code), String(cString: strerror(code)))
        }
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("media-open-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        let fifo = folder.appendingPathComponent("fifo.m4s").path
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        for path in [folder.path, fifo, folder.appendingPathComponent("missing.m4s").path] {
            XCTAssertThrowsError(try OpenMediaFile(path), path) { XCTAssertEqual($0 as? MediaFileError, .absent, path) }
        }
    }
}
