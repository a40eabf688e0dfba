import Foundation
#if canImport(FoundationNetworking)
    import FoundationNetworking
#endif

// Real servers on 127.0.0.1 for the upload tests, started by a test's setup and stopped after it
// (or in deinit). The servers are programs we did not write (resumable-upload's TUS server,
// moto_server) or small standard-library Python stand-ins in Tests/Servers (faultproxy.py,
// gcore_api.py). Each one also stops by itself after `maxSeconds` or when the test process dies.

public struct ServerError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

extension ServerProcess {
    /// A video made on this `clipflow serve` by `POST /videos` with `fields` (a `name` at least),
    /// and its upload token.
    public func newVideo(key: String, _ fields: [String: Any]) throws -> (id: Int, token: String) {
        let auth = ["Authorization": "Bearer \(key)"]
        let made = try HTTP.request("POST", "http://127.0.0.1:\(port)/videos", headers: auth, json: fields)
        guard let id = (try? made.json() as? [String: Any])?["id"] as? Int else { throw ServerError("POST /videos: \(made.status) \(made.text)") }
        let target = try HTTP.request("GET", "http://127.0.0.1:\(port)/videos/\(id)/upload", headers: auth)
        guard let token = (try? target.json() as? [String: Any])?["token"] as? String else {
            throw ServerError("GET /videos/\(id)/upload: \(target.status) \(target.text)")
        }
        return (id, token)
    }

    /// `file` uploaded to this `clipflow serve` by tuspy (a client we did not write) as video
    /// `id`'s source, with its upload token.
    public func tusUpload(_ file: String, video id: Int, token: String) throws {
        let script = """
            import sys
            from tusclient import client
            u = client.TusClient(sys.argv[1]).uploader(sys.argv[2], chunk_size=4 << 20, metadata={"filename": "v.mp4", "video_id": sys.argv[3], "token": sys.argv[4]})
            u.upload()
            """
        try Run.run(["python3", "-c", script, "http://127.0.0.1:\(port)/files", file, String(id), token])
    }

    /// `GET path` on this `clipflow serve` with its API key: the answer's JSON.
    public func apiGet(_ path: String, key: String) throws -> Any {
        try HTTP.request("GET", "http://127.0.0.1:\(port)\(path)", headers: ["Authorization": "Bearer \(key)"]).json()
    }

    /// Asks for video `id` every `every` seconds until it is `ready` or in `error` (returned as
    /// answered); throws after `seconds`.
    public func waitForVideo(_ id: Int, key: String, seconds: Double, every: Double = 0.25) throws -> [String: Any] {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            guard let v = try apiGet("/videos/\(id)", key: key) as? [String: Any] else { throw ServerError("video \(id): not a JSON object") }
            if ["ready", "error"].contains(v["status"] as? String ?? "") { return v }
            usleep(useconds_t(every * 1_000_000))
        }
        throw ServerError("video \(id) not ready in \(seconds) s")
    }
}

/// One server process: stdout and stderr go to files in its own temporary folder (never pipes that
/// can fill up); `start` returns once the port accepts TCP connections.
public final class ServerProcess: @unchecked Sendable {
    /// Tests/Servers, next to this file's folder.
    public static let scriptsDirectory: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Servers")

    public static func script(_ name: String) -> String {
        scriptsDirectory.appendingPathComponent(name).path
    }

    public let name: String
    public let arguments: [String]
    public let environment: [String: String]
    /// The loopback address the server listens on (127.0.0.1 unless told).
    public let host: String
    /// The folder holding stdout.log, stderr.log (and the port file, if any).
    public let logDirectory: URL
    /// The port: given, or read from the port file once the server wrote it.
    public private(set) var port: Int
    private let portFile: URL?
    private var process: Process?
    private let lock = NSLock()

