import HTTPTypes
import XCTest

@testable import ClipFlowServe

/// What `RequestGuard` lets through: Host names without an API key, cross-site writes, and how
/// `--listen` decides loopback.
final class BrowserChecksTests: XCTestCase {
    func testHostNamesAcceptedWithoutAnAPIKey() {
        for good in [
            "localhost", "localhost:8080", "LocalHost:1", "app.localhost:3000", "127.0.0.1", "127.0.0.1:8080", "127.255.0.9:1", "[::1]:8080", "[::1]",
            "my.box:8080"
        ] {
            XCTAssertNil(BrowserChecks.hostProblem(good, listenName: "MY.BOX"), good)
        }
        for bad in [
            "evil.example", "127.example.test", "127.0.0.1.evil.example:80", "localhost.evil.example", "0.0.0.0", "127.1", "127.0.0.256", "[::2]:80",
            "::1", "localhost:", "localhost:80a", "localhost:123456", "[::1", "", "a b"
        ] {
            XCTAssertNotNil(BrowserChecks.hostProblem(bad, listenName: "my.box"), bad)
        }
        XCTAssertNil(BrowserChecks.hostProblem(nil, listenName: ""), "no Host: not a browser")
    }

    func testCrossSiteWrites() {
        func problem(_ m: HTTPRequest.Method, origin: String? = nil, site: String? = nil) -> String? {
            BrowserChecks.crossSiteProblem(method: m, origin: origin, fetchSite: site, authority: "127.0.0.1:8080")
        }
        XCTAssertNil(problem(.post))
        XCTAssertNil(problem(.post, origin: "http://127.0.0.1:8080", site: "same-origin"))
        XCTAssertNil(problem(.patch, site: "none"))
        XCTAssertNil(problem(.post, origin: "https://127.0.0.1:8080", site: "same-origin"), "behind a TLS proxy the page's origin is https")
        XCTAssertNil(problem(.delete, origin: "HTTPS://127.0.0.1:8080"))
        XCTAssertNotNil(problem(.post, origin: "https://127.0.0.1:9999"))
        XCTAssertNotNil(problem(.post, origin: "ftp://127.0.0.1:8080"))
        XCTAssertNotNil(problem(.post, origin: "https://127.0.0.1:8080.evil.example"))
        XCTAssertNil(problem(.get, origin: "http://evil.example", site: "cross-site"), "reads are not writes")
        XCTAssertNotNil(problem(.post, origin: "http://evil.example"))
        XCTAssertNotNil(problem(.delete, origin: "null"))
        XCTAssertNotNil(problem(.patch, origin: "http://127.0.0.1:9999"))
        XCTAssertNotNil(problem(.post, site: "cross-site"))
        XCTAssertNotNil(problem(.post, site: "same-site"), "another port of localhost is another origin")
        XCTAssertNotNil(problem(HTTPRequest.Method("FOO")!, origin: "http://evil.example"))
    }

    func testListenDecidesOnTheResolvedAddress() throws {
        var o = ServeOptions(data: URL(fileURLWithPath: "/tmp/x"))
        XCTAssertEqual(try o.listenAddress().ipAddress, "127.0.0.1")
        o.host = "localhost"
        XCTAssertNoThrow(try o.listenAddress())
        o.host = "::1"
        XCTAssertNoThrow(try o.listenAddress())
        for beyond in ["0.0.0.0", "::", "10.1.2.3"] {
            o.host = beyond
            XCTAssertThrowsError(try o.listenAddress(), beyond) { XCTAssertTrue("\($0)".contains("needs an API key"), "\($0)") }
        }
        o.apiKey = "k"
        XCTAssertNoThrow(try o.listenAddress())
        for ip in ["127.0.0.1", "127.3.2.1", "::1", "::ffff:127.0.0.1"] { XCTAssertTrue(ServeOptions.isLoopbackAddress(ip), ip) }
        for ip in ["0.0.0.0", "::", "::ffff:10.0.0.1", "1.27.0.0", "::2"] { XCTAssertFalse(ServeOptions.isLoopbackAddress(ip), ip) }
        XCTAssertFalse(ServeOptions.isLoopback("127.example.test"), "a name is not loopback for starting with 127.")
        XCTAssertTrue(ServeOptions.isLoopback("localhost"))
    }
}
