import ClipFlowTestSupport
import Foundation
import XCTest

/// Private videos: a `signed` video's playlists, segments and covers open only with a playback
/// token, which its playlists carry on to every segment; the feed lists public videos only; a
/// forged, expired or misplaced token gets 403 whether or not the file exists.
final class ServeSignedCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "signed-test-key"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    var root: URL { URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent() }

    func api(_ s: ServerProcess, _ method: String, _ path: String, json: Any? = nil) throws -> HTTPReply {
        try HTTP.request(method, "http://127.0.0.1:\(s.port)\(path)", headers: ["Authorization": "Bearer \(key)"], json: json)
    }

    func get(_ s: ServerProcess, _ path: String) throws -> HTTPReply { try HTTP.request("GET", "http://127.0.0.1:\(s.port)\(path)") }

    /// Plays `path` of the server in chromium with the feed page's player (scripts/watch-check).
    func watch(_ s: ServerProcess, _ path: String, timeout: Int = 30) throws -> (status: Int32, report: [String: Any]) {
        let r = try Run.run(
            ["python3", root.appendingPathComponent("scripts/watch-check").path, "http://127.0.0.1:\(s.port)\(path)", "--timeout", String(timeout)],
            check: false)
        let report = (try? JSONSerialization.jsonObject(with: Data(r.out.utf8)) as? [String: Any]) ?? ["stderr": r.stderr]
        return (r.status, report)
    }

    func testASignedVideoPlaysWithItsTokenThroughEverySegmentAndNotWithout() throws {
        let s = ServerProcess.clipflowServe(binary: binary, data: fx.scratch("serve-signed"), environment: ["CLIPFLOW_API_KEY": key])
        try s.start()
        defer { s.stop() }
        let (id, upload) = try s.newVideo(key: key, ["name": "private", "access": "signed"])
        XCTAssertEqual((try api(s, "GET", "/videos/\(id)").json() as? [String: Any])?["access"] as? String, "signed")
        try s.tusUpload(try fx.clip("serve-signed.mp4", seconds: 6, size: "640x360"), video: id, token: upload)
        let ready = try s.waitForVideo(id, key: key, seconds: 120) as [String: Any]
        XCTAssertEqual(ready["status"] as? String, "ready")
        let described = try XCTUnwrap(ready["hls_url"] as? String)
        XCTAssertTrue(described.contains("?token=play."), described)
        let master = try XCTUnwrap(URL(string: described)?.path)
        let folder = (master as NSString).deletingLastPathComponent

        // Not in the feed; its files are absent without a token.
        XCTAssertEqual(((try get(s, "/feed.json").json() as? [String: Any])?["videos"] as? [[String: Any]])?.count, 0)
        XCTAssertEqual(try get(s, master).status, 404)
        XCTAssertEqual(try get(s, folder + "/poster.jpg").status, 404)
        let encoded = master.replacingOccurrences(of: "/media/\(id)/", with: "/media/" + String(id).map { "%3\($0)" }.joined() + "/")
        XCTAssertEqual(try get(s, encoded).status, 404, "a percent-encoded id is the same video")

        // A token from the API plays it in the page's player, every segment through.
        let given = try XCTUnwrap(try api(s, "POST", "/videos/\(id)/token", json: ["expires_in": 600]).json() as? [String: Any])
        let token = try XCTUnwrap(given["token"] as? String)
        let watched = try watch(s, "/v/\(id)?token=\(token)")
        XCTAssertEqual(watched.status, 0, "\(watched.report)")
        let media = (watched.report["media"] as? [[Any]] ?? []).compactMap { $0.count == 2 ? ($0[0] as? Int, $0[1] as? String) : nil }
        XCTAssertFalse(media.isEmpty)
        XCTAssertTrue(media.allSatisfy { $0.1?.contains("token=\(token)") ?? false }, "every media request carries the token: \(media)")
        // The rendition it played: each of its segments was fetched, and answered.
        let segments = media.compactMap { $0.1 }.filter { $0.contains("/seg-") }.map { String($0.prefix { $0 != "?" }) }
        let rendition = try XCTUnwrap(segments.last.map { ($0 as NSString).deletingLastPathComponent })
        let playlist = try get(s, rendition + ".m3u8?token=\(token)")
        XCTAssertEqual(playlist.status, 200)
        let listed = playlist.text.split(separator: "\n").filter { !$0.hasPrefix("#") && !$0.isEmpty }.map {
            (rendition as NSString).deletingLastPathComponent + "/" + String($0.prefix { $0 != "?" })
        }
        XCTAssertGreaterThan(listed.count, 1)
        XCTAssertEqual(Set(listed).subtracting(segments), [], "segments of \(rendition) never fetched")

        // Its views are taken with its token only; without, it is as absent as no video.
        let view = "{\"video\": \(id), \"startup_ms\": 100, \"rebuffers\": 0, \"rebuffer_ms\": 0, \"watched_ms\": 1000"
        let beacon = { (body: String) in
            try HTTP.request("POST", "http://127.0.0.1:\(s.port)/beacon", headers: ["Content-Type": "text/plain"], body: Data(body.utf8)).status
        }
        XCTAssertEqual(try beacon(view + "}"), 404)
        XCTAssertEqual(try beacon(view + ", \"token\": \"\(token)\"}"), 204)

        // Without the token the page has nothing to play; forged, expired and misplaced tokens: 403.
        XCTAssertNotEqual(try watch(s, "/v/\(id)", timeout: 5).status, 0)
        XCTAssertEqual(try get(s, master + "?token=\(token)x").status, 403)
        XCTAssertEqual(try get(s, "/media/\(id)/nothing/master.m3u8?token=forged.1.2.3").status, 403)
        XCTAssertEqual(try get(s, "/media/999/nothing/master.m3u8?token=\(token)").status, 403, "another video's media, absent or not")
        let short = try XCTUnwrap((try api(s, "POST", "/videos/\(id)/token", json: ["expires_in": 1]).json() as? [String: Any])?["token"] as? String)
        sleep(2)
        XCTAssertEqual(try get(s, master + "?token=\(short)").status, 403, "expired")
        // A token bound to the folder opens it, and nothing beside it.
        let bound = try XCTUnwrap(
            (try api(s, "POST", "/videos/\(id)/token", json: ["path": folder + "/"]).json() as? [String: Any])?["token"] as? String)
        XCTAssertEqual(try get(s, master + "?token=\(bound)").status, 200)
        XCTAssertEqual(try get(s, "/media/\(id)/other/master.m3u8?token=\(bound)").status, 403)
        XCTAssertEqual(try api(s, "POST", "/videos/\(id)/token", json: ["path": "/media/\(id + 1)/"]).status, 400)
        XCTAssertEqual(try api(s, "POST", "/videos/\(id)/token", json: ["path": folder]).status, 400, "a folder ends in /")
        XCTAssertEqual(try api(s, "POST", "/videos/\(id)/token", json: ["expires_in": 0]).status, 400)

        // Made public: in the feed, and open to anyone.
        let edited = try api(s, "PATCH", "/videos/\(id)", json: ["access": "public", "name": "now public"])
        XCTAssertEqual(edited.status, 200, edited.text)
        XCTAssertEqual((try edited.json() as? [String: Any])?["name"] as? String, "now public")
        XCTAssertEqual(try get(s, master).status, 200)
        XCTAssertEqual(((try get(s, "/feed.json").json() as? [String: Any])?["videos"] as? [[String: Any]])?.count, 1)
        XCTAssertEqual(try api(s, "PATCH", "/videos/\(id)", json: ["access": "secret"]).status, 400)
        XCTAssertFalse(s.stderrText.contains(token), "no token in the log")
    }
}