    /// `arguments` run through `/usr/bin/env` (so `python3` comes from PATH). Give either the
    /// `port` the server will listen on or a `portFile` it writes its port into.
    public init(
        name: String, arguments: [String], environment: [String: String] = [:],
        port: Int? = nil, portFile: URL? = nil, logDirectory: URL? = nil, host: String = "127.0.0.1"
    ) {
        self.name = name
        self.host = host
        self.arguments = arguments
        self.environment = environment
        self.port = port ?? 0
        self.portFile = portFile
        self.logDirectory =
            logDirectory
            ?? FileManager.default.temporaryDirectory
            .appendingPathComponent("clipflow-server-\(name)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try? FileManager.default.createDirectory(at: self.logDirectory, withIntermediateDirectories: true)
    }

    deinit { stop() }

    public var stdoutURL: URL { logDirectory.appendingPathComponent("stdout.log") }
    public var stderrURL: URL { logDirectory.appendingPathComponent("stderr.log") }
    public var stderrText: String { (try? String(contentsOf: stderrURL, encoding: .utf8)) ?? "" }
    public var stdoutText: String { (try? String(contentsOf: stdoutURL, encoding: .utf8)) ?? "" }
    public var isRunning: Bool { lock.withLock { process?.isRunning ?? false } }
    public var pid: Int32? { lock.withLock { process?.processIdentifier } }

    /// Starts the process and waits until its port accepts connections.
    public func start(timeout: TimeInterval = 20) throws {
        stop()
        if let portFile { try? FileManager.default.removeItem(at: portFile) }
        let fm = FileManager.default
        // Append: a restart keeps the earlier run's output.
        for u in [stdoutURL, stderrURL] where !fm.fileExists(atPath: u.path) {
            _ = fm.createFile(atPath: u.path, contents: nil)
        }
        let out = try FileHandle(forWritingTo: stdoutURL), err = try FileHandle(forWritingTo: stderrURL)
        out.seekToEndOfFile(); err.seekToEndOfFile()
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = arguments
        var e = ProcessInfo.processInfo.environment
        for (k, v) in environment { e[k] = v }
        e["PYTHONUNBUFFERED"] = "1"
        p.environment = e
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = out
        p.standardError = err
        try p.run()
        try? out.close(); try? err.close()
        lock.withLock { process = p }

        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if !p.isRunning {
                p.waitUntilExit()
                throw ServerError(
                    "\(name) exited with status \(p.terminationStatus) before listening "
                        + "(\(arguments.joined(separator: " "))):\n\(stderrText.suffix(3000))")
            }
            if let portFile, port == 0,
                let s = try? String(contentsOf: portFile, encoding: .utf8),
                let n = Int(s.trimmingCharacters(in: .whitespacesAndNewlines))
            {
                port = n
            }
            if port != 0 && Self.acceptsConnections(port: port, host: host) { return }
            usleep(50_000)
        }
        stop()
        throw ServerError(
            "\(name) did not listen within \(Int(timeout)) s "
                + "(\(arguments.joined(separator: " "))):\n\(stderrText.suffix(3000))")
    }

    /// SIGTERM, then SIGKILL after 6 s (supervise.py needs up to ~1.2 s to end its server's
    /// process group); waits for the process to end.
    public func stop() {
        guard
            let p = lock.withLock({ () -> Process? in
                defer { process = nil }; return process
            })
        else { return }
        if p.isRunning {
            kill(p.processIdentifier, SIGTERM)
            let deadline = Date().addingTimeInterval(6)
            while p.isRunning && Date() < deadline { usleep(20_000) }
            if p.isRunning { kill(p.processIdentifier, SIGKILL) }
        }
        p.waitUntilExit()
    }

    /// A port that was free a moment ago (bound to 127.0.0.1:0 and released).
    public static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return 0 }
        defer { close(fd) }
        var addr = loopback(port: 0)
        let ok = withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        }
        guard ok == 0 else { return 0 }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) }
        }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    /// True when `host`:`port` (an IPv4 address) accepts a TCP connection.
    public static func acceptsConnections(port: Int, host: String = "127.0.0.1") -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var addr = loopback(port: port, host: host)
        return withUnsafePointer(to: &addr) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size))
            }
        } == 0
    }

    private static func loopback(port: Int, host: String = "127.0.0.1") -> sockaddr_in {
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_port = UInt16(port).bigEndian
        a.sin_addr.s_addr = inet_addr(host)
        return a
    }

    /// `python3 supervise.py --max-seconds S -- command...`: for servers that cannot watch their
    /// parent themselves, so they never outlive the test process.
    public static func supervised(_ command: [String], maxSeconds: Int) -> [String] {
        ["python3", script("supervise.py"), "--max-seconds", String(maxSeconds), "--"] + command
    }
}

// MARK: - Small HTTP client for control calls

