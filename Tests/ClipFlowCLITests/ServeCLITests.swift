import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow serve` as a TUS server, judged by independent clients: PyPI tuspy, raw HTTP, and our
/// own uploader; crash-tested with SIGKILL.
final class ServeCLITests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func server(_ data: URL, _ extra: [String] = []) -> ServerProcess { .clipflowServe(binary: binary, data: data, extra) }

    func sha256(_ path: String) throws -> String {
        String(try Run.run(["sha256sum", path]).out.prefix(64))
    }

    func randomFile(_ name: String, bytes: Int) throws -> String {
        let path = fx.scratch("serve-files").appendingPathComponent(name).path
        try Run.run(["sh", "-c", "head -c \(bytes) /dev/urandom > '\(path)'"])
        return path
    }

    /// The file of the upload at `location`: named by the SHA-256 of its id (the id is not kept).
    func stored(_ data: URL, _ location: String) -> String {
        let id = String(location.split(separator: "/").last ?? "")
        let key = (try? Run.run(["sh", "-c", "printf %s \"$0\" | sha256sum", id]))?.out.prefix(64) ?? ""
        return data.appendingPathComponent("uploads").appendingPathComponent(String(key)).path
    }

    func testTuspyAndOurUploaderUploadIntact() throws {
        let data = fx.scratch("serve-tuspy")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let file = try randomFile("up.bin", bytes: 9_000_000)
        let script = """
            import sys
            from tusclient import client
            c = client.TusClient(sys.argv[1])
            u = c.uploader(sys.argv[2], chunk_size=2 * 1024 * 1024, metadata={"filename": "up.bin"}, upload_checksum=True)
            u.upload()
            print(u.url)
            """
        let url = try Run.run(["python3", "-c", script, "http://127.0.0.1:\(s.port)/files", file]).out.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue(url.hasPrefix("http://127.0.0.1:\(s.port)/files/"), url)
        XCTAssertEqual(try sha256(stored(data, url)), try sha256(file))

        let ours = try Run.run([
            binary, "upload", file, "--to", "tus", "--endpoint", "http://127.0.0.1:\(s.port)/files", "--queue", fx.scratch("serve-queue").path
        ])
        let location = try XCTUnwrap(
            (ours.out + ours.stderr).split(whereSeparator: \.isWhitespace).last { $0.contains("/files/") }.map(String.init), ours.out + ours.stderr)
        XCTAssertEqual(try sha256(stored(data, location)), try sha256(file))
    }

    /// tuspy through the fault-injecting proxy: PATCHes cut at random points, a lost response, 503s;
    /// the upload ends intact.
    func testTuspyThroughFaultsEndsIntact() throws {
        let data = fx.scratch("serve-faults")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let proxy = try FaultProxy.start(upstream: "http://127.0.0.1:\(s.port)")
        defer { proxy.stop() }
        try proxy.setRules([
            ["method": "PATCH", "action": "cut", "after_bytes": "random", "seed": 7, "times": 3],
            ["method": "PATCH", "action": "drop_response", "skip": 1, "times": 1],
            ["method": "PATCH", "action": "status", "status": 503, "skip": 2, "times": 2]
        ])
        let file = try randomFile("faults.bin", bytes: 12_000_000)
        let script = """
            import sys
            from tusclient import client
            c = client.TusClient(sys.argv[1])
            u = c.uploader(sys.argv[2], chunk_size=1024 * 1024, upload_checksum=True, retries=20, retry_delay=0)
            u.upload()
            print(u.url)
            """
        let r = try Run.run(["python3", "-c", script, proxy.url + "/files", file], check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        let url = r.out.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(try sha256(stored(data, url)), try sha256(file))
        let stats = try proxy.stats()
        XCTAssertGreaterThanOrEqual(stats.faultsApplied, 5, "\(stats.requests)")
    }

    /// 50 uploads at once (tuspy, one thread each): every one intact; the server's peak RSS printed.
    func testFiftyConcurrentUploads() throws {
        let data = fx.scratch("serve-fifty")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let folder = fx.scratch("serve-fifty-files")
        try Run.run(["sh", "-c", "for i in $(seq 0 49); do head -c 2000000 /dev/urandom > '\(folder.path)'/f$i.bin; done"])
        let script = """
            import sys, threading, hashlib
            from tusclient import client
            url, folder = sys.argv[1], sys.argv[2]
            out = [None] * 50
            def go(i):
                u = client.TusClient(url).uploader(f"{folder}/f{i}.bin", chunk_size=256 * 1024, upload_checksum=True)
                u.upload()
                out[i] = u.url
            ts = [threading.Thread(target=go, args=(i,)) for i in range(50)]
            [t.start() for t in ts]
            [t.join() for t in ts]
            print("\\n".join(out))
            """
        let r = try Run.run(["python3", "-c", script, "http://127.0.0.1:\(s.port)/files", folder.path], check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        let urls = r.out.split(separator: "\n").map(String.init)
        XCTAssertEqual(urls.count, 50)
        XCTAssertEqual(Set(urls).count, 50)
        for (i, u) in urls.enumerated() { XCTAssertEqual(try sha256(stored(data, u)), try sha256(folder.appendingPathComponent("f\(i).bin").path), u) }
        let status = try String(contentsOfFile: "/proc/\(try s.supervisedPID())/status", encoding: .utf8)
        let peak = status.split(separator: "\n").first { $0.hasPrefix("VmHWM") } ?? "VmHWM: ?"
        print("clipflow serve after 50 concurrent 2 MB uploads: peak RSS \(peak.split(separator: ":")[1].trimmingCharacters(in: .whitespaces))")
    }

    /// SIGKILL mid-PATCH, restart on the same data: the upload resumes at the last durable offset
    /// and ends intact (nothing lost, nothing written twice).
    func testUploadResumesIntactAfterKillDashNine() throws {
        let data = fx.scratch("serve-crash")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let file = try randomFile("crash.bin", bytes: 6_000_000)
        let base = "http://127.0.0.1:\(s.port)/files"
        let created = try HTTP.request("POST", base, headers: ["Tus-Resumable": "1.0.0", "Upload-Length": "6000000"])
        XCTAssertEqual(created.status, 201, created.text)
        let location = try XCTUnwrap(created.header("Location"))
        let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        let first = try HTTP.request(
            "PATCH", location, headers: ["Tus-Resumable": "1.0.0", "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"],
            body: bytes.prefix(2_000_000))
        XCTAssertEqual(first.status, 204, first.text)
        // A second PATCH that sends 1.5 MB, then nothing: the server is killed while it waits.
        let slow = Process()
        slow.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        slow.arguments = [
            "python3", "-c",
            """
            import socket, sys, time
            host, port, path, f = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
            body = open(f, 'rb').read()[2000000:]
            s = socket.create_connection((host, port))
            s.sendall(('PATCH %s HTTP/1.1\\r\\nHost: %s:%d\\r\\nTus-Resumable: 1.0.0\\r\\nUpload-Offset: 2000000\\r\\n'
                       'Content-Type: application/offset+octet-stream\\r\\nContent-Length: %d\\r\\n\\r\\n' % (path, host, port, len(body))).encode())
            s.sendall(body[:1500000])
            time.sleep(30)
            """,
            "127.0.0.1", String(s.port), URL(string: location)!.path, file
        ]
        try slow.run()
        defer { slow.terminate() }
        usleep(1_000_000)
        kill(try s.supervisedPID(), SIGKILL)
        slow.terminate()
        try s.start()
        let head = try HTTP.request("HEAD", location, headers: ["Tus-Resumable": "1.0.0"])
        XCTAssertEqual(head.status, 200)
        let offset = try XCTUnwrap(Int(head.header("Upload-Offset") ?? ""))
        XCTAssertTrue(offset == 2_000_000 || offset == 3_500_000, "the durable offset: \(offset)")
        let rest = try HTTP.request(
            "PATCH", location, headers: ["Tus-Resumable": "1.0.0", "Upload-Offset": String(offset), "Content-Type": "application/offset+octet-stream"],
            body: bytes.suffix(from: offset))
        XCTAssertEqual(rest.status, 204, rest.text)
        XCTAssertEqual(rest.header("Upload-Offset"), "6000000")
        XCTAssertEqual(try sha256(stored(data, location)), try sha256(file))
    }

    func testProtocolRefusalsAndExpiration() throws {
        let data = fx.scratch("serve-refusals")
        let s = server(data, ["--max-size", "1000000"])
        try s.start()
        defer { s.stop() }
        let base = "http://127.0.0.1:\(s.port)/files"
        let tus = ["Tus-Resumable": "1.0.0"]
        let options = try HTTP.request("OPTIONS", base)
        XCTAssertEqual(options.status, 204)
        XCTAssertEqual(options.header("Tus-Extension"), "creation,creation-with-upload,termination,checksum,expiration")
        XCTAssertEqual(options.header("Tus-Checksum-Algorithm"), "sha1,sha256")
        XCTAssertEqual(options.header("Tus-Max-Size"), "1000000")

        XCTAssertEqual(try HTTP.request("POST", base, headers: ["Upload-Length": "10"]).status, 412, "no Tus-Resumable")
        XCTAssertEqual(try HTTP.request("POST", base, headers: tus.merging(["Upload-Length": "2000000"]) { $1 }).status, 413, "above Tus-Max-Size")
        let badMeta = try HTTP.request("POST", base, headers: tus.merging(["Upload-Length": "10", "Upload-Metadata": "filename not*base64"]) { $1 })
        XCTAssertEqual(badMeta.status, 400)
        XCTAssertTrue(badMeta.text.contains("Upload-Metadata"), badMeta.text)
        XCTAssertEqual(try HTTP.request("HEAD", base + "/0123456789abcdef0123456789abcdef", headers: tus).status, 404)
        // Headers beyond the limit (32 KiB): refused, the server unharmed.
        let huge = try? HTTP.request("POST", base, headers: tus.merging(["Upload-Length": "10", "X-Padding": String(repeating: "a", count: 40_000)]) { $1 })
        XCTAssertTrue(huge == nil || huge!.status >= 400, "\(String(describing: huge?.status))")
        XCTAssertEqual(try HTTP.request("OPTIONS", base).status, 204)

        // creation-with-upload, then a checksum mismatch (460: nothing kept), a wrong offset (409),
        // a wrong content type (415), a good checksum.
        let body = Data("hello, world".utf8)
        let made = try HTTP.request(
            "POST", base,
            headers: tus.merging(["Upload-Length": "24", "Upload-Metadata": "filename aGVsbG8udHh0", "Content-Type": "application/offset+octet-stream"]) {
                $1
            }, body: body)
        XCTAssertEqual(made.status, 201, made.text)
        XCTAssertEqual(made.header("Upload-Offset"), "12")
        XCTAssertNotNil(made.header("Upload-Expires"))
        let at = try XCTUnwrap(made.header("Location"))
        let patch = tus.merging(["Content-Type": "application/offset+octet-stream", "Upload-Offset": "12"]) { $1 }
        let wrongSum = try HTTP.request(
            "PATCH", at, headers: patch.merging(["Upload-Checksum": "sha1 \(Data(repeating: 0, count: 20).base64EncodedString())"]) { $1 }, body: body)
        XCTAssertEqual(wrongSum.status, 460, wrongSum.text)
        XCTAssertEqual(try HTTP.request("HEAD", at, headers: tus).header("Upload-Offset"), "12", "a mismatched body is not kept")
        XCTAssertEqual(try HTTP.request("PATCH", at, headers: patch.merging(["Upload-Offset": "5"]) { $1 }, body: body).status, 409)
        XCTAssertEqual(try HTTP.request("PATCH", at, headers: patch.merging(["Content-Type": "text/plain"]) { $1 }, body: body).status, 415)
        let sha1 = try Run.run(["sh", "-c", "printf 'hello, world' | openssl dgst -sha1 -binary | base64"]).out.trimmingCharacters(in: .whitespacesAndNewlines)
        let good = try HTTP.request("PATCH", at, headers: patch.merging(["Upload-Checksum": "sha1 \(sha1)"]) { $1 }, body: body)
        XCTAssertEqual(good.status, 204, good.text)
        XCTAssertEqual(good.header("Upload-Offset"), "24")
        XCTAssertEqual(try String(contentsOfFile: stored(data, at), encoding: .utf8), "hello, worldhello, world")
        let meta = try HTTP.request("HEAD", at, headers: tus)
        XCTAssertEqual(meta.header("Upload-Metadata"), "filename aGVsbG8udHh0")
        XCTAssertEqual(try HTTP.request("PATCH", at, headers: patch.merging(["Upload-Offset": "24"]) { $1 }, body: body).status, 413, "past Upload-Length")

        // Termination.
        let doomed = try XCTUnwrap(try HTTP.request("POST", base, headers: tus.merging(["Upload-Length": "5"]) { $1 }).header("Location"))
        XCTAssertEqual(try HTTP.request("DELETE", doomed, headers: tus).status, 204)
        XCTAssertEqual(try HTTP.request("HEAD", doomed, headers: tus).status, 404)
        XCTAssertFalse(FileManager.default.fileExists(atPath: stored(data, doomed)))

        // Expiration (1.8 s on this server): an unfinished upload is refused (410), then swept
        // away; a finished one stays.
        s.stop()
        let e = server(data, ["--expiration", "0.0005", "--sweep-every", "0.5"])
        try e.start()
        defer { e.stop() }
        let late = "http://127.0.0.1:\(e.port)/files"
        let finished = try HTTP.request("POST", late, headers: tus.merging(["Upload-Length": "0"]) { $1 })
        let done = try XCTUnwrap(finished.header("Location"))
        let stale = try XCTUnwrap(try HTTP.request("POST", late, headers: tus.merging(["Upload-Length": "5"]) { $1 }).header("Location"))
        usleep(2_000_000)
        let gone = try HTTP.request("HEAD", stale, headers: tus).status
        XCTAssertTrue(gone == 410 || gone == 404, "\(gone)")
        usleep(1_000_000)
        XCTAssertEqual(try HTTP.request("HEAD", stale, headers: tus).status, 404, "swept")
        XCTAssertFalse(FileManager.default.fileExists(atPath: stored(data, stale)))
        XCTAssertEqual(try HTTP.request("HEAD", done, headers: tus).status, 200, "a finished upload does not expire")
    }

    func testListeningBeyondLoopbackNeedsAnAPIKeyAndSIGTERMEndsCleanly() throws {
        let data = fx.scratch("serve-auth")
        let r = try Run.run([binary, "serve", "--data", data.path, "--listen", "0.0.0.0:0"], env: ["CLIPFLOW_API_KEY": ""], check: false)
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("listening beyond loopback needs an API key"), r.stderr)
        let s = server(data)
        try s.start()
        let started = Date()
        s.stop()  // SIGTERM to supervise.py, which passes it on
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        XCTAssertFalse(s.stderrText.contains("error"), s.stderrText)
    }
}
