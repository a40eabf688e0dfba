import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow serve` as a hosting service: the Gcore-shaped API, upload tokens, processing into
/// HLS ladders, and what a client sees of it.
final class ServeHostingCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "test-api-key-not-for-logs"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func server(_ data: URL) -> ServerProcess { .clipflowServe(binary: binary, data: data, environment: ["CLIPFLOW_API_KEY": key]) }

    func api(_ s: ServerProcess, _ method: String, _ path: String, json: Any? = nil, bearer: String? = nil) throws -> HTTPReply {
        try HTTP.request(method, "http://127.0.0.1:\(s.port)\(path)", headers: ["Authorization": "Bearer \(bearer ?? key)"], json: json)
    }

    func video(_ s: ServerProcess, _ id: Int) throws -> [String: Any] {
        try XCTUnwrap(try api(s, "GET", "/videos/\(id)").json() as? [String: Any])
    }

    /// Polls the video until its status is one of `ends`; returns it and every status seen.
    func waitFor(_ s: ServerProcess, _ id: Int, _ ends: Set<String>, seconds: Double = 180) throws -> ([String: Any], [String]) {
        var seen: [String] = []
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let v = try video(s, id)
            let status = v["status"] as? String ?? "?"
            if seen.last != status { seen.append(status) }
            if ends.contains(status) { return (v, seen) }
            usleep(100_000)
        }
        throw ServerError("video \(id) never reached \(ends): \(seen)")
    }

    func source() throws -> String {
        try fx.clip(
            "serve-hosting-src.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "20", "-c:v", "libx264", "-preset",
                "ultrafast", "-c:a", "aac"
            ])
    }

    /// The reference flow end to end: record fragments (the test pattern, real time), join them
    /// turned 90 degrees (a phone's portrait video), upload by the Gcore flow, processed, listed
    /// with a cover, its HLS played.
    func testRecordMergeUploadProcessedListedAndPlays() throws {
        let data = fx.scratch("serve-hosting")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let clips = fx.scratch("serve-hosting-clips")
        let rec = try Run.run(
            [binary, "record", "-o", clips.path, "--duration", "6", "--segment", "2", "--size", "1280x720", "--preset", "ultrafast", "--quiet"],
            check: false)
        XCTAssertEqual(rec.status, 0, rec.stderr)
        let fragments = try FileManager.default.contentsOfDirectory(atPath: clips.path).filter { $0.hasSuffix(".mp4") }.sorted()
            .map { clips.appendingPathComponent($0).path }
        XCTAssertGreaterThanOrEqual(fragments.count, 3)
        let merged = fx.scratch("serve-hosting-merged").appendingPathComponent("phone.mp4").path
        let merge = try Run.run([binary, "merge", "--rotate", "90", "-o", merged, "--quiet"] + fragments, check: false)
        XCTAssertEqual(merge.status, 0, merge.stderr)
        let up = try Run.run(
            [
                binary, "upload", merged, "--to", "gcore", "--endpoint", "http://127.0.0.1:\(s.port)", "--upload-url", "http://{hostname}/files",
                "--queue", fx.scratch("serve-hosting-queue").path
            ], env: ["CLIPFLOW_UPLOAD_TOKEN": key], check: false)
        XCTAssertEqual(up.status, 0, up.stderr)
        XCTAssertFalse((up.out + up.stderr).contains(key), "the key is not printed")
        let (v, seen) = try waitFor(s, 1, ["ready", "error"])
        XCTAssertEqual(v["status"] as? String, "ready", "\(v)")
        XCTAssertTrue(seen.contains("viewable"), "the smallest rendition is published first: \(seen)")
        XCTAssertEqual((v["renditions"] as? [[String: Any]])?.compactMap { $0["name"] as? String }.sorted(), ["360p", "540p", "720p"])
        XCTAssertEqual((v["duration"] as? Double) ?? 0, 6, accuracy: 0.2)
        let hls = try XCTUnwrap(v["hls_url"] as? String)
        let lint = try Run.run([binary, "hls", "lint", hls], check: false)
        XCTAssertEqual(lint.status, 0, lint.out)
        // Listed with its cover, which is a JPEG of the video's shape.
        let list = try api(s, "GET", "/videos?page=1&per_page=10")
        XCTAssertEqual(list.header("X-Total-Count"), "1")
        let listed = try XCTUnwrap((try list.json() as? [[String: Any]])?.first)
        let cover = try HTTP.request("GET", try XCTUnwrap(listed["screenshot"] as? String))
        XCTAssertEqual(cover.status, 200)
        XCTAssertEqual(cover.header("Content-Type"), "image/jpeg")
        let jpg = fx.scratch("serve-cover").appendingPathComponent("cover.jpg")
        try cover.body.write(to: jpg)
        XCTAssertEqual(try Probe.stream(jpg.path, "v:0", "width,height"), "720,1280", "an upright portrait cover")
        // The feed manifest names it, and a browser plays it from the server.
        let feed = try XCTUnwrap(try HTTP.request("GET", "http://127.0.0.1:\(s.port)/feed.json").json() as? [String: Any])
        XCTAssertEqual((feed["videos"] as? [[String: Any]])?.first?["master"] as? String, URL(string: hls)?.path)
        // The feed page carries the same document, for its first fetches to start at once.
        let page = try HTTP.request("GET", "http://127.0.0.1:\(s.port)/v/1").text
        let carried = try XCTUnwrap(
            page.components(separatedBy: #"<script id="feed-doc" type="application/json">"#).dropFirst().first?.components(separatedBy: "</script>")
                .first)
        XCTAssertEqual(try JSONSerialization.jsonObject(with: Data(carried.utf8)) as? NSDictionary, feed as NSDictionary)
        let played = try XCTUnwrap(try Probe.browserPlayback([hls]).first)
        XCTAssertEqual(played["ended"] as? Bool, true, "\(played)")
        XCTAssertTrue(played["error"] is NSNull, "\(played)")
        // Deleting it removes its media and upload.
        XCTAssertEqual(try api(s, "DELETE", "/videos/1").status, 204)
        XCTAssertEqual(try api(s, "GET", "/videos/1").status, 404)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: data.appendingPathComponent("media").path), [])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: data.appendingPathComponent("uploads").path), [])
    }

    /// Makes a clip per (number, size, seconds) (the test picture in a hue of its own, a tone),
    /// uploads them in that order by the Gcore flow, and waits until each video is ready.
    func uploadUntilReady(_ s: ServerProcess, clips name: String, _ specs: [(Int, String, Int)]) throws {
        var files: [String] = []
        for (i, size, seconds) in specs {
            files.append(
                try fx.clip(
                    "\(name)-\(i).mp4",
                    [
                        "-f", "lavfi", "-i", "testsrc2=size=\(size):rate=30", "-f", "lavfi", "-i", "sine=f=\(200 * i):r=48000", "-t", String(seconds),
                        "-vf", "hue=h=\(i * 70)", "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac"
                    ]))
        }
        // One at a time: the queue sends several files side by side, and their videos' numbers
        // (the feed's order) would follow whichever was created first.
        for file in files {
            let up = try Run.run(
                [
                    binary, "upload", file, "--to", "gcore", "--endpoint", "http://127.0.0.1:\(s.port)", "--upload-url", "http://{hostname}/files",
                    "--queue", fx.scratch("\(name)-queue").path
                ], env: ["CLIPFLOW_UPLOAD_TOKEN": key], check: false)
            XCTAssertEqual(up.status, 0, up.stderr)
        }
        for id in 1...specs.count { XCTAssertEqual(try waitFor(s, id, ["ready", "error"]).0["status"] as? String, "ready") }
    }

    /// The pages in chromium: the feed plays the first video, prefetches the next one's first
    /// segment before it is scrolled to, starts it within 1 s of the scroll; the list page shows
    /// every cover. Screenshots are kept in .build/test-artifacts/serve-pages.
    func testFeedAndListPagesInABrowser() throws {
        let data = fx.scratch("serve-pages")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        try uploadUntilReady(s, clips: "serve-feed", (1...3).map { ($0, "640x360", 6) })
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let shots = root.appendingPathComponent(".build/test-artifacts/serve-pages")
        let r = try Run.run(
            ["python3", root.appendingPathComponent("scripts/feed-check").path, "http://127.0.0.1:\(s.port)", "--screenshots", shots.path, "--key", key],
            check: false)
        let j = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.out.utf8)) as? [String: Any], r.stderr)
        XCTAssertEqual(r.status, 0, "\(j) \(r.stderr)")
        XCTAssertEqual(j["first_playing"] as? Bool, true)
        XCTAssertEqual(j["next_prefetched_before_scroll"] as? Bool, true, "\(j)")
        XCTAssertLessThanOrEqual(j["next_start_ms"] as? Int ?? 10_000, 1000, "\(j)")
        XCTAssertEqual(j["first_paused"] as? Bool, true)
        XCTAssertEqual(j["covers_loaded"] as? Int, 3)
        XCTAssertEqual(j["covers_linked"] as? Int, 3, "each cover links to its video in the feed")
        for name in ["feed.png", "videos.png"] { XCTAssertTrue(FileManager.default.fileExists(atPath: shots.appendingPathComponent(name).path)) }
        print("screenshots: \(shots.path)")
    }

    /// Every control of the feed, used in chromium as a viewer would (scripts/feed-controls: keys,
    /// taps, the bar, the wheel, deep links, the fetches of upcoming and passed videos, layouts
    /// and screenshots read back with ffmpeg, the fallbacks), on five videos of both shapes; and
    /// the sized covers feed.json lists, judged by ffprobe.
    func testFeedControlsInABrowser() throws {
        let data = fx.scratch("serve-feed-controls")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        // Uploaded oldest first: the feed (newest first) opens on a landscape video, then a portrait one.
        try uploadUntilReady(
            s, clips: "serve-feed-controls", [(1, "1280x720", 8), (2, "720x1280", 8), (3, "640x360", 6), (4, "360x640", 6), (5, "1280x720", 6)])

        // The covers: the full one at display size, the smaller ones fitted within their size.
        let feed = try XCTUnwrap(try HTTP.request("GET", "http://127.0.0.1:\(s.port)/feed.json").json() as? [String: Any])
        let first = try XCTUnwrap((feed["videos"] as? [[String: Any]])?.first)
        func size(_ url: String) throws -> [Int] {
            let local = fx.scratch("serve-feed-cover").appendingPathComponent("cover.jpg")
            try HTTP.request("GET", "http://127.0.0.1:\(s.port)\(url)").body.write(to: local)
            return try Run.run(["ffprobe", "-v", "error", "-show_entries", "stream=width,height", "-of", "csv=p=0", local.path]).out
                .trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ",").compactMap { Int($0) }
        }
        XCTAssertEqual(try size(try XCTUnwrap(first["cover"] as? String)), [1280, 720])
        let covers = try XCTUnwrap(first["covers"] as? [[String: Any]])
        XCTAssertEqual(covers.compactMap { $0["size"] as? Int }, [640, 1280])
        XCTAssertEqual(try size(try XCTUnwrap(covers[0]["uri"] as? String)), [640, 360])
        XCTAssertEqual(try size(try XCTUnwrap(covers[1]["uri"] as? String)), [1280, 720])

        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let shots = root.appendingPathComponent(".build/test-artifacts/serve-feed-controls")
        let r = try Run.run(
            ["python3", root.appendingPathComponent("scripts/feed-controls").path, "http://127.0.0.1:\(s.port)", "--screenshots", shots.path], check: false)
        let j = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.out.utf8)) as? [String: Any], "\(r.out) \(r.stderr)")
        let checks = try XCTUnwrap(j["checks"] as? [String: Bool])
        XCTAssertGreaterThanOrEqual(checks.count, 36, "\(checks.keys.sorted())")
        for (name, passed) in checks.sorted(by: { $0.key < $1.key }) { XCTAssertTrue(passed, "\(name): \(j["problems"] ?? [])") }
        XCTAssertEqual(r.status, 0, "\(j) \(r.stderr)")
        print("screenshots: \(shots.path)")
    }

    /// `mode: copy`: a compliant upload is remuxed only (its packets into one rendition).
    func testCopyModeRemuxesOnly() throws {
        let data = fx.scratch("serve-copy")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let file = try fx.clip(
            "serve-copy-src.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "6", "-c:v", "libx264", "-preset",
                "ultrafast", "-g", "60", "-c:a", "aac"
            ])
        let made = try XCTUnwrap(try api(s, "POST", "/videos", json: ["name": "copied", "mode": "copy"]).json() as? [String: Any])
        let id = try XCTUnwrap(made["id"] as? Int)
        XCTAssertEqual(made["mode"] as? String, "copy")
        let token = try XCTUnwrap(try api(s, "GET", "/videos/\(id)/upload").json() as? [String: Any])["token"] as? String
        let script = """
            import sys
            from tusclient import client
            u = client.TusClient(sys.argv[1]).uploader(sys.argv[2], chunk_size=1 << 20, metadata={"filename": "c.mp4", "video_id": sys.argv[3], "token": sys.argv[4]})
            u.upload()
            """
        try Run.run(["python3", "-c", script, "http://127.0.0.1:\(s.port)/files", file, String(id), token!])
        let (v, _) = try waitFor(s, id, ["ready", "error"], seconds: 60)
        XCTAssertEqual(v["status"] as? String, "ready", "\(v)")
        XCTAssertEqual((v["renditions"] as? [[String: Any]])?.compactMap { $0["name"] as? String }, ["copy"])
        let hls = try XCTUnwrap(v["hls_url"] as? String)
        XCTAssertEqual(try Run.run([binary, "hls", "lint", hls], check: false).status, 0)
        let master = try HTTP.request("GET", hls).text
        XCTAssertTrue(master.contains("copy.m3u8") && master.contains("RESOLUTION=640x360"), master)
    }

    /// A TUS creation for a video, with this metadata (values base64'd).
    func create(_ s: ServerProcess, _ meta: [String: String], length: Int) throws -> HTTPReply {
        let header = meta.map { "\($0.key) \(Data($0.value.utf8).base64EncodedString())" }.joined(separator: ",")
        return try HTTP.request(
            "POST", "http://127.0.0.1:\(s.port)/files", headers: ["Tus-Resumable": "1.0.0", "Upload-Length": String(length), "Upload-Metadata": header])
    }

    func testTokensAndBadUploads() throws {
        let data = fx.scratch("serve-tokens")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        XCTAssertEqual(try api(s, "GET", "/videos", bearer: "nope").status, 401)
        XCTAssertEqual(try HTTP.request("GET", "http://127.0.0.1:\(s.port)/videos").status, 401)
        // The Gcore flow's refresh: the key as refresh token gives an access token that works.
        let refreshed = try HTTP.request("POST", "http://127.0.0.1:\(s.port)/auth/refresh", json: ["refresh": key])
        let access = try XCTUnwrap((try refreshed.json() as? [String: Any])?["access"] as? String)
        XCTAssertEqual(try api(s, "GET", "/videos", bearer: access).status, 200)
        XCTAssertEqual(try HTTP.request("POST", "http://127.0.0.1:\(s.port)/auth/refresh", json: ["refresh": "guess"]).status, 401)

        // The list page takes the key as the JSON list does (a Basic password from a browser), and
        // says how to upload while it is empty.
        // By curl: URLSession waits for ever on a 401 that asks for Basic credentials.
        func listPage(password: String?, path: String = "/videos") throws -> HTTPReply {
            var command = ["curl", "-s", "-D", "-", "-H", "Accept: text/html", "http://127.0.0.1:\(s.port)\(path)"]
            if let password { command += ["-u", "viewer:\(password)"] }
            let out = try Run.run(command).out
            let (head, body) = try XCTUnwrap(out.range(of: "\r\n\r\n").map { (out[..<$0.lowerBound], out[$0.upperBound...]) }, out)
            let lines = head.components(separatedBy: "\r\n")
            var headers: [String: String] = [:]
            for line in lines.dropFirst() {
                if let colon = line.firstIndex(of: ":") {
                    headers[String(line[..<colon])] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                }
            }
            let status = Int(lines[0].split(separator: " ").dropFirst().first ?? "") ?? 0
            return HTTPReply(status: status, headers: headers, body: Data(body.utf8))
        }
        for refused in [try listPage(password: nil), try listPage(password: "guess")] {
            XCTAssertEqual(refused.status, 401, refused.text)
            XCTAssertEqual(refused.header("WWW-Authenticate"), "Basic realm=\"clipflow videos\", charset=\"UTF-8\"")
            XCTAssertTrue(refused.text.contains("API key"), refused.text)
        }
        let empty = try listPage(password: key)
        XCTAssertEqual(empty.status, 200)
        XCTAssertTrue(empty.text.contains("No videos yet. Upload one with <code>clipflow upload VIDEO --to clipflow"), empty.text)

        // Names reach the list page as text, never as markup.
        XCTAssertEqual(try api(s, "POST", "/videos", json: ["name": "<img src=x onerror=alert(1)>"]).status, 201)
        let page = try listPage(password: key)
        XCTAssertEqual(page.header("Content-Type"), "text/html; charset=utf-8")
        XCTAssertTrue(page.text.contains("&lt;img src=x onerror=alert(1)&gt;"), page.text)
        XCTAssertFalse(page.text.contains("<img src=x"), page.text)
        XCTAssertEqual(try api(s, "POST", "/videos", json: ["title": "no name"]).status, 400)
        let a = try XCTUnwrap(try api(s, "POST", "/videos", json: ["name": "a"]).json() as? [String: Any])["id"] as? Int
        let b = try XCTUnwrap(try api(s, "POST", "/videos", json: ["name": "b"]).json() as? [String: Any])["id"] as? Int
        let tokenA = try XCTUnwrap(try api(s, "GET", "/videos/\(a!)/upload").json() as? [String: Any])["token"] as? String
        let target = try XCTUnwrap(try api(s, "GET", "/videos/\(b!)/upload").json() as? [String: Any])
        XCTAssertEqual(((target["servers"] as? [[String: Any]])?.first?["hostname"] as? String), "127.0.0.1:\(s.port)")
        // The Basic password is the list page's alone: the other video routes take a Bearer token.
        for path in ["/videos/\(b!)", "/videos/\(b!)/upload"] {
            let basic = try listPage(password: key, path: path)
            XCTAssertEqual(basic.status, 401, "\(path): \(basic.text)")
            XCTAssertNil(basic.header("WWW-Authenticate"), path)
            XCTAssertEqual(basic.header("Content-Type"), "application/json", path)
        }
        XCTAssertEqual(try create(s, ["filename": "x.mp4", "video_id": String(b!), "token": tokenA!], length: 10).status, 403, "another video's token")
        XCTAssertEqual(try create(s, ["filename": "x.mp4", "video_id": String(b!), "token": "forged"], length: 10).status, 403)
        XCTAssertEqual(try create(s, ["filename": "x.mp4"], length: 10).status, 401, "no token on a server with a key")
        // An expired token, signed with the server's own secret (read from its data folder).
        let expired = try Run.run([
            "python3", "-c",
            "import hmac, hashlib, base64, sys; k = open(sys.argv[1], 'rb').read(); body = 'upload.%s.1000' % sys.argv[2]; "
                + "sig = base64.urlsafe_b64encode(hmac.new(k, body.encode(), hashlib.sha256).digest()).decode().rstrip('='); print(body + '.' + sig)",
            data.appendingPathComponent("token-secret").path, String(b!)
        ]).out.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(try create(s, ["filename": "x.mp4", "video_id": String(b!), "token": expired], length: 10).status, 401, "expired")

        // Not a video: the upload is accepted, its processing ends in error with the reason;
        // the other video is not affected.
        let notVideo = try create(s, ["filename": "notes.mp4", "video_id": String(a!), "token": tokenA!], length: 12)
        XCTAssertEqual(notVideo.status, 201, notVideo.text)
        let at = try XCTUnwrap(notVideo.header("Location"))
        let sent = try HTTP.request(
            "PATCH", at, headers: ["Tus-Resumable": "1.0.0", "Upload-Offset": "0", "Content-Type": "application/offset+octet-stream"],
            body: Data("not a video\n".utf8))
        XCTAssertEqual(sent.status, 204)
        let (failed, _) = try waitFor(s, a!, ["error", "ready"], seconds: 30)
        XCTAssertEqual(failed["status"] as? String, "error")
        XCTAssertTrue((failed["error"] as? String ?? "").contains("not a video"), "\(failed)")
        XCTAssertFalse((failed["error"] as? String ?? "").contains(data.path), "no server paths in the reason: \(failed)")
        let listed = try listPage(password: key).text
        let reason = (failed["error"] as? String ?? "?").replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;").replacingOccurrences(of: "'", with: "&#39;")
        XCTAssertTrue(listed.contains("<div class=\"error\">\(reason)</div>"), "the failed video's reason is on the list page: \(listed)")
        XCTAssertEqual(try video(s, b!)["status"] as? String, "pending")
        XCTAssertEqual(try api(s, "GET", "/videos/999").status, 404)
        XCTAssertEqual(try create(s, ["filename": "again.mp4", "video_id": String(a!), "token": tokenA!], length: 10).status, 409, "uploaded already")
        XCTAssertFalse(s.stderrText.contains(key))
    }

    /// `kill -9` while a video is being processed; after a restart the job runs again and the video
    /// ends ready with one published ladder (superseded folders removed at once: no grace).
    func testProcessingResumesAfterKillDashNine() throws {
        let data = fx.scratch("serve-crash-processing")
        let s = ServerProcess.clipflowServe(binary: binary, data: data, ["--superseded-grace", "0"], environment: ["CLIPFLOW_API_KEY": key])
        try s.start()
        defer { s.stop() }
        let up = try Run.run(
            [
                binary, "upload", try source(), "--to", "gcore", "--endpoint", "http://127.0.0.1:\(s.port)", "--upload-url", "http://{hostname}/files",
                "--queue", fx.scratch("serve-crash-queue").path
            ], env: ["CLIPFLOW_UPLOAD_TOKEN": key], check: false)
        XCTAssertEqual(up.status, 0, up.stderr)
        _ = try waitFor(s, 1, ["processing", "viewable"], seconds: 30)
        usleep(500_000)
        kill(try s.supervisedPID(), SIGKILL)
        try s.start()
        let (v, _) = try waitFor(s, 1, ["ready", "error"])
        XCTAssertEqual(v["status"] as? String, "ready", "\(v)")
        var folders: [String] = []
        for _ in 0..<100 {
            folders = try FileManager.default.contentsOfDirectory(atPath: data.appendingPathComponent("media/1").path)
            if folders.count == 1 { break }
            usleep(100_000)
        }
        XCTAssertEqual(folders.count, 1, "one published ladder, no leftovers: \(folders)")
        let lint = try Run.run([binary, "hls", "lint", try XCTUnwrap(v["hls_url"] as? String)], check: false)
        XCTAssertEqual(lint.status, 0, lint.out)
    }
}
