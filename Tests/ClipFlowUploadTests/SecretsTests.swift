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

    func testEncodedFormsAreRedactedAndTheRegistryIsBounded() {
        let s = Secrets()
        s.register("wJal/K7MDENG+bPxR")
        XCTAssertEqual(s.redact(#"{"secret": "wJal\/K7MDENG+bPxR"}"#), #"{"secret": "***"}"#)
        XCTAssertEqual(s.redact("?x=wJal%2FK7MDENG%2BbPxR"), "?x=***")
        for i in 0..<(Secrets.capacity + 10) { s.register("token-\(i)-value") }
        XCTAssertEqual(s.redact("token-\(Secrets.capacity + 9)-value"), "***")
        XCTAssertEqual(s.redact("token-0-value"), "token-0-value", "the oldest fell out")
    }
}
