import XCTest
import Foundation
import ClipFlowTestSupport

/// `clipflow upload` as a user runs it, against real servers on 127.0.0.1 (PyPI resumable-upload
/// for TUS, the Gcore-style API stand-in); every completed upload compared by sha256.
final class UploadCLITests: XCTestCase {
    let fx = Fixtures.shared
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func makeFile(_ name: String, bytes: Int) throws -> String {
        let f = fx.scratch("upload-cli-src").appendingPathComponent(name)
        var data = [UInt8](repeating: 0, count: bytes)
        var x: UInt32 = 2463534242 &+ UInt32(bytes)
        for i in data.indices { x ^= x << 13; x ^= x >> 17; x ^= x << 5; data[i] = UInt8(truncatingIfNeeded: x) }
        try Data(data).write(to: URL(fileURLWithPath: f.path))
        return f.path
    }

    func events(_ text: String) -> [[String: Any]] {
        text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    func testSendUploadsByTUSWithEventsAndListShowsTheResult() throws {
        let server = try TUSServer.start(directory: fx.scratch("upload-cli-tus"))
        defer { server.stop() }
        let file = try makeFile("clip.mp4", bytes: 3_000_000)
        let queue = fx.scratch("upload-cli-q1").path
        let r = try Run.run(
            [
                binary, "upload", file, "--to", "tus", "--endpoint", server.baseURL, "--queue", queue,
                "--chunk-size", "1000000", "--title", "Holiday", "--tag", "a", "--tag", "b", "--events", "json"
            ], check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        let ev = events(r.out)
        XCTAssertEqual(ev.first { $0["item"] != nil }?["event"] as? String, "started")
        let acks = ev.filter { $0["event"] as? String == "progress" }.compactMap { $0["acknowledged"] as? Int }
        XCTAssertEqual(acks, acks.sorted(), "progress never goes backwards")
        XCTAssertEqual(acks.last, 3_000_000)
        let finished = try XCTUnwrap(ev.last { $0["event"] as? String == "finished" && $0["item"] != nil }?["result"] as? [String: Any])
        let url = try XCTUnwrap(finished["url"] as? String)
        XCTAssertEqual(try server.storedSHA256(for: url), try sha256(ofFile: file))
        // The server got our metadata.
        let head = try server.head(url)
        let meta = head.header("Upload-Metadata") ?? ""
        XCTAssertTrue(meta.contains("title \(Data("Holiday".utf8).base64EncodedString())"), meta)
        XCTAssertTrue(meta.contains("filename \(Data("clip.mp4".utf8).base64EncodedString())"), meta)
        let list = try Run.run([binary, "upload", "list", "--queue", queue])
        XCTAssertTrue(list.out.contains("finished") && list.out.contains("100%") && list.out.contains(url), list.out)
    }

    func testCtrlCPausesAndRunContinuesTheSameUpload() throws {
        let server = try TUSServer.start(directory: fx.scratch("upload-cli-tus2"))
        defer { server.stop() }
        // Every PATCH is held 0.3 s by the proxy, so the upload is still running when Ctrl-C comes.
        let proxy = try FaultProxy.start(upstream: "http://127.0.0.1:\(server.port)")
        defer { proxy.process.stop() }
        try proxy.setRules([["method": "PATCH", "action": "delay", "seconds": 0.3, "times": -1]])
        let file = try makeFile("long.mp4", bytes: 24_000_000)
        let queue = fx.scratch("upload-cli-q2").path
        let (status, text) = try Run.interrupt(
            binary,
            [
                "upload", file, "--to", "tus", "--endpoint", proxy.url + "/files", "--queue", queue,
                "--chunk-size", "262144", "--events", "json"
            ],
            after: "\"event\":\"progress\"", watchStdout: true)
        XCTAssertEqual(status, 130, text)
        XCTAssertFalse(text.contains("\"event\":\"finished\""), "finished before the signal")
        XCTAssertEqual(text.components(separatedBy: "\"event\":\"paused\"").count - 1, 1, "one paused event per upload: \(text)")
        let list = try Run.run([binary, "upload", "list", "--json", "--queue", queue])
        let entry = try XCTUnwrap((try JSONSerialization.jsonObject(with: list.stdout) as? [[String: Any]])?.first)
        XCTAssertEqual(entry["state"] as? String, "queued", "an interrupted upload stays queued")
        try proxy.clearRules()
        let r = try Run.run([binary, "upload", "run", "--queue", queue, "--events", "json"], check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        let ev = events(r.out)
        let resumedAt = try XCTUnwrap(ev.first { $0["event"] as? String == "started" && $0["item"] != nil }?["resumed_at"] as? Int)
        XCTAssertGreaterThan(resumedAt, 0, "continued where the server stopped")
        let url = try XCTUnwrap((ev.last { $0["event"] as? String == "finished" && $0["item"] != nil }?["result"] as? [String: Any])?["url"] as? String)
        XCTAssertEqual(try server.storedSHA256(for: url), try sha256(ofFile: file))
        XCTAssertEqual(server.storedFiles().count, 1, "one upload on the server, not two")
    }

    func testPauseResumeAndCancelThroughTheQueue() throws {
        let server = try TUSServer.start(directory: fx.scratch("upload-cli-tus3"))
        defer { server.stop() }
        let a = try makeFile("a.mp4", bytes: 1_000_000)
        let b = try makeFile("b.mp4", bytes: 1_100_000)
        let queue = fx.scratch("upload-cli-q3").path
        let add = try Run.run([binary, "upload", a, b, "--to", "tus", "--endpoint", server.baseURL, "--queue", queue, "--no-wait"])
        XCTAssertTrue(add.stderr.contains("queued"), add.stderr)
        let ids = try (JSONSerialization.jsonObject(with: try Run.run([binary, "upload", "list", "--json", "--queue", queue]).stdout) as? [[String: Any]] ?? [])
            .compactMap { $0["id"] as? String }
        XCTAssertEqual(ids.count, 2)
        _ = try Run.run([binary, "upload", "pause", ids[1], "--queue", queue])
        XCTAssertEqual(try Run.run([binary, "upload", "run", "--queue", queue], check: false).status, 0)
        var states = try
            (JSONSerialization.jsonObject(with: try Run.run([binary, "upload", "list", "--json", "--queue", queue]).stdout) as? [[String: Any]] ?? [])
            .map { $0["state"] as? String ?? "" }
        XCTAssertEqual(states, ["finished", "paused"])
        _ = try Run.run([binary, "upload", "cancel", ids[1], "--queue", queue])
        _ = try Run.run([binary, "upload", "resume", "--all", "--queue", queue], check: false)
        states = try (JSONSerialization.jsonObject(with: try Run.run([binary, "upload", "list", "--json", "--queue", queue]).stdout) as? [[String: Any]] ?? [])
            .map { $0["state"] as? String ?? "" }
        XCTAssertEqual(states, ["finished", "cancelled"])
        XCTAssertEqual(server.storedFiles().count, 1)
        _ = try Run.run([binary, "upload", "prune", "--queue", queue])
        XCTAssertTrue(try Run.run([binary, "upload", "list", "--queue", queue]).out.contains("empty"))
    }

    func testGcoreFlowRefreshesAnExpiredTokenAndNeverPrintsSecrets() throws {
        let tus = try TUSServer.start(directory: fx.scratch("upload-cli-gcore-tus"))
        defer { tus.stop() }
        let api = try GcoreAPI.start(tusHost: tus.hostPort, access: "cli-access-1234", refresh: "cli-refresh-5678")
        defer { api.stop() }
        try api.expireAccess()
        let file = try makeFile("holiday.mp4", bytes: 2_000_000)
        let r = try Run.run(
            [
                binary, "upload", file, "--to", "gcore", "--endpoint", api.url, "--upload-url", "http://{hostname}/files",
                "--queue", fx.scratch("upload-cli-q4").path, "--events", "json"
            ],
            env: ["CLIPFLOW_UPLOAD_TOKEN": "cli-access-1234", "CLIPFLOW_UPLOAD_REFRESH_TOKEN": "cli-refresh-5678"], check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        let ev = events(r.out)
        XCTAssertEqual(ev.filter { $0["event"] as? String == "credentials-expired" }.count, 1)
        let result = try XCTUnwrap(ev.last { $0["event"] as? String == "finished" && $0["item"] != nil }?["result"] as? [String: Any])
        XCTAssertNotNil(result["video_id"])
        XCTAssertEqual(try tus.storedSHA256(for: result["url"] as! String), try sha256(ofFile: file))
        XCTAssertEqual(try api.refreshCount(), 1)
        let tokens = ((try api.state()["upload_tokens"] as? [String: Any]) ?? [:]).values.compactMap { $0 as? String }
        for secret in ["cli-access-1234", "cli-refresh-5678"] + tokens {
            XCTAssertFalse(r.out.contains(secret) || r.stderr.contains(secret), "secret \(secret) printed")
        }
        // A refused refresh fails clearly, without the token.
        try api.expireAccess()
        let bad = try Run.run(
            [
                binary, "upload", file, "--to", "gcore", "--endpoint", api.url, "--upload-url", "http://{hostname}/files",
                "--queue", fx.scratch("upload-cli-q5").path
            ],
            env: ["CLIPFLOW_UPLOAD_TOKEN": "cli-access-1234", "CLIPFLOW_UPLOAD_REFRESH_TOKEN": "wrong-refresh-0000"], check: false)
        XCTAssertEqual(bad.status, 1)
        XCTAssertTrue(bad.stderr.contains("401"), bad.stderr)
        XCTAssertFalse(bad.stderr.contains("cli-access-1234") || bad.stderr.contains("wrong-refresh-0000"), bad.stderr)
    }

    func testBadInputAndUnreachableServerGiveClearErrors() throws {
        let queue = fx.scratch("upload-cli-q6").path
        let missing = try Run.run(
            [binary, "upload", "/nonexistent/clip.mp4", "--to", "tus", "--endpoint", "http://127.0.0.1:9/files", "--queue", queue], check: false)
        XCTAssertEqual(missing.status, 65)
        XCTAssertTrue(missing.stderr.contains("/nonexistent/clip.mp4") && missing.stderr.contains("No such file"), missing.stderr)
        let usage = try Run.run([binary, "upload", "x.mp4", "--to", "ftp", "--endpoint", "http://h"], check: false)
        XCTAssertNotEqual(usage.status, 0)
        XCTAssertTrue(usage.stderr.contains("--to must be tus, clipflow, gcore or s3"), usage.stderr)
        let file = try makeFile("c.mp4", bytes: 1000)
        let port = ServerProcess.freePort()
        let down = try Run.run(
            [
                binary, "upload", file, "--to", "tus", "--endpoint", "http://127.0.0.1:\(port)/files", "--queue", queue,
                "--retries", "2", "--retry-delay", "0.01"
            ], check: false)
        XCTAssertEqual(down.status, 1)
        XCTAssertTrue(down.stderr.contains("retry 1") && down.stderr.contains("127.0.0.1:\(port)") && down.stderr.contains("upload resume"), down.stderr)
        XCTAssertTrue(try Run.run([binary, "upload", "list", "--queue", queue]).out.contains("failed"))
    }

    func testS3MultipartWithCredentialsFromACommand() throws {
        let s3 = try MotoServer.start(bucket: "cli", partMinSize: 1_000_000)
        defer { s3.process.stop() }
        let creds = fx.scratch("upload-cli-s3").appendingPathComponent("creds.json")
        let c = s3.sessionCredentials
        try """
        {"Credentials": {"AccessKeyId": "\(c.accessKeyID)", "SecretAccessKey": "\(c.secretAccessKey)", "SessionToken": "\(c.sessionToken ?? "")"}}
        """.write(to: creds, atomically: true, encoding: .utf8)
        let file = try makeFile("trip.mp4", bytes: 3_500_000)
        let r = try Run.run(
            [
                binary, "upload", file, "--to", "s3", "--endpoint", s3.endpoint, "--bucket", s3.bucket,
                "--key-prefix", "in/", "--chunk-size", "1000000", "--min-part-size", "1000000",
                "--credentials-command", "cat '\(creds.path)'", "--title", "Trip", "--tag", "x",
                "--queue", fx.scratch("upload-cli-q7").path, "--events", "json"
            ], env: ["AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""],
            check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(try s3.objectSHA256(key: "in/trip.mp4"), try sha256(ofFile: file))
        XCTAssertEqual(try s3.objectMetadata(key: "in/trip.mp4")["title"], "Trip")
        let result = try XCTUnwrap(events(r.out).last { $0["event"] as? String == "finished" && $0["item"] != nil }?["result"] as? [String: Any])
        XCTAssertTrue((result["etag"] as? String ?? "").contains("-4"), "4 parts: \(result)")
        for secret in [c.secretAccessKey, c.sessionToken ?? "none"] {
            XCTAssertFalse(r.out.contains(secret) || r.stderr.contains(secret))
        }
        // A wrong secret is refused with the server's reason and without the secret.
        try """
        {"AccessKeyId": "\(c.accessKeyID)", "SecretAccessKey": "wrong-secret-value-123", "SessionToken": "\(c.sessionToken ?? "")"}
        """.write(to: creds, atomically: true, encoding: .utf8)
        let bad = try Run.run(
            [
                binary, "upload", file, "--to", "s3", "--endpoint", s3.endpoint, "--bucket", s3.bucket, "--key-prefix", "bad/",
                "--credentials-command", "cat '\(creds.path)'", "--queue", fx.scratch("upload-cli-q8").path
            ], check: false)
        XCTAssertEqual(bad.status, 1)
        XCTAssertTrue(bad.stderr.contains("SignatureDoesNotMatch"), bad.stderr)
        XCTAssertFalse(bad.stderr.contains("wrong-secret-value-123"), bad.stderr)
    }
}
