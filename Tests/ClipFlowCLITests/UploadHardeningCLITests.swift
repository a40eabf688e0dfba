import XCTest
import Foundation
import ClipFlowTestSupport

/// `clipflow upload` against hostile servers and hostile input, as a user runs it: messages,
/// events and what is kept in the queue file.
final class UploadHardeningCLITests: XCTestCase {
    let fx = Fixtures.shared
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func makeFile(_ name: String, bytes: Int) throws -> String {
        let f = fx.scratch("upload-hard-src").appendingPathComponent(name)
        var data = [UInt8](repeating: 0, count: bytes)
        for i in data.indices { data[i] = UInt8(truncatingIfNeeded: i &* 13 &+ i >> 7) }
        try Data(data).write(to: URL(fileURLWithPath: f.path))
        return f.path
    }

    /// Everything under `dir` as text (the queue file, the resume store...).
    func contents(of dir: String) -> String {
        let fm = FileManager.default
        return ((try? fm.contentsOfDirectory(atPath: dir)) ?? []).map {
            (try? String(contentsOfFile: dir + "/" + $0, encoding: .utf8)) ?? ""
        }.joined(separator: "\n")
    }

    /// 10 (a): a failed upload names its file once.
    func testFailedUploadNamesTheFileOnce() throws {
        let server = try HostileServer.start()
        defer { server.stop() }
        try server.plan(rules: [["method": "POST", "path": "/files", "mutation": "status", "value": 0.004, "times": -1]])  // 400
        let file = try makeFile("once.bin", bytes: 20_000)
        let queue = fx.scratch("upload-hard-once").path
        let r = try Run.run(
            [
                binary, "upload", file, "--to", "tus", "--endpoint", server.url + "/files", "--queue", queue,
                "--retries", "1", "--retry-delay", "0.01"
            ], check: false)
        XCTAssertEqual(r.status, 1, r.stderr)
        // The failure as it happens (ID: failed (CODE): FILE: why), then the closing line.
        let line = try XCTUnwrap(r.stderr.split(separator: "\n").first { $0.contains(": failed (") }, r.stderr)
        XCTAssertTrue(line.contains(": failed (http-400): \(file): "), String(line))
        XCTAssertEqual(line.components(separatedBy: file).count - 1, 1, "the path is said once: \(line)")
        XCTAssertTrue(r.stderr.split(separator: "\n").last?.hasPrefix("error: 1 upload failed (above); `clipflow upload resume ") == true, r.stderr)
        // Without the lines above (--quiet), the error line says it all.
        let quiet = try Run.run(
            [
                binary, "upload", file, "--to", "tus", "--endpoint", server.url + "/files", "--queue", fx.scratch("upload-hard-once-q").path,
                "--retries", "1", "--retry-delay", "0.01", "--quiet"
            ], check: false)
        XCTAssertEqual(quiet.status, 1, quiet.stderr)
        XCTAssertTrue(quiet.stderr.hasPrefix("error: \(file): "), quiet.stderr)
        XCTAssertEqual(quiet.stderr.components(separatedBy: file).count - 1, 1, "the path is said once: \(quiet.stderr)")
    }

    /// 10 (b) and 5, as the user reads them: an oversized header is named, an endless answer ends.
    func testOversizedAndEndlessAnswersEndWithAClearError() throws {
        let server = try HostileServer.start()
        defer { server.stop() }
        let file = try makeFile("big-answer.bin", bytes: 20_000)
        for (mutation, expected) in [
            ("giant-header", "response header is larger than"),
            ("endless-body", "answer is larger than"),
            ("drip", "did not complete within 2 s")
        ] {
            try server.plan(rules: [["method": "OPTIONS", "mutation": mutation, "times": -1]])
            let queue = fx.scratch("upload-hard-\(mutation)").path
            let start = Date()
            let r = try Run.run(
                [
                    "timeout", "-s", "KILL", "60", binary, "upload", file, "--to", "tus", "--endpoint", server.url + "/files",
                    "--queue", queue, "--retries", "1", "--retry-delay", "0.01", "--response-timeout", "2"
                ], check: false)
            XCTAssertEqual(r.status, 1, "\(mutation): \(r.stderr)")
            XCTAssertLessThan(Date().timeIntervalSince(start), 20, mutation)
            XCTAssertTrue(r.stderr.contains(expected), "\(mutation): \(r.stderr)")
            XCTAssertFalse(r.stderr.lowercased().contains("out of memory"), "\(mutation): \(r.stderr)")
        }
    }

