import XCTest
@testable import ClipFlowUpload

final class MIMETests: XCTestCase {
    /// S3's Content-Type and TUS's `filetype` come from one table: they agree for every extension.
    func testS3ContentTypeAndTUSFiletypeComeFromOneTable() {
        let o = S3Options(endpoint: "http://127.0.0.1:9", region: "us-east-1", bucket: "b")
        for ext in [
            "mp4", "M4V", "mov", "mkv", "webm", "avi", "ts", "m2ts", "mpg", "3gp", "m4a", "aac", "mp3", "wav",
            "jpg", "jpeg", "png", "json", "txt", "bin", ""
        ] {
            XCTAssertEqual(o.contentType(for: "/x/clip.\(ext)"), mimeType(forExtension: ext), ext)
        }
        XCTAssertEqual(mimeType(forExtension: "m4v"), "video/mp4")
        XCTAssertEqual(mimeType(forExtension: "MOV"), "video/quicktime")
        XCTAssertEqual(mimeType(forExtension: "xyz"), "application/octet-stream")
        var explicit = o
        explicit.contentType = "video/custom"
        XCTAssertEqual(explicit.contentType(for: "a.mp4"), "video/custom")
    }
}