public struct HTTPReply: Sendable {
    public var status: Int
    public var headers: [String: String]
    public var body: Data
    public init(status: Int, headers: [String: String], body: Data) {
        self.status = status
        self.headers = headers
        self.body = body
    }
    public var text: String { String(decoding: body, as: UTF8.self) }
    public func json() throws -> Any { try JSONSerialization.jsonObject(with: body) }
    public func header(_ name: String) -> String? {
        headers.first { $0.key.lowercased() == name.lowercased() }?.value
    }
}

public enum HTTP {
    /// One synchronous request (for control endpoints and oracles, not for the code under test).
    public static func request(
        _ method: String, _ url: String, headers: [String: String] = [:],
        body: Data? = nil, json: Any? = nil, timeout: TimeInterval = 20
    ) throws -> HTTPReply {
        guard let u = URL(string: url) else { throw ServerError("bad URL \(url)") }
        var r = URLRequest(url: u, timeoutInterval: timeout)
        r.httpMethod = method
        for (k, v) in headers { r.setValue(v, forHTTPHeaderField: k) }
        if let json {
            r.httpBody = try JSONSerialization.data(withJSONObject: json)
            r.setValue("application/json", forHTTPHeaderField: "Content-Type")
        } else if let body {
            r.httpBody = body
        }
        let config = URLSessionConfiguration.ephemeral
        config.connectionProxyDictionary = [:]
        let session = URLSession(configuration: config)
        defer { session.finishTasksAndInvalidate() }
        final class Box: @unchecked Sendable { var reply: HTTPReply?; var error: Error? }
        let box = Box()
        let done = DispatchSemaphore(value: 0)
        session.dataTask(with: r) { data, response, error in
            if let h = response as? HTTPURLResponse {
                var hs: [String: String] = [:]
                for (k, v) in h.allHeaderFields { hs["\(k)"] = "\(v)" }
                box.reply = HTTPReply(status: h.statusCode, headers: hs, body: data ?? Data())
            } else {
                box.error = error ?? ServerError("no response from \(method) \(url)")
            }
            done.signal()
        }.resume()
        done.wait()
        if let reply = box.reply { return reply }
        throw box.error!
    }
}

/// sha256 of a file by `/usr/bin/sha256sum`: an independent oracle, not our code.
public func sha256(ofFile url: URL) throws -> String {
    let r = try Run.run(["/usr/bin/sha256sum", "--", url.path])
    return String(r.out.prefix(while: { $0 != " " }))
}

public func sha256(ofFile path: String) throws -> String {
    try sha256(ofFile: URL(fileURLWithPath: path))
}

// MARK: - TUS: resumable-upload (PyPI resumable-upload 0.3.0)

/// The real TUS 1.0 server of the `resumable-upload` package. Its state is in `directory`
/// (db.sqlite plus one file per upload, named by the upload id), so `restart()` on the same port
/// keeps every upload. Its Location headers are relative (`/files/<id>`).
public final class TUSServer: @unchecked Sendable {
    public let directory: URL
    public let process: ServerProcess
    public var port: Int { process.port }
    /// http://127.0.0.1:P/files
    public var baseURL: String { "http://127.0.0.1:\(port)/files" }
    /// 127.0.0.1:P (what the Gcore stand-in hands out as the upload server's hostname).
    public var hostPort: String { "127.0.0.1:\(port)" }

    /// `extraArgs` are more `resumable-upload serve` flags, e.g. ["--upload-expiry", "60"],
    /// ["--max-size", "1000000"], ["--lock-wait", "1"].
    public static func start(
        directory: URL, port: Int? = nil, extraArgs: [String] = [],
        maxSeconds: Int = 600
    ) throws -> TUSServer {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let p = port ?? ServerProcess.freePort()
        let cmd =
            [
                "python3", "-m", "resumable_upload", "serve", "--host", "127.0.0.1", "--port", String(p),
                "--upload-dir", directory.path, "--db-path", directory.appendingPathComponent("db.sqlite").path,
                "--checksum-algorithms", "sha1,sha256,md5"
            ] + extraArgs
        let proc = ServerProcess(
            name: "tus", arguments: ServerProcess.supervised(cmd, maxSeconds: maxSeconds),
            port: p, logDirectory: directory.appendingPathComponent("logs"))
        try proc.start()
        return TUSServer(directory: directory, process: proc)
    }

