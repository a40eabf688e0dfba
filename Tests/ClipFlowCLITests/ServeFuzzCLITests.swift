import ClipFlowTestSupport
import Foundation
import XCTest

/// Hostile HTTP requests into `clipflow serve`, seeded: each case is one request over a fresh
/// connection, built from random methods, paths (API, TUS, media with and without playback tokens,
/// the studio, beacons, traversal forms), query numbers
/// (overflowing, negative, not numbers), headers (Host, Origin, Range, conditionals, TUS headers
/// with hostile numbers and metadata, content types, Expect) and bodies (JSON of wrong types and
/// ranges, junk bytes), or a request cut off after a random number of bytes.
///
/// Each case: an answer within 10 s (or the connection closed, for requests HTTP cannot parse),
/// never a 5xx, and the server still running and serving `GET /feed.json` afterwards.
///
/// `swift test` runs CLIPFLOW_FUZZ_CASES (default 200) cases from CLIPFLOW_FUZZ_SEED (default 1);
/// `scripts/fuzz-serve` runs more.
final class ServeFuzzCLITests: XCTestCase {
    let fx = Fixtures.shared
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }
    static let env = ProcessInfo.processInfo.environment
    static let cases = Int(env["CLIPFLOW_FUZZ_CASES"] ?? "") ?? 200
    static let firstSeed = Int(env["CLIPFLOW_FUZZ_SEED"] ?? "") ?? 1

    func testHostileRequestsNeverCrashOrAnswer5xx() throws {
        let data = fx.scratch("serve-fuzz")
        let media = data.appendingPathComponent("media/999999/a0-full")
        try FileManager.default.createDirectory(at: media, withIntermediateDirectories: true)
        try Data((0..<1000).map { UInt8(truncatingIfNeeded: $0) }).write(to: media.appendingPathComponent("seg.m4s"))
        try Data("#EXTM3U\n".utf8).write(to: media.appendingPathComponent("master.m3u8"))
        let s = ServerProcess.clipflowServe(binary: binary, data: data, ["--max-size", "100000"], environment: ["CLIPFLOW_API_KEY": ""])
        try s.start()
        defer { s.stop() }
        let port = s.port
        // Something to aim at: a video and an upload in progress.
        _ = try HTTP.request("POST", "http://127.0.0.1:\(port)/videos", json: ["name": "target"])
        let upload = try XCTUnwrap(
            try HTTP.request("POST", "http://127.0.0.1:\(port)/files", headers: ["Tus-Resumable": "1.0.0", "Upload-Length": "5000"]).header("Location"))
        let uploadPath = try XCTUnwrap(URL(string: upload)?.path)
        var outcomes: [String: Int] = [:]
        for i in 0..<Self.cases {
            let seed = Self.firstSeed + i
            var rng = SplitMix64(seed: UInt64(seed))
            let request = HostileRequest.make(&rng, port: port, upload: uploadPath)
            let answer = RawHTTP.exchange(port: port, request.bytes, cutAfter: request.cutAfter, timeout: 10)
            let context = "seed \(seed): \(request.summary)"
            switch answer {
            case .status(let code):
                outcomes["\(code)", default: 0] += 1
                XCTAssertLessThan(code, 500, context)
            case .closed: outcomes["closed", default: 0] += 1
            case .cut: outcomes["cut", default: 0] += 1
            case .timedOut: XCTFail("no answer within 10 s: \(context)")
            }
            guard s.isRunning, case .status(200) = RawHTTP.exchange(port: port, Array(RawHTTP.probe(port).utf8), cutAfter: nil, timeout: 10) else {
                XCTFail("the server stopped serving after \(context)\n\(s.stderrText.suffix(3000))")
                return
            }
        }
        print("serve fuzz: \(Self.cases) cases from seed \(Self.firstSeed): \(outcomes.sorted { $0.key < $1.key })")
    }
}

/// One generated request: its bytes, and where to cut it off (nil: sent whole).
struct HostileRequest {
    var bytes: [UInt8]
    var cutAfter: Int?
    var summary: String

