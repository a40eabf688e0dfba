import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow serve`'s uploads on disk under faults, judged with raw HTTP from Python (bodies cut
/// short, chunked bodies without their last chunk, a client that vanished mid-PATCH) and a real
/// full disk (a small tmpfs): what arrived is kept, completion follows the recorded offset,
/// deleting frees space first, and what a local user could read is not kept.
final class ServeStorageCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "storage-test-key"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func server(_ data: URL, _ extra: [String] = [], withKey: Bool = true) -> ServerProcess {
        .clipflowServe(binary: binary, data: data, extra, environment: ["CLIPFLOW_API_KEY": withKey ? key : ""])
    }

    func api(_ s: ServerProcess, _ method: String, _ path: String, json: Any? = nil) throws -> HTTPReply {
        try HTTP.request(method, "http://127.0.0.1:\(s.port)\(path)", headers: ["Authorization": "Bearer \(key)"], json: json)
    }

    let tus = ["Tus-Resumable": "1.0.0"]
    let patch = ["Tus-Resumable": "1.0.0", "Content-Type": "application/offset+octet-stream"]

    /// A video and its upload token.
    func makeVideo(_ s: ServerProcess) throws -> (Int, String) {
        let made = try XCTUnwrap(try api(s, "POST", "/videos", json: ["name": "v"]).json() as? [String: Any])
        let id = try XCTUnwrap(made["id"] as? Int)
        let token = try XCTUnwrap((try api(s, "GET", "/videos/\(id)/upload").json() as? [String: Any])?["token"] as? String)
        return (id, token)
    }

    /// A TUS upload of `length` bytes (for `video` when given); its URL.
    func create(_ s: ServerProcess, length: Int, video: (Int, String)? = nil) throws -> String {
        var headers = tus.merging(["Upload-Length": String(length)]) { $1 }
        if let (id, token) = video {
            headers["Upload-Metadata"] = "filename \(b64("v.bin")),video_id \(b64(String(id))),token \(b64(token))"
        }
        let r = try HTTP.request("POST", "http://127.0.0.1:\(s.port)/files", headers: headers)
        XCTAssertEqual(r.status, 201, r.text)
        return try XCTUnwrap(r.header("Location"))
    }

    func b64(_ s: String) -> String { Data(s.utf8).base64EncodedString() }

    func offset(_ url: String) throws -> Int? {
        Int(try HTTP.request("HEAD", url, headers: tus).header("Upload-Offset") ?? "")
    }

    func status(_ s: ServerProcess, _ id: Int) throws -> String {
        (try api(s, "GET", "/videos/\(id)").json() as? [String: Any])?["status"] as? String ?? "?"
    }

    /// Sends a PATCH by hand: `mode` "cut" (Content-Length `declared`, `send` bytes, then close),
    /// "chunked-unfinished" (the bytes as chunks, no last chunk, close), "chunked" (complete),
    /// or "hold" (Content-Length, `send` bytes, then the connection stays open `hold` seconds);
    /// prints the status line it got back, if any.
    func rawPatch(_ url: String, offset: Int, bytes: String, send: Int, declared: Int, mode: String, hold: Double = 0) throws -> Process {
        let u = try XCTUnwrap(URL(string: url))
        let script = """
            import socket, sys, time
            host, port, path, f, offset, send, declared, mode, hold = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7]), sys.argv[8], float(sys.argv[9])
            body = open(f, 'rb').read()[offset:offset + send]
            s = socket.create_connection((host, port))
            head = 'PATCH %s HTTP/1.1\\r\\nHost: %s:%d\\r\\nTus-Resumable: 1.0.0\\r\\nUpload-Offset: %d\\r\\nContent-Type: application/offset+octet-stream\\r\\n' % (path, host, port, offset)
            if mode.startswith('chunked'):
                s.sendall((head + 'Transfer-Encoding: chunked\\r\\n\\r\\n').encode())
                for i in range(0, len(body), 65536):
                    part = body[i:i + 65536]
                    s.sendall(b'%x\\r\\n' % len(part) + part + b'\\r\\n')
                if mode == 'chunked':
                    s.sendall(b'0\\r\\n\\r\\n')
            else:
                s.sendall((head + 'Content-Length: %d\\r\\n\\r\\n' % declared).encode())
                s.sendall(body)
            if mode == 'hold':
                time.sleep(hold)
            if mode == 'chunked':
                s.settimeout(10)
                print(s.recv(200).split(b'\\r\\n')[0].decode(), flush=True)
                s.close()
            else:
                time.sleep(0.3)
                s.shutdown(socket.SHUT_RDWR)
                s.close()
            """
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = [
            "python3", "-c", script, u.host ?? "127.0.0.1", String(u.port ?? 80), u.path, bytes, String(offset), String(send), String(declared), mode,
            String(hold)
        ]
        let out = Pipe()
        p.standardOutput = out
        try p.run()
        return p
    }

    func finish(_ p: Process) -> String {
        p.waitUntilExit()
        let data = (p.standardOutput as? Pipe)?.fileHandleForReading.readDataToEndOfFile() ?? Data()
        return String(decoding: data, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func randomFile(_ name: String, bytes: Int) throws -> String {
        let path = fx.scratch("serve-storage-files").appendingPathComponent(name).path
        try Run.run(["sh", "-c", "head -c \(bytes) /dev/urandom > '\(path)'"])
        return path
    }

    /// 900,000 of 1,000,000 bytes arrive, then the connection closes: the 900,000 are kept; the
    /// rest resumes from there and the file is intact.
    func testAPatchCutShortKeepsWhatArrived() throws {
        let data = fx.scratch("serve-storage-cut")
        let s = server(data, withKey: false)
        try s.start()
        defer { s.stop() }
        let file = try randomFile("cut.bin", bytes: 1_000_000)
        let url = try create(s, length: 1_000_000)
        _ = finish(try rawPatch(url, offset: 0, bytes: file, send: 900_000, declared: 1_000_000, mode: "cut"))
        var kept = try offset(url)
        for _ in 0..<300 where kept != 900_000 {
            usleep(100_000)
            kept = try offset(url)
        }
        XCTAssertEqual(kept, 900_000)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        let rest = try HTTP.request("PATCH", url, headers: patch.merging(["Upload-Offset": "900000"]) { $1 }, body: bytes.suffix(from: 900_000))
        XCTAssertEqual(rest.status, 204, rest.text)
        let sums = try Run.run(["sh", "-c", "sha256sum '\(file)' '\(data.path)'/uploads/* | cut -c1-64"]).out.split(separator: "\n")
        XCTAssertEqual(sums.count, 2)
        XCTAssertEqual(sums.first, sums.last)
    }

    /// The last byte arrives and then the PATCH fails (a chunked body cut before its last chunk;
    /// a chunked body one byte too long, 413): the upload is complete and its video leaves
    /// `pending` without a restart.
    func testCompletionFollowsTheLastByteWhateverThePatchsEnd() throws {
        let data = fx.scratch("serve-storage-last-byte")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let file = try randomFile("last.bin", bytes: 300_001)
        let a = try makeVideo(s), b = try makeVideo(s)
        let unfinished = try create(s, length: 300_000, video: a)
        _ = finish(try rawPatch(unfinished, offset: 0, bytes: file, send: 300_000, declared: 0, mode: "chunked-unfinished"))
        let tooLong = try create(s, length: 300_000, video: b)
        let answer = finish(try rawPatch(tooLong, offset: 0, bytes: file, send: 300_001, declared: 0, mode: "chunked"))
        XCTAssertTrue(answer.contains("413"), answer)
        for (video, url) in [(a.0, unfinished), (b.0, tooLong)] {
            var kept = try offset(url)
            for _ in 0..<300 where kept != 300_000 {
                usleep(100_000)
                kept = try offset(url)
            }
            XCTAssertEqual(kept, 300_000, url)
            var seen = try status(s, video)
            for _ in 0..<300 where seen == "pending" {
                usleep(100_000)
                seen = try status(s, video)
            }
            XCTAssertNotEqual(seen, "pending", "video \(video) is queued once its upload is complete")
        }
    }

    /// A client vanishes mid-PATCH (its connection stays open, silent): a resume from another
    /// connection takes the upload over at once (no 423 for the idle timeout), at the offset the
    /// vanished PATCH made durable, and the upload ends intact.
    func testAResumeTakesOverFromAVanishedClient() throws {
        let data = fx.scratch("serve-storage-takeover")
        let s = server(data, withKey: false)
        try s.start()
        defer { s.stop() }
        let file = try randomFile("takeover.bin", bytes: 3_000_000)
        let url = try create(s, length: 3_000_000)
        let vanished = try rawPatch(url, offset: 0, bytes: file, send: 1_200_000, declared: 3_000_000, mode: "hold", hold: 60)
        defer { vanished.terminate() }
        usleep(1_500_000)
        let started = Date()
        let head = try HTTP.request("HEAD", url, headers: tus)
        XCTAssertEqual(head.status, 200, head.text)
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        let at = try XCTUnwrap(Int(head.header("Upload-Offset") ?? ""))
        XCTAssertEqual(at, 1_200_000, "what the vanished PATCH received is kept")
        let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        let rest = try HTTP.request("PATCH", url, headers: patch.merging(["Upload-Offset": String(at)]) { $1 }, body: bytes.suffix(from: at))
        XCTAssertEqual(rest.status, 204, rest.text)
        XCTAssertLessThan(Date().timeIntervalSince(started), 10)
        let sums = try Run.run(["sh", "-c", "sha256sum '\(file)' '\(data.path)'/uploads/* | cut -c1-64"]).out.split(separator: "\n")
        XCTAssertEqual(sums.first, sums.last)

        // A PATCH (not a HEAD) takes over too; its offset is then checked against what the
        // vanished one recorded.
        let second = try create(s, length: 3_000_000)
        let silent = try rawPatch(second, offset: 0, bytes: file, send: 700_000, declared: 3_000_000, mode: "hold", hold: 60)
        defer { silent.terminate() }
        usleep(1_500_000)
        let stale = try HTTP.request("PATCH", second, headers: patch.merging(["Upload-Offset": "0"]) { $1 }, body: bytes.prefix(1000))
        XCTAssertEqual(stale.status, 409, stale.text)
        XCTAssertEqual(try offset(second), 700_000)
    }

    /// A full disk (an 8 MB tmpfs as the data folder): the PATCH that fills it is answered 507
    /// with the reason; TUS DELETE, DELETE /videos/ID and the expiry sweep each free the space
    /// (files first); the server takes uploads again by itself.
    func testAFullDiskIsReportedAndDeletingFreesIt() throws {
        let data = fx.scratch("serve-storage-full")
        guard (try? Run.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", data.path]))?.status == 0 else {
            throw XCTSkip("mounting a tmpfs needs root")
        }
        defer { _ = try? Run.run(["umount", "-l", data.path], check: false) }
        let s = server(data, ["--expiration", "0.002", "--sweep-every", "0.5"])
        try s.start()
        defer { s.stop() }
        let file = try randomFile("full.bin", bytes: 12_000_000)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        func free() throws -> Int { Int(try Run.run(["df", "--output=avail", "-B1", data.path]).out.split(separator: "\n").last ?? "") ?? 0 }
        func fill(_ url: String) throws {
            let r = try HTTP.request("PATCH", url, headers: patch.merging(["Upload-Offset": "0"]) { $1 }, body: bytes)
            XCTAssertEqual(r.status, 507, r.text)
            XCTAssertTrue(r.text.contains("disk is full"), r.text)
            XCTAssertLessThan(try free(), 1_000_000)
        }
        let empty = try free()

        // DELETE /videos/ID.
        let v = try makeVideo(s)
        try fill(try create(s, length: 12_000_000, video: v))
        XCTAssertEqual(try api(s, "DELETE", "/videos/\(v.0)").status, 204)
        XCTAssertGreaterThan(try free(), empty - 1_000_000)

        // TUS DELETE.
        let w = try makeVideo(s)
        let upload = try create(s, length: 12_000_000, video: w)
        try fill(upload)
        XCTAssertEqual(try HTTP.request("DELETE", upload, headers: tus).status, 204)
        XCTAssertGreaterThan(try free(), empty - 1_000_000)

        // The expiry sweep (uploads expire after 7 s here).
        let x = try makeVideo(s)
        let expiring = try create(s, length: 12_000_000, video: x)
        try fill(expiring)
        var freed = try free()
        for _ in 0..<150 where freed < empty - 1_000_000 {
            usleep(100_000)
            freed = try free()
        }
        XCTAssertGreaterThan(freed, empty - 1_000_000, "swept")

        // Space is back: an upload goes through.
        let y = try makeVideo(s)
        let small = try create(s, length: 1_000_000, video: y)
        XCTAssertEqual(try HTTP.request("PATCH", small, headers: patch.merging(["Upload-Offset": "0"]) { $1 }, body: bytes.prefix(1_000_000)).status, 204)
    }

    /// DELETE /videos/ID removes every upload of the video: one in progress takes no more PATCHes
    /// (404); an extra upload made with the same token and finished after another was bound is
    /// swept; a video's source cannot be terminated by TUS (409), the video stays as it was.
    func testDeletingAVideoRemovesItsUploads() throws {
        let data = fx.scratch("serve-storage-video-uploads")
        let s = server(data, ["--sweep-every", "0.5"])
        try s.start()
        defer { s.stop() }
        let file = try randomFile("v.bin", bytes: 200_000)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: file))
        let v = try makeVideo(s)
        let inProgress = try create(s, length: 200_000, video: v)
        XCTAssertEqual(try HTTP.request("PATCH", inProgress, headers: patch.merging(["Upload-Offset": "0"]) { $1 }, body: bytes.prefix(1000)).status, 204)
        XCTAssertEqual(try api(s, "DELETE", "/videos/\(v.0)").status, 204)
        let late = try HTTP.request("PATCH", inProgress, headers: patch.merging(["Upload-Offset": "1000"]) { $1 }, body: bytes.suffix(from: 1000))
        XCTAssertTrue([404, 410].contains(late.status), "\(late.status) \(late.text)")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: data.appendingPathComponent("uploads").path), [])

        let w = try makeVideo(s)
        let first = try create(s, length: 200_000, video: w), extra = try create(s, length: 200_000, video: w)
        for url in [first, extra] {
            XCTAssertEqual(try HTTP.request("PATCH", url, headers: patch.merging(["Upload-Offset": "0"]) { $1 }, body: bytes).status, 204)
        }
        var gone = try HTTP.request("HEAD", extra, headers: tus).status
        for _ in 0..<50 where gone != 404 {
            usleep(100_000)
            gone = try HTTP.request("HEAD", extra, headers: tus).status
        }
        XCTAssertEqual(gone, 404, "the extra upload is swept")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: data.appendingPathComponent("uploads").path).count, 1)
        let terminate = try HTTP.request("DELETE", first, headers: tus)
        XCTAssertEqual(terminate.status, 409, terminate.text)
        XCTAssertTrue(terminate.text.contains("DELETE /videos/\(w.0)"), terminate.text)
        XCTAssertEqual(try HTTP.request("HEAD", first, headers: tus).status, 200)
    }

    /// The database and its WAL are readable by the server's user only; the upload token is
    /// neither stored nor echoed by HEAD; upload ids are stored as digests.
    func testTheDatabaseKeepsNoSecretsForOthers() throws {
        let data = fx.scratch("serve-storage-secrets")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let v = try makeVideo(s)
        let url = try create(s, length: 100, video: v)
        let head = try HTTP.request("HEAD", url, headers: tus)
        let meta = head.header("Upload-Metadata") ?? ""
        XCTAssertTrue(meta.contains("video_id"), meta)
        XCTAssertFalse(meta.contains("token") || meta.contains(b64(v.1)), meta)
        for name in ["clipflow.sqlite", "clipflow.sqlite-wal"] {
            let attributes = try FileManager.default.attributesOfItem(atPath: data.appendingPathComponent(name).path)
            XCTAssertEqual((attributes[.posixPermissions] as? Int).map { String($0, radix: 8) }, "600", name)
        }
        let id = String(try XCTUnwrap(url.split(separator: "/").last))
        let stored = try Run.run(["sh", "-c", "cat '\(data.path)'/clipflow.sqlite*; ls '\(data.path)/uploads'"]).out
        XCTAssertFalse(stored.contains(id), "the upload id is not stored")
        XCTAssertFalse(stored.contains(v.1) || stored.contains(b64(v.1)), "the upload token is not stored")
    }
}
