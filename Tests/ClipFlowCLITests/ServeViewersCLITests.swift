import ClipFlowTestSupport
import Foundation
import XCTest

/// What viewers saw: the feed page reports each view (`POST /beacon`), `/metrics` counts them per
/// video and rendition, `GET /videos/{id}/views` sums them up for the studio; beacons are checked
/// and rate limited, so a flood costs bounded memory.
final class ServeViewersCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "viewers-test-key"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    var root: URL { URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent() }

    func api(_ s: ServerProcess, _ method: String, _ path: String, json: Any? = nil) throws -> HTTPReply {
        try HTTP.request(method, "http://127.0.0.1:\(s.port)\(path)", headers: ["Authorization": "Bearer \(key)"], json: json)
    }

    func beacon(_ s: ServerProcess, _ body: String, type: String = "application/json") throws -> HTTPReply {
        try HTTP.request("POST", "http://127.0.0.1:\(s.port)/beacon", headers: ["Content-Type": type], body: Data(body.utf8))
    }

    /// A server with one video, ready; its id.
    func serverWithAVideo(_ name: String) throws -> (ServerProcess, Int) {
        let s = ServerProcess.clipflowServe(binary: binary, data: fx.scratch(name), environment: ["CLIPFLOW_API_KEY": key])
        try s.start()
        let (id, upload) = try s.newVideo(key: key, ["name": "watched"])
        try s.tusUpload(try fx.clip("serve-viewers.mp4", seconds: 4, size: "640x360"), video: id, token: upload)
        XCTAssertEqual((try s.waitForVideo(id, key: key, seconds: 120) as [String: Any])["status"] as? String, "ready")
        return (s, id)
    }

    func testTheFeedReportsEachViewToMetricsAndTheVideosFigures() throws {
        let (s, id) = try serverWithAVideo("serve-viewers")
        defer { s.stop() }
        let watched = try Run.run(["python3", root.appendingPathComponent("scripts/watch-check").path, "http://127.0.0.1:\(s.port)/"], check: false)
        XCTAssertEqual(watched.status, 0, watched.out + watched.stderr)
        var metrics = ""
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            metrics = try HTTP.request("GET", "http://127.0.0.1:\(s.port)/metrics").text
            if metrics.contains("clipflow_viewer_views_total{video=\"\(id)\"") { break }
            usleep(100_000)
        }
        let views = metrics.split(separator: "\n").filter { $0.hasPrefix("clipflow_viewer_views_total{video=\"\(id)\"") }
        XCTAssertEqual(views.count, 1, metrics)
        XCTAssertTrue(views.first?.hasSuffix(" 1") ?? false, "\(views)")
        XCTAssertFalse(views.first?.contains("rendition=\"other\"") ?? true, "the rendition played is named: \(views)")
        XCTAssertTrue(metrics.contains("clipflow_viewer_startup_seconds_count{video=\"\(id)\""), metrics)
        let summary = try XCTUnwrap(try api(s, "GET", "/videos/\(id)/views").json() as? [String: Any])
        XCTAssertEqual(summary["views"] as? Int, 1, "\(summary)")
        let p50 = try XCTUnwrap(summary["startup_p50_ms"] as? Int, "\(summary)")
        XCTAssertTrue((1..<10_000).contains(p50), "\(summary)")
        XCTAssertEqual(summary["errors"] as? Int, 0)
        XCTAssertNotNil(summary["rebuffer_ratio"] as? Double)
    }

    func testBeaconsAreCheckedAndAFloodCostsBoundedMemory() throws {
        let (s, id) = try serverWithAVideo("serve-viewers-flood")
        defer { s.stop() }
        let good =
            "{\"video\": \(id), \"startup_ms\": 300, \"rebuffers\": 1, \"rebuffer_ms\": 200, \"watched_ms\": 4000, \"rendition\": \"360p\", \"error\": null}"
        XCTAssertEqual(try beacon(s, good).status, 204)
        XCTAssertEqual(try beacon(s, good, type: "application/x-www-form-urlencoded").status, 415)
        XCTAssertEqual(try beacon(s, String(repeating: " ", count: 3000) + good).status, 413)
        let negative = try beacon(s, good.replacingOccurrences(of: "\"rebuffers\": 1", with: "\"rebuffers\": -1"))
        XCTAssertEqual(negative.status, 400)
        XCTAssertTrue(negative.text.contains("rebuffers"), negative.text)
        XCTAssertEqual(try beacon(s, good.replacingOccurrences(of: "\"video\": \(id)", with: "\"video\": 999999")).status, 404)
        XCTAssertEqual(try beacon(s, "[1, 2]").status, 400)

        // A flood from one address: a burst is taken, the rest refused; memory stays put.
        let pid = try s.supervisedPID()
        func resident() throws -> Int {
            let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
            let line = try XCTUnwrap(status.split(separator: "\n").first { $0.hasPrefix("VmRSS:") })
            return Int(line.split(separator: " ", omittingEmptySubsequences: true)[1]) ?? 0
        }
        let before = try resident()
        let script = """
            import collections, json, sys, time, urllib.request
            from concurrent.futures import ThreadPoolExecutor
            url, body = sys.argv[1], sys.argv[2].encode()
            def send(n):
                r = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"})
                try:
                    return urllib.request.urlopen(r, timeout=10).status
                except urllib.error.HTTPError as e:
                    return e.code
            start = time.monotonic()
            with ThreadPoolExecutor(16) as pool:
                counts = collections.Counter(pool.map(send, range(3000)))
            print(json.dumps({"counts": {str(k): v for k, v in counts.items()}, "seconds": time.monotonic() - start}))
            """
        let flood = try Run.run(["python3", "-c", script, "http://127.0.0.1:\(s.port)/beacon", good])
        let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(flood.out.utf8)) as? [String: Any])
        let counts = try XCTUnwrap(report["counts"] as? [String: Int])
        let seconds = try XCTUnwrap(report["seconds"] as? Double)
        let taken = counts["204"] ?? 0
        XCTAssertEqual(taken + (counts["429"] ?? 0), 3000, "\(counts)")
        XCTAssertLessThanOrEqual(taken, 20 + Int(seconds.rounded(.up)) + 1, "\(report)")
        let after = try resident()
        XCTAssertLessThan(after - before, 30_000, "resident KiB before \(before), after \(after)")
        let summary = try XCTUnwrap(try api(s, "GET", "/videos/\(id)/views").json() as? [String: Any])
        XCTAssertEqual(summary["views"] as? Int, 1 + taken)
        XCTAssertEqual(summary["rebuffer_ratio"] as? Double, 0.05)
    }
}