    /// 4, through the CLI with a token from --credentials-command: a Location on another host is
    /// refused and that host gets nothing.
    func testCrossOriginLocationWithCommandCredentialsIsRefused() throws {
        let foreign = try HostileServer.start(host: "127.0.0.2")
        defer { foreign.stop() }
        let server = try HostileServer.start(foreign: foreign.hostPort)
        defer { server.stop() }
        try server.plan(rules: [["method": "POST", "path": "/files", "mutation": "location", "value": "//\(foreign.hostPort)/files/x", "times": -1]])
        let file = try makeFile("cross.bin", bytes: 20_000)
        let queue = fx.scratch("upload-hard-cross").path
        let token = "tok-cli-cross-0r1g1n-secret"
        let r = try Run.run(
            [
                binary, "upload", file, "--to", "tus", "--endpoint", server.url + "/files", "--queue", queue,
                "--credentials-command", "printf '{\"token\":\"%s\"}' \"$CROSS_TOKEN\""
            ],
            env: ["CROSS_TOKEN": token], check: false)
        XCTAssertEqual(r.status, 1, r.stderr)
        XCTAssertTrue(r.stderr.contains("refused"), r.stderr)
        XCTAssertFalse(r.stderr.contains(token))
        XCTAssertEqual(try foreign.requests().count, 0, "nothing went to the other host")
        XCTAssertTrue(try server.requests().contains { $0.headers["authorization"] == "Bearer \(token)" }, "the endpoint got the token")
    }

    /// 10 (e): a secret written into --credentials-command is refused before anything is stored;
    /// a command that refers to the environment is kept and works.
    func testLiteralSecretInCredentialsCommandIsNeverStored() throws {
        let server = try HostileServer.start()
        defer { server.stop() }
        let file = try makeFile("creds.bin", bytes: 20_000)
        for command in [
            "echo {\"token\":\"s3cr3t-literal\"}",
            "my-helper --secret-access-key s3cr3t-literal",
            "env AWS_SECRET_ACCESS_KEY=s3cr3t-literal helper",
            "curl -s -H 'Authorization: Bearer s3cr3t-literal' https://example.invalid/creds",
            "echo wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY1"
        ] {
            let queue = fx.scratch("upload-hard-creds-\(abs(command.hashValue))").path
            let r = try Run.run(
                [
                    binary, "upload", file, "--to", "tus", "--endpoint", server.url + "/files", "--queue", queue,
                    "--credentials-command", command
                ], check: false)
            XCTAssertNotEqual(r.status, 0, command)
            XCTAssertTrue(r.stderr.contains("--credentials-command"), "\(command): \(r.stderr)")
            XCTAssertFalse(r.stderr.contains("s3cr3t-literal"), r.stderr)
            XCTAssertFalse(contents(of: queue).contains("s3cr3t-literal"), "\(command): stored in the queue")
            XCTAssertFalse(contents(of: queue).contains("wJalrXUtnFEMI"), "\(command): stored in the queue")
        }
        // The safe form: the command names a variable; the queue keeps the command, not the value.
        let queue = fx.scratch("upload-hard-creds-env").path
        let token = "tok-from-env-0123456789"
        let r = try Run.run(
            [
                binary, "upload", file, "--to", "tus", "--endpoint", server.url + "/files", "--queue", queue,
                "--credentials-command", "printf '{\"token\":\"%s\"}' \"$UPLOAD_TOKEN_VAR\""
            ],
            env: ["UPLOAD_TOKEN_VAR": token], check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertFalse(contents(of: queue).contains(token))
        XCTAssertTrue(contents(of: queue).contains("UPLOAD_TOKEN_VAR"), "the command is kept, so `upload run` can resume")
        XCTAssertTrue(try server.requests().contains { $0.headers["authorization"] == "Bearer \(token)" })
    }

    /// Without a usable libcurl the upload fails with a message naming the library and what to
    /// install, through the CLI's error path (the shim never exits the process itself).
    func testMissingLibcurlIsReportedNotExited() throws {
        let dir = fx.scratch("upload-no-libcurl").path
        try "int clipflow_fake_curl;\n".write(toFile: dir + "/e.c", atomically: true, encoding: .utf8)
        // A libcurl.so.4 without curl's functions, found first through LD_LIBRARY_PATH.
        _ = try Run.run(["cc", "-shared", "-fPIC", "-o", dir + "/libcurl.so.4", dir + "/e.c"])
        let file = try makeFile("no-curl.bin", bytes: 1000)
        let r = try Run.run(
            [
                binary, "upload", file, "--to", "tus", "--endpoint", "http://127.0.0.1:9/files",
                "--queue", dir + "/queue"
            ], env: ["LD_LIBRARY_PATH": dir], check: false)
        XCTAssertEqual(r.status, 1, r.stderr)
        let line = try XCTUnwrap(r.stderr.split(separator: "\n").first { $0.contains(": failed (") }, r.stderr)
        XCTAssertTrue(line.contains("\(file): cannot upload: libcurl has no curl_global_init; install libcurl4"), String(line))
    }
}
