import ClipFlowTestSupport
import Foundation
import XCTest

/// Traces over OTLP (swift-otel), as an OpenTelemetry collector receives them: a small OTLP/HTTP
/// receiver (otlp_receiver.py, decoding with PyPI opentelemetry-proto) on 127.0.0.1, pointed at by
/// the standard `OTEL_EXPORTER_OTLP_ENDPOINT`. One upload is one trace across an API server and a
/// worker sharing PostgreSQL; each `clipflow batch` row is one trace; without the variables the
/// rows keep no trace context.
final class TracingCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "tracing-test-api-key"
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    /// A receiver logging every span it gets to `log`.
    func receiver(log: URL) throws -> ServerProcess {
        let dir = fx.scratch("otlp-receiver")
        let portFile = dir.appendingPathComponent("port-\(UUID().uuidString)")
        let r = ServerProcess(
            name: "otlp-receiver", arguments: ["python3", ServerProcess.script("otlp_receiver.py"), "--port-file", portFile.path, "--log", log.path],
            portFile: portFile, logDirectory: dir)
        try r.start()
        return r
    }

    /// The collector's credentials, which no log line may hold.
    let collectorToken = "otlp-s3cret-collector-token"

    /// The standard variables for sending to `receiver` as `service`, quickly, with credentials.
    func otel(_ receiver: ServerProcess, service: String) -> [String: String] {
        [
            "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:\(receiver.port)", "OTEL_SERVICE_NAME": service, "OTEL_BSP_SCHEDULE_DELAY": "100",
            "OTEL_EXPORTER_OTLP_HEADERS": "authorization=Bearer \(collectorToken)"
        ]
    }

    /// The spans received so far.
    func spans(_ log: URL) -> [[String: Any]] {
        ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    /// Waits until `done` holds of the spans received; returns them then (or, after `seconds`, as
    /// they are).
    func waitForSpans(_ log: URL, seconds: Double = 30, until done: ([[String: Any]]) -> Bool) -> [[String: Any]] {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let s = spans(log)
            if done(s) { return s }
            usleep(200_000)
        }
        return spans(log)
    }

    func testOneUploadIsOneTraceAcrossAnAPIServerAndAWorker() throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let log = fx.scratch("tracing-serve").appendingPathComponent("spans.jsonl")
        let otlp = try receiver(log: log)
        defer { otlp.stop() }
        let data = fx.scratch("tracing-serve-data")
        let api = ServerProcess.clipflowServe(
            binary: binary, data: data, ["--database", pg.url, "--role", "api"],
            environment: otel(otlp, service: "clipflow-api").merging(["CLIPFLOW_API_KEY": key]) { $1 })
        try api.start()
        defer { api.stop() }
        let worker = ServerProcess.clipflowServe(
            binary: binary, data: data, ["--database", pg.url, "--role", "worker"],
            environment: otel(otlp, service: "clipflow-worker").merging(["CLIPFLOW_API_KEY": key]) { $1 })
        try worker.start()
        defer { worker.stop() }

        // Uploaded in 1 MB PATCHes by tuspy, then made playable and laddered by the worker.
        let (id, token) = try api.newVideo(key: key, ["name": "traced"])
        let clip = try fx.clip("tracing.mp4", seconds: 6, size: "1280x720")
        let size = try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: clip)[.size] as? Int)
        let script = """
            import sys
            from tusclient import client
            u = client.TusClient(sys.argv[1]).uploader(sys.argv[2], chunk_size=1 << 20, metadata={"video_id": sys.argv[3], "token": sys.argv[4]})
            u.upload()
            """
        try Run.run(["python3", "-c", script, "http://127.0.0.1:\(api.port)/files", clip, String(id), token])
        let ready = try api.waitForVideo(id, key: key, seconds: 180)
        XCTAssertEqual(ready["status"] as? String, "ready", "\(ready)")

        // The job row carries the upload's trace (W3C traceparent).
        let stored = try pg.psql("SELECT trace FROM jobs WHERE video_id = \(id)").trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertTrue(stored.hasPrefix("00-") && stored.count == 55, stored)
        let trace = String(stored.split(separator: "-")[1])

        let patches = (size + (1 << 20) - 1) >> 20
        let all = waitForSpans(log) { s in
            let ofTrace = s.filter { $0["trace"] as? String == trace }
            return ofTrace.filter { $0["name"] as? String == "clipflow.job" }.count >= 2
                && ofTrace.contains {
                    $0["name"] as? String == "clipflow.publish" && ($0["attributes"] as? [String: Any])?["clipflow.publish.renditions"] as? String != nil
                }
        }
        let ofTrace = all.filter { $0["trace"] as? String == trace }
        func named(_ name: String) -> [[String: Any]] { ofTrace.filter { $0["name"] as? String == name } }
        func attribute(_ span: [String: Any], _ key: String) -> Any? { (span["attributes"] as? [String: Any])?[key] }

        // The API server's part: the upload's creation (the trace's root), each PATCH under it.
        let upload = try XCTUnwrap(named("clipflow.upload").first, "\(all)")
        XCTAssertEqual(upload["service"] as? String, "clipflow-api")
        XCTAssertEqual(upload["parent"] as? String, "", "the root: \(upload)")
        XCTAssertEqual(attribute(upload, "clipflow.upload.length") as? Int, size)
        let patched = named("clipflow.upload.patch")
        XCTAssertEqual(patched.count, patches, "every PATCH: \(patched)")
        XCTAssertTrue(patched.allSatisfy { $0["service"] as? String == "clipflow-api" && $0["parent"] as? String == upload["span"] as? String })
        XCTAssertEqual(patched.compactMap { attribute($0, "clipflow.upload.offset") as? Int }.max(), size)

        // The worker's part: both steps under the upload, each with its worker process and its
        // publishing; the first publishing says it made the video playable.
        let jobs = named("clipflow.job")
        XCTAssertEqual(Set(jobs.compactMap { attribute($0, "clipflow.job.step") as? String }), ["playable", "ladder"], "\(jobs)")
        XCTAssertTrue(jobs.allSatisfy { $0["service"] as? String == "clipflow-worker" && $0["parent"] as? String == upload["span"] as? String }, "\(jobs)")
        let jobIDs = Set(jobs.compactMap { $0["span"] as? String })
        let workers = named("clipflow.worker"), publishes = named("clipflow.publish")
        XCTAssertFalse(workers.isEmpty, "\(ofTrace)")
        XCTAssertTrue((workers + publishes).allSatisfy { jobIDs.contains($0["parent"] as? String ?? "") }, "\(ofTrace)")
        XCTAssertEqual(publishes.filter { attribute($0, "clipflow.publish.first_playable") as? Bool == true }.count, 1, "\(publishes)")
        let first = try XCTUnwrap(publishes.first { attribute($0, "clipflow.publish.first_playable") as? Bool == true })
        XCTAssertLessThan(first["end"] as? Int ?? .max, jobs.compactMap { $0["end"] as? Int }.max() ?? 0, "playable before the ladder ends")
        // Nothing of the upload went into any other trace.
        XCTAssertEqual(Set(all.filter { ($0["name"] as? String ?? "").hasPrefix("clipflow.upload") }.compactMap { $0["trace"] as? String }), [trace])
        let diagnostics = (api.stderrText + "\n" + worker.stderrText).split(separator: "\n").filter { $0.lowercased().contains("otel") }
        XCTAssertEqual(diagnostics, [], "the exporter had nothing to complain of")
        // The collector's credentials went to the collector, and nowhere else.
        XCTAssertTrue(all.allSatisfy { $0["authorization"] as? String == "Bearer \(collectorToken)" })
        XCTAssertFalse((api.stderrText + worker.stderrText).contains(collectorToken))
    }

    /// Without the OpenTelemetry variables nothing is kept for tracing: no trace in the rows.
    func testWithoutTheVariablesNoTraceIsKept() throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let s = ServerProcess.clipflowServe(
            binary: binary, data: fx.scratch("tracing-off"), ["--database", pg.url, "--role", "all"], environment: ["CLIPFLOW_API_KEY": key])
        try s.start()
        defer { s.stop() }
        let (id, token) = try s.newVideo(key: key, ["name": "untraced", "mode": "copy"])
        try s.tusUpload(try fx.clip("tracing-off.mp4", seconds: 2, size: "320x240"), video: id, token: token)
        XCTAssertEqual(try s.waitForVideo(id, key: key, seconds: 60)["status"] as? String, "ready")
        XCTAssertEqual(try pg.psql("SELECT count(*) FROM uploads WHERE trace IS NOT NULL").trimmingCharacters(in: .whitespacesAndNewlines), "0")
        XCTAssertEqual(try pg.psql("SELECT count(*) FROM jobs WHERE trace IS NOT NULL").trimmingCharacters(in: .whitespacesAndNewlines), "0")
    }

    /// Each row of `clipflow batch` is a trace of its own, sent before the command ends, a
    /// failed row's span marked as an error.
    func testEachBatchRowIsATrace() throws {
        let log = fx.scratch("tracing-batch").appendingPathComponent("spans.jsonl")
        let otlp = try receiver(log: log)
        defer { otlp.stop() }
        let dir = fx.scratch("tracing-batch-rows")
        let clip = try fx.toneClip(0, seconds: 1)
        var csv = "CLIPS,OUT\n"
        for i in 0..<3 {
            let set = dir.appendingPathComponent("set-\(i)")
            try FileManager.default.createDirectory(at: set, withIntermediateDirectories: true)
            try FileManager.default.linkItem(atPath: clip, toPath: set.appendingPathComponent("fragment0.mp4").path)
            csv += "\(set.path),\(dir.appendingPathComponent("out-\(i)").path)\n"
        }
        csv += "\(dir.appendingPathComponent("missing").path),\(dir.appendingPathComponent("out-missing").path)\n"
        let rows = dir.appendingPathComponent("rows.csv").path
        try csv.write(toFile: rows, atomically: true, encoding: .utf8)
        let pipeline = Self.root.appendingPathComponent("pipelines/fragments-to-folder.json").path
        let r = try Run.run([binary, "batch", pipeline, "--rows", rows, "--jobs", "2", "--quiet"], env: otel(otlp, service: "clipflow-batch"), check: false)
        XCTAssertNotEqual(r.status, 0, "a row failed")
        // Sent before the command ended: no waiting.
        let got = spans(log).filter { $0["name"] as? String == "clipflow.batch.row" }
        XCTAssertEqual(got.count, 4, "\(spans(log))\n\(r.stderr)")
        XCTAssertEqual(Set(got.compactMap { $0["trace"] as? String }).count, 4, "a trace per row")
        XCTAssertTrue(got.allSatisfy { $0["service"] as? String == "clipflow-batch" })
        let byRow = Dictionary(uniqueKeysWithValues: got.map { (($0["attributes"] as? [String: Any])?["clipflow.batch.row"] as? Int ?? -1, $0) })
        XCTAssertEqual(Set(byRow.keys), [0, 1, 2, 3])
        XCTAssertEqual((byRow[3]?["attributes"] as? [String: Any])?["clipflow.batch.status"] as? String, "failed")
        XCTAssertEqual(byRow[3]?["status"] as? Int, 2, "STATUS_CODE_ERROR")
        XCTAssertEqual((byRow[0]?["attributes"] as? [String: Any])?["clipflow.batch.status"] as? String, "ok")
        XCTAssertFalse(r.stderr.contains(collectorToken) || r.out.contains(collectorToken))
    }
}
