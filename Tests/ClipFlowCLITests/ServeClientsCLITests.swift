import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow serve` with the clients it is meant for: Gcore's (TUS at `/upload`), our own
/// uploader with its defaults, and plain TUS clients (PyPI tuspy) carrying the API key. Judged by
/// tuspy, sha256sum, the API's own answers and ffprobe playing the published HLS over HTTP.
final class ServeClientsCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "clients-api-key-not-for-logs"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func server(_ data: URL, _ extra: [String] = [], key: String? = nil) -> ServerProcess {
        .clipflowServe(binary: binary, data: data, extra, environment: ["CLIPFLOW_API_KEY": key ?? self.key])
    }

    func api(_ s: ServerProcess, _ method: String, _ path: String) throws -> HTTPReply {
        try HTTP.request(method, "http://127.0.0.1:\(s.port)\(path)", headers: ["Authorization": "Bearer \(key)"])
    }

    func videos(_ s: ServerProcess) throws -> [[String: Any]] {
        let r = try api(s, "GET", "/videos")
        XCTAssertEqual(r.status, 200, r.text)
        return try XCTUnwrap(try r.json() as? [[String: Any]], r.text)
    }

    /// Polls the video until its status is viewable or ready (or error); returns it.
    func playable(_ s: ServerProcess, _ id: Int, seconds: Double = 120) throws -> [String: Any] {
        let deadline = Date().addingTimeInterval(seconds)
        var last: Any = "nothing"
        while Date() < deadline {
            let v = try XCTUnwrap(try api(s, "GET", "/videos/\(id)").json() as? [String: Any])
            last = v
            if ["viewable", "ready", "error"].contains(v["status"] as? String ?? "") { return v }
            usleep(200_000)
        }
        throw ServerError("video \(id) never became playable: \(last)")
    }

    /// What ffprobe reads from a video's `hls_url` over HTTP: its streams' types and its duration.
    func probeHLS(_ video: [String: Any]) throws -> (streams: [String], duration: Double) {
        let hls = try XCTUnwrap(video["hls_url"] as? String, "\(video)")
        XCTAssertTrue(hls.hasPrefix("http://127.0.0.1:"), hls)
        let r = try Run.run(
            ["ffprobe", "-v", "error", "-show_entries", "stream=codec_type:format=duration", "-of", "json", hls], check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        let j = try XCTUnwrap(try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any], r.out)
        let streams = (j["streams"] as? [[String: Any]] ?? []).compactMap { $0["codec_type"] as? String }
        let duration = Double((j["format"] as? [String: Any])?["duration"] as? String ?? "") ?? 0
        return (streams, duration)
    }

    /// A 3 s H.264/AAC clip.
    func clip() throws -> String {
        try fx.clip(
            "serve-clients.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "3", "-c:v", "libx264", "-g", "30",
                "-c:a", "aac"
            ])
    }

    /// The file the server keeps for the upload at `location`: named by the SHA-256 of its id.
    func stored(_ data: URL, _ location: String) throws -> String {
        let id = String(location.split(separator: "/").last ?? "")
        let name = String(try Run.run(["sh", "-c", "printf %s \"$0\" | sha256sum", id]).out.prefix(64))
        return data.appendingPathComponent("uploads").appendingPathComponent(name).path
    }

    /// tuspy (in chunks: a creation, then PATCHes at the upload's URL) sends `file` to `endpoint`
    /// with `headers` and `metadata`; its exit status, the upload's URL and its error output.
    func tuspy(_ endpoint: String, _ file: String, headers: [String: String] = [:], metadata: [String: String] = [:]) throws -> Run {
        let script = """
            import json, sys
            from tusclient import client
            c = client.TusClient(sys.argv[1], headers=json.loads(sys.argv[3]))
            u = c.uploader(sys.argv[2], chunk_size=256 * 1024, metadata=json.loads(sys.argv[4]), upload_checksum=True)
            u.upload()
            print(u.url)
            """
        let encode = { (d: [String: String]) in String(decoding: try JSONSerialization.data(withJSONObject: d), as: UTF8.self) }
        return try Run.run(["python3", "-c", script, endpoint, file, try encode(headers), try encode(metadata)], check: false)
    }

    /// tuspy uploads to `/upload` (where Gcore's clients send uploads) as to `/files`: each upload's
    /// URL is under the path it was created on, and the bytes kept are the file's.
    func testTuspyUploadsToUploadAndToFiles() throws {
        let data = fx.scratch("serve-clients-paths")
        let s = server(data, key: "")
        try s.start()
        defer { s.stop() }
        let file = fx.scratch("serve-clients-paths-file").appendingPathComponent("random.bin").path
        try Run.run(["sh", "-c", "head -c 1500000 /dev/urandom > '\(file)'"])
        for path in ["upload", "files"] {
            let r = try tuspy("http://127.0.0.1:\(s.port)/\(path)", file)
            XCTAssertEqual(r.status, 0, "\(path): \(r.stderr)")
            let url = r.out.trimmingCharacters(in: .whitespacesAndNewlines)
            XCTAssertTrue(url.hasPrefix("http://127.0.0.1:\(s.port)/\(path)/"), url)
            XCTAssertEqual(try sha256(ofFile: try stored(data, url)), try sha256(ofFile: file), path)
            let head = try HTTP.request("HEAD", url, headers: ["Tus-Resumable": "1.0.0"])
            XCTAssertEqual(head.header("Upload-Offset"), "1500000", path)
        }
        let options = try HTTP.request("OPTIONS", "http://127.0.0.1:\(s.port)/upload", headers: ["Tus-Resumable": "1.0.0"])
        XCTAssertEqual(options.header("Tus-Version"), "1.0.0")
        XCTAssertTrue((options.header("Tus-Extension") ?? "").contains("creation-with-upload"), "\(options.headers)")
    }

    /// `clipflow upload --to gcore --endpoint http://HOST:PORT` against `clipflow serve`, with no
    /// other flag: the video ends processed and its HLS plays (ffprobe over HTTP).
    func testOurGcoreUploaderWithDefaultsAgainstServe() throws {
        let data = fx.scratch("serve-clients-gcore")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let up = try Run.run(
            [binary, "upload", try clip(), "--to", "gcore", "--endpoint", "http://127.0.0.1:\(s.port)", "--queue", fx.scratch("serve-clients-q").path],
            env: ["CLIPFLOW_UPLOAD_TOKEN": key], check: false)
        XCTAssertEqual(up.status, 0, up.stderr)
        let listed = try videos(s)
        XCTAssertEqual(listed.count, 1, "\(listed)")
        let id = try XCTUnwrap(listed.first?["id"] as? Int)
        let v = try playable(s, id)
        XCTAssertTrue(["viewable", "ready"].contains(v["status"] as? String ?? ""), "\(v)")
        let (streams, duration) = try probeHLS(v)
        XCTAssertTrue(streams.contains("video"), "\(streams)")
        XCTAssertEqual(duration, 3, accuracy: 0.3)
        XCTAssertFalse(s.stderrText.contains(key))
    }

    /// An upload the server refuses for good (larger than `--max-size`): our uploader deletes the
    /// video it made and says so; no video is left waiting for it.
    func testAFailedGcoreUploadLeavesNoPendingVideo() throws {
        let data = fx.scratch("serve-clients-refused")
        let s = server(data, ["--max-size", "1000"])
        try s.start()
        defer { s.stop() }
        let up = try Run.run(
            [binary, "upload", try clip(), "--to", "gcore", "--endpoint", "http://127.0.0.1:\(s.port)", "--queue", fx.scratch("serve-clients-q2").path],
            env: ["CLIPFLOW_UPLOAD_TOKEN": key], check: false)
        XCTAssertEqual(up.status, 1, up.stderr)
        XCTAssertTrue(up.stderr.contains("Tus-Max-Size"), up.stderr)
        XCTAssertTrue(up.stderr.contains("was deleted"), up.stderr)
        XCTAssertEqual(try videos(s).count, 0, "no pending video left")
        XCTAssertEqual(try api(s, "GET", "/videos").header("X-Total-Count"), "0")
    }

    /// A plain TUS upload (tuspy, no video_id) sent with the API key becomes a video named by its
    /// `filename` metadata and is processed like any other; without the key it is refused; one
    /// terminated before its end takes its video with it.
    func testPlainTUSUploadWithTheAPIKeyBecomesAVideo() throws {
        let data = fx.scratch("serve-clients-plain")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let endpoint = "http://127.0.0.1:\(s.port)/upload"
        let refused = try tuspy(endpoint, try clip(), metadata: ["filename": "clip.mp4"])
        XCTAssertNotEqual(refused.status, 0, "no key, no upload")
        XCTAssertTrue(refused.stderr.contains("401"), refused.stderr)
        XCTAssertEqual(try videos(s).count, 0)

        let r = try tuspy(endpoint, try clip(), headers: ["Authorization": "Bearer \(key)"], metadata: ["filename": "clip.mp4"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let url = r.out.trimmingCharacters(in: .whitespacesAndNewlines)
        XCTAssertEqual(try sha256(ofFile: try stored(data, url)), try sha256(ofFile: try clip()))
        let listed = try videos(s)
        XCTAssertEqual(listed.compactMap { $0["name"] as? String }, ["clip.mp4"], "\(listed)")
        let id = try XCTUnwrap(listed.first?["id"] as? Int)
        let v = try playable(s, id)
        XCTAssertTrue(["viewable", "ready"].contains(v["status"] as? String ?? ""), "\(v)")
        XCTAssertTrue(try probeHLS(v).streams.contains("video"))

        // Made with the key but terminated unfinished: the video made for it goes too.
        let created = try HTTP.request(
            "POST", endpoint,
            headers: [
                "Tus-Resumable": "1.0.0", "Upload-Length": "100", "Authorization": "Bearer \(key)",
                "Upload-Metadata": "filename \(Data("gone.mp4".utf8).base64EncodedString())"
            ])
        XCTAssertEqual(created.status, 201, created.text)
        XCTAssertEqual(try videos(s).compactMap { $0["name"] as? String }, ["gone.mp4", "clip.mp4"])
        let location = try XCTUnwrap(created.header("Location"))
        XCTAssertEqual(try HTTP.request("DELETE", location, headers: ["Tus-Resumable": "1.0.0"]).status, 204)
        XCTAssertEqual(try videos(s).compactMap { $0["name"] as? String }, ["clip.mp4"])
        XCTAssertFalse(s.stderrText.contains(key))
    }

    /// On a server without an API key (it listens on loopback only), a plain TUS upload sent with
    /// no `Authorization` becomes a video as one sent with the key does: tuspy's named by its
    /// `filename` metadata, ours (`--to tus`) by its `--title`; both are processed and play.
    func testPlainTUSUploadWithoutAKeyBecomesAVideoOnAServerWithoutOne() throws {
        let data = fx.scratch("serve-clients-open-tus")
        let s = server(data, key: "")
        try s.start()
        defer { s.stop() }
        let r = try tuspy("http://127.0.0.1:\(s.port)/files/", try clip(), metadata: ["filename": "clip.mp4"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let ours = try Run.run(
            [
                binary, "upload", try clip(), "--to", "tus", "--endpoint", "http://127.0.0.1:\(s.port)/files", "--title", "Holiday",
                "--queue", fx.scratch("serve-clients-open-tus-q").path
            ], check: false)
        XCTAssertEqual(ours.status, 0, ours.stderr)
        let listed = try videos(s)
        XCTAssertEqual(listed.compactMap { $0["name"] as? String }, ["Holiday", "clip.mp4"], "\(listed)")
        for id in listed.compactMap({ $0["id"] as? Int }) {
            let v = try playable(s, id)
            XCTAssertTrue(["viewable", "ready"].contains(v["status"] as? String ?? ""), "\(v)")
            XCTAssertTrue(try probeHLS(v).streams.contains("video"), "\(v)")
        }
    }

    /// The JSON objects among `text`'s lines.
    func events(_ text: String) -> [[String: Any]] {
        text.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// `clipflow upload --to clipflow --endpoint http://HOST:PORT`: with no token against a server
    /// without a key; against one with a key, refused without the token, saying what to set (the
    /// failed entry then cleared by `upload prune --failed`), and sent with it. A success prints
    /// the video's watch link (`/v/ID`), and its JSON events carry it.
    func testUploadToClipflowWithAndWithoutAKeyPrintsTheWatchLink() throws {
        let open = server(fx.scratch("serve-clients-own-open"), key: "")
        try open.start()
        defer { open.stop() }
        let base = "http://127.0.0.1:\(open.port)"
        let sent = try Run.run(
            [binary, "upload", try clip(), "--to", "clipflow", "--endpoint", base, "--title", "Morning", "--queue", fx.scratch("serve-clients-own-q1").path],
            check: false)
        XCTAssertEqual(sent.status, 0, sent.stderr)
        let listed = try videos(open)
        XCTAssertEqual(listed.compactMap { $0["name"] as? String }, ["Morning"], "\(listed)")
        let id = try XCTUnwrap(listed.first?["id"] as? Int)
        XCTAssertTrue(sent.stderr.contains("watch \(base)/v/\(id)"), sent.stderr)
        XCTAssertEqual(try HTTP.request("GET", "\(base)/v/\(id)").status, 200)
        XCTAssertTrue(["viewable", "ready"].contains(try playable(open, id)["status"] as? String ?? ""))

        let locked = server(fx.scratch("serve-clients-own-key"))
        try locked.start()
        defer { locked.stop() }
        let keyed = "http://127.0.0.1:\(locked.port)"
        let queue = fx.scratch("serve-clients-own-q2").path
        let refused = try Run.run([binary, "upload", try clip(), "--to", "clipflow", "--endpoint", keyed, "--queue", queue], check: false)
        XCTAssertEqual(refused.status, 1, refused.stderr)
        XCTAssertTrue(refused.stderr.contains("set CLIPFLOW_UPLOAD_TOKEN"), refused.stderr)
        XCTAssertEqual(try videos(locked).count, 0, "no video is left waiting")
        XCTAssertTrue(try Run.run([binary, "upload", "list", "--queue", queue]).out.contains("failed"))
        XCTAssertTrue(try Run.run([binary, "upload", "prune", "--help"]).out.contains("--failed"))
        try Run.run([binary, "upload", "prune", "--failed", "--queue", queue])
        XCTAssertTrue(try Run.run([binary, "upload", "list", "--queue", queue]).out.contains("the upload queue is empty"))

        let withKey = try Run.run(
            [binary, "upload", try clip(), "--to", "clipflow", "--endpoint", keyed, "--queue", queue, "--events", "json"],
            env: ["CLIPFLOW_UPLOAD_TOKEN": key], check: false)
        XCTAssertEqual(withKey.status, 0, withKey.stderr)
        let made = try XCTUnwrap(try videos(locked).first?["id"] as? Int)
        let finished = try XCTUnwrap(
            events(withKey.out).last { $0["event"] as? String == "finished" && $0["item"] != nil }?["result"] as? [String: Any], withKey.out)
        XCTAssertEqual(finished["method"] as? String, "clipflow")
        XCTAssertEqual(finished["watch_url"] as? String, "\(keyed)/v/\(made)")
        XCTAssertFalse(withKey.out.contains(key) || withKey.stderr.contains(key))
    }
}
