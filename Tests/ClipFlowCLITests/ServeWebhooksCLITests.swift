import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow serve --webhook`: each video's events reach a receiver (Tests/Servers/
/// webhook_receiver.py, which checks signatures as a receiver's own code would), signed, in
/// order per video, once per event id, retried after a 500 and after the receiver was down
/// (across a restart of the server); receivers on names that resolve to private addresses, and
/// redirects to other addresses, are refused.
final class ServeWebhooksCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "webhooks-test-key"
    let secret = "webhook-secret-not-for-logs-0123"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func server(_ data: URL, _ extra: [String]) -> ServerProcess {
        .clipflowServe(binary: binary, data: data, extra, environment: ["CLIPFLOW_API_KEY": key, "CLIPFLOW_WEBHOOK_SECRET": secret])
    }

    func api(_ s: ServerProcess, _ method: String, _ path: String, json: Any? = nil) throws -> HTTPReply {
        try HTTP.request(method, "http://127.0.0.1:\(s.port)\(path)", headers: ["Authorization": "Bearer \(key)"], json: json)
    }

    /// A receiver on `port` (0: any) logging to `log`.
    func receiver(log: URL, port: Int = 0, _ extra: [String] = []) -> ServerProcess {
        let dir = fx.scratch("webhook-receiver")
        let portFile = dir.appendingPathComponent("port")
        return ServerProcess(
            name: "webhook-receiver",
            arguments: ["python3", ServerProcess.script("webhook_receiver.py"), "--port", String(port), "--port-file", portFile.path, "--log", log.path]
                + extra,
            environment: ["WEBHOOK_SECRET": secret], port: port == 0 ? nil : port, portFile: port == 0 ? portFile : nil, logDirectory: dir)
    }

    /// The receiver's log lines.
    func received(_ log: URL) -> [[String: Any]] {
        ((try? String(contentsOf: log, encoding: .utf8)) ?? "").split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    /// Waits until the receiver answered 2xx to `types` for `video`; returns the log then.
    func waitForDelivered(_ log: URL, video: Int, _ types: [String], seconds: Double = 60) throws -> [[String: Any]] {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let lines = received(log)
            let delivered = Set(lines.filter { $0["video"] as? Int == video && ($0["answered"] as? Int ?? 0) < 300 }.compactMap { $0["type"] as? String })
            if Set(types).isSubset(of: delivered) { return lines }
            usleep(100_000)
        }
        throw ServerError("the receiver never had \(types) for video \(video): \(received(log))")
    }

    func newVideo(_ s: ServerProcess, name: String) throws -> (id: Int, token: String) { try s.newVideo(key: key, ["name": name]) }

    /// A video's whole life reaches the receiver: created, viewable, ready, deleted, in that
    /// order, each signed and with its id in a header; the receiver's first two answers are 500,
    /// and those events come again with the same ids. Neither the secret nor the receiver's
    /// query token is in the server's log.
    func testAVideosLifeReachesTheReceiverSignedInOrderAfterFailures() throws {
        let log = fx.scratch("webhooks-life").appendingPathComponent("received.jsonl")
        let r = receiver(log: log, ["--fail-first", "2"])
        try r.start()
        defer { r.stop() }
        let data = fx.scratch("webhooks-life-data")
        let s = server(data, ["--webhook", "http://127.0.0.1:\(r.port)/hooks?token=receiver-token-not-for-logs"])
        try s.start()
        defer { s.stop() }
        let clip = try fx.clip("webhooks-clip.mp4", seconds: 2, size: "320x240")
        let (id, token) = try newVideo(s, name: "webhooks life")
        try s.tusUpload(clip, video: id, token: token)
        _ = try waitForDelivered(log, video: id, ["video.created", "video.viewable", "video.ready"], seconds: 120)
        XCTAssertEqual(try api(s, "DELETE", "/videos/\(id)").status, 204)
        let lines = try waitForDelivered(log, video: id, ["video.deleted"])

        XCTAssertEqual(lines.prefix(2).map { $0["answered"] as? Int }, [500, 500], "\(lines)")
        XCTAssertTrue(lines.allSatisfy { $0["signature_ok"] as? Bool == true }, "\(lines)")
        XCTAssertTrue(lines.allSatisfy { $0["event_id_header"] as? String == $0["id"] as? String }, "\(lines)")
        XCTAssertTrue(lines.allSatisfy { $0["path"] as? String == "/hooks?token=receiver-token-not-for-logs" }, "\(lines)")
        let delivered = lines.filter { ($0["answered"] as? Int ?? 0) < 300 }
        XCTAssertEqual(delivered.compactMap { $0["type"] as? String }, ["video.created", "video.viewable", "video.ready", "video.deleted"])
        XCTAssertEqual(Set(delivered.compactMap { $0["id"] as? String }).count, 4, "one id per event")
        // The two refused attempts were of events delivered later under the same id.
        let refusedIDs = Set(lines.prefix(2).compactMap { $0["id"] as? String })
        XCTAssertTrue(refusedIDs.isSubset(of: Set(delivered.compactMap { $0["id"] as? String })), "\(lines)")
        XCTAssertEqual(delivered.last?["status"] as? String, "ready", "a deleted video's event carries its last status")

        let metrics = try HTTP.request("GET", "http://127.0.0.1:\(s.port)/metrics").text
        XCTAssertTrue(metrics.contains("clipflow_webhook_attempts_total{outcome=\"delivered\"} 4"), metrics)
        XCTAssertTrue(metrics.contains("clipflow_webhook_attempts_total{outcome=\"retry\"} 2"), metrics)
        let serverLog = s.stderrText
        XCTAssertTrue(serverLog.contains("event=webhook"), serverLog)
        XCTAssertFalse(serverLog.contains(secret))
        XCTAssertFalse(serverLog.contains("receiver-token-not-for-logs"))
    }

    /// Events made while the receiver is down wait in the database through a restart of the
    /// server, and arrive, in order, once the receiver is back.
    func testEventsWaitForADownReceiverAcrossARestart() throws {
        let log = fx.scratch("webhooks-down").appendingPathComponent("received.jsonl")
        let port = ServerProcess.freePort()
        let data = fx.scratch("webhooks-down-data")
        let s = server(data, ["--webhook", "http://127.0.0.1:\(port)/"])
        try s.start()
        defer { s.stop() }
        let first = try newVideo(s, name: "made while the receiver is down").id
        let second = try newVideo(s, name: "deleted while the receiver is down").id
        XCTAssertEqual(try api(s, "DELETE", "/videos/\(second)").status, 204)
        let deadline = Date().addingTimeInterval(20)
        while !s.stderrText.contains("outcome=retry"), Date() < deadline { usleep(100_000) }
        XCTAssertTrue(s.stderrText.contains("outcome=retry"), s.stderrText)
        s.stop()
        try s.start()
        let r = receiver(log: log, port: port)
        try r.start()
        defer { r.stop() }
        _ = try waitForDelivered(log, video: first, ["video.created"], seconds: 60)
        let lines = try waitForDelivered(log, video: second, ["video.created", "video.deleted"], seconds: 60)
        XCTAssertEqual(lines.filter { $0["video"] as? Int == second }.compactMap { $0["type"] as? String }, ["video.created", "video.deleted"])
        XCTAssertTrue(lines.allSatisfy { $0["signature_ok"] as? Bool == true }, "\(lines)")
    }

    /// A receiver that redirects elsewhere on loopback is not followed (the other address never
    /// hears of it); a receiver named by a host name that resolves to loopback is refused unless
    /// `--webhook-allow-private`; `--webhook` without a secret does not start.
    func testRedirectsAndPrivateNamesAreRefused() throws {
        let otherLog = fx.scratch("webhooks-other").appendingPathComponent("received.jsonl")
        let other = receiver(log: otherLog)
        try other.start()
        defer { other.stop() }
        let redirectLog = fx.scratch("webhooks-redirect").appendingPathComponent("received.jsonl")
        let redirecting = receiver(log: redirectLog, ["--redirect", "http://127.0.0.1:\(other.port)/stolen"])
        try redirecting.start()
        defer { redirecting.stop() }

        let s = server(
            fx.scratch("webhooks-redirect-data"), ["--webhook", "http://127.0.0.1:\(redirecting.port)/", "--webhook", "http://localhost:\(other.port)/named"])
        try s.start()
        let id = try newVideo(s, name: "redirected").id
        let deadline = Date().addingTimeInterval(20)
        while received(redirectLog).count < 2 || !s.stderrText.contains("not a public address"), Date() < deadline { usleep(100_000) }
        s.stop()
        XCTAssertGreaterThanOrEqual(received(redirectLog).filter { $0["video"] as? Int == id }.count, 2, "tried again after the 307")
        XCTAssertEqual(received(otherLog).count, 0, "neither the redirect nor the private name reached the other receiver")
        XCTAssertTrue(s.stderrText.contains("localhost resolves to"), s.stderrText)
        XCTAssertFalse(s.stderrText.contains("outcome=delivered"), s.stderrText)

        let allowed = server(fx.scratch("webhooks-allowed-data"), ["--webhook", "http://localhost:\(other.port)/named", "--webhook-allow-private"])
        try allowed.start()
        defer { allowed.stop() }
        let named = try newVideo(allowed, name: "allowed").id
        _ = try waitForDelivered(otherLog, video: named, ["video.created"], seconds: 30)

        let noSecret = try Run.run(
            [binary, "serve", "--data", fx.scratch("webhooks-nosecret").path, "--listen", "127.0.0.1:0", "--webhook", "http://127.0.0.1:9/"], check: false)
        XCTAssertNotEqual(noSecret.status, 0)
        XCTAssertTrue(noSecret.stderr.contains("CLIPFLOW_WEBHOOK_SECRET"), noSecret.stderr)
    }

    /// Two servers sharing one PostgreSQL database, both with the receiver: each event is
    /// delivered once (by its id), a video's in order, whichever server made the change.
    func testTwoServersOnPostgresDeliverEachEventOnce() throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let log = fx.scratch("webhooks-pg").appendingPathComponent("received.jsonl")
        let r = receiver(log: log)
        try r.start()
        defer { r.stop() }
        let data = fx.scratch("webhooks-pg-data")
        let options = ["--database", pg.url, "--webhook", "http://127.0.0.1:\(r.port)/"]
        let a = server(data, options), b = server(data, options)
        try a.start()
        defer { a.stop() }
        try b.start()
        defer { b.stop() }
        var ids: [Int] = []
        for n in 0..<6 { ids.append(try newVideo(n % 2 == 0 ? a : b, name: "pg \(n)").id) }
        for (n, id) in ids.enumerated() where n % 3 == 0 { XCTAssertEqual(try api(n % 2 == 0 ? b : a, "DELETE", "/videos/\(id)").status, 204) }
        for (n, id) in ids.enumerated() { _ = try waitForDelivered(log, video: id, n % 3 == 0 ? ["video.created", "video.deleted"] : ["video.created"]) }
        sleep(2)  // a second delivery of any of them would come now
        let lines = received(log)
        XCTAssertEqual(lines.count, 8, "each event once: \(lines)")
        XCTAssertEqual(Set(lines.compactMap { $0["id"] as? String }).count, 8)
        for id in [ids[0], ids[3]] {
            XCTAssertEqual(lines.filter { $0["video"] as? Int == id }.compactMap { $0["type"] as? String }, ["video.created", "video.deleted"])
        }
        XCTAssertTrue(lines.allSatisfy { $0["signature_ok"] as? Bool == true }, "\(lines)")
        XCTAssertTrue(a.stderrText.contains("outcome=delivered") || b.stderrText.contains("outcome=delivered"))
    }
}
