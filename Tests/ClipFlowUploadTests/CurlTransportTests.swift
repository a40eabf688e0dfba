import XCTest
import ClipFlowTestSupport
@testable import ClipFlowUpload

/// The libcurl transport against a real TUS server (PyPI resumable-upload) on 127.0.0.1.
final class CurlTransportTests: XCTestCase {
    func testStreamsAFileRangeAndReadsHeadersAndStatus() throws {
        let server = try TUSServer.start(directory: Fixtures.shared.scratch("transport-tus"))
        defer { server.stop() }
        let file = Fixtures.shared.scratch("transport-src").appendingPathComponent("data.bin")
        var bytes = [UInt8](repeating: 0, count: 3_000_000)
        for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: i &* 31 &+ i >> 9) }
        try Data(bytes).write(to: file)

        let t = try CurlTransport()
        let options = try t.perform(HTTPRequest(method: "OPTIONS", url: server.baseURL))
        XCTAssertEqual(options.status, 204)
        XCTAssertEqual(options.header("Tus-Version")?.contains("1.0.0"), true)

        let create = try t.perform(
            HTTPRequest(
                method: "POST", url: server.baseURL,
                headers: [
                    ("Tus-Resumable", "1.0.0"), ("Upload-Length", "3000000")
                ]))
        XCTAssertEqual(create.status, 201)
        let location = try XCTUnwrap(create.header("location"))
        let url = resolveURL(location, against: server.baseURL)
        XCTAssertTrue(url.hasPrefix("http://127.0.0.1:"), url)

        // Two ranges of the file: the transport streams exactly [offset, offset+length).
        var sent: Int64 = 0
        for (offset, length) in [(Int64(0), Int64(1_000_000)), (1_000_000, 2_000_000)] {
            let r = try t.perform(
                HTTPRequest(
                    method: "PATCH", url: url,
                    headers: [
                        ("Tus-Resumable", "1.0.0"), ("Upload-Offset", String(offset)),
                        ("Content-Type", "application/offset+octet-stream")
                    ],
                    body: .file(path: file.path, offset: offset, length: length)), onSent: { sent = $0 })
            XCTAssertEqual(r.status, 204, r.text)
            XCTAssertEqual(r.header("upload-offset"), String(offset + length))
            XCTAssertEqual(sent, length)
        }
        let head = try t.perform(HTTPRequest(method: "HEAD", url: url, headers: [("Tus-Resumable", "1.0.0")]))
        XCTAssertEqual(head.header("Upload-Offset"), "3000000")
        XCTAssertEqual(try server.storedSHA256(for: url), try sha256(ofFile: file.path))
    }

    func testConnectionRefusedIsARetryableTransportError() throws {
        let t = try CurlTransport()
        let port = ServerProcess.freePort()
        XCTAssertThrowsError(try t.perform(HTTPRequest(method: "GET", url: "http://127.0.0.1:\(port)/x"))) { error in
            let e = error as? TransportError
            XCTAssertEqual(e?.kind, .connect)
            XCTAssertEqual(e?.isRetryable, true)
        }
    }

    func testHeaderWithALineBreakIsRefusedBeforeSending() throws {
        let t = try CurlTransport()
        for bad in [("X-Title", "a\r\nAuthorization: Bearer x"), ("X-Title", "a\nb"), ("X-Ti\0tle", "a")] {
            XCTAssertThrowsError(try t.perform(HTTPRequest(method: "GET", url: "http://127.0.0.1:9/x", headers: [bad]))) { error in
                XCTAssertEqual((error as? TransportError)?.kind, .invalid, "\(bad)")
                XCTAssertFalse("\(error)".contains("Bearer"), "the message does not repeat the value")
            }
        }
    }

    func testMissingBodyFileIsAFileReadError() throws {
        let t = try CurlTransport()
        XCTAssertThrowsError(
            try t.perform(
                HTTPRequest(
                    method: "PUT", url: "http://127.0.0.1:9/x",
                    body: .file(path: "/nonexistent/file", offset: 0, length: 10)))
        ) { error in
            XCTAssertEqual((error as? TransportError)?.kind, .fileRead)
            XCTAssertTrue("\(error)".contains("/nonexistent/file"))
        }
    }

    func testAbortStopsATransferAsCancelled() throws {
        let server = try TUSServer.start(directory: Fixtures.shared.scratch("transport-abort"))
        defer { server.stop() }
        let t = try CurlTransport(shouldAbort: { true })
        XCTAssertThrowsError(
            try t.perform(
                HTTPRequest(
                    method: "POST", url: server.baseURL,
                    headers: [
                        ("Tus-Resumable", "1.0.0"), ("Upload-Length", "10")
                    ], body: .bytes(Data(count: 10))))
        ) { error in
            XCTAssertEqual((error as? TransportError)?.kind, .cancelled)
        }
    }
}
