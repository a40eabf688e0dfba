import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow serve` against hostile HTTP clients and local users, judged with independent tools:
/// curl for requests, strace for how files are created, python sockets for connection floods,
/// a private /etc/hosts (unshare) for name resolution.
final class ServeHTTPHardeningCLITests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func server(_ data: URL, _ extra: [String] = [], key: String = "") -> ServerProcess {
        .clipflowServe(binary: binary, data: data, extra, environment: ["CLIPFLOW_API_KEY": key])
    }

    /// One request by curl; HEAD is sent as curl sends it (`-I`).
    func curl(_ port: Int, _ method: String, _ path: String, headers: [String: String] = [:], body: String? = nil) throws -> CurlReply {
        let out = fx.scratch("serve-http-curl").appendingPathComponent("body")
        var args = ["curl", "-sS", "--path-as-is", "--max-time", "15", "-o", out.path, "-D", "-"]
        args += method == "HEAD" ? ["-I"] : ["-X", method]
        for (k, v) in headers { args += ["-H", "\(k): \(v)"] }
        if let body { args += ["--data-binary", body] }
        let r = try Run.run(args + ["http://127.0.0.1:\(port)\(path)"], check: false)
        guard r.status == 0 else { throw ServerError("curl \(method) \(path): exit \(r.status): \(r.stderr)") }
        // The last head (after any 100 Continue).
        let head = r.out.components(separatedBy: "\r\n\r\n").filter { $0.hasPrefix("HTTP/") }.last ?? ""
        let lines = head.components(separatedBy: "\r\n")
        let status = Int(lines.first?.split(separator: " ").dropFirst().first ?? "") ?? 0
        var fields: [String: String] = [:]
        for l in lines.dropFirst() {
            guard let colon = l.firstIndex(of: ":") else { continue }
            fields[String(l[..<colon])] = l[l.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        return CurlReply(status: status, headers: fields, body: (try? Data(contentsOf: out)) ?? Data())
    }

    func alive(_ s: ServerProcess, _ context: String) throws {
        XCTAssertEqual(try curl(s.port, "GET", "/feed.json").status, 200, "the server serves after \(context)")
    }

    // MARK: query numbers and JSON fields

    func testQueryNumbersThatOverflowOrAreNotNumbersAre400NamingTheParameter() throws {
        let s = server(fx.scratch("serve-http-query"))
        try s.start()
        defer { s.stop() }
        let cases = [
            ("page=9223372036854775807&per_page=100", "page"), ("page=4611686018427387905&per_page=2", "page"), ("page=-9223372036854775808", "page"),
            ("page=99999999999999999999", "page"), ("page=abc", "page"), ("page=0", "page"), ("page=1.5", "page"),
            ("per_page=9223372036854775807", "per_page"), ("per_page=1e3", "per_page"), ("per_page=0", "per_page"), ("per_page=", "per_page")
        ]
        for (query, name) in cases {
            let r = try curl(s.port, "GET", "/videos?\(query)")
            XCTAssertEqual(r.status, 400, "\(query): \(r.text)")
            XCTAssertTrue(r.text.contains("\"\(name):"), "\(query): the answer names \(name): \(r.text)")
            try alive(s, query)
        }
        let far = try curl(s.port, "GET", "/videos?page=1000000000&per_page=100")
        XCTAssertEqual(far.status, 200, far.text)
        XCTAssertEqual(far.text, "[]")
    }

    func testJSONFieldsOfTheWrongTypeOrOutOfRangeAre400NamingTheField() throws {
        let s = server(fx.scratch("serve-http-json"))
        try s.start()
        defer { s.stop() }
        let json = ["Content-Type": "application/json"]
        let refused: [(String, String)] = [
            (#"{"name": "a", "client_id": 1e300}"#, "client_id"), (#"{"name": "a", "client_id": "7"}"#, "client_id"),
            (#"{"name": "a", "client_id": true}"#, "client_id"), (#"{"name": "a", "client_id": 1.5}"#, "client_id"),
            (#"{"name": "a", "client_id": -1}"#, "client_id"), (#"{"name": "a", "client_id": 9223372036854775808}"#, "client_id"),
            (#"{"name": "a", "description": 5}"#, "description"), (#"{"name": "a", "description": ["x"]}"#, "description"),
            (#"{"name": 5}"#, "name"), (#"{"description": "no name"}"#, "name"), (#"{"name": "a", "mode": 1}"#, "mode")
        ]
        for (body, field) in refused {
            let r = try curl(s.port, "POST", "/videos", headers: json, body: body)
            XCTAssertEqual(r.status, 400, "\(body): \(r.text)")
            XCTAssertTrue(r.text.contains("\(field):"), "\(body): the answer names \(field): \(r.text)")
        }
        XCTAssertEqual(try curl(s.port, "POST", "/videos", headers: json, body: "[1]").status, 400)
        let made = try curl(s.port, "POST", "/videos", headers: json, body: #"{"name": "a", "client_id": 9007199254740993, "description": null}"#)
        XCTAssertEqual(made.status, 201, made.text)
        XCTAssertTrue(made.text.contains(#""client_id":9007199254740993"#), made.text)
        let listed = try curl(s.port, "GET", "/videos")
        XCTAssertEqual(listed.header("X-Total-Count"), "1", "only the valid video was stored: \(listed.text)")
    }

    // MARK: local users

    /// The token secret is never readable by others, not even for an instant: strace shows it
    /// created with O_EXCL and mode 0600 (under umask 022) and never chmod-ed; the data folder is
    /// 0700, made so or tightened when it was looser.
    func testTokenSecretIsPrivateFromItsFirstByteInAPrivateDataFolder() throws {
        let root = fx.scratch("serve-http-secret")
        let data = root.appendingPathComponent("data")
        let traces = root.appendingPathComponent("trace")
        let port = ServerProcess.freePort()
        let s = ServerProcess(
            name: "clipflow-serve-strace",
            arguments: ServerProcess.supervised(
                [
                    "sh", "-c",
                    "umask 022; exec strace -f -ff -o \"$1\" -e trace=openat,open,creat,close,chmod,fchmod,fchmodat,rename,renameat,renameat2,link,linkat \"$2\" serve --data \"$3\" --listen 127.0.0.1:\"$4\"",
                    "sh", traces.path, binary, data.path, String(port)
                ], maxSeconds: 120), environment: ["CLIPFLOW_API_KEY": ""], port: port)
        try s.start(timeout: 60)
        s.stop()
        let secret = data.appendingPathComponent("token-secret").path
        XCTAssertEqual(try mode(secret), 0o600)
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: secret)[.size] as? Int, 32)
        XCTAssertEqual(try mode(data.path), 0o700, "a data folder only the server can enter")
        let files = try FileManager.default.contentsOfDirectory(atPath: root.path).filter { $0.hasPrefix("trace.") }
        XCTAssertFalse(files.isEmpty, "strace wrote its traces")
        let threads = try files.map { try String(contentsOf: root.appendingPathComponent($0), encoding: .utf8).components(separatedBy: "\n") }
        // The names the secret had: its own and any it was renamed or linked from.
        var names: Set<String> = [secret]
        for l in threads.joined() where (l.hasPrefix("rename") || l.hasPrefix("link")) && l.contains("\"\(secret)\"") {
            if let from = l.split(separator: "\"").dropFirst().first { names.insert(String(from)) }
        }
        var created = 0
        for lines in threads {
            var open: Set<String> = []
            for l in lines {
                let quoted = l.split(separator: "\"").dropFirst().first.map(String.init) ?? ""
                if (l.hasPrefix("openat(") || l.hasPrefix("open(")) && names.contains(quoted) && l.contains("O_CREAT") {
                    created += 1
                    XCTAssertTrue(l.contains("O_EXCL") && l.contains(", 0600)"), "created private and new: \(l)")
                    if let fd = l.split(separator: "=").last?.trimmingCharacters(in: .whitespaces) { open.insert(fd) }
                } else if l.hasPrefix("close("), let fd = l.dropFirst(6).split(separator: ")").first {
                    open.remove(String(fd))
                } else if l.hasPrefix("fchmod("), let fd = l.dropFirst(7).split(separator: ",").first, open.contains(String(fd)) {
                    XCTFail("the secret's mode changed after it was created: \(l)")
                } else if l.contains("chmod") && names.contains(quoted) {
                    XCTFail("the secret's mode changed after it was created: \(l)")
                }
            }
        }
        XCTAssertEqual(created, 1, "one creation of the secret in \(names)")

        // A looser folder made earlier is tightened; the secret is kept.
        chmod(data.path, 0o755)
        let before = try Data(contentsOf: URL(fileURLWithPath: secret))
        let again = server(data)
        try again.start()
        again.stop()
        XCTAssertEqual(try mode(data.path), 0o700)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: secret)), before)
    }

    func mode(_ path: String) throws -> Int {
        try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int) & 0o777
    }

    // MARK: exposure

    /// `--listen NAME` decides on the addresses NAME resolves to (names from a private /etc/hosts).
    func testListenDecidesLoopbackOnTheResolvedAddressNotTheName() throws {
        guard (try? Run.run(["unshare", "-rm", "true"]))?.status == 0 else { throw XCTSkip("unshare -rm is not available here") }
        let root = fx.scratch("serve-http-listen")
        let hosts = root.appendingPathComponent("hosts")
        try "127.0.0.1 localhost\n0.0.0.0 127.example.test\n127.0.0.2 loop.example.test\n".write(to: hosts, atomically: true, encoding: .utf8)
        func inNamespace(_ listen: String) -> [String] {
            [
                "unshare", "-rm", "sh", "-c", "mount --bind \"$1\" /etc/hosts && exec \"$2\" serve --data \"$3\" --listen \"$4\"", "sh", hosts.path, binary,
                root.appendingPathComponent("data-\(listen.count)").path, listen
            ]
        }
        let everywhere = try Run.run(["timeout", "-s", "KILL", "15"] + inNamespace("127.example.test:0"), env: ["CLIPFLOW_API_KEY": ""], check: false)
        XCTAssertNotEqual(everywhere.status, 0, "it must not run: \(everywhere.stderr)")
        XCTAssertNotEqual(everywhere.status, 137, "it listened (killed after 15 s)")
        XCTAssertTrue(everywhere.stderr.contains("0.0.0.0") && everywhere.stderr.contains("API key"), everywhere.stderr)

        let port = ServerProcess.freePort()
        let s = ServerProcess(
            name: "clipflow-serve-ns", arguments: ServerProcess.supervised(inNamespace("loop.example.test:\(port)"), maxSeconds: 120),
            environment: ["CLIPFLOW_API_KEY": ""], port: port, host: "127.0.0.2")
        try s.start()
        defer { s.stop() }
        let r = try Run.run([
            "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Host: loop.example.test:\(port)", "http://127.0.0.2:\(port)/feed.json"
        ])
        XCTAssertEqual(r.out, "200", "a name resolving to loopback listens without a key, and its name is a good Host")
    }

    /// Without an API key (DNS rebinding): only loopback names and addresses, or the name the server
    /// listens on, in `Host`; with a key, any.
    func testHostHeaderOnlyLoopbackNamesWithoutAnAPIKey() throws {
        let s = server(fx.scratch("serve-http-host"))
        try s.start()
        defer { s.stop() }
        let p = s.port
        for host in ["127.0.0.1:\(p)", "localhost:\(p)", "LOCALHOST:\(p)", "[::1]:\(p)", "127.0.0.1", "app.localhost:\(p)"] {
            XCTAssertEqual(try curl(p, "GET", "/feed.json", headers: ["Host": host]).status, 200, host)
        }
        for host in ["evil.example:\(p)", "127.0.0.1.evil.example:\(p)", "localhost.evil.example", "0.0.0.0:\(p)", "10.0.0.1:\(p)", "[::2]:\(p)", "127.1:\(p)"]
        {
            for (method, path) in [("GET", "/feed.json"), ("GET", "/videos"), ("GET", "/"), ("POST", "/files"), ("GET", "/media/1/a/x.m3u8")] {
                let r = try curl(p, method, path, headers: ["Host": host, "Tus-Resumable": "1.0.0", "Upload-Length": "1"])
                XCTAssertEqual(r.status, 421, "\(host) \(method) \(path): \(r.text)")
                XCTAssertTrue(r.text.contains("Host"), r.text)
            }
        }
        s.stop()
        let keyed = server(fx.scratch("serve-http-host-key"), key: "k-host")
        try keyed.start()
        defer { keyed.stop() }
        XCTAssertEqual(try curl(keyed.port, "GET", "/feed.json", headers: ["Host": "video.example.com"]).status, 200, "with a key, any name")
    }

    /// Writes a browser sends for another site are refused; JSON endpoints take JSON only.
    func testCrossSiteWritesAndNonJSONBodiesAreRefused() throws {
        let s = server(fx.scratch("serve-http-origin"))
        try s.start()
        defer { s.stop() }
        let p = s.port
        let json = ["Content-Type": "application/json"]
        let body = #"{"name": "x"}"#
        for extra in [["Origin": "http://evil.example"], ["Origin": "null"], ["Sec-Fetch-Site": "cross-site"], ["Sec-Fetch-Site": "same-site"]] {
            let r = try curl(p, "POST", "/videos", headers: json.merging(extra) { $1 }, body: body)
            XCTAssertEqual(r.status, 403, "\(extra): \(r.text)")
            let tus = try curl(p, "POST", "/files", headers: extra.merging(["Tus-Resumable": "1.0.0", "Upload-Length": "1"]) { $1 })
            XCTAssertEqual(tus.status, 403, "\(extra) TUS: \(tus.text)")
        }
        for type in ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"] {
            let r = try curl(p, "POST", "/videos", headers: ["Content-Type": type], body: body)
            XCTAssertEqual(r.status, 415, "\(type): \(r.text)")
            XCTAssertTrue(r.text.contains("Content-Type"), r.text)
        }
        XCTAssertEqual(try curl(p, "POST", "/auth/refresh", headers: ["Content-Type": "text/plain"], body: "{}").status, 415)
        let own = try curl(
            p, "POST", "/videos", headers: json.merging(["Origin": "http://127.0.0.1:\(p)", "Sec-Fetch-Site": "same-origin"]) { $1 }, body: body)
        XCTAssertEqual(own.status, 201, "the server's own pages may write: \(own.text)")
        XCTAssertEqual(try curl(p, "POST", "/videos", headers: ["Content-Type": "application/json; charset=utf-8"], body: body).status, 201)
        XCTAssertEqual(try curl(p, "DELETE", "/videos/1", headers: ["Origin": "http://evil.example"]).status, 403)
        XCTAssertEqual(try curl(p, "GET", "/videos/1", headers: ["Origin": "http://evil.example"]).status, 200, "reads are not writes")
        XCTAssertEqual(try curl(p, "DELETE", "/videos/1").status, 204)
    }

    /// `--max-connections 8` and 40 idle connections: the ninth and later wait (never answered
    /// while the eight are held), the server stays up, and answers once they close.
    func testConnectionsBeyondTheCapWaitAndTheServerServesAfterwards() throws {
        let s = server(fx.scratch("serve-http-cap"), ["--max-connections", "8"])
        try s.start()
        defer { s.stop() }
        let script = """
            import json, socket, sys, time
            port = int(sys.argv[1])
            held, refused = [], 0
            for i in range(40):
                try:
                    held.append(socket.create_connection(('127.0.0.1', port), timeout=3))
                except OSError:
                    refused += 1
            time.sleep(0.5)
            probe = socket.create_connection(('127.0.0.1', port), timeout=2)
            probe.sendall(b'GET /feed.json HTTP/1.1\\r\\nHost: 127.0.0.1\\r\\nConnection: close\\r\\n\\r\\n')
            try:
                early = probe.recv(64)
            except socket.timeout:
                early = b''
            for h in held:
                h.close()
            probe.settimeout(15)
            late = b''
            while True:
                chunk = probe.recv(65536)
                if not chunk:
                    break
                late += chunk
            print(json.dumps({'refused': refused, 'early': early.decode('latin-1'), 'late': late[:12].decode('latin-1')}))
            """
        let r = try Run.run(["python3", "-c", script, String(s.port)])
        let result = try XCTUnwrap(try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any], r.out)
        XCTAssertEqual(result["early"] as? String, "", "no answer while 8 connections are held: \(result)")
        XCTAssertEqual(result["late"] as? String, "HTTP/1.1 200", "answered once they closed: \(result)")
        XCTAssertTrue(s.isRunning)
        try alive(s, "the flood")
    }

    // MARK: media

    /// A ladder folder with one file of each served type (and some that are not served).
    func mediaFolder(_ data: URL) throws -> URL {
        let folder = data.appendingPathComponent("media/999999/a0-full")
        try FileManager.default.createDirectory(at: folder.appendingPathComponent(".a1-full.clipflow-tmp-1-2"), withIntermediateDirectories: true)
        for name in ServeHTTPHardeningCLITests.types.keys.map({ "x.\($0)" }) + ["notes.txt", "page.html", ".a1-full.clipflow-tmp-1-2/master.m3u8"] {
            try Data("#EXTM3U\n".utf8).write(to: folder.appendingPathComponent(name))
        }
        try Data((0..<100).map { UInt8($0) }).write(to: folder.appendingPathComponent("seg.m4s"))
        return folder
    }

    static let types = [
        "m3u8": "application/vnd.apple.mpegurl", "m4s": "video/iso.segment", "mp4": "video/mp4", "m4a": "audio/mp4", "ts": "video/mp2t",
        "aac": "audio/aac", "vtt": "text/vtt", "jpg": "image/jpeg", "jpeg": "image/jpeg", "png": "image/png", "json": "application/json"
    ]

    func testEveryServedTypeHasItsContentTypeAndCacheControl() throws {
        let data = fx.scratch("serve-http-types")
        _ = try mediaFolder(data)
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let p = s.port
        for (ext, type) in Self.types {
            for method in ["GET", "HEAD"] {
                let r = try curl(p, method, "/media/999999/a0-full/x.\(ext)")
                XCTAssertEqual(r.status, 200, "\(method) .\(ext)")
                XCTAssertEqual(r.header("Content-Type"), type, "\(method) .\(ext)")
                XCTAssertEqual(r.header("Cache-Control"), "public, max-age=31536000, immutable", "\(method) .\(ext)")
                XCTAssertEqual(r.header("X-Content-Type-Options"), "nosniff", "\(method) .\(ext)")
                XCTAssertEqual(r.header("Content-Length"), "8", "\(method) .\(ext)")
            }
        }
        for path in [
            "notes.txt", "page.html", ".a1-full.clipflow-tmp-1-2/master.m3u8", "", "x", "../../../clipflow.sqlite", "%2e%2e/%2e%2e/%2e%2e/token-secret"
        ] {
            XCTAssertEqual(try curl(p, "GET", "/media/999999/a0-full/\(path)").status, 404, path)
        }
        XCTAssertEqual(try curl(p, "POST", "/media/999999/a0-full/x.m3u8").status, 405)
        // The rest of what the server sends, against the same kind of table.
        let pages: [(String, [String: String], String, String)] = [
            ("/", [:], "text/html; charset=utf-8", "no-cache"), ("/videos", ["Accept": "text/html"], "text/html; charset=utf-8", "no-cache"),
            ("/feed.json", [:], "application/json", "no-cache"), ("/videos", [:], "application/json", "no-store"),
            ("/videos?page=x", [:], "application/json", "no-store")
        ]
        for (path, headers, type, cache) in pages {
            let r = try curl(p, "GET", path, headers: headers)
            XCTAssertEqual(r.header("Content-Type"), type, path)
            XCTAssertEqual(r.header("Cache-Control"), cache, path)
        }
    }

    func testRangesAndConditionsFollowRFC9110() throws {
        let data = fx.scratch("serve-http-ranges")
        _ = try mediaFolder(data)
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let p = s.port
        let path = "/media/999999/a0-full/seg.m4s"
        let all = Data((0..<100).map { UInt8($0) })
        // Range, expected status, expected body (nil: none checked), Content-Range.
        let cases: [(String, Int, Range<Int>?, String?)] = [
            ("bytes=-16", 206, 84..<100, "bytes 84-99/100"), ("bytes=10-", 206, 10..<100, "bytes 10-99/100"), ("bytes=0-0", 206, 0..<1, "bytes 0-0/100"),
            ("bytes=95-200", 206, 95..<100, "bytes 95-99/100"), ("bytes=-200", 206, 0..<100, "bytes 0-99/100"),
            ("bytes=0-99999999999999999999999", 206, 0..<100, "bytes 0-99/100"), ("BYTES=1-2", 206, 1..<3, "bytes 1-2/100"),
            ("bytes=0-1,200-300", 206, 0..<2, "bytes 0-1/100"), ("bytes=100-", 416, nil, "bytes */100"), ("bytes=100-200", 416, nil, "bytes */100"),
            ("bytes=-0", 416, nil, "bytes */100"), ("bytes=9223372036854775807-", 416, nil, "bytes */100"),
            ("bytes=99999999999999999999999-", 416, nil, "bytes */100"), ("bytes=0-1,5-6", 200, 0..<100, nil), ("bytes=5-2", 200, 0..<100, nil),
            ("bytes=abc", 200, 0..<100, nil), ("items=0-5", 200, 0..<100, nil), ("bytes=", 200, 0..<100, nil), ("bytes=--1", 200, 0..<100, nil),
            ("bytes=1-2-3", 200, 0..<100, nil), ("bytes=+1-2", 200, 0..<100, nil)
        ]
        for (range, status, bytes, contentRange) in cases {
            let r = try curl(p, "GET", path, headers: ["Range": range])
            XCTAssertEqual(r.status, status, range)
            XCTAssertEqual(r.header("Content-Range"), contentRange, range)
            if let bytes {
                XCTAssertEqual(r.body, all.subdata(in: bytes), range)
                XCTAssertEqual(r.header("Content-Length"), String(bytes.count), range)
            }
        }
        let head = try curl(p, "HEAD", path, headers: ["Range": "bytes=0-9"])
        XCTAssertEqual(head.status, 200, "HEAD ignores Range")
        XCTAssertEqual(head.header("Content-Length"), "100")
        XCTAssertEqual(head.header("Accept-Ranges"), "bytes")
        let etag = try XCTUnwrap(head.header("ETag"))
        let modified = try XCTUnwrap(head.header("Last-Modified"))
        XCTAssertEqual(try curl(p, "GET", path, headers: ["If-None-Match": etag]).status, 304)
        XCTAssertEqual(try curl(p, "GET", path, headers: ["If-None-Match": "\"other\", W/\(etag)"]).status, 304)
        XCTAssertEqual(try curl(p, "GET", path, headers: ["If-None-Match": "\"other\""]).status, 200)
        XCTAssertEqual(try curl(p, "GET", path, headers: ["If-Modified-Since": modified]).status, 304)
        XCTAssertEqual(try curl(p, "GET", path, headers: ["Range": "bytes=0-0", "If-Range": etag]).status, 206)
        XCTAssertEqual(try curl(p, "GET", path, headers: ["Range": "bytes=0-0", "If-Range": "\"other\""]).status, 200)
        // An independent client resumes a download with ranges.
        let out = data.appendingPathComponent("resumed.m4s")
        try all.prefix(40).write(to: out)
        try Run.run(["curl", "-sS", "-C", "-", "-o", out.path, "http://127.0.0.1:\(p)\(path)"])
        XCTAssertEqual(try Data(contentsOf: out), all)
    }

    /// What cannot be a media file (a folder, a FIFO, a socket, a dangling link) is 404 at once:
    /// a FIFO with no writer does not hold the request.
    func testWhatIsNotARegularFileIs404AtOnce() throws {
        let data = fx.scratch("serve-http-not-files")
        let folder = try mediaFolder(data)
        try FileManager.default.createDirectory(at: folder.appendingPathComponent("folder.m4s"), withIntermediateDirectories: true)
        try Run.run(["mkfifo", folder.appendingPathComponent("fifo.m4s").path])
        try Run.run(["python3", "-c", "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])", folder.appendingPathComponent("socket.m4s").path])
        try FileManager.default.createSymbolicLink(atPath: folder.appendingPathComponent("gone.m4s").path, withDestinationPath: "nowhere.m4s")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        for name in ["folder.m4s", "fifo.m4s", "socket.m4s", "gone.m4s", "missing.m4s", "seg.m4s/x.m4s"] {
            let r = try curl(s.port, "GET", "/media/999999/a0-full/\(name)")
            XCTAssertEqual(r.status, 404, "\(name): \(r.text)")
        }
        try alive(s, "the requests for what is not a file")
    }

    /// A media file the server may not read (made unreadable for the server, which runs here as
    /// `nobody`): 503 with Retry-After, never 404 (a 404 of an immutable URL may be kept by
    /// caches), and the server's log names the file (relative to the data folder) and the reason.
    func testAMediaFileThatCannotBeReadIs503AndLogged() throws {
        let data = fx.scratch("serve-http-unreadable")
        let folder = try mediaFolder(data)
        let nobody: UInt32 = 65534
        for path in try FileManager.default.subpathsOfDirectory(atPath: data.path).map({ data.appendingPathComponent($0).path }) + [data.path] {
            XCTAssertEqual(chown(path, nobody, nobody), 0, path)
        }
        chmod(folder.appendingPathComponent("seg.m4s").path, 0)
        let port = ServerProcess.freePort()
        let s = ServerProcess(
            name: "clipflow-serve-nobody",
            arguments: ServerProcess.supervised(
                [
                    "setpriv", "--reuid=\(nobody)", "--regid=\(nobody)", "--clear-groups", "--", binary, "serve", "--data", data.path, "--listen",
                    "127.0.0.1:\(port)"
                ],
                maxSeconds: 300),
            environment: ["CLIPFLOW_API_KEY": ""], port: port)
        try s.start()
        defer { s.stop() }
        let r = try curl(port, "GET", "/media/999999/a0-full/seg.m4s")
        XCTAssertEqual(r.status, 503, r.text)
        XCTAssertNotNil(r.header("Retry-After"))
        XCTAssertNil(r.header("Cache-Control"), "a refusal is not kept")
        XCTAssertFalse(r.text.contains(data.path), r.text)
        XCTAssertEqual(try curl(port, "GET", "/media/999999/a0-full/x.m3u8").status, 200, "the readable files are served")
        let log = s.stderrText
        XCTAssertTrue(log.contains("media/999999/a0-full/seg.m4s") && log.contains(String(cString: strerror(EACCES))), log)
        XCTAssertFalse(log.contains(data.path + "/media"), log)
    }

    // MARK: compression and the icon

    /// `gzip -dc` of `bytes` (an independent decoder); nil when they are not gzip.
    func gunzip(_ bytes: Data) throws -> Data? {
        let file = fx.scratch("serve-http-gunzip").appendingPathComponent("body.gz")
        try bytes.write(to: file)
        let r = try Run.run(["gzip", "-dc", file.path], check: false)
        return r.status == 0 ? r.stdout : nil
    }

    /// Text (pages, JSON, playlists) is gzipped for a client that asks (`Accept-Encoding: gzip`),
    /// and every such answer varies by it; media bytes, ranges, and clients that do not ask (or
    /// refuse gzip) get the bytes as they are. Judged by curl's raw bytes, `gzip -dc` and
    /// `curl --compressed`.
    func testTextIsGzippedForClientsThatAskAndMediaNeverIs() throws {
        let data = fx.scratch("serve-http-gzip")
        let folder = data.appendingPathComponent("media/999999/a0-full")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let playlist =
            "#EXTM3U\n#EXT-X-VERSION:7\n#EXT-X-TARGETDURATION:4\n" + (0..<200).map { "#EXTINF:4.000,\nseg\($0).m4s\n" }.joined() + "#EXT-X-ENDLIST\n"
        try Data(playlist.utf8).write(to: folder.appendingPathComponent("index.m3u8"))
        let manifest = "{\"videos\":[" + (0..<100).map { "{\"segment\":\"seg\($0).m4s\",\"duration\":4}" }.joined(separator: ",") + "]}"
        try Data(manifest.utf8).write(to: folder.appendingPathComponent("feed.json"))
        // Media of zeros would shrink to almost nothing; it is sent as it is all the same.
        for name in ["seg0.m4s", "x.mp4", "x.ts", "x.m4a"] { try Data(count: 100_000).write(to: folder.appendingPathComponent(name)) }
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let p = s.port
        let gzip = ["Accept-Encoding": "gzip"]
        let media = "/media/999999/a0-full"
        let texts: [(String, [String: String])] = [
            ("/", [:]), ("/videos", ["Accept": "text/html"]), ("\(media)/index.m3u8", [:]), ("\(media)/feed.json", [:])
        ]
        for (path, headers) in texts {
            let plain = try curl(p, "GET", path, headers: headers)
            XCTAssertEqual(plain.status, 200, path)
            XCTAssertNil(plain.header("Content-Encoding"), path)
            XCTAssertEqual(plain.header("Vary"), "Accept-Encoding", path)
            let packed = try curl(p, "GET", path, headers: headers.merging(gzip) { $1 })
            XCTAssertEqual(packed.status, 200, path)
            XCTAssertEqual(packed.header("Content-Encoding"), "gzip", path)
            XCTAssertEqual(packed.header("Vary"), "Accept-Encoding", path)
            XCTAssertEqual(packed.header("Content-Length"), String(packed.body.count), path)
            XCTAssertEqual(packed.header("Content-Type"), plain.header("Content-Type"), path)
            XCTAssertLessThan(packed.body.count, plain.body.count, path)
            XCTAssertEqual(try gunzip(packed.body), plain.body, path)
            var args = ["curl", "-sS", "--compressed"]
            for (k, v) in headers { args += ["-H", "\(k): \(v)"] }
            XCTAssertEqual(try Run.run(args + ["http://127.0.0.1:\(p)\(path)"]).stdout, plain.body, "curl --compressed \(path)")
            for refusing in ["gzip;q=0", "identity", "br", "deflate, gzip;q=0.0"] {
                let r = try curl(p, "GET", path, headers: headers.merging(["Accept-Encoding": refusing]) { $1 })
                XCTAssertNil(r.header("Content-Encoding"), "\(path) \(refusing)")
                XCTAssertEqual(r.body, plain.body, "\(path) \(refusing)")
            }
            let weighed = try curl(p, "GET", path, headers: headers.merging(["Accept-Encoding": "deflate, GZIP;q=0.5"]) { $1 })
            XCTAssertEqual(weighed.header("Content-Encoding"), "gzip", path)
        }

        // A playlist's gzipped answer is another representation: a weak tag, which revalidates it.
        let playlistPath = "\(media)/index.m3u8"
        let strong = try XCTUnwrap(try curl(p, "GET", playlistPath).header("ETag"))
        let weak = try XCTUnwrap(try curl(p, "GET", playlistPath, headers: gzip).header("ETag"))
        XCTAssertEqual(weak, "W/" + strong)
        let revalidated = try curl(p, "GET", playlistPath, headers: gzip.merging(["If-None-Match": weak]) { $1 })
        XCTAssertEqual(revalidated.status, 304)
        XCTAssertEqual(revalidated.header("ETag"), weak)
        // A range is of the bytes as they are.
        let range = try curl(p, "GET", playlistPath, headers: gzip.merging(["Range": "bytes=0-6"]) { $1 })
        XCTAssertEqual(range.status, 206)
        XCTAssertNil(range.header("Content-Encoding"))
        XCTAssertEqual(range.text, "#EXTM3U")

        for name in ["seg0.m4s", "x.mp4", "x.ts", "x.m4a"] {
            let r = try curl(p, "GET", "\(media)/\(name)", headers: gzip)
            XCTAssertEqual(r.status, 200, name)
            XCTAssertNil(r.header("Content-Encoding"), name)
            XCTAssertNil(r.header("Vary"), name)
            XCTAssertEqual(r.body, Data(count: 100_000), name)
        }
    }

    /// A browser asks every site for `/favicon.ico`: it gets an icon (ffprobe reads a 32x32
    /// picture in it), and the log shows no 404 for it.
    func testTheFaviconIsAnIconNotA404() throws {
        let data = fx.scratch("serve-http-favicon")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let r = try curl(s.port, "GET", "/favicon.ico")
        XCTAssertEqual(r.status, 200)
        XCTAssertEqual(r.header("Content-Type"), "image/x-icon")
        let icon = fx.scratch("serve-http-favicon-out").appendingPathComponent("favicon.ico")
        try r.body.write(to: icon)
        let probe = try Run.run(["ffprobe", "-v", "error", "-show_entries", "stream=width,height", "-of", "csv=p=0", icon.path])
        XCTAssertEqual(probe.out.trimmingCharacters(in: .whitespacesAndNewlines), "32,32")
        s.stop()
        let lines = s.stderrText.split(separator: "\n").filter { $0.contains("path=/favicon.ico") }
        XCTAssertEqual(lines.count, 1, s.stderrText)
        XCTAssertTrue(lines.allSatisfy { $0.contains("status=200") }, s.stderrText)
    }

    // MARK: operator input

    /// `--max-connections` beyond what a server can hold (up to Int64's largest, which once
    /// overflowed the open-file arithmetic) is refused naming the flag, with the usage status.
    func testMaxConnectionsOutOfRangeIsRefusedNamingTheFlag() throws {
        for value in ["9223372036854775807", "1048577", "0", "-1"] {
            let r = try Run.run(
                [
                    "timeout", "20", binary, "serve", "--data", fx.scratch("serve-http-max-connections").path, "--listen", "127.0.0.1:0",
                    "--max-connections=\(value)"
                ],
                check: false)
            XCTAssertTrue([64, 65].contains(r.status), "\(value): exit \(r.status): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("--max-connections"), "\(value): \(r.stderr)")
            XCTAssertFalse(r.stderr.contains("Fatal error"), "\(value): \(r.stderr)")
        }
    }

    // MARK: what the API shows

    /// A job that fails on a path inside the data folder: its `error` names no absolute path of it.
    func testAFailedJobsErrorShowsNoAbsoluteDataPath() throws {
        let data = fx.scratch("serve-http-error")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let p = s.port
        let clip = try fx.clip(
            "serve-http-error.mp4", ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25", "-t", "1", "-c:v", "libx264", "-preset", "ultrafast"])
        XCTAssertEqual(try curl(p, "POST", "/videos", headers: ["Content-Type": "application/json"], body: #"{"name": "e"}"#).status, 201)
        // The video's media folder cannot be made: a file is in its place.
        try FileManager.default.createDirectory(at: data.appendingPathComponent("media"), withIntermediateDirectories: true)
        try Data("in the way".utf8).write(to: data.appendingPathComponent("media/1"))
        let target = try XCTUnwrap(try curl(p, "GET", "/videos/1/upload").json() as? [String: Any])
        let token = try XCTUnwrap(target["token"] as? String)
        let size = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: clip)[.size] as? Int)
        let meta = "video_id \(Data("1".utf8).base64EncodedString()),token \(Data(token.utf8).base64EncodedString())"
        let up = try Run.run([
            "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Length: \(size)", "-H",
            "Upload-Metadata: \(meta)",
            "-H", "Content-Type: application/offset+octet-stream", "--data-binary", "@\(clip)", "http://127.0.0.1:\(p)/files"
        ])
        XCTAssertEqual(up.out, "201")
        var video: [String: Any] = [:]
        for _ in 0..<300 {
            video = try XCTUnwrap(try curl(p, "GET", "/videos/1").json() as? [String: Any])
            if video["status"] as? String == "error" || video["status"] as? String == "ready" { break }
            usleep(100_000)
        }
        XCTAssertEqual(video["status"] as? String, "error", "\(video)")
        let error = try XCTUnwrap(video["error"] as? String)
        print("the failed job's error as the API shows it: \(error)")
        XCTAssertFalse(error.isEmpty)
        for form in [data.path, data.resolvingSymlinksInPath().path, data.standardizedFileURL.path] {
            XCTAssertFalse(error.contains(form), "the error shows the data folder: \(error)")
        }
        let listed = try curl(p, "GET", "/videos")
        XCTAssertFalse(listed.text.contains(data.path), listed.text)
    }
}

/// What curl received: the final status, its head's fields and the body.
struct CurlReply {
    var status: Int
    var headers: [String: String]
    var body: Data
    var text: String { String(decoding: body, as: UTF8.self) }
    func json() throws -> Any { try JSONSerialization.jsonObject(with: body) }
    func header(_ name: String) -> String? { headers.first { $0.key.lowercased() == name.lowercased() }?.value }
}
