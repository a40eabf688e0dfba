import ClipFlowTestSupport
import Foundation
import XCTest

/// Two `clipflow serve` instances sharing one real PostgreSQL (Debian's, started here) and one
/// data folder: either takes any request, a job runs on one of them only, and a job whose server
/// is killed is finished by the other.
final class ServePostgresCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "pg-test-key"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func server(_ data: URL, _ database: String) -> ServerProcess {
        .clipflowServe(
            binary: binary, data: data, ["--database", database, "--job-lease", "3", "--superseded-grace", "0"], environment: ["CLIPFLOW_API_KEY": key])
    }

    func get(_ s: ServerProcess, _ path: String) throws -> Any { try s.apiGet(path, key: key) }

    func waitReady(_ s: ServerProcess, _ id: Int, seconds: Double = 180) throws -> [String: Any] {
        try s.waitForVideo(id, key: key, seconds: seconds, every: 0.2)
    }

    func testTwoServersShareOneDatabase() throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let data = fx.scratch("serve-pg")
        let a = server(data, pg.url), b = server(data, pg.url)
        try a.start()
        defer { a.stop() }
        try b.start()
        defer { b.stop() }

        // A TUS upload begun on one server and finished on the other.
        let bytes = Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 13) })
        let made = try HTTP.request("POST", "http://127.0.0.1:\(a.port)/files", headers: ["Tus-Resumable": "1.0.0", "Upload-Length": "3000000"])
        XCTAssertEqual(made.status, 401, "a server with a key takes uploads for videos only")
        let v0 = try XCTUnwrap(
            try HTTP.request("POST", "http://127.0.0.1:\(a.port)/videos", headers: ["Authorization": "Bearer \(key)"], json: ["name": "split"]).json()
                as? [String: Any])
        let id0 = try XCTUnwrap(v0["id"] as? Int)
        let token = try XCTUnwrap((try get(b, "/videos/\(id0)/upload") as? [String: Any])?["token"] as? String)
        let meta =
            "filename \(Data("x.bin".utf8).base64EncodedString()),video_id \(Data(String(id0).utf8).base64EncodedString()),token \(Data(token.utf8).base64EncodedString())"
        let created = try HTTP.request(
            "POST", "http://127.0.0.1:\(a.port)/files", headers: ["Tus-Resumable": "1.0.0", "Upload-Length": "3000000", "Upload-Metadata": meta])
        XCTAssertEqual(created.status, 201, created.text)
        let path = try XCTUnwrap(URL(string: try XCTUnwrap(created.header("Location")))?.path)
        let patch = ["Tus-Resumable": "1.0.0", "Content-Type": "application/offset+octet-stream"]
        XCTAssertEqual(
            try HTTP.request("PATCH", "http://127.0.0.1:\(a.port)\(path)", headers: patch.merging(["Upload-Offset": "0"]) { $1 }, body: bytes.prefix(1_000_000))
                .status, 204)
        XCTAssertEqual(try HTTP.request("HEAD", "http://127.0.0.1:\(b.port)\(path)", headers: ["Tus-Resumable": "1.0.0"]).header("Upload-Offset"), "1000000")
        XCTAssertEqual(
            try HTTP.request(
                "PATCH", "http://127.0.0.1:\(b.port)\(path)", headers: patch.merging(["Upload-Offset": "1000000"]) { $1 }, body: bytes.suffix(from: 1_000_000)
            )
            .status, 204)
        let fileName = try Run.run(["sh", "-c", "printf %s \"$0\" | sha256sum", URL(fileURLWithPath: path).lastPathComponent]).out.prefix(64)
        let stored = data.appendingPathComponent("uploads").appendingPathComponent(String(fileName))
        XCTAssertEqual(try Data(contentsOf: stored), bytes)
        XCTAssertEqual(try waitReady(a, id0)["status"] as? String, "error", "not a video: its processing ends in error")

        // Three videos by the Gcore flow through A: listed by B, each processed once.
        let files = try (1...3).map { try fx.clip("pg-\($0).mp4", seconds: 4, size: "640x360") }
        let up = try Run.run(
            [binary, "upload"] + files + [
                "--to", "gcore", "--endpoint", "http://127.0.0.1:\(a.port)", "--upload-url", "http://{hostname}/files", "--queue", fx.scratch("pg-queue").path
            ], env: ["CLIPFLOW_UPLOAD_TOKEN": key], check: false)
        XCTAssertEqual(up.status, 0, up.stderr)
        XCTAssertEqual((try get(b, "/videos") as? [[String: Any]])?.count, 4)
        for id in (id0 + 1)...(id0 + 3) { XCTAssertEqual(try waitReady(b, id)["status"] as? String, "ready") }
        XCTAssertEqual(try pg.psql("SELECT count(*), max(attempts) FROM jobs WHERE state = 'done'").trimmingCharacters(in: .whitespacesAndNewlines), "3|1")

        // Kill the server working on a video's ladder: the other takes the job over after the lease.
        let long = try fx.clip("pg-long.mp4", seconds: 20, size: "1280x720")
        let up2 = try Run.run(
            [
                binary, "upload", long, "--to", "gcore", "--endpoint", "http://127.0.0.1:\(b.port)", "--upload-url", "http://{hostname}/files", "--queue",
                fx.scratch("pg-queue-2").path
            ], env: ["CLIPFLOW_UPLOAD_TOKEN": key], check: false)
        XCTAssertEqual(up2.status, 0, up2.stderr)
        let id4 = id0 + 4
        var owner = ""
        for _ in 0..<100 where owner.isEmpty {
            owner = try pg.psql("SELECT owner FROM jobs WHERE video_id = \(id4) AND state = 'running' AND step = 'ladder'").trimmingCharacters(
                in: .whitespacesAndNewlines)
            if owner.isEmpty { usleep(100_000) }
        }
        let (pa, pb) = (try a.supervisedPID(), try b.supervisedPID())
        let victim = owner.contains("-\(pa)-") ? pa : pb
        XCTAssertTrue(owner.contains("-\(victim)-"), "owner \(owner), servers \(pa) \(pb)")
        usleep(500_000)
        kill(victim, SIGKILL)
        let survivor = victim == pa ? b : a
        let v = try waitReady(survivor, id4)
        XCTAssertEqual(v["status"] as? String, "ready", "\(v)")
        XCTAssertEqual(try pg.psql("SELECT attempts FROM jobs WHERE video_id = \(id4)").trimmingCharacters(in: .whitespacesAndNewlines), "2")
        let lint = try Run.run([binary, "hls", "lint", try XCTUnwrap(v["hls_url"] as? String)], check: false)
        XCTAssertEqual(lint.status, 0, lint.out)
        var folders: [String] = []
        for _ in 0..<100 {
            folders = try FileManager.default.contentsOfDirectory(atPath: data.appendingPathComponent("media/\(id4)").path)
            if folders.count == 1 { break }
            usleep(100_000)
        }
        XCTAssertEqual(folders.count, 1, "the published ladder alone once its grace is over: \(folders)")
    }

    /// `--role api` takes uploads and answers the API but processes nothing; `--role worker`
    /// processes what API servers queue and answers only `/healthz` and `/metrics`.
    func testAnAPIServerQueuesAndAWorkerProcesses() throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let data = fx.scratch("serve-pg-roles")
        let api = ServerProcess.clipflowServe(binary: binary, data: data, ["--database", pg.url, "--role", "api"], environment: ["CLIPFLOW_API_KEY": key])
        try api.start()
        defer { api.stop() }

        // Uploaded while no worker runs: the video waits, its job queued.
        let clip = try fx.clip("roles.mp4", seconds: 12, size: "1280x720")
        let up = try Run.run(
            [binary, "upload", clip, "--to", "gcore", "--endpoint", "http://127.0.0.1:\(api.port)", "--queue", fx.scratch("roles-queue").path],
            env: ["CLIPFLOW_UPLOAD_TOKEN": key], check: false)
        XCTAssertEqual(up.status, 0, up.stderr)
        let id = try XCTUnwrap((try get(api, "/videos") as? [[String: Any]])?.first?["id"] as? Int)
        usleep(1_500_000)
        XCTAssertEqual((try get(api, "/videos/\(id)") as? [String: Any])?["status"] as? String, "processing")
        XCTAssertEqual(try pg.psql("SELECT state FROM jobs WHERE video_id = \(id)").trimmingCharacters(in: .whitespacesAndNewlines), "queued")

        let worker = ServerProcess.clipflowServe(
            binary: binary, data: data, ["--database", pg.url, "--role", "worker"], environment: ["CLIPFLOW_API_KEY": key])
        try worker.start()
        defer { worker.stop() }
        let base = "http://127.0.0.1:\(worker.port)"
        XCTAssertEqual(try HTTP.request("GET", base + "/healthz").status, 200)
        XCTAssertEqual(try HTTP.request("GET", base + "/videos", headers: ["Authorization": "Bearer \(key)"]).status, 404, "a worker has no API")
        XCTAssertEqual(try HTTP.request("POST", base + "/files", headers: ["Tus-Resumable": "1.0.0", "Upload-Length": "10"]).status, 404)

        // The API server answers the worker's progress, moving forward only.
        var v: [String: Any] = [:], seen: [Double] = []
        let deadline = Date().addingTimeInterval(180)
        while Date() < deadline {
            v = try XCTUnwrap(try get(api, "/videos/\(id)") as? [String: Any])
            seen.append(v["progress"] as? Double ?? -1)
            if ["ready", "error"].contains(v["status"] as? String ?? "") { break }
            usleep(200_000)
        }
        XCTAssertEqual(v["status"] as? String, "ready", "\(v)")
        XCTAssertEqual(seen.last, 1)
        XCTAssertEqual(seen, seen.sorted(), "progress only moves forward")
        XCTAssertTrue(seen.contains { $0 > 0 && $0 < 1 }, "progress while processing: \(seen)")
        let lint = try Run.run([binary, "hls", "lint", try XCTUnwrap(v["hls_url"] as? String)], check: false)
        XCTAssertEqual(lint.status, 0, lint.out)
        let apiLog = api.stderrText, workerLog = worker.stderrText
        XCTAssertTrue(apiLog.hasPrefix("clipflow serve (role api): listening on http://127.0.0.1:\(api.port)"), apiLog)
        XCTAssertTrue(apiLog.split(separator: "\n").first?.hasSuffix(", 0 workers") == true, apiLog)
        XCTAssertTrue(workerLog.hasPrefix("clipflow serve (role worker): listening on \(base)"), workerLog)
        XCTAssertFalse(apiLog.contains("event=job"), "the API server ran no job:\n\(apiLog)")
        XCTAssertTrue(workerLog.contains("event=job kind=published video=\(id)"), workerLog)
    }

    func testRolesNeedASharedDatabase() throws {
        let data = fx.scratch("serve-roles-sqlite").appendingPathComponent("data")
        for role in ["api", "worker"] {
            let r = try Run.run([binary, "serve", "--data", data.path, "--listen", "127.0.0.1:0", "--role", role], check: false)
            XCTAssertNotEqual(r.status, 0)
            XCTAssertTrue(r.stderr.contains("--role \(role): needs --database postgres://"), r.stderr)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: data.path), "nothing made")
    }

    func testABadDatabaseURLIsRefusedWithoutItsPassword() throws {
        let r = try Run.run(
            [binary, "serve", "--data", fx.scratch("pg-bad").path, "--listen", "127.0.0.1:0", "--database", "postgres://u:hunter2@127.0.0.1:1/db"],
            check: false)
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("postgres://u@127.0.0.1:1/db"), r.stderr)
        XCTAssertFalse(r.stderr.contains("hunter2"), r.stderr)
    }

    /// The password is taken from PGPASSWORD, from the whole URL in CLIPFLOW_DATABASE_URL or from
    /// a password file (PGPASSFILE, libpq's format and rules); one given in the arguments, which
    /// every local user sees, is used with a warning that names no password.
    func testThePasswordComesFromTheEnvironmentOrAPasswordFile() throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let password = "pw-\(UInt32.random(in: 0...UInt32.max))"
        try pg.addPasswordUser("owner", password: password)
        let address = "127.0.0.1:\(pg.port)/owner"
        let folder = fx.scratch("pg-password")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        let passfile = folder.appendingPathComponent("pgpass")
        try "# comment\n127.0.0.1:\(pg.port):other:owner:wrong\n*:\(pg.port):owner:owner:\(password)\n".write(to: passfile, atomically: true, encoding: .utf8)
        chmod(passfile.path, 0o600)
        let cases: [(name: String, arguments: [String], environment: [String: String], warns: Bool)] = [
            ("PGPASSWORD", ["--database", "postgres://owner@\(address)"], ["PGPASSWORD": password], false),
            ("CLIPFLOW_DATABASE_URL", [], ["CLIPFLOW_DATABASE_URL": "postgres://owner:\(password)@\(address)"], false),
            ("PGPASSFILE", ["--database", "postgres://owner@\(address)"], ["PGPASSFILE": passfile.path], false),
            ("argv", ["--database", "postgres://owner:\(password)@\(address)"], [:], true)
        ]
        for c in cases {
            let s = ServerProcess.clipflowServe(
                binary: binary, data: fx.scratch("pg-password-\(c.name)"), c.arguments,
                environment: c.environment.merging(["CLIPFLOW_API_KEY": key]) { a, _ in a })
            try s.start(timeout: 30)
            XCTAssertEqual(try HTTP.request("GET", "http://127.0.0.1:\(s.port)/videos", headers: ["Authorization": "Bearer \(key)"]).status, 200, c.name)
            s.stop()
            let log = s.stderrText
            XCTAssertTrue(log.contains("database postgres://owner@\(address)"), "\(c.name): the start line names the database:\n\(log)")
            XCTAssertFalse(log.contains(password), "\(c.name): the password is never written:\n\(log)")
            let warnings = log.split(separator: "\n").filter { $0.contains("warning:") }
            XCTAssertEqual(warnings.count, c.warns ? 1 : 0, "\(c.name): \(log)")
            if c.warns { XCTAssertTrue(warnings.first?.contains("give it in PGPASSWORD") == true, log) }
        }
        let tables = try pg.psql("SELECT count(*) FROM information_schema.tables WHERE table_name = 'uploads'", database: "owner")
        XCTAssertEqual(tables.trimmingCharacters(in: .whitespacesAndNewlines), "1", "the tables were made in the user's database")

        // A password file others may read is not read (as libpq does), and says why.
        chmod(passfile.path, 0o644)
        let r = try Run.run(
            [binary, "serve", "--data", fx.scratch("pg-password-open").path, "--listen", "127.0.0.1:0", "--database", "postgres://owner@\(address)"],
            env: ["PGPASSFILE": passfile.path], check: false)
        XCTAssertEqual(r.status, 65, r.stderr)
        XCTAssertTrue(r.stderr.contains("\(passfile.path) has group or world access"), r.stderr)
        XCTAssertFalse(r.stderr.contains(password), r.stderr)
    }

    /// A wrong password is said at once for what it is, exit 65: a retry cannot fix it.
    func testAWrongPasswordIsAnAuthenticationFailureAtOnce() throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        try pg.addPasswordUser("owner", password: "right-\(UInt32.random(in: 0...UInt32.max))")
        let wrong = "wrong-\(UInt32.random(in: 0...UInt32.max))"
        for (arguments, environment) in [
            (["--database", "postgres://owner@127.0.0.1:\(pg.port)/owner"], ["PGPASSWORD": wrong]),
            (["--database", "postgres://owner:\(wrong)@127.0.0.1:\(pg.port)/owner"], [:])
        ] {
            let started = Date()
            let r = try Run.run(
                [binary, "serve", "--data", fx.scratch("pg-wrong").path, "--listen", "127.0.0.1:0"] + arguments, env: environment, check: false)
            let seconds = Date().timeIntervalSince(started)
            XCTAssertEqual(r.status, 65, r.stderr)
            XCTAssertLessThan(seconds, 5, "at once, not after a connect timeout: \(r.stderr)")
            let errors = r.stderr.split(separator: "\n").filter { $0.hasPrefix("error: ") }
            XCTAssertEqual(errors, ["error: --database postgres://owner@127.0.0.1:\(pg.port)/owner: authentication failed for user owner"], r.stderr)
            XCTAssertFalse(r.stderr.contains(wrong), r.stderr)
        }
    }
}