    static let numbers = [
        "0", "1", "-1", "7", "100", "5000", "9223372036854775807", "9223372036854775808", "-9223372036854775808", "18446744073709551616",
        "99999999999999999999999999", "1e300", "1.5", "0x10", "abc", "", " 1", "+1", "00000000000000000000001"
    ]

    static func make(_ rng: inout SplitMix64, port: Int, upload: String) -> HostileRequest {
        func pick<T>(_ a: [T]) -> T { a[Int(rng.next() % UInt64(a.count))] }
        func chance(_ p: Double) -> Bool { Double(rng.next() % 1000) < p * 1000 }
        func number() -> String { pick(numbers) }
        // Most cases aim at one surface (the API's query numbers, its JSON writes, media with
        // ranges, TUS); the rest go anywhere.
        let aim = pick(["listing", "listing", "write", "media", "tus", "beacon", "any", "any", "any"])
        let method: String
        var path: String
        switch aim {
        case "listing": (method, path) = (pick(["GET", "GET", "HEAD"]), "/videos")
        case "write":
            (method, path) = (
                pick(["POST", "POST", "PUT", "PATCH"]), pick(["/videos", "/videos", "/auth/refresh", "/videos/1", "/videos/1/token", "/videos/999999/token"])
            )
        case "media":
            (method, path) = (pick(["GET", "GET", "HEAD", "POST"]), pick(["/media/999999/a0-full/seg.m4s", "/media/999999/a0-full/master.m3u8"]))
            if chance(0.5) {
                path +=
                    "?token="
                    + pick([
                        "play.999999.9999999999.AAAA", "play.1.1.x", "play.999999~Li4v.9999999999.AAAA", "play..", "%ff", "", "play.999999.\(number()).A",
                        "upload.999999.9999999999.AAAA", String(repeating: "t", count: 5000)
                    ])
            }
        case "beacon": (method, path) = (pick(["POST", "POST", "POST", "GET"]), "/beacon")
        case "tus": (method, path) = (pick(["POST", "PATCH", "PATCH", "HEAD", "DELETE", "OPTIONS"]), pick(["/files", upload, upload]))
        default:
            method = pick(["GET", "GET", "HEAD", "POST", "POST", "PATCH", "DELETE", "OPTIONS", "PUT", "TRACE", "FOO"])
            path = pick([
                "/", "/videos", "/videos/1", "/videos/1/upload", "/videos/\(number())", "/videos/999999", "/feed.json", "/auth/refresh", "/files",
                upload, "/files/\(number())", "/files/../videos", "/media/999999/a0-full/seg.m4s", "/media/999999/a0-full/master.m3u8",
                "/media/../clipflow.sqlite", "/media/%2e%2e/token-secret", "/media/999999/a0-full/", "/media", "/media/999999/a0-full/seg.m4s%00.m3u8",
                "//videos", "/videos/%ff", "/\(String(repeating: "a", count: Int(rng.next() % 3000)))", "/studio", "/studio/token", "/studio/x",
                "/beacon", "/videos/1/views", "/videos/1/token", "/v/1?token=play.1.9999999999.AAAA", "/v/\(number())?token=\(number())"
            ])
        }
        let listing = aim == "listing"
        if listing || chance(0.2) {
            var q: [String] = []
            for name in ["page", "per_page"] where chance(0.7) {
                q.append("\(name)=\(number().addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? "")")
            }
            if chance(0.1) { q.append("page=1&page=2") }
            path += "?" + q.joined(separator: "&")
        }
        var headers: [(String, String)] = [("Connection", "close")]
        headers.append(("Host", chance(0.85) ? "127.0.0.1:\(port)" : pick(["evil.example", "", "localhost", "[::1]:\(port)", "127.0.0.1:\(number())", "a b"])))
        if chance(0.2) { headers.append(("Origin", pick(["http://evil.example", "null", "http://127.0.0.1:\(port)", "http://localhost:1"]))) }
        if chance(0.1) { headers.append(("Sec-Fetch-Site", pick(["cross-site", "same-site", "same-origin", "none", "junk"]))) }
        if aim == "media" ? chance(0.8) : chance(0.2) {
            let a = number(), b = number()
            headers.append(
                (
                    "Range",
                    pick([
                        "bytes=-\(a)", "bytes=\(a)-", "bytes=\(a)-\(b)", "bytes=\(a)-\(b),\(b)-\(a)",
                        "bytes=" + Array(repeating: "0-0", count: 500).joined(separator: ","), "bytes=,", "items=1-2", "bytes"
                    ])
                ))
        }
        if chance(0.1) { headers.append(("If-Range", pick(["\"x\"", "Thu, 01 Jan 1970 00:00:00 GMT", "junk"]))) }
        if chance(0.1) { headers.append(("If-None-Match", pick(["*", "\"x\"", "W/\"x\", \"y\"", ""]))) }
        if chance(0.1) { headers.append(("If-Modified-Since", pick(["Thu, 01 Jan 2099 00:00:00 GMT", "yesterday", "Thu, 01 Jan 1970 00:00:00 GMT"]))) }
        let tus = aim == "tus"
        if tus ? chance(0.9) : chance(0.3) { headers.append(("Tus-Resumable", pick(["1.0.0", "1.0.0", "0.2.2", ""]))) }
        if tus ? chance(0.6) : chance(0.2) { headers.append(("Upload-Length", number())) }
        if tus ? chance(0.7) : chance(0.2) { headers.append(("Upload-Offset", number())) }
        if chance(0.2) {
            headers.append(
                (
                    "Upload-Metadata",
                    pick([
                        "video_id MQ==,token eA==", "filename aGVsbG8=", "a YQ==,a YQ==", "video_id OTk5OTk5OTk5OTk5OTk5OTk5OTk5", "x *", ",,,",
                        "k \(String(repeating: "QUFB", count: 2000))"
                    ])
                ))
        }
        if chance(0.1) { headers.append(("Upload-Checksum", pick(["sha1 AAAA", "md5 x", "sha256", "sha1 \(String(repeating: "A", count: 28))="]))) }
        if chance(0.05) { headers.append(("Upload-Defer-Length", "1")) }
        if chance(0.1) { headers.append(("Authorization", pick(["Bearer x", "Bearer ", "Basic Zm9vOmJhcg==", "Bearer access.api.9999999999.AAAA"]))) }
        if chance(0.1) { headers.append(("Accept", "text/html")) }
        if chance(0.05) { headers.append(("Expect", "100-continue")) }
        if chance(0.05) { headers.append(("X-Pad", String(repeating: "p", count: Int(rng.next() % 40_000)))) }

        var body: [UInt8] = []
        if ["POST", "PATCH", "PUT", "DELETE"].contains(method) || chance(0.1) {
            switch aim == "write" ? 0 : aim == "tus" ? 1 : aim == "beacon" ? 3 : rng.next() % 5 {
            case 0:
                var fields: [String] = []
                if chance(0.8) { fields.append("\"name\": \(pick(["\"n\"", "5", "null", "[]", "\"\"", "\"\(String(repeating: "n", count: 600))\""]))") }
                if chance(0.5) { fields.append("\"client_id\": \(pick([number(), "\"7\"", "true", "null", "-0", "{}"]))") }
                if chance(0.4) { fields.append("\"description\": \(pick(["\"d\"", "5", "null", "[\"x\"]", "{\"a\": 1}"]))") }
                if chance(0.3) { fields.append("\"mode\": \(pick(["\"ladder\"", "\"copy\"", "\"x\"", "1"]))") }
                if chance(0.3) { fields.append("\"refresh\": \(pick(["\"k\"", "5", "null"]))") }
                if chance(0.3) { fields.append("\"access\": \(pick(["\"public\"", "\"signed\"", "\"x\"", "1", "null"]))") }
                if chance(0.3) { fields.append("\"expires_in\": \(pick([number(), "\"60\"", "null"]))") }
                if chance(0.2) { fields.append("\"path\": \(pick(["\"/media/1/\"", "\"/media/1/../2/\"", "\"\"", "5"]))") }
                body = Array(("{" + fields.joined(separator: ", ") + "}").utf8)
                headers.append(("Content-Type", pick(["application/json", "application/json", "text/plain", "application/json; charset=utf-8"])))
            case 1:
                body = (0..<Int(rng.next() % 3000)).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
                headers.append(("Content-Type", pick(["application/offset+octet-stream", "application/json", "text/plain"])))
            case 2:
                body = Array(pick(["[1]", "{", "null", "\"s\"", "{\"name\": \"\u{0}\"}", String(repeating: "[", count: 5000)]).utf8)
                headers.append(("Content-Type", "application/json"))
            case 3:
                var fields: [String] = []
                if chance(0.9) { fields.append("\"video\": \(pick(["1", "999999", number(), "\"1\"", "null"]))") }
                for name in ["startup_ms", "rebuffers", "rebuffer_ms", "watched_ms"] where chance(0.8) {
                    fields.append("\"\(name)\": \(number().isEmpty ? "0" : number())")
                }
                if chance(0.5) { fields.append("\"rendition\": \(pick(["\"360p\"", "\"native\"", "\"\(String(repeating: "r", count: 300))\"", "7"]))") }
                if chance(0.5) { fields.append("\"error\": \(pick(["\"source\"", "null", "\"<script>\"", "[]"]))") }
                body = Array(("{" + fields.joined(separator: ", ") + "}").utf8)
                headers.append(("Content-Type", pick(["application/json", "text/plain", "application/x-www-form-urlencoded"])))
            default: break
            }
        }
        if !body.isEmpty || chance(0.5) { headers.append(("Content-Length", String(body.count))) }
        var text = "\(method) \(path) HTTP/1.1\r\n"
        for (k, v) in headers { text += "\(k): \(v)\r\n" }
        text += "\r\n"
        let bytes = Array(text.utf8) + body
        let cut = chance(0.08) ? Int(rng.next() % UInt64(bytes.count)) : nil
        let shown = headers.filter { $0.1.count < 200 }.map { "\($0.0): \($0.1)" }.joined(separator: " | ")
        return HostileRequest(
            bytes: bytes, cutAfter: cut, summary: "\(method) \(path.prefix(200)) [\(shown)] body \(body.count) bytes\(cut.map { ", cut after \($0)" } ?? "")")
    }
}

