import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow serve` as an operator runs it: its start line and request log on stderr (which never
/// holds the key, a token, the token secret or an upload's URL), a taken port, `/healthz`,
/// `/metrics` read by the Prometheus client's own parser, and TLS ended by Debian's nginx with the
/// configuration in deploy/nginx.
final class ServeOperatorCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "operator-test-key-must-not-be-logged"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    var repository: URL { URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent() }

    func api(_ base: String, _ method: String, _ path: String, json: Any? = nil, bearer: String? = nil) throws -> HTTPReply {
        try HTTP.request(method, base + path, headers: ["Authorization": "Bearer \(bearer ?? key)"], json: json)
    }

    func source() throws -> String {
        try fx.clip(
            "serve-operator-src.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "4", "-c:v", "libx264", "-preset",
                "ultrafast", "-g", "60", "-c:a", "aac"
            ])
    }

    /// Polls the video (at `base`, with `verify` false for a self-signed certificate) until its
    /// status is one of `ends`.
    func waitFor(_ base: String, _ id: Int, _ ends: Set<String>, seconds: Double = 90) throws -> [String: Any] {
        let deadline = Date().addingTimeInterval(seconds)
        var last: [String: Any] = [:]
        while Date() < deadline {
            last = try XCTUnwrap(try api(base, "GET", "/videos/\(id)").json() as? [String: Any])
            if ends.contains(last["status"] as? String ?? "") { return last }
            usleep(200_000)
        }
        throw ServerError("video \(id) never reached \(ends): \(last)")
    }

    /// Uploads `file` for video `id` with tuspy to `endpoint`; returns the upload's URL.
    func tuspy(_ endpoint: String, _ file: String, video id: Int, token: String, insecure: Bool = false) throws -> String {
        let script = """
            import sys, warnings
            warnings.filterwarnings("ignore")
            from tusclient import client
            u = client.TusClient(sys.argv[1]).uploader(sys.argv[2], chunk_size=1 << 20, verify_tls_cert=sys.argv[5] != "insecure",
                metadata={"filename": "op.mp4", "video_id": sys.argv[3], "token": sys.argv[4]})
            u.upload()
            print(u.url)
            """
        return try Run.run(["python3", "-c", script, endpoint, file, String(id), token, insecure ? "insecure" : "verify"]).out
            .trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The metric families of a `/metrics` answer as PyPI prometheus_client's parser reads them:
    /// `name{labels}` -> value, for every sample.
    func parsedMetrics(_ text: String) throws -> [String: Double] {
        let script = """
            import sys, json
            from prometheus_client.parser import text_string_to_metric_families
            out = {}
            for family in text_string_to_metric_families(sys.stdin.read()):
                for s in family.samples:
                    labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
                    out[s.name + ("{" + labels + "}" if labels else "")] = s.value
            print(json.dumps(out))
            """
        let file = fx.scratch("serve-operator-metrics").appendingPathComponent("metrics-\(UUID().uuidString).txt")
        try Data(text.utf8).write(to: file)
        let r = try Run.run(["sh", "-c", "python3 -c \"$0\" < \"$1\"", script, file.path], check: false)
        XCTAssertEqual(r.status, 0, "prometheus_client refused the exposition: \(r.stderr)\n\(text)")
        return try XCTUnwrap(try JSONSerialization.jsonObject(with: r.stdout) as? [String: Double])
    }

    /// Every way the token secret could be written: hex, base64, base64url.
    func secretSpellings(_ data: URL) throws -> [String] {
        let secret = try Data(contentsOf: data.appendingPathComponent("token-secret"))
        XCTAssertEqual(secret.count, 32)
        let b64 = secret.base64EncodedString()
        let url = b64.replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        return [secret.map { String(format: "%02x", $0) }.joined(), b64, url]
    }

    /// Create a video with the key, upload it with its token, fetch it, ask /healthz and /metrics,
    /// all with the server's stderr in a file: no line holds the key, the upload token, an access
    /// token, the token secret, the upload's id or a query; every line is one JSON object; the
    /// request lines name each request with its status and bytes.
    func testFullFlowLogsEachRequestAsJSONAndNeverASecret() throws {
        let data = fx.scratch("serve-operator-json")
        let s = ServerProcess.clipflowServe(binary: binary, data: data, ["--log-format", "json"], environment: ["CLIPFLOW_API_KEY": key])
        try s.start()
        defer { s.stop() }
        let base = "http://127.0.0.1:\(s.port)"
        let file = try source()
        let size = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int)

        let made = try api(base, "POST", "/videos", json: ["name": "operator", "mode": "copy"])
        XCTAssertEqual(made.status, 201, made.text)
        let id = try XCTUnwrap((try made.json() as? [String: Any])?["id"] as? Int)
        let token = try XCTUnwrap((try api(base, "GET", "/videos/\(id)/upload").json() as? [String: Any])?["token"] as? String)
        let access = try XCTUnwrap((try api(base, "POST", "/auth/refresh", json: ["refresh": key]).json() as? [String: Any])?["access"] as? String)
        XCTAssertEqual(try api(base, "GET", "/videos?token=\(token)&key=\(key)", bearer: access).status, 200)
        XCTAssertEqual(try api(base, "GET", "/videos", bearer: "wrong-\(key)").status, 401)
        let location = try tuspy(base + "/files", file, video: id, token: token)
        let uploadID = try XCTUnwrap(location.split(separator: "/").last.map(String.init))
        XCTAssertEqual(try HTTP.request("HEAD", location + "?token=\(token)", headers: ["Tus-Resumable": "1.0.0"]).status, 200)
        XCTAssertEqual(try HTTP.request("GET", base + "/files/\(uploadID)/nothing-here").status, 404)
        let video = try waitFor(base, id, ["ready", "error"])
        XCTAssertEqual(video["status"] as? String, "ready", "\(video)")
        let hls = try XCTUnwrap(video["hls_url"] as? String)
        XCTAssertEqual(try HTTP.request("GET", hls).status, 200)

        let health = try HTTP.request("GET", base + "/healthz")
        XCTAssertEqual(health.status, 200)
        XCTAssertEqual(health.text, "ok\n")
        // The job is marked done just after its video is: ask again until it is.
        var exposition = try HTTP.request("GET", base + "/metrics")
        var m = try parsedMetrics(exposition.text)
        for _ in 0..<50 where m["clipflow_jobs{state=\"done\"}"] != 1 {
            usleep(100_000)
            exposition = try HTTP.request("GET", base + "/metrics")
            m = try parsedMetrics(exposition.text)
        }
        XCTAssertEqual(exposition.status, 200, "no key needed")
        XCTAssertTrue(exposition.header("Content-Type")?.hasPrefix("text/plain; version=0.0.4") ?? false, "\(exposition.headers)")
        XCTAssertEqual(m["clipflow_uploads_created_total"], 1, "\(m)")
        XCTAssertEqual(m["clipflow_uploads_completed_total"], 1, "\(m)")
        XCTAssertEqual(m["clipflow_upload_bytes_received_total"], Double(size), "\(m)")
        XCTAssertEqual(m["clipflow_jobs{state=\"done\"}"], 1, "\(m)")
        XCTAssertEqual(m["clipflow_jobs{state=\"queued\"}"], 0, "\(m)")
        XCTAssertNotNil(m["clipflow_processing_seconds_count{outcome=\"done\"}"], "\(m)")
        XCTAssertNotNil(m["clipflow_time_to_playable_seconds_bucket{le=\"+Inf\"}"], "\(m)")
        // Where the time to playable went: every mark once, in order, the last one the whole time.
        let marks = ["taken", "worker", "probed", "written", "published"]
        for mark in marks { XCTAssertEqual(m["clipflow_time_to_mark_seconds_count{mark=\"\(mark)\"}"], 1, "\(mark): \(m)") }
        let at = marks.map { m["clipflow_time_to_mark_seconds_sum{mark=\"\($0)\"}"] ?? -1 }
        XCTAssertEqual(at, at.sorted(), "\(marks) in order: \(at)")
        XCTAssertGreaterThanOrEqual(at[0], 0)
        XCTAssertEqual(at[4], m["clipflow_time_to_playable_seconds_sum"] ?? -1, accuracy: 0.05)
        // The queue, the workers' busy time and the database's time.
        XCTAssertEqual(m["clipflow_job_queue_depth{step=\"playable\"}"], 0, "\(m)")
        XCTAssertEqual(m["clipflow_job_queue_age_seconds{step=\"playable\"}"], 0, "\(m)")
        XCTAssertGreaterThan(m["clipflow_worker_busy_seconds_total{step=\"playable\"}"] ?? 0, 0, "\(m)")
        XCTAssertEqual(
            m["clipflow_worker_busy_seconds_total{step=\"playable\"}"] ?? -1, m["clipflow_processing_seconds_sum{outcome=\"done\"}"] ?? -2, accuracy: 0.001)
        for operation in ["read", "write"] {
            let count = m["clipflow_database_seconds_count{operation=\"\(operation)\"}"] ?? 0
            XCTAssertGreaterThan(count, 3, "\(operation): \(m)")
            XCTAssertEqual(m["clipflow_database_seconds_bucket{le=\"+Inf\",operation=\"\(operation)\"}"], count, "\(m)")
            XCTAssertLessThan(m["clipflow_database_seconds_sum{operation=\"\(operation)\"}"] ?? .infinity, count, "under a second each: \(m)")
        }
        XCTAssertGreaterThanOrEqual(m["clipflow_http_requests_total{code=\"2xx\"}"] ?? 0, 8, "\(m)")
        XCTAssertEqual(m["clipflow_http_requests_total{code=\"4xx\"}"], 2, "the wrong key and the missing path: \(m)")

        s.stop()
        let log = s.stderrText
        var secrets = [key, token, access, uploadID] + (try secretSpellings(data))
        secrets.append(contentsOf: secrets.map { $0.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? $0 })
        for secret in Set(secrets) { XCTAssertFalse(log.contains(secret), "the log holds a secret (\(secret.prefix(6))…):\n\(log)") }

        let lines = log.split(separator: "\n").map(String.init)
        let objects = try lines.map { line in
            try XCTUnwrap(try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], "not one JSON object: \(line)")
        }
        let start = try XCTUnwrap(objects.first)
        XCTAssertEqual(start["event"] as? String, "listening")
        XCTAssertEqual(start["url"] as? String, base)
        XCTAssertEqual(start["database"] as? String, "sqlite")
        XCTAssertEqual(start["workers"] as? Int, 1)
        XCTAssertEqual(start["role"] as? String, "all")
        let requests = objects.filter { $0["event"] as? String == "request" }
        let keys: Set = ["time", "event", "method", "path", "status", "received", "sent", "ms"]
        XCTAssertTrue(requests.allSatisfy { Set($0.keys) == keys }, "\(requests)")
        XCTAssertFalse(requests.contains { ($0["path"] as? String ?? "?").contains("?") }, "no query is logged: \(requests)")
        XCTAssertTrue(
            requests.allSatisfy { ($0["status"] as? Int ?? 0) >= 100 && ($0["ms"] as? Double ?? -1) >= 0 && ($0["sent"] as? Int ?? -1) >= 0 }, "\(requests)")
        func seen(_ method: String, _ path: String, _ status: Int) -> [[String: Any]] {
            requests.filter { $0["method"] as? String == method && $0["path"] as? String == path && $0["status"] as? Int == status }
        }
        XCTAssertEqual(seen("POST", "/videos", 201).count, 1, "\(requests)")
        XCTAssertEqual(seen("GET", "/videos", 200).count, 1, "\(requests)")
        XCTAssertEqual(seen("GET", "/videos", 401).count, 1, "\(requests)")
        XCTAssertEqual(seen("POST", "/files", 201).count, 1, "\(requests)")
        XCTAssertEqual(seen("GET", "/files/…", 404).count, 1, "an unmatched upload URL is hidden too: \(requests)")
        XCTAssertEqual(seen("HEAD", "/files/{id}", 200).count, 1, "\(requests)")
        let patches = seen("PATCH", "/files/{id}", 204)
        XCTAssertEqual(patches.compactMap { $0["received"] as? Int }.reduce(0, +), size, "\(patches)")
        XCTAssertEqual(seen("GET", "/healthz", 200).first?["sent"] as? Int, 3)
        XCTAssertEqual(seen("GET", "/metrics", 200).last?["sent"] as? Int, exposition.body.count)
        XCTAssertEqual(seen("POST", "/auth/refresh", 200).count, 1)
        XCTAssertTrue(requests.contains { ($0["path"] as? String ?? "").hasPrefix("/media/\(id)/") }, "\(requests)")
        // Job lines, once processing reports its changes: one object each, no secret (checked above).
        for job in objects.filter({ $0["event"] as? String == "job" }) {
            XCTAssertEqual(job["video"] as? Int, id, "\(job)")
        }
    }

    /// The start line as a person reads it, one text line per request, and a second server on the
    /// same port: one clear line, a failing exit, and no data folder made.
    func testTextStartLineAndATakenPortIsOneClearErrorWithoutADataFolder() throws {
        let data = fx.scratch("serve-operator-text")
        let s = ServerProcess.clipflowServe(binary: binary, data: data, ["--workers", "2"])
        try s.start()
        defer { s.stop() }
        XCTAssertEqual(try HTTP.request("GET", "http://127.0.0.1:\(s.port)/healthz").text, "ok\n")
        XCTAssertEqual(try HTTP.request("GET", "http://127.0.0.1:\(s.port)/feed.json?token=abc").status, 200)

        let second = fx.scratch("serve-operator-taken").appendingPathComponent("never-made")
        let r = try Run.run([binary, "serve", "--data", second.path, "--listen", "127.0.0.1:\(s.port)"], check: false)
        XCTAssertNotEqual(r.status, 0)
        XCTAssertEqual(r.stderr, "error: --listen 127.0.0.1:\(s.port): the address is already in use (another server listens there)\n")
        XCTAssertFalse(FileManager.default.fileExists(atPath: second.path), "the data folder is not made")

        s.stop()
        let lines = s.stderrText.split(separator: "\n").map(String.init)
        XCTAssertEqual(lines.first, "clipflow serve: listening on http://127.0.0.1:\(s.port), data \(data.path), database sqlite, 2 workers")
        let request = #/^time=\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z event=request method=GET path=(\S+) status=200 received=0 sent=(\d+) ms=[0-9.]+$/#
        let paths = lines.dropFirst().compactMap { try? request.wholeMatch(in: $0)?.output.1 }.map(String.init)
        XCTAssertEqual(paths, ["/healthz", "/feed.json"], "\(lines)")
    }

    /// With PostgreSQL: the start line names the database without a password; once the database
    /// stops, `/healthz` answers 503 within its limit and `/metrics` leaves the job counts out.
    func testHealthFollowsTheDatabase() throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let data = fx.scratch("serve-operator-pg")
        let s = ServerProcess.clipflowServe(binary: binary, data: data, ["--database", pg.url], environment: ["CLIPFLOW_API_KEY": key])
        try s.start()
        defer { s.stop() }
        let base = "http://127.0.0.1:\(s.port)"
        XCTAssertEqual(try HTTP.request("GET", base + "/healthz").text, "ok\n")
        XCTAssertEqual(try parsedMetrics(try HTTP.request("GET", base + "/metrics").text)["clipflow_jobs{state=\"queued\"}"], 0)
        pg.stop()
        let started = Date()
        let down = try HTTP.request("GET", base + "/healthz")
        XCTAssertEqual(down.status, 503, down.text)
        XCTAssertLessThan(Date().timeIntervalSince(started), 5)
        let exposition = try HTTP.request("GET", base + "/metrics")
        XCTAssertEqual(exposition.status, 200)
        XCTAssertFalse(exposition.text.contains("clipflow_jobs"), exposition.text)
        _ = try parsedMetrics(exposition.text)
        s.stop()
        let first = s.stderrText.split(separator: "\n").first.map(String.init)
        XCTAssertEqual(first, "clipflow serve: listening on \(base), data \(data.path), database \(pg.url), 1 worker")
    }

    /// Debian's nginx with deploy/nginx/clipflow-serve.conf ends TLS (a self-signed certificate
    /// made with the openssl CLI) in front of `clipflow serve`: tuspy uploads through https, the
    /// upload's Location stays https, and the video is listed and processed.
    func testUploadThroughNginxEndingTLS() throws {
        let data = fx.scratch("serve-operator-tls")
        let s = ServerProcess.clipflowServe(binary: binary, data: data, environment: ["CLIPFLOW_API_KEY": key])
        try s.start()
        defer { s.stop() }

        let dir = fx.scratch("serve-operator-nginx")
        let cert = dir.appendingPathComponent("cert.pem").path, privateKey = dir.appendingPathComponent("key.pem").path
        try Run.run([
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
            "-keyout", privateKey, "-out", cert
        ])
        let port = ServerProcess.freePort()
        var site = try String(contentsOf: repository.appendingPathComponent("deploy/nginx/clipflow-serve.conf"), encoding: .utf8)
        for (from, to) in [
            ("server 127.0.0.1:8080;", "server 127.0.0.1:\(s.port);"), ("listen 443 ssl http2;", "listen 127.0.0.1:\(port) ssl http2;"),
            ("listen [::]:443 ssl http2;", ""), ("/etc/ssl/certs/clipflow.example.pem", cert), ("/etc/ssl/private/clipflow.example.key", privateKey),
            ("access_log /var/log/nginx/clipflow-serve.access.log;", "access_log off;")
        ] {
            XCTAssertTrue(site.contains(from), "deploy/nginx/clipflow-serve.conf has no '\(from)'")
            site = site.replacingOccurrences(of: from, with: to)
        }
        let conf = """
            \(getuid() == 0 ? "user root;" : "")
            worker_processes 1;
            pid \(dir.path)/nginx.pid;
            error_log \(dir.path)/error.log warn;
            events { worker_connections 64; }
            http {
                client_body_temp_path \(dir.path)/body;
                proxy_temp_path \(dir.path)/proxy;
                fastcgi_temp_path \(dir.path)/fastcgi;
                uwsgi_temp_path \(dir.path)/uwsgi;
                scgi_temp_path \(dir.path)/scgi;
                \(site)
            }
            """
        try Data(conf.utf8).write(to: dir.appendingPathComponent("nginx.conf"))
        let nginx = ServerProcess(
            name: "nginx", arguments: ["nginx", "-p", dir.path, "-c", dir.appendingPathComponent("nginx.conf").path, "-g", "daemon off;"], port: port)
        try nginx.start()
        defer { nginx.stop() }

        let base = "https://127.0.0.1:\(port)"
        let made = try Run.run([
            "curl", "-sS", "--cacert", cert, "-H", "Authorization: Bearer \(key)", "-H", "Content-Type: application/json", "-d",
            #"{"name": "through nginx", "mode": "copy"}"#, base + "/videos"
        ])
        let id = try XCTUnwrap((try JSONSerialization.jsonObject(with: made.stdout) as? [String: Any])?["id"] as? Int, made.out)
        let upload = try Run.run(["curl", "-sS", "--cacert", cert, "-H", "Authorization: Bearer \(key)", base + "/videos/\(id)/upload"])
        let token = try XCTUnwrap((try JSONSerialization.jsonObject(with: upload.stdout) as? [String: Any])?["token"] as? String, upload.out)
        let location = try tuspy(base + "/files", try source(), video: id, token: token, insecure: true)
        XCTAssertTrue(location.hasPrefix(base + "/files/"), "the upload's URL goes through the proxy over https: \(location)")
        let listed = try Run.run(["curl", "-sS", "--cacert", cert, "-H", "Authorization: Bearer \(key)", base + "/videos"])
        XCTAssertTrue(listed.out.contains("\"through nginx\""), listed.out)
        let described = try Run.run(["curl", "-sS", "--cacert", cert, "-H", "Authorization: Bearer \(key)", base + "/videos/\(id)"])
        let hls = (try JSONSerialization.jsonObject(with: described.stdout) as? [String: Any])?["hls_url"] as? String ?? ""
        XCTAssertTrue(hls.isEmpty || hls.hasPrefix(base + "/media/"), "the video's URLs say https behind the proxy: \(described.out)")
        XCTAssertFalse(described.out.contains("http://"), described.out)
        let health = try Run.run(["curl", "-sS", "--cacert", cert, base + "/healthz"])
        XCTAssertEqual(health.out, "ok\n")
        s.stop()
        XCTAssertFalse(s.stderrText.contains(token) || s.stderrText.contains(key), s.stderrText)
        XCTAssertTrue(s.stderrText.contains("event=request method=PATCH path=/files/{id} status=204"), s.stderrText)
    }
}