    private init(directory: URL, process: ServerProcess) {
        self.directory = directory
        self.process = process
    }

    public func stop() { process.stop() }

    /// Stops and starts again on the same port with the same database: uploads persist.
    public func restart() throws {
        process.stop()
        try process.start()
    }

    /// The upload files the server stores (every file of the directory but the database).
    public func storedFiles() -> [URL] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        return names.filter { !$0.hasPrefix("db.sqlite") && $0 != "logs" }.sorted()
            .map { directory.appendingPathComponent($0) }
    }

    /// The upload id: the last path component of an upload URL (absolute or relative).
    public static func uploadID(of uploadURL: String) -> String {
        let path = uploadURL.split(separator: "?").first.map(String.init) ?? uploadURL
        return path.split(separator: "/").last.map(String.init) ?? ""
    }

    /// Where the server stores the bytes of the upload at `uploadURL`.
    public func storedFile(for uploadURL: String) -> URL {
        directory.appendingPathComponent(Self.uploadID(of: uploadURL))
    }

    public func storedSHA256(for uploadURL: String) throws -> String {
        try sha256(ofFile: storedFile(for: uploadURL))
    }

    /// HEAD on the upload (straight to the server, not through any proxy): Upload-Offset, or nil
    /// when the server does not know the upload (404/410).
    public func offset(of uploadURL: String) throws -> Int? {
        let r = try HTTP.request(
            "HEAD", "http://127.0.0.1:\(port)/files/\(Self.uploadID(of: uploadURL))",
            headers: ["Tus-Resumable": "1.0.0"])
        guard r.status == 200 else { return nil }
        return r.header("Upload-Offset").flatMap { Int($0) }
    }

    /// HEAD on the upload: all response headers (Upload-Offset, Upload-Length, Upload-Metadata...).
    public func head(_ uploadURL: String) throws -> HTTPReply {
        try HTTP.request(
            "HEAD", "http://127.0.0.1:\(port)/files/\(Self.uploadID(of: uploadURL))",
            headers: ["Tus-Resumable": "1.0.0"])
    }
}

// MARK: - S3: moto_server

public struct AWSCredentials: Sendable, Equatable {
    public var accessKeyID: String
    public var secretAccessKey: String
    public var sessionToken: String?
}

/// moto 5 in server mode with signature checking on for every request after the setup
/// (moto_setup.py --lock): a bucket, an IAM user with a key, a role, and STS session credentials.
public final class MotoServer: @unchecked Sendable {
    public let process: ServerProcess
    public let bucket: String
    public let region: String
    /// AssumeRole credentials (access key, secret, session token) to give the client under test.
    public let sessionCredentials: AWSCredentials
    /// The IAM user's long-term key (no session token); the oracles below sign with it.
    public let userCredentials: AWSCredentials
    public let expiration: String
    public var port: Int { process.port }
    /// http://127.0.0.1:P
    public var endpoint: String { "http://127.0.0.1:\(port)" }

