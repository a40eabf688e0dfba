import ClipFlowTestSupport
import Foundation
import XCTest

/// deploy/grafana/clipflow-serve.json against a real Prometheus (Debian's) scraping a real
/// `clipflow serve` that processed an upload: every panel's query is one Prometheus accepts, the
/// processing panels have data, every series the dashboard names is one the server writes (or is
/// documented as appearing only with a bucket or with viewers), and every series the server writes
/// has a panel.
final class GrafanaDashboardCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "grafana-test-api-key"
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    /// The dashboard's queries, in panel order: (panel title, PromQL with Grafana's variables).
    func queries() throws -> [(String, String)] {
        let data = try Data(contentsOf: Self.root.appendingPathComponent("deploy/grafana/clipflow-serve.json"))
        let dashboard = try XCTUnwrap(try JSONSerialization.jsonObject(with: data) as? [String: Any])
        let panels = try XCTUnwrap(dashboard["panels"] as? [[String: Any]])
        return panels.flatMap { panel in
            ((panel["targets"] as? [[String: Any]]) ?? []).compactMap { t in (t["expr"] as? String).map { (panel["title"] as? String ?? "", $0) } }
        }
    }

    /// The metric families a query or an exposition names (`_bucket`, `_sum`, `_count` folded).
    func families(_ text: String) -> Set<String> {
        let regex = try! NSRegularExpression(pattern: "clipflow_[a-z_]+")
        let range = NSRange(text.startIndex..., in: text)
        return Set(
            regex.matches(in: text, range: range).compactMap { Range($0.range, in: text).map { String(text[$0]) } }.map { name in
                for suffix in ["_bucket", "_sum", "_count"] where name.hasSuffix(suffix) { return String(name.dropLast(suffix.count)) }
                return name
            })
    }

    func testEveryPanelQueryAnswersFromARealPrometheus() throws {
        let data = fx.scratch("grafana-serve")
        let s = ServerProcess.clipflowServe(binary: binary, data: data, environment: ["CLIPFLOW_API_KEY": key])
        try s.start()
        defer { s.stop() }
        let (id, token) = try s.newVideo(key: key, ["name": "dashboard"])
        try s.tusUpload(try fx.clip("grafana.mp4", seconds: 3, size: "640x360"), video: id, token: token)
        XCTAssertEqual(try s.waitForVideo(id, key: key, seconds: 120)["status"] as? String, "ready")

        // Prometheus scrapes the server every second.
        let dir = fx.scratch("grafana-prometheus")
        let config = dir.appendingPathComponent("prometheus.yml")
        try """
        global:
          scrape_interval: 1s
        scrape_configs:
          - job_name: clipflow-serve
            static_configs:
              - targets: ["127.0.0.1:\(s.port)"]
        """.write(to: config, atomically: true, encoding: .utf8)
        let port = ServerProcess.freePort()
        let prometheus = ServerProcess(
            name: "prometheus",
            arguments: [
                "prometheus", "--config.file", config.path, "--storage.tsdb.path", dir.appendingPathComponent("tsdb").path,
                "--web.listen-address", "127.0.0.1:\(port)"
            ],
            port: port, logDirectory: dir)
        try prometheus.start()
        defer { prometheus.stop() }
        // It listens before its storage is ready: until then it answers 503.
        let ready = Date().addingTimeInterval(30)
        while Date() < ready, (try? HTTP.request("GET", "http://127.0.0.1:\(port)/-/ready").status) != 200 { usleep(200_000) }

        func query(_ promql: String) throws -> [String: Any] {
            var components = URLComponents(string: "http://127.0.0.1:\(port)/api/v1/query")!
            components.queryItems = [URLQueryItem(name: "query", value: promql)]
            let answer = try HTTP.request("GET", components.url!.absoluteString)
            return try XCTUnwrap(try answer.json() as? [String: Any], answer.text)
        }
        func series(_ promql: String) throws -> Int { ((try query(promql)["data"] as? [String: Any])?["result"] as? [Any])?.count ?? 0 }
        // A few scrapes, so rates have two samples at least; more traffic meanwhile.
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, try series("count_over_time(up[1m]) >= 6") == 0 {
            _ = try HTTP.request("GET", "http://127.0.0.1:\(s.port)/feed.json")
            usleep(500_000)
        }
        XCTAssertEqual(try series("up == 1"), 1, "Prometheus scraped the server")

        let all = try queries()
        XCTAssertGreaterThanOrEqual(all.count, 20)
        var empty: [String] = []
        for (title, expr) in all {
            let promql = expr.replacingOccurrences(of: "$__rate_interval", with: "30s").replacingOccurrences(of: "$instance", with: ".*")
            let answer = try query(promql)
            XCTAssertEqual(answer["status"] as? String, "success", "\(title): \(promql): \(answer)")
            XCTAssertNil(answer["warnings"], "\(title): \(answer)")
            if try series(promql) == 0 { empty.append(title) }
        }
        // What this server did shows: uploads, requests, jobs, the queue, workers, processing, time
        // to playable, the database. (No bucket, no viewer, no webhook: those panels may be empty.)
        let mustShow = [
            "Uploads created and completed per second", "HTTP answers by status class", "Queued jobs by step (from the database)",
            "Jobs by state (from the database)", "Workers busy (1 = one core's worth of steps)", "Jobs ended per second by outcome",
            "Where the time to playable goes: mean seconds to each mark", "Database statements per second by operation",
            "Database time, p99 by operation"
        ]
        for title in mustShow { XCTAssertFalse(empty.contains(title), "\(title) has data; empty: \(empty)") }

        // The names agree both ways with what the server writes.
        let exposition = try HTTP.request("GET", "http://127.0.0.1:\(s.port)/metrics").text
        let written = families(exposition)
        let named = families(all.map(\.1).joined(separator: "\n"))
        let onlyWithBucketOrViewers = named.filter { $0.hasPrefix("clipflow_bucket_") || $0.hasPrefix("clipflow_viewer_") }
        XCTAssertEqual(named.subtracting(written).subtracting(onlyWithBucketOrViewers), [], "named by the dashboard, not written by the server")
        XCTAssertEqual(written.subtracting(named).subtracting(["clipflow_viewer_reports_dropped_total"]), [], "written, with no panel")
        let docs = try String(contentsOf: Self.root.appendingPathComponent("docs/observability.md"), encoding: .utf8)
        for name in onlyWithBucketOrViewers.filter({ $0.hasPrefix("clipflow_bucket_") }) { XCTAssertTrue(docs.contains(name), name) }
    }
}
