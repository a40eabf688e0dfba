import XCTest
import Foundation
import ClipFlowTestSupport
@testable import ClipFlowUpload

/// The uploaders against servers that hand out URLs elsewhere or answer without end
/// (Tests/Servers/hostile_http.py on 127.0.0.1, a second one on 127.0.0.2 that records what it got).
final class HostileServerTests: XCTestCase {
    var dir = ""
    var main: HostileServer!
    var foreign: HostileServer!
    var otherPort: HostileServer!
    let token = "tok-hostile-5ecret-0123456789"

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "hostile-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        foreign = try HostileServer.start(host: "127.0.0.2")
        otherPort = try HostileServer.start(host: "127.0.0.1")
        main = try HostileServer.start(host: "127.0.0.1", foreign: foreign.hostPort)
    }

    override func tearDownWithError() throws {
        main?.stop(); foreign?.stop(); otherPort?.stop()
        try? FileManager.default.removeItem(atPath: dir)
    }

    func makeFile(_ name: String, bytes: Int) throws -> String {
        var data = Data(count: bytes)
        for i in 0..<bytes { data[i] = UInt8(truncatingIfNeeded: i &* 7 &+ i >> 5) }
        let path = dir + "/" + name
        try data.write(to: URL(fileURLWithPath: path))
        return path
    }

    func tusUploader(_ endpoint: String, response: Double = 300) throws -> TUSUploader {
        var t = TransportSettings()
        t.stallTimeout = 2
        t.responseTimeout = response
        var o = TUSOptions(endpoint: endpoint, chunkSize: 64 << 10, retry: .fast, transport: t)
        o.progressInterval = 0
        let token = self.token
        return TUSUploader(
            options: o, store: try ResumeStore(path: dir + "/resume.json"),
            headers: { ["Authorization": "Bearer \(token)"] },
            refreshHeaders: { _ in ["Authorization": "Bearer \(token)"] })
    }

    /// Requests (server, method, host header) that carried the token anywhere but `main`'s origin.
    func leaks() throws -> [String] {
        var out: [String] = []
        for (name, s) in [("main", main!), ("foreign", foreign!), ("other-port", otherPort!)] {
            for r in try s.requests() where r.headers.values.contains(where: { $0.contains(token) }) {
                if name != "main" || r.headers["host"] != main.hostPort { out.append("\(name): \(r.method) \(r.path) host \(r.headers["host"] ?? "?")") }
            }
        }
        return out
    }

    // MARK: point 4: credentials only to the endpoint's own origin

    func testCrossOriginLocationIsRefusedAndNoCredentialOrByteGoesThere() throws {
        let file = try makeFile("clip.mp4", bytes: 200_000)
        let variants = [
            "another host": "http://\(foreign.hostPort)/files/x",
            "scheme-relative": "//\(foreign.hostPort)/files/x",
            "another port": "http://127.0.0.1:\(otherPort.port)/files/x",
            "another host name": "http://localhost:\(main.port)/files/x",
            "user info": "http://user:pw@127.0.0.1:\(main.port)/files/x"
        ]
        for (what, location) in variants.sorted(by: { $0.key < $1.key }) {
            for s in [main!, foreign!, otherPort!] { try s.plan(rules: []) }
            try main.plan(rules: [["method": "POST", "path": "/files", "mutation": "location", "value": location, "times": 1]])
            let up = try tusUploader(main.url + "/files")
            XCTAssertThrowsError(try up.upload(file: file, id: "x", metadata: [:], control: UploadControl(), observer: NoUploadObserver()), what) {
                let e = $0 as? UploadError
                XCTAssertEqual(e?.code, "cross-origin", "\(what): \($0)")
                XCTAssertTrue(e?.message.contains("refused") == true, "\(what): \($0)")
                XCTAssertFalse(e?.message.contains(self.token) == true)
            }
            XCTAssertEqual(try leaks(), [], "\(what): the token went elsewhere")
            let patches = try [main!, foreign!, otherPort!].flatMap { try $0.requests() }.filter { $0.method == "PATCH" }
            XCTAssertEqual(patches.count, 0, "\(what): no byte of the file goes to the handed-out URL")
            XCTAssertNil(
                try ResumeStore(path: dir + "/resume.json").all.first { $0.uploadURL?.contains("/files/x") == true },
                "\(what): the refused URL is not kept for a resume")
        }
    }

    func testSameOriginLocationStillCompletes() throws {
        let file = try makeFile("ok.mp4", bytes: 150_000)
        try main.plan(rules: [])
        let r = try tusUploader(main.url + "/files").upload(file: file, id: "ok", metadata: [:], control: UploadControl(), observer: NoUploadObserver())
        let id = try XCTUnwrap(r.url?.split(separator: "/").last)
        XCTAssertEqual(try main.objects()["tus/\(id)"], try sha256(ofFile: file))
        XCTAssertEqual(try leaks(), [])
    }

    /// Gcore names an upload server on another host: expected, and its upload token goes there in
    /// the metadata, but the API's bearer token never does.
    func testGcoreUploadServerElsewhereNeverGetsTheAPIToken() throws {
        let file = try makeFile("video.mp4", bytes: 150_000)
        try main.plan(rules: [["method": "GET", "path": "/api/videos", "mutation": "foreign-host", "times": -1]])
        try foreign.plan(rules: [])
        var o = GcoreOptions(apiBase: main.url + "/api", uploadURLTemplate: "http://{hostname}/files")
        o.tus.chunkSize = 64 << 10
        o.tus.retry = .fast
        let up = GcoreUploader(
            options: o, store: try ResumeStore(path: dir + "/resume.json"),
            credentials: StaticCredentialProvider(.bearer(token: token, refreshToken: nil)))
        let r = try up.upload(file: file, id: "g", metadata: [:], control: UploadControl(), observer: NoUploadObserver())
        XCTAssertTrue(r.url?.hasPrefix(foreign.url) == true, r.url ?? "")
        let atForeign = try foreign.requests()
        XCTAssertTrue(atForeign.contains { $0.method == "PATCH" }, "the bytes went to the named upload server")
        XCTAssertFalse(atForeign.contains { $0.headers.values.contains { $0.contains(self.token) } }, "the API token went to the upload server")
        XCTAssertTrue(try main.requests().contains { $0.headers["authorization"] == "Bearer \(token)" }, "the API got its token")
    }

    func testGcoreUploadServerThatIsNotAHostNameIsRefused() throws {
        let file = try makeFile("video2.mp4", bytes: 10_000)
        for bad in ["evil@127.0.0.2:1", "127.0.0.1:1/x?y=", "a b", "http://x"] {
            XCTAssertFalse(isPlainHost(bad), bad)
        }
        for good in ["upload.example.com", "127.0.0.1:8080", "[::1]:443", "a-b.c"] {
            XCTAssertTrue(isPlainHost(good), good)
        }
        let up = try gcoreUploaderToldABadHost()
        XCTAssertThrowsError(try up.upload(file: file, id: "g2", metadata: [:], control: UploadControl(), observer: NoUploadObserver())) {
            XCTAssertEqual(($0 as? UploadError)?.code, "protocol", "\($0)")
            XCTAssertTrue("\($0)".contains("not a host name"), "\($0)")
        }
        XCTAssertEqual(try leaks(), [])
    }

    /// A Gcore uploader whose API names an upload server that is not a host name.
    func gcoreUploaderToldABadHost() throws -> GcoreUploader {
        try main.plan(rules: [["method": "GET", "path": "/api/videos", "mutation": "bad-host", "value": 0, "times": -1]])
        var o = GcoreOptions(apiBase: main.url + "/api", uploadURLTemplate: "http://{hostname}/files")
        o.tus.retry = .fast
        return GcoreUploader(
            options: o, store: try ResumeStore(path: dir + "/resume.json"),
            credentials: StaticCredentialProvider(.bearer(token: token, refreshToken: nil)))
    }

    /// A failure whose cause does not name the file (here the Gcore API's answer) still comes out
    /// naming it: in `file`, and once, at the start of the message and of the `failed` event.
    func testAFailedUploadNamesItsFileInTheErrorAndOnceAtTheStartOfItsMessage() throws {
        let file = try makeFile("video3.mp4", bytes: 10_000)
        let up = try gcoreUploaderToldABadHost()
        let log = UploadEventLog()
        XCTAssertThrowsError(try up.upload(file: file, id: "g3", metadata: [:], control: UploadControl(), observer: log)) {
            let e = $0 as? UploadError
            XCTAssertEqual(e?.file, file)
            XCTAssertTrue(e?.message.hasPrefix(file + ": Gcore API ") == true, "\($0)")
            XCTAssertEqual(e?.message.components(separatedBy: file).count, 2, "named once: \($0)")
            XCTAssertEqual(log.all.last, .failed(id: "g3", code: "protocol", message: e?.message ?? ""))
        }
    }

    // MARK: point 5: bounded answers

    /// Runs `body` on its own thread; fails the test (and returns nil) when it takes over `limit` s.
    func within<T>(_ limit: Double, _ what: String, _ body: @escaping @Sendable () -> T) -> T? {
        let box = ResultBox<T>()
        let done = DispatchSemaphore(value: 0)
        Thread {
            box.value = body(); done.signal()
        }.start()
        if done.wait(timeout: .now() + limit) == .timedOut {
            XCTFail("\(what): still running after \(limit) s")
            return nil
        }
        return box.value
    }

    func testEndlessControlAnswerBodyFailsAtOnceWithAClearError() throws {
        try main.plan(rules: [["method": "OPTIONS", "mutation": "endless-body", "times": -1]])
        let url = main.url + "/files"
        let result = within(20, "OPTIONS with an endless body") { () -> Result<HTTPResponse, Error> in
            Result { try CurlTransport().perform(HTTPRequest(method: "OPTIONS", url: url)) }
        }
        guard let result else { return }
        XCTAssertThrowsError(try result.get()) {
            XCTAssertEqual(($0 as? TransportError)?.kind, .oversized, "\($0)")
            XCTAssertTrue("\($0)".contains("answer is larger than \(HTTPResponse.maxBody) bytes"), "\($0)")
        }
    }

    func testAnswerDrippedForeverEndsAtTheResponseTimeout() throws {
        try main.plan(rules: [["method": "OPTIONS", "mutation": "drip", "times": -1]])
        let url = main.url + "/files"
        let start = Date()
        let result = within(20, "OPTIONS answered one byte at a time") { () -> Result<HTTPResponse, Error> in
            var s = TransportSettings()
            s.responseTimeout = 2
            return Result { try CurlTransport(settings: s).perform(HTTPRequest(method: "OPTIONS", url: url)) }
        }
        guard let result else { return }
        XCTAssertThrowsError(try result.get()) {
            XCTAssertEqual(($0 as? TransportError)?.kind, .stalled, "\($0)")
            XCTAssertTrue("\($0)".contains("did not complete within 2 s"), "\($0)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(start), 6)
    }

    /// A server that answers a PATCH before reading its body, then drips the answer forever:
    /// curl can never finish sending, so the clock must start at the answer, not at the body's end.
    func testEarlyAnswerDrippedForeverEndsAtTheResponseTimeout() throws {
        try main.plan(rules: [["method": "PATCH", "mutation": "early-drip", "times": -1]])
        let file = dir + "/big.bin"  // sparse, more than the socket buffers hold
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: nil))
        XCTAssertEqual(truncate(file, 64 << 20), 0)
        let url = main.url + "/files/x"
        let start = Date()
        let result = within(20, "PATCH answered early, then one byte at a time") { () -> Result<HTTPResponse, Error> in
            var s = TransportSettings()
            s.responseTimeout = 2
            return Result {
                try CurlTransport(settings: s).perform(
                    HTTPRequest(
                        method: "PATCH", url: url,
                        body: .file(path: file, offset: 0, length: 64 << 20)))
            }
        }
        guard let result else { return }
        XCTAssertThrowsError(try result.get()) {
            XCTAssertEqual(($0 as? TransportError)?.kind, .stalled, "\($0)")
            XCTAssertTrue("\($0)".contains("did not complete within 2 s"), "\($0)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(start), 8)
    }

    /// 10 (b): oversized headers are named as such, never "Out of memory".
    func testOversizedResponseHeadersAreReportedAsSuch() throws {
        for (mutation, expected) in [
            ("giant-header", "larger than curl's limit of 102400 bytes"),
            ("many-headers", "larger than \(HTTPResponse.maxHeaderBytes) bytes"),
            ("endless-headers", "larger than \(HTTPResponse.maxHeaderBytes) bytes")
        ] {
            try main.plan(rules: [["method": "OPTIONS", "mutation": mutation, "times": -1]])
            let url = main.url + "/files"
            guard
                let result = within(
                    20, mutation,
                    { () -> Result<HTTPResponse, Error> in
                        Result { try CurlTransport().perform(HTTPRequest(method: "OPTIONS", url: url)) }
                    })
            else { continue }
            XCTAssertThrowsError(try result.get(), mutation) {
                XCTAssertEqual(($0 as? TransportError)?.kind, .oversized, "\(mutation): \($0)")
                XCTAssertTrue("\($0)".contains("response header is \(expected)"), "\(mutation): \($0)")
                XCTAssertFalse("\($0)".lowercased().contains("out of memory"), "\(mutation): \($0)")
            }
        }
    }

    func testTUSUploadWithAnEndlessOptionsAnswerFailsInsteadOfHanging() throws {
        let file = try makeFile("endless.mp4", bytes: 50_000)
        try main.plan(rules: [["method": "OPTIONS", "mutation": "endless-body", "times": -1]])
        let up = try tusUploader(main.url + "/files")
        let result = within(30, "TUS upload against an endless OPTIONS answer") { () -> Result<UploadResult, Error> in
            Result { try up.upload(file: file, id: "e", metadata: [:], control: UploadControl(), observer: NoUploadObserver()) }
        }
        guard let result else { return }
        XCTAssertThrowsError(try result.get()) {
            XCTAssertEqual(($0 as? UploadError)?.code, "bad-response", "\($0)")
        }
    }
}

private final class ResultBox<T>: @unchecked Sendable { var value: T? }