    /// `partMinSize` sets S3_UPLOAD_PART_MIN_SIZE (moto's 5 MiB minimum for every part but the last).
    public static func start(bucket: String, partMinSize: Int? = nil, maxSeconds: Int = 600) throws -> MotoServer {
        let p = ServerProcess.freePort()
        // Large count: no checking during setup; moto_setup.py --lock then turns it on for every
        // later request (setup itself makes 7 counted requests for one bucket).
        var env = ["INITIAL_NO_AUTH_ACTION_COUNT": "1000000"]
        if let partMinSize { env["S3_UPLOAD_PART_MIN_SIZE"] = String(partMinSize) }
        let proc = ServerProcess(
            name: "moto",
            arguments: ServerProcess.supervised(
                ["moto_server", "-H", "127.0.0.1", "-p", String(p)],
                maxSeconds: maxSeconds),
            environment: env, port: p)
        try proc.start()
        let r = try Run.run([
            "python3", ServerProcess.script("moto_setup.py"), "setup",
            "--endpoint", "http://127.0.0.1:\(p)", "--bucket", bucket, "--lock"
        ])
        guard let j = try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any],
            let ak = j["access_key_id"] as? String, let sk = j["secret_access_key"] as? String,
            let tok = j["session_token"] as? String, let uak = j["user_access_key_id"] as? String,
            let usk = j["user_secret_access_key"] as? String
        else {
            throw ServerError("moto_setup.py printed no credentials: \(r.out) \(r.stderr)")
        }
        return MotoServer(
            process: proc, bucket: bucket, region: (j["region"] as? String) ?? "us-east-1",
            session: AWSCredentials(accessKeyID: ak, secretAccessKey: sk, sessionToken: tok),
            user: AWSCredentials(accessKeyID: uak, secretAccessKey: usk, sessionToken: nil),
            expiration: (j["expiration"] as? String) ?? "")
    }

    private init(
        process: ServerProcess, bucket: String, region: String, session: AWSCredentials,
        user: AWSCredentials, expiration: String
    ) {
        self.process = process
        self.bucket = bucket
        self.region = region
        self.sessionCredentials = session
        self.userCredentials = user
        self.expiration = expiration
    }

    public func stop() { process.stop() }

    private func helper(_ args: [String]) throws -> Run {
        try Run.run(
            ["python3", ServerProcess.script("moto_setup.py")] + args
                + [
                    "--endpoint", endpoint, "--access-key", userCredentials.accessKeyID,
                    "--secret-key", userCredentials.secretAccessKey
                ])
    }

    /// Downloads the object (boto3, user's key) to `out` (a temporary file if nil) and returns
    /// the sha256 of the downloaded file by sha256sum.
    public func objectSHA256(key: String, bucket: String? = nil, out: URL? = nil) throws -> String {
        let file = out ?? process.logDirectory.appendingPathComponent("get-\(UInt32.random(in: 0...UInt32.max))")
        _ = try helper(["get", "--bucket", bucket ?? self.bucket, "--key", key, "--out", file.path])
        defer { if out == nil { try? FileManager.default.removeItem(at: file) } }
        return try sha256(ofFile: file)
    }

    /// HEAD of the object: {"etag", "size", "content_type", "metadata": {...}} as printed by the helper.
    public func objectHead(key: String, bucket: String? = nil) throws -> [String: Any] {
        let r = try helper(["head", "--bucket", bucket ?? self.bucket, "--key", key])
        return (try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any]) ?? [:]
    }

    /// The object's user metadata (x-amz-meta-*, names without the prefix, lowercased by S3).
    public func objectMetadata(key: String, bucket: String? = nil) throws -> [String: String] {
        (try objectHead(key: key, bucket: bucket)["metadata"] as? [String: String]) ?? [:]
    }

    /// Upload ids of the multipart uploads still in progress in the bucket.
    public func listMultipartUploads(bucket: String? = nil) throws -> [String] {
        let r = try helper(["list-uploads", "--bucket", bucket ?? self.bucket])
        let list = (try JSONSerialization.jsonObject(with: r.stdout) as? [[String: Any]]) ?? []
        return list.compactMap { $0["upload_id"] as? String }
    }
}

// MARK: - Fault-injecting proxy

/// What the proxy saw: one [method, target, outcome] per request, where outcome is the upstream
/// status (Int) or a fault ("cut", "drop_response", "stall", "status:503", "error:...").
public struct ProxyStats: @unchecked Sendable {
    public struct Entry: Sendable, Equatable {
        public var method: String
        public var target: String
        /// The upstream status as text ("204") or the fault ("cut", "status:503"...).
        public var outcome: String
        public var status: Int? { Int(outcome) }
    }
    public var requests: [Entry]
    public var faultsApplied: Int
    public var bytesForwarded: Int

    public func count(_ method: String? = nil, pathContains: String? = nil, outcome: String? = nil) -> Int {
        requests.filter {
            (method == nil || $0.method == method) && (pathContains == nil || $0.target.contains(pathContains!))
                && (outcome == nil || $0.outcome == outcome)
        }.count
    }
}

/// Tests/Servers/faultproxy.py in front of an upstream. Rules are JSON dictionaries
/// (see faultproxy.py), e.g. `["method": "PATCH", "action": "cut", "after_bytes": 100_000]`.
public final class FaultProxy: @unchecked Sendable {
    public let process: ServerProcess
    public let upstream: String
    public var port: Int { process.port }
    /// http://127.0.0.1:P
    public var url: String { "http://127.0.0.1:\(port)" }

