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

    func get(_ s: ServerProcess, _ path: String) throws -> Any { try s.apiGet(path, key: key) }

    func waitReady(_ s: ServerProcess, _ id: Int, seconds: Double = 240) throws -> [String: Any] {
        try s.waitForVideo(id, key: key, seconds: seconds)
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

    /// Two API servers, one upload: a PATCH to a stalls mid-part; the client resumes on b from
    /// the recorded offset (0), b records more than a holds; then a's request ends. What a writes
    /// for the upload it lost is never read: the resume goes on from b's offset and the object is
    /// the upload as sent.
    func testAStaleRequestOnAnotherAPIServerNeverWritesWhereTheUploadsOwnerWrites() throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let weed = try SeaweedFS.start()
        defer { weed.stop() }
        let a = server("api", pg, weed, data: fx.scratch("serve-bucket-stale-a")), b = server("api", pg, weed, data: fx.scratch("serve-bucket-stale-b"))
        for s in [a, b] { try s.start(timeout: 60) }
        defer { for s in [a, b] { s.stop() } }

        let bytes = Data((0..<20_000_000).map { UInt8(truncatingIfNeeded: $0 &* 2_654_435_761 >> 9) })
        let file = fx.scratch("bucket-stale").appendingPathComponent("upload.bin")
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try bytes.write(to: file)
        let (_, meta) = try newVideo(a, "stale")
        let made = try HTTP.request(
            "POST", url(a, "/files"), headers: tus.merging(["Upload-Length": String(bytes.count), "Upload-Metadata": meta]) { a, _ in a })
        XCTAssertEqual(made.status, 201, made.text)
        let path = try XCTUnwrap(URL(string: try XCTUnwrap(made.header("Location")))?.path)
        let object = try objectKey(path)

        // a takes 9,000,000 of the 9,200,000 bytes its request declares (a whole 8 MiB part and
        // some of the next), then the client stalls.
        let stale = try RawConnection(port: a.port)
        try stale.send(
            Data(
                ("PATCH \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(a.port)\r\nTus-Resumable: 1.0.0\r\n"
                    + "Content-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\nContent-Length: 9200000\r\n\r\n").utf8))
        try stale.send(bytes.subdata(in: 0..<9_000_000))
        usleep(3_000_000)

        // The client resumes on b from what b answers (0) and is cut at 9,500,000: b records it.
        XCTAssertEqual(try offset(b, path), 0)
        var h = patchHeaders
        h["Upload-Offset"] = "0"
        let resumed = try HTTP.request("PATCH", url(b, path), headers: h, body: bytes.subdata(in: 0..<9_500_000), timeout: 60)
        XCTAssertEqual(resumed.status, 204, resumed.text)
        XCTAssertEqual(resumed.header("Upload-Offset"), "9500000")

        // a's request ends now, with fewer bytes than b recorded: refused, its bytes not recorded.
        try stale.send(bytes.subdata(in: 9_000_000..<9_200_000))
        XCTAssertEqual(try stale.status(), 409, "a's request lost the upload to b's")
        let partials = try weed.keys(prefix: object + ".")
        XCTAssertEqual(partials.count, 1, "only the partial part the row names is kept: \(partials)")

        // The upload resumes from b's offset, on either server, and is whole and exact.
        XCTAssertEqual(try offset(a, path), 9_500_000)
        h["Upload-Offset"] = "9500000"
        let next = try HTTP.request("PATCH", url(a, path), headers: h, body: bytes.subdata(in: 9_500_000..<12_000_000), timeout: 60)
        XCTAssertEqual(next.status, 204, next.text)
        h["Upload-Offset"] = "12000000"
        let last = try HTTP.request("PATCH", url(b, path), headers: h, body: bytes.subdata(in: 12_000_000..<bytes.count), timeout: 60)
        XCTAssertEqual(last.status, 204, last.text)
        XCTAssertEqual(last.header("Upload-Offset"), String(bytes.count))
        XCTAssertEqual(try weed.objectSHA256(key: object), try sha256(ofFile: file), "the bucket holds the upload as sent")
        XCTAssertEqual(try weed.keys(prefix: prefix + "uploads/"), [object], "no partial part is left once the upload is whole")
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
        let kept = try weed.keys(prefix: prefix + "uploads/").sorted()
        XCTAssertEqual(kept.count, 2, "\(kept)")
        for path in paths {
            let partial = try objectKey(path) + ".part-2"
            XCTAssertTrue(kept.contains { $0 == partial || $0.hasPrefix(partial + ".") }, "\(partial) in \(kept)")
        }

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

/// One HTTP/1.1 request written by the test over a socket of its own, in pieces and when the test
/// says, for a client that stalls mid-body.
private final class RawConnection {
    private let fd: Int32

    init(port: Int) throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw ServerError("socket: \(String(cString: strerror(errno)))") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = UInt16(port).bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            close(fd)
            throw ServerError("connect to 127.0.0.1:\(port): \(String(cString: strerror(errno)))")
        }
        var wait = timeval(tv_sec: 60, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &wait, socklen_t(MemoryLayout<timeval>.size))
    }

    deinit { close(fd) }

    func send(_ data: Data) throws {
        try data.withUnsafeBytes { (raw: UnsafeRawBufferPointer) in
            guard let base = raw.baseAddress else { return }
            var done = 0
            while done < raw.count {
                let n = Glibc.send(fd, base + done, raw.count - done, Int32(MSG_NOSIGNAL))
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { throw ServerError("send: \(String(cString: strerror(errno)))") }
                done += n
            }
        }
    }

    /// The status code of the answer (read up to its status line).
    func status() throws -> Int {
        var text = ""
        var buffer = [UInt8](repeating: 0, count: 4096)
        while !text.contains("\r\n") {
            let n = recv(fd, &buffer, buffer.count, 0)
            guard n > 0 else { throw ServerError("no answer: \(n < 0 ? String(cString: strerror(errno)) : "closed") after \(text.debugDescription)") }
            text += String(decoding: buffer[..<n], as: UTF8.self)
        }
        let words = text.split(separator: " ")
        guard words.count > 1, let code = Int(words[1]) else { throw ServerError("not an HTTP answer: \(text.prefix(200))") }
        return code
    }
}
