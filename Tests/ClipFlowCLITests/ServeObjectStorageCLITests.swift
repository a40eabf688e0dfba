import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow serve --storage s3://…` against a real S3 server (SeaweedFS) and a real PostgreSQL,
/// both started here: API servers and workers each with a data folder of their own (no disk
/// shared), uploads and ladders in the bucket. Media are judged by ffprobe/ffmpeg reading them
/// over HTTP from an API server; the bucket by boto3.
final class ServeObjectStorageCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "bucket-test-key"
    let prefix = "site/"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    /// A server of `role` with a data folder of its own, `data`.
    func server(_ role: String, _ pg: PostgresServer, _ weed: SeaweedFS, data: URL) -> ServerProcess {
        var environment = weed.environment
        environment["CLIPFLOW_API_KEY"] = key
        return .clipflowServe(
            binary: binary, data: data,
            [
                "--database", pg.url, "--role", role, "--storage", "s3://\(weed.bucket)/\(prefix)", "--job-lease", "3", "--superseded-grace", "0"
            ], environment: environment)
    }

    func url(_ s: ServerProcess, _ path: String) -> String { "http://127.0.0.1:\(s.port)\(path)" }

    func get(_ s: ServerProcess, _ path: String) throws -> Any {
        try HTTP.request("GET", url(s, path), headers: ["Authorization": "Bearer \(key)"]).json()
    }

    func waitReady(_ s: ServerProcess, _ id: Int, seconds: Double = 240) throws -> [String: Any] {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            let v = try XCTUnwrap(try get(s, "/videos/\(id)") as? [String: Any])
            if ["ready", "error"].contains(v["status"] as? String ?? "") { return v }
            usleep(250_000)
        }
        throw ServerError("video \(id) not ready in \(seconds) s")
    }

    /// A new video on `s` and the TUS metadata of an upload for it, with an upload token from
    /// `issuer` (by default `s`).
    func newVideo(_ s: ServerProcess, _ name: String, tokenFrom issuer: ServerProcess? = nil) throws -> (id: Int, metadata: String) {
        let v = try XCTUnwrap(
            try HTTP.request("POST", url(s, "/videos"), headers: ["Authorization": "Bearer \(key)"], json: ["name": name]).json() as? [String: Any])
        let id = try XCTUnwrap(v["id"] as? Int)
        let token = try XCTUnwrap((try get(issuer ?? s, "/videos/\(id)/upload") as? [String: Any])?["token"] as? String)
        let b64 = { (s: String) in Data(s.utf8).base64EncodedString() }
        return (id, "filename \(b64(name)),video_id \(b64(String(id))),token \(b64(token))")
    }

    /// Uploads `clip` to API server `s` with `clipflow upload --to gcore`; the new video's id.
    @discardableResult
    func uploadWithCLI(_ clip: String, to s: ServerProcess) throws -> Int {
        let up = try Run.run(
            [binary, "upload", clip, "--to", "gcore", "--endpoint", url(s, ""), "--queue", fx.scratch("bucket-queue").path],
            env: ["CLIPFLOW_UPLOAD_TOKEN": key], check: false)
        XCTAssertEqual(up.status, 0, up.stderr)
        return try XCTUnwrap((try get(s, "/videos") as? [[String: Any]])?.first?["id"] as? Int)
    }

    /// The lines of `s`'s log about the ladder step of `video` that are of `kind`.
    func ladderLines(_ s: ServerProcess, _ kind: String, _ video: Int) -> [Substring] {
        s.stderrText.split(separator: "\n").filter { $0.contains("event=job kind=\(kind) video=\(video) ") && $0.contains("phase=ladder") }
    }

    let tus = ["Tus-Resumable": "1.0.0"]
    var patchHeaders: [String: String] { tus.merging(["Content-Type": "application/offset+octet-stream"]) { a, _ in a } }

    func offset(_ s: ServerProcess, _ path: String) throws -> Int {
        let head = try HTTP.request("HEAD", url(s, path), headers: tus)
        return try XCTUnwrap(Int(head.header("Upload-Offset") ?? ""), "HEAD \(head.status)")
    }

    /// The bucket key of a TUS upload at `path` (`/files/ID`): the SHA-256 of its id.
    func objectKey(_ path: String) throws -> String {
        let id = String(path.split(separator: "/").last ?? "")
        let hex = try Run.run(["sh", "-c", "printf %s \"$0\" | sha256sum", id]).out.prefix(64)
        return prefix + "uploads/" + hex
    }

    /// A clip of about `megabytes` MB (a noisy picture at a high bit rate, with sound).
    func bigClip(_ name: String, seconds: Int, megabytes: Int) throws -> String {
        try fx.clip(
            name,
            [
                "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30,noise=alls=60:allf=t", "-f", "lavfi", "-i", "sine=r=48000", "-t", String(seconds),
                "-c:v", "libx264", "-preset", "ultrafast", "-g", "30", "-b:v", "\(megabytes * 8 / seconds)M", "-maxrate", "\(megabytes * 8 / seconds)M",
                "-bufsize", "2M", "-pix_fmt", "yuv420p", "-c:a", "aac", "-movflags", "+faststart"
            ])
    }

    /// ffmpeg decodes the whole stream at `url` (playlists proxied, segments redirected to the
    /// bucket) without an error; returns its video frame count.
    func decodedFrames(_ url: String) throws -> Int {
        let r = try Run.run(
            ["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", url],
            check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        // FFmpeg notes that a segment redirected to the bucket needs a connection of its own.
        let errors = r.stderr.split(separator: "\n").filter { !$0.contains("Cannot reuse HTTP connection for different host") }
        XCTAssertEqual(errors, [], "decoded without errors")
        return Int(r.out.split(separator: "\n").first ?? "") ?? 0
    }

    func testAnUploadMovesAcrossAPIServersAndTwoWorkersShareTheWork() throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let weed = try SeaweedFS.start()
        defer { weed.stop() }
        let folders = ["a", "b", "w1", "w2"].map { fx.scratch("serve-bucket-\($0)") }
        let a = server("api", pg, weed, data: folders[0]), b = server("api", pg, weed, data: folders[1])
        let w1 = server("worker", pg, weed, data: folders[2]), w2 = server("worker", pg, weed, data: folders[3])
        for s in [a, b, w1, w2] { try s.start(timeout: 60) }
        defer { for s in [a, b, w1, w2] { s.stop() } }
        XCTAssertTrue(a.stderrText.contains("storage s3://\(weed.bucket)/\(prefix),"), a.stderrText)

        // One upload in three PATCHes over two API servers: the first ends mid-part, the second
        // crosses a part boundary (8 MiB), the third ends it.
        let clip = try bigClip("bucket-split.mp4", seconds: 8, megabytes: 12)
        let bytes = try Data(contentsOf: URL(fileURLWithPath: clip))
        XCTAssertGreaterThan(bytes.count, 9 << 20)
        // The token from b admits the upload at a: the servers share their token secret through
        // PostgreSQL (each has a data folder of its own).
        let (id, meta) = try newVideo(a, "split", tokenFrom: b)
        let made = try HTTP.request(
            "POST", url(a, "/files"), headers: tus.merging(["Upload-Length": String(bytes.count), "Upload-Metadata": meta]) { a, _ in a })
        XCTAssertEqual(made.status, 201, made.text)
        let path = try XCTUnwrap(URL(string: try XCTUnwrap(made.header("Location")))?.path)
        let cuts = [0, 3_000_000, 9_500_000, bytes.count]
        for (i, server) in [a, b, a].enumerated() {
            XCTAssertEqual(try offset(server, path), cuts[i], "each server answers the recorded offset")
            var h = patchHeaders
            h["Upload-Offset"] = String(cuts[i])
            let r = try HTTP.request("PATCH", url(server, path), headers: h, body: bytes.subdata(in: cuts[i]..<cuts[i + 1]))
            XCTAssertEqual(r.status, 204, r.text)
            XCTAssertEqual(r.header("Upload-Offset"), String(cuts[i + 1]))
        }
        let object = try objectKey(path)
        XCTAssertEqual(try weed.objectSHA256(key: object), try sha256(ofFile: URL(fileURLWithPath: clip)), "the bucket holds the upload as sent")
        XCTAssertEqual(try weed.keys(prefix: prefix + "uploads/"), [object], "no partial part is left once the upload is whole")
        XCTAssertEqual(try weed.pendingMultipartUploads(), 0)

        // Nine more, through `clipflow upload` (Gcore flow) to either API server.
        for n in 0..<9 { try uploadWithCLI(try fx.clip("bucket-\(n).mp4", seconds: 2, size: "320x240"), to: n % 2 == 0 ? b : a) }
        let listed = try XCTUnwrap(try get(a, "/videos?per_page=50") as? [[String: Any]])
        let ids = listed.compactMap { $0["id"] as? Int }
        XCTAssertEqual(ids.count, 10)
        for v in ids {
            let done = try waitReady(v % 2 == 0 ? a : b, v)
            XCTAssertEqual(done["status"] as? String, "ready", "\(done)")
        }

        // Each job ran once, on one of the two workers; both took some; the API servers none.
        let logs = w1.stderrText + w2.stderrText
        for v in ids {
            XCTAssertEqual(logs.components(separatedBy: "event=job kind=done video=\(v) ").count - 1, 1, "video \(v) finished once:\n\(logs)")
        }
        XCTAssertTrue(w1.stderrText.contains("event=job kind=done"), "worker 1 did some")
        XCTAssertTrue(w2.stderrText.contains("event=job kind=done"), "worker 2 did some")
        XCTAssertFalse(a.stderrText.contains("event=job") || b.stderrText.contains("event=job"))
        for data in folders[2...] {
            let scratch = data.appendingPathComponent("scratch").path
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: scratch), [], "a worker's scratch is empty between jobs")
        }
        for data in folders[0...1] {
            XCTAssertFalse(FileManager.default.fileExists(atPath: data.appendingPathComponent("uploads").path), "no upload on an API server's disk")
        }

        // Played from either API server: playlists proxied, segments from the bucket.
        let split = try XCTUnwrap(try get(b, "/videos/\(id)") as? [String: Any])
        let hls = try XCTUnwrap(split["hls_url"] as? String)
        let frames = try decodedFrames(hls)
        XCTAssertEqual(frames, 240, "8 s at 30 fps")
        let poster = try XCTUnwrap(split["screenshot"] as? String)
        let redirect = try Run.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %{redirect_url}", poster]).out
        XCTAssertTrue(redirect.hasPrefix("302 \(weed.endpoint)/"), "media bytes come from the bucket: \(redirect)")
        XCTAssertFalse(redirect.contains(weed.secretKey))
        let image = try HTTP.request("GET", poster)
        XCTAssertEqual(image.status, 200)
        XCTAssertEqual(Array(image.body.prefix(3)), [0xFF, 0xD8, 0xFF], "a JPEG, through the presigned URL")
        let feed = try XCTUnwrap((try HTTP.request("GET", url(a, "/feed.json")).json() as? [String: Any])?["videos"] as? [[String: Any]])
        XCTAssertEqual(feed.count, 10, "the feed lists every video, from manifests in the bucket")
        // In chromium: the feed plays and prefetches, the list page shows every cover, their bytes
        // from the bucket (the pages' Content-Security-Policy allows its origin).
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let page = try Run.run(["python3", root.appendingPathComponent("scripts/feed-check").path, url(a, ""), "--key", key], check: false)
        XCTAssertEqual(page.status, 0, "\(page.out) \(page.stderr)")

        // Deleting everything leaves nothing billable: no object, no unfinished multipart upload.
        for v in ids {
            XCTAssertEqual(try HTTP.request("DELETE", url(v % 2 == 0 ? b : a, "/videos/\(v)"), headers: ["Authorization": "Bearer \(key)"]).status, 204)
        }
        usleep(500_000)
        XCTAssertEqual(try weed.keys(prefix: ""), [])
        XCTAssertEqual(try weed.pendingMultipartUploads(), 0)
    }

    func testAWorkerKilledMidLadderIsReplacedWithoutADuplicate() throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let weed = try SeaweedFS.start()
        defer { weed.stop() }
        let a = server("api", pg, weed, data: fx.scratch("serve-bucket-kill-a"))
        let workers = [
            server("worker", pg, weed, data: fx.scratch("serve-bucket-kill-w1")), server("worker", pg, weed, data: fx.scratch("serve-bucket-kill-w2"))
        ]
        for s in [a] + workers { try s.start(timeout: 60) }
        defer { for s in [a] + workers { s.stop() } }

        let clip = try fx.clip("bucket-long.mp4", seconds: 20, size: "1280x720")
        let id = try uploadWithCLI(clip, to: a)

        // kill -9 the worker whose ladder is under way.
        let deadline = Date().addingTimeInterval(120)
        var victim: ServerProcess?
        while victim == nil, Date() < deadline {
            victim = workers.first { !ladderLines($0, "started", id).isEmpty }
            usleep(100_000)
        }
        let killed = try XCTUnwrap(victim, "no worker started the ladder")
        usleep(1_000_000)
        XCTAssertTrue(try XCTUnwrap(get(a, "/videos/\(id)") as? [String: Any])["status"] as? String == "viewable", "killed mid-ladder")
        kill(try killed.supervisedPID(), SIGKILL)
        let survivor = workers.first { $0 !== killed }!

        let v = try waitReady(a, id)
        XCTAssertEqual(v["status"] as? String, "ready", "\(v)")
        XCTAssertEqual(ladderLines(killed, "published", id), [])
        XCTAssertEqual(ladderLines(survivor, "published", id).count, 1, "the other worker published the ladder once:\n\(survivor.stderrText)")
        XCTAssertEqual(try decodedFrames(try XCTUnwrap(v["hls_url"] as? String)), 600, "20 s at 30 fps")
        XCTAssertEqual(try HTTP.request("DELETE", url(a, "/videos/\(id)"), headers: ["Authorization": "Bearer \(key)"]).status, 204)
        XCTAssertEqual(try weed.keys(prefix: ""), [], "nothing of the video is left, whatever the killed worker wrote")

        // A video deleted on the API server while the worker (another machine) makes its ladder:
        // what the worker puts afterwards goes too.
        let second = try uploadWithCLI(clip, to: a)
        let until = Date().addingTimeInterval(120)
        while Date() < until, ladderLines(survivor, "started", second).isEmpty { usleep(100_000) }
        usleep(2_000_000)  // the published folder it reuses is downloaded; the encoding runs
        XCTAssertEqual(try HTTP.request("DELETE", url(a, "/videos/\(second)"), headers: ["Authorization": "Bearer \(key)"]).status, 204)
        let gone = Date().addingTimeInterval(120)
        while Date() < gone, !survivor.stderrText.contains("event=job kind=requeued video=\(second) ") { usleep(200_000) }
        XCTAssertTrue(survivor.stderrText.contains("event=job kind=requeued video=\(second) "), survivor.stderrText)
        XCTAssertEqual(try weed.keys(prefix: ""), [], "the ladder put after the removal was removed by its worker")
        XCTAssertEqual(try weed.pendingMultipartUploads(), 0)
    }

    func testAnUploadSurvivesAKilledAPIServerAndARestartedObjectStore() throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let weed = try SeaweedFS.start()
        defer { weed.stop() }
        let a = server("api", pg, weed, data: fx.scratch("serve-bucket-crash-a")), b = server("api", pg, weed, data: fx.scratch("serve-bucket-crash-b"))
        for s in [a, b] { try s.start(timeout: 60) }
        defer { for s in [a, b] { s.stop() } }

        let bytes = Data((0..<24_000_000).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 11) })
        let file = fx.scratch("bucket-crash").appendingPathComponent("upload.bin")
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try bytes.write(to: file)
        let (_, meta) = try newVideo(a, "crash")
        let made = try HTTP.request(
            "POST", url(a, "/files"), headers: tus.merging(["Upload-Length": String(bytes.count), "Upload-Metadata": meta]) { a, _ in a })
        XCTAssertEqual(made.status, 201, made.text)
        let path = try XCTUnwrap(URL(string: try XCTUnwrap(made.header("Location")))?.path)
        func patch(_ s: ServerProcess, from: Int, to: Int) throws -> HTTPReply {
            var h = patchHeaders
            h["Upload-Offset"] = String(from)
            return try HTTP.request("PATCH", url(s, path), headers: h, body: bytes.subdata(in: from..<to), timeout: 60)
        }
        XCTAssertEqual(try patch(a, from: 0, to: 6_000_000).status, 204)

        // API server a is killed while a PATCH streams into it (slowly: a part goes out meanwhile).
        let curl = Process()
        curl.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        curl.arguments = [
            "-s", "-o", "/dev/null", "-X", "PATCH", "--limit-rate", "4M", "-H", "Tus-Resumable: 1.0.0", "-H", "Content-Type: application/offset+octet-stream",
            "-H", "Upload-Offset: 6000000", "--data-binary", "@-", url(a, path)
        ]
        let body = Pipe()
        curl.standardInput = body
        try curl.run()
        let writer = Thread {
            try? body.fileHandleForWriting.write(contentsOf: bytes.subdata(in: 6_000_000..<bytes.count))
            try? body.fileHandleForWriting.close()
        }
        writer.start()
        usleep(2_500_000)
        kill(try a.supervisedPID(), SIGKILL)
        curl.waitUntilExit()
        let resumed = try offset(b, path)
        XCTAssertGreaterThanOrEqual(resumed, 6_000_000, "what was recorded before the kill stays")
        XCTAssertLessThan(resumed, bytes.count)

        // The object store goes away mid-upload: the PATCH is refused, nothing recorded moves.
        weed.process.stop()
        let refused = try patch(b, from: resumed, to: resumed + 1_000_000)
        XCTAssertEqual(refused.status, 503, refused.text)
        XCTAssertTrue(refused.text.contains("object storage"), refused.text)
        XCTAssertFalse(refused.text.contains(weed.secretKey) || refused.text.contains(weed.accessKey))
        XCTAssertTrue(b.stderrText.contains("upload request failed (503): s3://\(weed.bucket)/\(prefix)uploads/"), "the cause is logged:\n\(b.stderrText)")
        XCTAssertFalse(b.stderrText.contains(weed.secretKey))
        try weed.restart()
        XCTAssertEqual(try offset(b, path), resumed, "the recorded offset did not move")

        // Back: the upload resumes on the other API server and is whole and exact.
        let done = try patch(b, from: resumed, to: bytes.count)
        XCTAssertEqual(done.status, 204, done.text)
        XCTAssertEqual(done.header("Upload-Offset"), String(bytes.count))
        let object = try objectKey(path)
        XCTAssertEqual(try weed.objectSHA256(key: object), try sha256(ofFile: file))
        XCTAssertEqual(try weed.keys(prefix: prefix + "uploads/"), [object])
        XCTAssertEqual(try weed.pendingMultipartUploads(), 0)
    }

    func testExpiredAndTerminatedUploadsLeaveNothingInTheBucket() throws {
        let weed = try SeaweedFS.start()
        defer { weed.stop() }
        // One server on SQLite, bytes in the bucket, its keys from a credentials command; unfinished
        // uploads expire after 7.2 s.
        let keys = fx.scratch("serve-bucket-keys").appendingPathComponent("keys.json")
        try FileManager.default.createDirectory(at: keys.deletingLastPathComponent(), withIntermediateDirectories: true)
        try JSONSerialization.data(withJSONObject: ["AccessKeyId": weed.accessKey, "SecretAccessKey": weed.secretKey]).write(to: keys)
        let s = ServerProcess.clipflowServe(
            binary: binary, data: fx.scratch("serve-bucket-expiry"),
            [
                "--storage", "s3://\(weed.bucket)/\(prefix)", "--credentials-command", "cat \(keys.path)", "--expiration", "0.002", "--sweep-every", "1"
            ], environment: ["AWS_ENDPOINT_URL_S3": weed.endpoint, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""])
        try s.start(timeout: 60)
        defer { s.stop() }
        let sent = Data((0..<9_500_000).map { UInt8(truncatingIfNeeded: $0 &* 40_503 >> 7) })
        var paths: [String] = []
        for _ in 0..<2 {
            let made = try HTTP.request("POST", url(s, "/files"), headers: tus.merging(["Upload-Length": "20000000"]) { a, _ in a })
            XCTAssertEqual(made.status, 201, made.text)
            let path = try XCTUnwrap(URL(string: try XCTUnwrap(made.header("Location")))?.path)
            var h = patchHeaders
            h["Upload-Offset"] = "0"
            XCTAssertEqual(try HTTP.request("PATCH", url(s, path), headers: h, body: sent).status, 204)
            paths.append(path)
        }
        // Each holds a whole part (in its multipart upload) and a partial part's object.
        XCTAssertEqual(try weed.pendingMultipartUploads(), 2)
        XCTAssertEqual(try weed.keys(prefix: prefix + "uploads/").sorted(), try paths.map { try objectKey($0) + ".part-2" }.sorted())

        // One terminated, the other left to expire.
        XCTAssertEqual(try HTTP.request("DELETE", url(s, paths[0]), headers: tus).status, 204)
        let deadline = Date().addingTimeInterval(30)
        while Date() < deadline, try weed.pendingMultipartUploads() > 0 || !(try weed.keys(prefix: "")).isEmpty { usleep(250_000) }
        XCTAssertTrue([404, 410].contains(try HTTP.request("HEAD", url(s, paths[1]), headers: tus).status))
        XCTAssertEqual(try weed.keys(prefix: ""), [], "no object left")
        XCTAssertEqual(try weed.pendingMultipartUploads(), 0, "no unfinished multipart upload left")
    }

    func testABucketThatCannotBeUsedIsOneClearErrorBeforeAnythingIsMade() throws {
        let weed = try SeaweedFS.start()
        defer { weed.stop() }
        let data = fx.scratch("serve-bucket-bad").appendingPathComponent("data")
        var wrongSecret = weed.environment
        wrongSecret["AWS_SECRET_ACCESS_KEY"] = "not-the-secret-\(UInt32.random(in: 0...UInt32.max))"
        let nobody = ["AWS_ENDPOINT_URL_S3": "http://127.0.0.1:\(ServerProcess.freePort())", "AWS_MAX_ATTEMPTS": "1"]
        let cases: [(storage: String, env: [String: String], says: String)] = [
            ("videos/site", weed.environment, "--storage videos/site: expected s3://BUCKET or s3://BUCKET/PREFIX"),
            ("s3:///site", weed.environment, "--storage s3:///site: expected s3://BUCKET or s3://BUCKET/PREFIX"),
            ("s3://\(weed.bucket)/site", ["AWS_ENDPOINT_URL_S3": weed.endpoint, "AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""], "AWS_ACCESS_KEY_ID"),
            ("s3://\(weed.bucket)/site", wrongSecret, "the secret access key for access key"),
            ("s3://no-such-bucket-here/site", weed.environment, "no such bucket"),
            ("s3://\(weed.bucket)/site", weed.environment.merging(nobody) { _, b in b }, "--storage s3://\(weed.bucket)/site/:")
        ]
        for c in cases {
            let r = try Run.run([binary, "serve", "--data", data.path, "--listen", "127.0.0.1:0", "--storage", c.storage], env: c.env, check: false)
            XCTAssertNotEqual(r.status, 0, c.storage)
            XCTAssertTrue(r.stderr.contains(c.says), "\(c.storage): \(r.stderr)")
            XCTAssertEqual(r.stderr.split(separator: "\n").count, 1, "one line: \(r.stderr)")
            XCTAssertFalse(r.stderr.contains(weed.secretKey) || r.stderr.contains(wrongSecret["AWS_SECRET_ACCESS_KEY"]!))
            XCTAssertFalse(FileManager.default.fileExists(atPath: data.path), "nothing made: \(c.storage)")
        }
    }
}