    public static func start(upstream: String, maxSeconds: Int = 600) throws -> FaultProxy {
        let dir = FileManager.default.temporaryDirectory
            .appendingPathComponent("clipflow-server-faultproxy-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let portFile = dir.appendingPathComponent("port")
        let proc = ServerProcess(
            name: "faultproxy",
            arguments: [
                "python3", ServerProcess.script("faultproxy.py"), "--upstream", upstream,
                "--port", "0", "--port-file", portFile.path,
                "--max-seconds", String(maxSeconds)
            ],
            portFile: portFile, logDirectory: dir)
        try proc.start()
        return FaultProxy(process: proc, upstream: upstream)
    }

    private init(process: ServerProcess, upstream: String) {
        self.process = process
        self.upstream = upstream
    }

    public func stop() { process.stop() }

    /// Replaces the rules.
    public func setRules(_ rules: [[String: Any]]) throws {
        let r = try HTTP.request("POST", url + "/__proxy/rules", json: rules)
        guard r.status == 200 else { throw ServerError("faultproxy refused rules: \(r.status) \(r.text)") }
    }

    public func clearRules() throws {
        _ = try HTTP.request("DELETE", url + "/__proxy/rules")
    }

    public func resetStats() throws {
        _ = try HTTP.request("POST", url + "/__proxy/reset-stats")
    }

    public func stats() throws -> ProxyStats {
        let r = try HTTP.request("GET", url + "/__proxy/stats")
        guard let j = try r.json() as? [String: Any] else { throw ServerError("bad stats: \(r.text)") }
        let reqs = (j["requests"] as? [[Any]]) ?? []
        return ProxyStats(
            requests: reqs.map { e in
                ProxyStats.Entry(
                    method: "\(e.count > 0 ? e[0] : "")", target: "\(e.count > 1 ? e[1] : "")",
                    outcome: "\(e.count > 2 ? e[2] : "")")
            },
            faultsApplied: (j["faults_applied"] as? Int) ?? 0,
            bytesForwarded: (j["bytes_forwarded"] as? Int) ?? 0)
    }
}

// MARK: - Gcore video API stand-in

/// Tests/Servers/gcore_api.py: login/refresh, bearer tokens, POST /videos, GET /videos/{id}/upload
/// (servers[0].hostname = `tusHost`). Starts with `access`/`refresh` already valid.
public final class GcoreAPI: @unchecked Sendable {
    public let process: ServerProcess
    public let access: String
    public let refresh: String
    public let username = "user@example.com"
    public let password = "secret"
    public var port: Int { process.port }
    /// http://127.0.0.1:P
    public var url: String { "http://127.0.0.1:\(port)" }

    public static func start(
        tusHost: String, access: String = "test-access-token",
        refresh: String = "test-refresh-token", maxSeconds: Int = 600
    ) throws -> GcoreAPI {
        let dir = FileManager.default.temporaryDirectory
            .appendingPathComponent("clipflow-server-gcore-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let portFile = dir.appendingPathComponent("port")
        let proc = ServerProcess(
            name: "gcore",
            arguments: [
                "python3", ServerProcess.script("gcore_api.py"), "--port", "0",
                "--port-file", portFile.path, "--tus-host", tusHost,
                "--max-seconds", String(maxSeconds), "--access", access,
                "--refresh", refresh
            ],
            portFile: portFile, logDirectory: dir)
        try proc.start()
        return GcoreAPI(process: proc, access: access, refresh: refresh)
    }

    private init(process: ServerProcess, access: String, refresh: String) {
        self.process = process
        self.access = access
        self.refresh = refresh
    }

    public func stop() { process.stop() }

    /// Every access token issued so far expires: the next authorized call gets 401.
    public func expireAccess() throws {
        let r = try HTTP.request("POST", url + "/__control/expire-access")
        guard r.status == 200 else { throw ServerError("expire-access: \(r.status) \(r.text)") }
    }

    /// {"videos": [...], "refreshes": N, "logins": N, "upload_tokens": {...}, "requests": [[m, p, s]]}
    public func state() throws -> [String: Any] {
        let r = try HTTP.request("GET", url + "/__control/state")
        return (try r.json() as? [String: Any]) ?? [:]
    }

    public func refreshCount() throws -> Int { (try state()["refreshes"] as? Int) ?? 0 }

    public func videos() throws -> [[String: Any]] { (try state()["videos"] as? [[String: Any]]) ?? [] }
}

// MARK: - Hostile HTTP server

/// Tests/Servers/hostile_http.py: TUS, a Gcore-style API and S3 multipart in memory on one
/// listener, answering honestly until a plan bends its answers; records every request it gets.
public final class HostileServer: @unchecked Sendable {
    public struct Request: Sendable {
        public var method: String
        public var path: String
        public var headers: [String: String]
    }

