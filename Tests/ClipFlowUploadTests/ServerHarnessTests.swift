import XCTest
import ClipFlowTestSupport

/// Proves the test servers themselves (Tests/Servers, ClipFlowTestSupport/Servers.swift) with the
/// `curl` CLI as the client: none of our upload code is involved.
final class ServerHarnessTests: XCTestCase {
    private var scratch: URL!

    override func setUpWithError() throws {
        scratch = Fixtures.shared.scratch("harness")
    }

    /// A file of `size` pseudo-random bytes.
    private func blob(_ name: String, size: Int) throws -> URL {
        let u = scratch.appendingPathComponent(name)
        var g = SystemRandomNumberGenerator()
        var d = Data(count: size)
        d.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for i in words.indices { words[i] = g.next() }
        }
        try d.write(to: u)
        return u
    }

    private struct CurlResult { var exit: Int32; var code: Int; var headers: String; var body: String }

    /// curl with -w http_code; headers (-D) and body (-o) captured; never throws on failure.
    private func curl(_ args: [String]) throws -> CurlResult {
        let h = scratch.appendingPathComponent("h-\(UInt32.random(in: 0...UInt32.max))")
        let b = scratch.appendingPathComponent("b-\(UInt32.random(in: 0...UInt32.max))")
        let r = try Run.run(
            ["curl", "-sS", "--noproxy", "*", "-D", h.path, "-o", b.path, "-w", "%{http_code}"] + args,
            check: false)
        return CurlResult(
            exit: r.status, code: Int(r.out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0,
            headers: (try? String(contentsOf: h, encoding: .utf8)) ?? "",
            body: (try? String(contentsOf: b, encoding: .utf8)) ?? "")
    }

    private func header(_ name: String, in headers: String) -> String? {
        for line in headers.split(separator: "\r\n") {
            let parts = line.split(separator: ":", maxSplits: 1)
            if parts.count == 2 && parts[0].lowercased() == name.lowercased() {
                return parts[1].trimmingCharacters(in: .whitespaces)
            }
        }
        return nil
    }

    private func tusCreate(_ base: String, length: Int) throws -> String {
        let r = try curl(["-X", "POST", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Length: \(length)", base + "/files"])
        XCTAssertEqual(r.code, 201, r.body)
        let loc = try XCTUnwrap(header("Location", in: r.headers))
        XCTAssertTrue(loc.hasPrefix("/files/"), "resumable-upload 0.3.0 answers a relative Location: \(loc)")
        return loc
    }

    private func tusPatch(_ base: String, _ location: String, offset: Int, file: URL, extra: [String] = []) throws -> CurlResult {
        try curl(
            [
                "-X", "PATCH", "-H", "Tus-Resumable: 1.0.0", "-H", "Content-Type: application/offset+octet-stream",
                "-H", "Upload-Offset: \(offset)", "--data-binary", "@" + file.path
            ] + extra + [base + location])
    }

    // MARK: TUS + proxy

    func testTUSUploadThroughProxyStoresTheExactBytes() throws {
        let tus = try TUSServer.start(directory: scratch.appendingPathComponent("tus"))
        let proxy = try FaultProxy.start(upstream: "http://127.0.0.1:\(tus.port)")
        let file = try blob("a.bin", size: 3_000_000)  // > 1 MiB: curl sends Expect: 100-continue
        let loc = try tusCreate(proxy.url, length: 3_000_000)
        let r = try tusPatch(proxy.url, loc, offset: 0, file: file)
        XCTAssertEqual(r.code, 204)
        XCTAssertEqual(header("Upload-Offset", in: r.headers), "3000000")
        XCTAssertEqual(try tus.offset(of: loc), 3_000_000)
        XCTAssertEqual(try tus.storedSHA256(for: loc), try sha256(ofFile: file))
        XCTAssertEqual(tus.storedFiles().count, 1)

        // Chunked request bodies are forwarded too.
        let loc2 = try tusCreate(proxy.url, length: 3_000_000)
        let r2 = try tusPatch(proxy.url, loc2, offset: 0, file: file, extra: ["-H", "Transfer-Encoding: chunked"])
        XCTAssertEqual(r2.code, 204)
        XCTAssertEqual(try tus.storedSHA256(for: loc2), try sha256(ofFile: file))

        let s = try proxy.stats()
        XCTAssertEqual(s.count("POST", outcome: "201"), 2)
        XCTAssertEqual(s.count("PATCH", outcome: "204"), 2)
        XCTAssertEqual(s.faultsApplied, 0)
        XCTAssertGreaterThanOrEqual(s.bytesForwarded, 6_000_000)
    }

    func testCutDropStatusAndStallRules() throws {
        let tus = try TUSServer.start(directory: scratch.appendingPathComponent("tus"))
        let proxy = try FaultProxy.start(upstream: "http://127.0.0.1:\(tus.port)")
        let file = try blob("b.bin", size: 1_000_000)

        // cut: the client sees a broken connection; resumable-upload 0.3.0 keeps the bytes that
        // arrived before the (FIN) close and moves the offset to them.
        let l1 = try tusCreate(proxy.url, length: 1_000_000)
        try proxy.setRules([["method": "PATCH", "action": "cut", "after_bytes": 300_000]])
        let cut = try tusPatch(proxy.url, l1, offset: 0, file: file)
        XCTAssertNotEqual(cut.exit, 0, "curl must fail on a cut connection")
        usleep(300_000)
        XCTAssertEqual(try tus.offset(of: l1), 300_000)
        // The stored prefix is the file's prefix; the upload then completes from that offset.
        let rest = scratch.appendingPathComponent("rest.bin")
        try Data(try Data(contentsOf: file).suffix(from: 300_000)).write(to: rest)
        XCTAssertEqual(try tusPatch(proxy.url, l1, offset: 300_000, file: rest).code, 204)
        XCTAssertEqual(try tus.storedSHA256(for: l1), try sha256(ofFile: file))

        // cut with an RST to the server: it keeps nothing.
        let l1b = try tusCreate(proxy.url, length: 1_000_000)
        try proxy.setRules([["method": "PATCH", "action": "cut", "after_bytes": 300_000, "upstream_close": "rst"]])
        XCTAssertNotEqual(try tusPatch(proxy.url, l1b, offset: 0, file: file).exit, 0)
        usleep(300_000)
        XCTAssertEqual(try tus.offset(of: l1b), 0)

        // drop_response: the server applied the PATCH, the client never heard.
        let l2 = try tusCreate(proxy.url, length: 1_000_000)
        try proxy.setRules([["method": "PATCH", "action": "drop_response"]])
        let drop = try tusPatch(proxy.url, l2, offset: 0, file: file)
        XCTAssertEqual(drop.exit, 52, "curl: empty reply from server")
        XCTAssertEqual(try tus.offset(of: l2), 1_000_000)

        // status: answered by the proxy `times` times, then the request goes through.
        let l3 = try tusCreate(proxy.url, length: 1_000_000)
        try proxy.setRules([
            [
                "method": "PATCH", "action": "status", "status": 423, "times": 2,
                "body": "locked", "headers": ["Retry-After": "1"]
            ]
        ])
        let s1 = try tusPatch(proxy.url, l3, offset: 0, file: file)
        XCTAssertEqual(s1.code, 423)
        XCTAssertEqual(s1.body, "locked")
        XCTAssertEqual(header("Retry-After", in: s1.headers), "1")
        XCTAssertEqual(try tusPatch(proxy.url, l3, offset: 0, file: file).code, 423)
        XCTAssertEqual(try tus.offset(of: l3), 0, "a status rule never reaches the server")
        XCTAssertEqual(try tusPatch(proxy.url, l3, offset: 0, file: file).code, 204)

        // skip: the first matching request passes, the second gets the fault.
        let l4 = try tusCreate(proxy.url, length: 1_000_000)
        try proxy.setRules([["method": "HEAD", "action": "status", "status": 503, "skip": 1]])
        XCTAssertEqual(try curl(["-I", "-H", "Tus-Resumable: 1.0.0", proxy.url + l4]).code, 200)
        XCTAssertEqual(try curl(["-I", "-H", "Tus-Resumable: 1.0.0", proxy.url + l4]).code, 503)
        XCTAssertEqual(try curl(["-I", "-H", "Tus-Resumable: 1.0.0", proxy.url + l4]).code, 200)

        // stall: the client's own timeout fires; the proxy then closes and the server keeps what it got.
        let l5 = try tusCreate(proxy.url, length: 1_000_000)
        try proxy.setRules([["method": "PATCH", "action": "stall", "after_bytes": 1000, "seconds": 1.5]])
        let stall = try tusPatch(proxy.url, l5, offset: 0, file: file, extra: ["--max-time", "0.7"])
        XCTAssertEqual(stall.exit, 28, "curl: operation timed out")
        var offset: Int? = 0
        for _ in 0..<40 where offset != 1000 { usleep(100_000); offset = try tus.offset(of: l5) }
        XCTAssertEqual(offset, 1000)

        let st = try proxy.stats()
        XCTAssertEqual(st.count("PATCH", outcome: "cut"), 2)
        XCTAssertEqual(st.count("PATCH", outcome: "drop_response"), 1)
        XCTAssertEqual(st.count("PATCH", outcome: "status:423"), 2)
        XCTAssertEqual(st.count("HEAD", outcome: "status:503"), 1)
        XCTAssertEqual(st.count("PATCH", outcome: "stall"), 1)
        XCTAssertEqual(st.faultsApplied, 7)
        try proxy.clearRules()
        try proxy.resetStats()
        XCTAssertEqual(try proxy.stats().requests.count, 0)
    }

    func testTUSRestartKeepsUploadsAndProxyAnswers502WhileDown() throws {
        let tus = try TUSServer.start(directory: scratch.appendingPathComponent("tus"))
        let proxy = try FaultProxy.start(upstream: "http://127.0.0.1:\(tus.port)")
        let file = try blob("c.bin", size: 400_000)
        let half = scratch.appendingPathComponent("half.bin"), rest = scratch.appendingPathComponent("rest.bin")
        let d = try Data(contentsOf: file)
        try d.prefix(150_000).write(to: half)
        try d.suffix(from: 150_000).write(to: rest)
        let loc = try tusCreate(proxy.url, length: 400_000)
        XCTAssertEqual(try tusPatch(proxy.url, loc, offset: 0, file: half).code, 204)
        let port = tus.port
        tus.stop()
        XCTAssertEqual(try curl(["-I", "-H", "Tus-Resumable: 1.0.0", proxy.url + loc]).code, 502)
        try tus.restart()
        XCTAssertEqual(tus.port, port)
        XCTAssertEqual(try tus.offset(of: loc), 150_000)
        XCTAssertEqual(try tusPatch(proxy.url, loc, offset: 150_000, file: rest).code, 204)
        XCTAssertEqual(try tus.storedSHA256(for: loc), try sha256(ofFile: file))
    }

    // MARK: S3 (moto)

    func testMotoChecksSignaturesAndSessionTokens() throws {
        let moto = try MotoServer.start(bucket: "clipflow-test", partMinSize: 1024)
        let s = moto.sessionCredentials
        let token = try XCTUnwrap(s.sessionToken)
        let file = try blob("s3.bin", size: 200_000)
        let hash = try sha256(ofFile: file)
        let emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        func signed(_ key: String, _ secret: String, token: String?, payload: String = emptyHash) -> [String] {
            // curl 7.88's SigV4 does not send x-amz-content-sha256 itself; moto needs it signed.
            [
                "--aws-sigv4", "aws:amz:\(moto.region):s3", "--user", "\(key):\(secret)",
                "-H", "x-amz-content-sha256: \(payload)"
            ] + (token.map { ["-H", "x-amz-security-token: \($0)"] } ?? [])
        }
        let obj = "\(moto.endpoint)/\(moto.bucket)/dir/clip.mp4"

        let put = try curl(
            signed(s.accessKeyID, s.secretAccessKey, token: token, payload: hash)
                + ["-T", file.path, "-H", "x-amz-meta-clip-id: 42", obj])
        XCTAssertEqual(put.code, 200, put.body)
        XCTAssertEqual(try moto.objectSHA256(key: "dir/clip.mp4"), hash)
        XCTAssertEqual(try moto.objectMetadata(key: "dir/clip.mp4")["clip-id"], "42")

        let badSecret = try curl(signed(s.accessKeyID, "wrong-secret", token: token) + [obj])
        XCTAssertEqual(badSecret.code, 403)
        XCTAssertTrue(badSecret.body.contains("SignatureDoesNotMatch"), badSecret.body)
        let noToken = try curl(signed(s.accessKeyID, s.secretAccessKey, token: nil) + [obj])
        XCTAssertEqual(noToken.code, 403, "session credentials without their token are refused")
        let badToken = try curl(signed(s.accessKeyID, s.secretAccessKey, token: "not-the-token") + [obj])
        XCTAssertEqual(badToken.code, 400)
        XCTAssertTrue(badToken.body.contains("InvalidToken"), badToken.body)
        let unsigned = try curl([obj])
        XCTAssertFalse((200..<300).contains(unsigned.code), "moto answers an unsigned request with \(unsigned.code)")
        let get = try curl(signed(s.accessKeyID, s.secretAccessKey, token: token) + [obj])
        XCTAssertEqual(get.code, 200)

        // Multipart: an upload in progress is listed until it is aborted.
        // curl 7.88 signs "uploads" without "=".
        let create = try curl(signed(s.accessKeyID, s.secretAccessKey, token: token) + ["-X", "POST", obj + "?uploads="])
        XCTAssertEqual(create.code, 200, create.body)
        let uploadID = try XCTUnwrap(
            create.body.components(separatedBy: "<UploadId>").dropFirst().first?
                .components(separatedBy: "</UploadId>").first)
        XCTAssertEqual(try moto.listMultipartUploads(), [uploadID])
        let abort = try curl(
            signed(s.accessKeyID, s.secretAccessKey, token: token)
                + ["-X", "DELETE", obj + "?uploadId=\(uploadID)"])
        XCTAssertEqual(abort.code, 204, abort.body)
        XCTAssertEqual(try moto.listMultipartUploads(), [])

        // Through the proxy the signature still holds (Host is kept), and an ExpiredToken can be faked.
        let proxy = try FaultProxy.start(upstream: moto.endpoint)
        let viaProxy = "\(proxy.url)/\(moto.bucket)/dir/clip.mp4"
        XCTAssertEqual(try curl(signed(s.accessKeyID, s.secretAccessKey, token: token) + [viaProxy]).code, 200)
        try proxy.setRules([
            [
                "method": "GET", "action": "status", "status": 400,
                "headers": ["Content-Type": "application/xml"],
                "body": "<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>"
            ]
        ])
        let expired = try curl(signed(s.accessKeyID, s.secretAccessKey, token: token) + [viaProxy])
        XCTAssertEqual(expired.code, 400)
        XCTAssertTrue(expired.body.contains("ExpiredToken"))
    }

    // MARK: S3 (SeaweedFS)

    /// SeaweedFS starts in seconds on 127.0.0.1 only, checks every signature (curl's own SigV4 is
    /// the client here), serves what boto3 put, and leaves no process behind when stopped.
    func testSeaweedFSChecksSignaturesAndStopsWithNothingLeft() throws {
        let started = Date()
        let s3 = try SeaweedFS.start(buckets: ["clipflow", "second"])
        let startup = Date().timeIntervalSince(started)
        XCTAssertLessThan(startup, 30, "SeaweedFS took \(startup) s to serve")
        let file = try blob("s3.bin", size: 200_000)
        let hash = try sha256(ofFile: file)
        let emptyHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        func signed(_ secret: String, payload: String = emptyHash) -> [String] {
            ["--aws-sigv4", "aws:amz:\(s3.region):s3", "--user", "\(s3.accessKey):\(secret)", "-H", "x-amz-content-sha256: \(payload)"]
        }
        let obj = "\(s3.endpoint)/second/dir/clip.mp4"
        let put = try curl(signed(s3.secretKey, payload: hash) + ["-T", file.path, "-H", "x-amz-meta-clip-id: 42", obj])
        XCTAssertEqual(put.code, 200, put.body)
        XCTAssertEqual(try s3.objectSHA256(key: "dir/clip.mp4", bucket: "second"), hash)
        XCTAssertEqual((try s3.head(key: "dir/clip.mp4", bucket: "second")["metadata"] as? [String: String])?["clip-id"], "42")
        XCTAssertEqual(try s3.keys(bucket: "second"), ["dir/clip.mp4"])
        let badSecret = try curl(signed("wrong-secret") + [obj])
        XCTAssertEqual(badSecret.code, 403)
        XCTAssertTrue(badSecret.body.contains("SignatureDoesNotMatch"), badSecret.body)
        XCTAssertEqual(try curl([obj]).code, 403, "an unsigned request is refused")
        let range = try curl(signed(s3.secretKey) + ["-H", "Range: bytes=100-", obj])
        XCTAssertEqual(range.code, 206)
        XCTAssertEqual(header("Content-Range", in: range.headers), "bytes 100-199999/200000")

        // Every listening socket of the server is on 127.0.0.1.
        let pids = try Run.run(["pgrep", "-f", "^[^ ]*weed -logdir=\(s3.folder.path)"], check: false).out.split(separator: "\n").map(String.init)
        XCTAssertEqual(pids.count, 1, "one weed process")
        let sockets = try Run.run(["ss", "-ltnpH"]).out.split(separator: "\n").filter { line in pids.contains { line.contains("pid=\($0),") } }
        XCTAssertGreaterThanOrEqual(sockets.count, 8, sockets.joined(separator: "\n"))
        for line in sockets { XCTAssertTrue(line.contains(" 127.0.0.1:"), String(line)) }

        s3.stop()
        XCTAssertEqual(try Run.run(["pgrep", "-f", "^[^ ]*weed -logdir=\(s3.folder.path)"], check: false).out, "", "weed still running")
        XCTAssertFalse(FileManager.default.fileExists(atPath: s3.folder.path), "the data folder is removed")
    }

    // MARK: Gcore stand-in

    func testGcoreStandIn() throws {
        let api = try GcoreAPI.start(tusHost: "127.0.0.1:9", access: "A0", refresh: "R0")
        func call(_ method: String, _ path: String, token: String?, json: [String: Any]? = nil) throws -> HTTPReply {
            try HTTP.request(
                method, api.url + path, headers: token.map { ["Authorization": "Bearer \($0)"] } ?? [:],
                json: json)
        }
        let created = try call("POST", "/videos", token: "A0", json: ["name": "clip one"])
        XCTAssertEqual(created.status, 201)
        let video = try XCTUnwrap(try created.json() as? [String: Any])
        let id = try XCTUnwrap(video["id"] as? Int)
        XCTAssertEqual(video["name"] as? String, "clip one")
        XCTAssertEqual(video["client_id"] as? Int, 1234)

        let info = try XCTUnwrap(try call("GET", "/videos/\(id)/upload", token: "A0").json() as? [String: Any])
        let servers = try XCTUnwrap(info["servers"] as? [[String: Any]])
        XCTAssertEqual(servers.first?["hostname"] as? String, "127.0.0.1:9")
        XCTAssertFalse(((info["token"] as? String) ?? "").isEmpty)
        XCTAssertEqual((info["video"] as? [String: Any])?["id"] as? Int, id)
        XCTAssertEqual(try call("GET", "/videos/999999/upload", token: "A0").status, 404)
        XCTAssertEqual(try call("GET", "/videos/\(id)", token: "nope").status, 401)

        try api.expireAccess()
        let expired = try call("GET", "/videos/\(id)", token: "A0")
        XCTAssertEqual(expired.status, 401)
        XCTAssertEqual((try expired.json() as? [String: Any])?["detail"] as? String, "token expired")
        let refreshed = try XCTUnwrap(
            try call("POST", "/auth/refresh", token: nil, json: ["refresh": "R0"]).json()
                as? [String: Any])
        let a1 = try XCTUnwrap(refreshed["access"] as? String)
        XCTAssertEqual(try call("GET", "/videos/\(id)", token: a1).status, 200)
        XCTAssertEqual(try call("POST", "/auth/refresh", token: nil, json: ["refresh": "bad"]).status, 401)

        let login = try call("POST", "/auth/login", token: nil, json: ["username": api.username, "password": api.password])
        XCTAssertEqual(login.status, 200)
        XCTAssertEqual(try api.refreshCount(), 1)
        XCTAssertEqual(try api.videos().count, 1)
    }
}
