import XCTest
@testable import ClipFlowUpload

final class SecretsTests: XCTestCase {
    func testRegisteredSecretsAndSecretQueryValuesAreRedacted() {
        let s = Secrets()
        s.register("AKIAEXAMPLEKEY")
        s.register("abc")  // too short to be a credential: ignored
        XCTAssertEqual(s.redact("key AKIAEXAMPLEKEY failed"), "key *** failed")
        XCTAssertEqual(s.redact("abc"), "abc")
        XCTAssertEqual(
            s.redact("GET http://h/o?uploadId=7&X-Amz-Signature=deadbeef&token=tk1 x"),
            "GET http://h/o?uploadId=7&X-Amz-Signature=***&token=*** x")
        XCTAssertEqual(s.redact("a=b&c"), "a=b&c")
    }
}