/// A request over a raw TCP connection to 127.0.0.1 (no client library in between).
enum RawHTTP {
    enum Answer: Equatable {
        case status(Int)
        /// Closed without an answer.
        case closed
        /// We cut the request off and closed the connection.
        case cut
        case timedOut
    }

    static func probe(_ port: Int) -> String { "GET /feed.json HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n" }

    static func exchange(port: Int, _ bytes: [UInt8], cutAfter: Int?, timeout: Double) -> Answer {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return .closed }
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = UInt16(port).bigEndian
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return .closed }
        var tv = timeval(tv_sec: Int(timeout), tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, socklen_t(MemoryLayout<timeval>.size))
        let toSend = cutAfter.map { Array(bytes.prefix($0)) } ?? bytes
        var sent = 0
        while sent < toSend.count {
            let n = toSend.withUnsafeBytes { send(fd, $0.baseAddress! + sent, toSend.count - sent, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { break }  // the server may refuse before reading everything
            sent += n
        }
        if cutAfter != nil { return .cut }
        var received: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 65536)
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n < 0, errno == EINTR { continue }
            if n < 0, errno == EAGAIN || errno == EWOULDBLOCK { return finalStatus(received) ?? .timedOut }
            if n <= 0 { break }
            received += buffer[0..<n]
            // The final status line is enough (1xx heads are followed by another).
            if let s = finalStatus(received), case .status(let code) = s, code >= 200 { return s }
        }
        return finalStatus(received) ?? .closed
    }

    /// The first non-1xx status in `bytes`, once its line is complete.
    private static func finalStatus(_ bytes: [UInt8]) -> Answer? {
        let text = String(decoding: bytes, as: UTF8.self)
        for head in text.components(separatedBy: "\r\n\r\n") {
            guard head.hasPrefix("HTTP/1."), let line = head.components(separatedBy: "\r\n").first, head.contains("\r\n") || text.hasSuffix("\r\n\r\n") else {
                continue
            }
            let parts = line.split(separator: " ")
            guard parts.count >= 2, let code = Int(parts[1]) else { continue }
            if code >= 200 { return .status(code) }
        }
        return nil
    }
}