    public let process: ServerProcess
    public var host: String { process.host }
    public var port: Int { process.port }
    /// host:port
    public var hostPort: String { "\(host):\(port)" }
    /// http://host:port
    public var url: String { "http://\(hostPort)" }

    /// `foreign` (host:port) is where "elsewhere" mutations point (another listener that records).
    public static func start(host: String = "127.0.0.1", foreign: String? = nil, maxSeconds: Int = 600) throws -> HostileServer {
        let dir = FileManager.default.temporaryDirectory
            .appendingPathComponent("clipflow-server-hostile-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let portFile = dir.appendingPathComponent("port")
        var args = [
            "python3", ServerProcess.script("hostile_http.py"), "--bind", host, "--port", "0",
            "--port-file", portFile.path, "--max-seconds", String(maxSeconds)
        ]
        if let foreign { args += ["--foreign", foreign] }
        let proc = ServerProcess(name: "hostile", arguments: args, portFile: portFile, logDirectory: dir, host: host)
        try proc.start()
        return HostileServer(process: proc)
    }

    private init(process: ServerProcess) { self.process = process }

    public func stop() { process.stop() }

    /// Seeded random mutations: each answer is bent with probability `rate`. Clears the log.
    public func plan(seed: Int, rate: Double) throws {
        try post(["seed": seed, "rate": rate])
    }

    /// Exact mutations: [{"method", "path"?, "mutation", "value"?, "times"?}]. Clears the log.
    public func plan(rules: [[String: Any]]) throws {
        try post(["rules": rules])
    }

    private func post(_ plan: [String: Any]) throws {
        let r = try HTTP.request("POST", url + "/__control/plan", body: try JSONSerialization.data(withJSONObject: plan))
        guard r.status == 200 else { throw ServerError("hostile plan: \(r.status) \(r.text)") }
    }

    private func log() throws -> [String: Any] {
        let r = try HTTP.request("GET", url + "/__control/log")
        return (try r.json() as? [String: Any]) ?? [:]
    }

    /// Every request since the last plan.
    public func requests() throws -> [Request] {
        ((try log()["requests"] as? [[String: Any]]) ?? []).map {
            Request(
                method: $0["method"] as? String ?? "", path: $0["path"] as? String ?? "",
                headers: $0["headers"] as? [String: String] ?? [:])
        }
    }

    /// [method, path, mutation] of every bent answer since the last plan.
    public func mutations() throws -> [[String]] { (try log()["mutations"] as? [[String]]) ?? [] }

    /// sha256 (hex) of each completed upload: "tus/<id>" or "s3/<key>".
    public func objects() throws -> [String: String] { (try log()["objects"] as? [String: String]) ?? [:] }
}

// MARK: - PostgreSQL (Debian's postgresql)

/// A PostgreSQL server of a test's own: `initdb` into a temporary folder (trust authentication,
/// user and database `clipflow`), `postgres` on a free loopback port under supervise.py (so it
/// never outlives the tests). As root it runs as the `postgres` user, which PostgreSQL requires.
public final class PostgresServer: @unchecked Sendable {
    public let process: ServerProcess
    public let folder: URL
    public var port: Int { process.port }
    /// For `clipflow serve --database`.
    public var url: String { "postgres://clipflow@127.0.0.1:\(port)/clipflow" }

    static var binaries: String {
        let versions = ((try? FileManager.default.contentsOfDirectory(atPath: "/usr/lib/postgresql")) ?? []).sorted { Int($0) ?? 0 < Int($1) ?? 0 }
        return "/usr/lib/postgresql/\(versions.last ?? "15")/bin"
    }

    /// `command` as the user PostgreSQL runs as.
    static func asServerUser(_ command: [String]) -> [String] { getuid() == 0 ? ["runuser", "-u", "postgres", "--"] + command : command }

