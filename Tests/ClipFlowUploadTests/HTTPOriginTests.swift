import XCTest
@testable import ClipFlowUpload

/// Which server-given URLs count as the endpoint's own origin (and may get its credentials).
final class HTTPOriginTests: XCTestCase {
    func testOnlyTheSameSchemeHostPortAndUserInfoAreTheSameOrigin() {
        let base = "http://127.0.0.1:8080/files"
        let same = ["http://127.0.0.1:8080/files/abc", "HTTP://127.0.0.1:8080/other", resolveURL("/files/x", against: base)]
        let other = [
            "http://127.0.0.2:8080/files/x", resolveURL("//127.0.0.2:8080/files/x", against: base),
            "http://127.0.0.1:8081/files/x", "http://localhost:8080/files/x", "https://127.0.0.1:8080/files/x",
            "http://user:pw@127.0.0.1:8080/files/x", "http://user@127.0.0.1:8080/files/x", "ftp://127.0.0.1:8080/x",
            "files/x", ""
        ]
        for u in same { XCTAssertTrue(isSameOrigin(u, base), u) }
        for u in other { XCTAssertFalse(isSameOrigin(u, base), u) }
        XCTAssertTrue(isSameOrigin("https://h.example/x", "https://h.example:443/files"), "default ports")
        // An endpoint the user gave with user info keeps it for relative Locations.
        let withUser = "http://me:pw@127.0.0.1:8080/files"
        XCTAssertTrue(isSameOrigin(resolveURL("/files/x", against: withUser), withUser))
        XCTAssertFalse(isSameOrigin("http://127.0.0.1:8080/files/x", withUser))
    }
}
