import XCTest
import ClipFlowTestSupport
@testable import ClipFlowUpload

/// Option values and error codes are types now; what earlier versions wrote keeps loading and is
/// written back with the same spellings.
final class UploadSettingsCompatibilityTests: XCTestCase {
    /// A queue.json as the string-typed version wrote it (addressing, checksum and errorCode as
    /// plain strings).
    let oldQueue = """
        {"version":1,"uploads":[{"id":"a1b2c3d4","file":"/tmp/clip.mp4","destination":{"method":"s3","endpoint":"http://127.0.0.1:9",\
        "bucket":"b","region":"us-east-1","addressing":"virtual","checksum":"sha1","credentials":{}},"metadata":{"title":"T"},\
        "state":"failed","added":"2026-01-01T00:00:00Z","updated":"2026-01-01T00:00:05Z","acknowledged":5,"total":10,\
        "errorCode":"s3-no-such-upload","errorMessage":"/tmp/clip.mp4: gone"},
        {"id":"e5f6a7b8","file":"/tmp/b.mp4","destination":{"method":"tus","endpoint":"http://127.0.0.1:9/files","checksum":"off",\
        "credentials":{}},"metadata":{},"state":"failed","added":"2026-01-01T00:00:00Z","updated":"2026-01-01T00:00:05Z",\
        "acknowledged":0,"total":10,"errorCode":"http-500","errorMessage":"/tmp/b.mp4: server error"}]}
        """

    func testQueueFileWrittenByTheStringTypedVersionLoadsAndKeepsItsSpellings() throws {
        let dir = Fixtures.shared.scratch("upload-old-queue").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try oldQueue.write(toFile: dir + "/queue.json", atomically: true, encoding: .utf8)
        let q = try UploadQueue(directory: dir, makeUploader: { _, _ in throw UploadError(.internal, message: "not used") })
        let s3 = try q.entry("a1b2c3d4")
        XCTAssertEqual(s3.destination.addressing, .virtual)
        XCTAssertEqual(s3.destination.checksum, .sha1)
        XCTAssertEqual(s3.errorCode.flatMap(UploadErrorCode.init(rawValue:)), .s3NoSuchUpload)
        let tus = try q.entry("e5f6a7b8")
        XCTAssertEqual(tus.destination.checksum, .off)
        XCTAssertNil(tus.destination.addressing)
        XCTAssertEqual(tus.errorCode.flatMap(UploadErrorCode.init(rawValue:)), .http(500))

        // Written back (resuming a failed entry rewrites the file): the same words.
        try q.resume("e5f6a7b8")
        let data = try Data(contentsOf: URL(fileURLWithPath: dir + "/queue.json"))
        let uploads = try XCTUnwrap((try JSONSerialization.jsonObject(with: data) as? [String: Any])?["uploads"] as? [[String: Any]])
        let destinations = uploads.compactMap { $0["destination"] as? [String: Any] }
        XCTAssertEqual(destinations.count, 2)
        XCTAssertEqual(destinations[0]["addressing"] as? String, "virtual")
        XCTAssertEqual(destinations[0]["checksum"] as? String, "sha1")
        XCTAssertEqual(destinations[1]["checksum"] as? String, "off")
        XCTAssertEqual(uploads[0]["errorCode"] as? String, "s3-no-such-upload")
    }

    func testErrorCodeSpellingsRoundTrip() {
        let codes: [UploadErrorCode] = [
            .badInput, .fileChanged, .fileRead, .cancelled, .paused, .internal, .libraries, .output,
            .transport, .network, .stalled, .badResponse, .tls, .invalid, .unsupported, .tooLarge,
            .protocol, .checksumMismatch, .crossOrigin, .gone, .conflict, .noProgress, .credentials,
            .credentialsExpired, .clockSkew, .retry, .api, .failure, .s3NoSuchUpload,
            .http(403), .s3("AccessDenied")
        ]
        XCTAssertEqual(Set(codes.map(\.rawValue)).count, codes.count, "every spelling is distinct")
        for c in codes { XCTAssertEqual(UploadErrorCode(rawValue: c.rawValue), c, c.rawValue) }
        XCTAssertEqual(UploadErrorCode.http(503).rawValue, "http-503")
        XCTAssertEqual(UploadErrorCode.s3("SlowDown").rawValue, "s3-SlowDown")
        XCTAssertEqual(UploadErrorCode.checksumMismatch.rawValue, "checksum-mismatch")
        XCTAssertNil(UploadErrorCode(rawValue: "no-such-code"))
        XCTAssertEqual(UploadError(.http(404), message: "m").code, "http-404")
    }

    func testOptionSpellingsAreTheCLIAndPipelineWords() {
        XCTAssertEqual(S3Options.AddressingStyle.allCases.map(\.rawValue), ["path", "virtual"])
        XCTAssertEqual(TUSOptions.Checksum.allCases.map(\.rawValue), ["auto", "off", "sha1", "sha256"])
    }
}