    public static func start(maxSeconds: Int = 900) throws -> PostgresServer {
        let folder = URL(fileURLWithPath: "/tmp").appendingPathComponent("clipflow-pg-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let data = folder.appendingPathComponent("data")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
        if getuid() == 0 { try Run.run(["chown", "postgres:postgres", folder.path]) }
        try Run.run(asServerUser(["\(binaries)/initdb", "-D", data.path, "-U", "clipflow", "--auth=trust", "-E", "UTF8", "--no-sync"]))
        let port = ServerProcess.freePort()
        let proc = ServerProcess(
            name: "postgres",
            arguments: ServerProcess.supervised(
                asServerUser([
                    "\(binaries)/postgres", "-D", data.path, "-p", String(port), "-k", folder.path, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"
                ]), maxSeconds: maxSeconds),
            port: port)
        try proc.start()
        let server = PostgresServer(process: proc, folder: folder)
        // The server accepts connections a moment before it takes queries.
        var created = false
        for _ in 0..<100 where !created {
            created = (try? server.psql("CREATE DATABASE clipflow", database: "postgres")) != nil
            if !created { usleep(100_000) }
        }
        guard created else { throw ServerError("postgres did not take queries: \(proc.stderrText.suffix(2000))") }
        return server
    }

    private init(process: ServerProcess, folder: URL) {
        self.process = process
        self.folder = folder
    }

    /// A role `name` that must give `password` over TCP (scram-sha-256, whatever the cluster's
    /// trust for others), owning a database of its own named `name`.
    public func addPasswordUser(_ name: String, password: String) throws {
        try psql("CREATE ROLE \(name) LOGIN PASSWORD '\(password)'", database: "postgres")
        try psql("CREATE DATABASE \(name) OWNER \(name)", database: "postgres")
        let rules = folder.appendingPathComponent("data/pg_hba.conf")
        let old = try String(contentsOf: rules, encoding: .utf8)
        try ("host all \(name) 127.0.0.1/32 scram-sha-256\n" + old).write(to: rules, atomically: false, encoding: .utf8)
        try psql("SELECT pg_reload_conf()", database: "postgres")
        // The server reads its rules again a moment after it is told to.
        for _ in 0..<50 {
            let trusted = try Run.run(
                ["psql", "-h", "127.0.0.1", "-p", String(port), "-U", name, "-d", name, "-w", "-At", "-c", "SELECT 1"], env: ["PGPASSWORD": ""],
                check: false)
            if trusted.status != 0 { return }
            usleep(100_000)
        }
        throw ServerError("postgres did not start asking \(name) for a password")
    }

    /// One statement's rows, `|`-separated (psql -At).
    @discardableResult
    public func psql(_ sql: String, database: String = "clipflow") throws -> String {
        try Run.run(["psql", "-h", "127.0.0.1", "-p", String(port), "-U", "clipflow", "-d", database, "-At", "-v", "ON_ERROR_STOP=1", "-c", sql]).out
    }

    public func stop() {
        process.stop()
        try? FileManager.default.removeItem(at: folder)
    }
}

// MARK: - clipflow serve (the binary under test)

extension ServerProcess {
    /// `clipflow serve --data DATA --listen 127.0.0.1:PORT EXTRA...` (the `binary` under test) on a
    /// free loopback port kept across restarts, under supervise.py so it never outlives the tests.
    public static func clipflowServe(
        binary: String, data: URL, _ extra: [String] = [], environment: [String: String] = [:], maxSeconds: Int = 900
    ) -> ServerProcess {
        let port = freePort()
        return ServerProcess(
            name: "clipflow-serve",
            arguments: supervised([binary, "serve", "--data", data.path, "--listen", "127.0.0.1:\(port)"] + extra, maxSeconds: maxSeconds),
            environment: environment, port: port)
    }

    /// The supervised process itself (supervise.py's child running `command`), for SIGKILL.
    public func supervisedPID(_ command: String = "clipflow serve") throws -> Int32 {
        guard let parent = pid else { throw ServerError("\(name) is not running") }
        let r = try Run.run(["pgrep", "-f", "-P", String(parent), command], check: false)
        guard let child = Int32(r.out.split(separator: "\n").first ?? "") else { throw ServerError("no '\(command)' under \(parent): \(r.out)") }
        return child
    }
}
