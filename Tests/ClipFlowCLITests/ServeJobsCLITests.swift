import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow serve`'s processing under hostile uploads and faults: each step runs in a worker
/// process the server supervises; a worker that dies (killed here with SIGKILL, as the kernel's
/// OOM killer would) costs its video an attempt, never the server; limits are checked from the
/// probe; a deleted video's job stops for good.
final class ServeJobsCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "jobs-test-key"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func server(_ data: URL, _ extra: [String] = []) -> ServerProcess {
        .clipflowServe(binary: binary, data: data, extra, environment: ["CLIPFLOW_API_KEY": key])
    }

    func api(_ s: ServerProcess, _ method: String, _ path: String, json: Any? = nil) throws -> HTTPReply {
        try HTTP.request(method, "http://127.0.0.1:\(s.port)\(path)", headers: ["Authorization": "Bearer \(key)"], json: json)
    }

    func video(_ s: ServerProcess, _ id: Int) throws -> [String: Any] {
        try XCTUnwrap(try api(s, "GET", "/videos/\(id)").json() as? [String: Any])
    }

    func waitFor(_ s: ServerProcess, _ id: Int, _ ends: Set<String>, seconds: Double = 180) throws -> [String: Any] {
        let deadline = Date().addingTimeInterval(seconds)
        var last: [String: Any] = [:]
        while Date() < deadline {
            last = try video(s, id)
            if ends.contains(last["status"] as? String ?? "") { return last }
            usleep(100_000)
        }
        throw ServerError("video \(id) never reached \(ends): \(last)")
    }

    /// A video made by the API and its file uploaded with tuspy; returns its id.
    func upload(_ s: ServerProcess, _ file: String, name: String) throws -> Int {
        let (id, token) = try newVideo(s, name: name)
        try upload(s, file, video: id, token: token)
        return id
    }

    /// A video made by the API: its id and upload token.
    func newVideo(_ s: ServerProcess, name: String) throws -> (id: Int, token: String) { try s.newVideo(key: key, ["name": name]) }

    /// `file` uploaded with tuspy as video `id`'s source.
    func upload(_ s: ServerProcess, _ file: String, video id: Int, token: String) throws { try s.tusUpload(file, video: id, token: token) }

    /// Encoding worker processes of this data folder (their command lines name the step's
    /// pipeline, which a step writes beside its output in the video's media folder: `-first` for
    /// the smallest rung, `-full` for the ladder; a copy's worker, often over in a moment, is not
    /// one), for one video when `video` is given.
    func workers(_ data: URL, video: Int? = nil) throws -> [Int32] {
        let pattern = "serve-worker \(data.path)/media/\(video.map(String.init) ?? "[0-9]+")/\\.a.*-(first|full)\\.json"
        let r = try Run.run(["pgrep", "-f", pattern], check: false)
        return r.out.split(separator: "\n").compactMap { Int32($0) }
    }

    func waitForWorker(_ data: URL, excluding: Set<Int32>, video: Int? = nil, seconds: Double = 60) throws -> Int32 {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if let pid = try workers(data, video: video).first(where: { !excluding.contains($0) }) { return pid }
            usleep(50_000)
        }
        throw ServerError("no new processing worker within \(seconds) s")
    }

    /// A worker killed in attempt 1, the server killed in attempt 2 (its worker ends with it),
    /// a worker killed in attempt 3: the video ends in error naming the signal and the attempts;
    /// the server stayed up through every worker's death, and the other videos (one of them the
    /// 2-pixel-wide 4:4:4 clip that crashed `hls`) are processed as if nothing happened.
    func testAWorkerThatDiesCostsAnAttemptNeverTheServer() throws {
        let data = fx.scratch("serve-jobs-crash")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let doomed = try upload(s, try fx.clip("serve-jobs-long.mp4", seconds: 30, size: "1280x720"), name: "doomed")
        let fine = try upload(s, try fx.clip("serve-jobs-short.mp4", seconds: 4, size: "640x360"), name: "fine")
        let thin = try upload(
            s,
            try fx.clip("serve-jobs-thin.mp4", ["-f", "lavfi", "-i", "testsrc2=size=64x64", "-t", "1", "-vf", "scale=2:600", "-pix_fmt", "yuv444p"]),
            name: "thin")
        let serverPID = try s.supervisedPID()
        var killed: Set<Int32> = []

        let first = try waitForWorker(data, excluding: killed, video: doomed)
        kill(first, SIGKILL)
        killed.insert(first)
        let second = try waitForWorker(data, excluding: killed, video: doomed)
        XCTAssertEqual(try s.supervisedPID(), serverPID, "the server outlived its worker")
        // Its smallest rung may be published already (a slow start of this test): then the kills
        // land on its ladder step, whose attempts count the same way.
        XCTAssertTrue(["processing", "viewable"].contains(try video(s, doomed)["status"] as? String ?? ""))
        kill(serverPID, SIGKILL)
        killed.insert(second)
        var orphaned = try workers(data)
        for _ in 0..<100 where !orphaned.isEmpty {
            usleep(50_000)
            orphaned = try workers(data)
        }
        XCTAssertEqual(orphaned, [], "a worker ends with its server")
        try s.start()
        let restarted = try s.supervisedPID()
        let third = try waitForWorker(data, excluding: killed, video: doomed)
        kill(third, SIGKILL)

        let failed = try waitFor(s, doomed, ["error", "ready"], seconds: 60)
        XCTAssertEqual(failed["status"] as? String, "error", "\(failed)")
        let reason = failed["error"] as? String ?? ""
        XCTAssertTrue(reason.contains("SIGKILL") && reason.contains("attempt 3 of 3"), reason)
        XCTAssertFalse(reason.contains(data.path), reason)
        XCTAssertEqual(try waitFor(s, fine, ["ready", "error"])["status"] as? String, "ready")
        let thinEnd = try waitFor(s, thin, ["ready", "error"])
        XCTAssertFalse((thinEnd["error"] as? String ?? "").contains(data.path), "\(thinEnd)")
        XCTAssertEqual(try s.supervisedPID(), restarted, "the server stayed up: \(s.stderrText.suffix(2000))")
        XCTAssertEqual(try api(s, "GET", "/videos").status, 200)
    }

    /// The 0.4 MB upload declaring 16384x8704 (one black H.264 frame): refused from its probe, with
    /// the reason, before anything is decoded; a longer, faster or bigger video than the flags
    /// allow likewise; within the limits the same server processes a video.
    func testLimitsAreCheckedFromTheProbe() throws {
        let data = fx.scratch("serve-jobs-limits")
        let s = server(data, ["--max-duration", "5", "--max-frame-rate", "50"])
        try s.start()
        defer { s.stop() }
        let huge = try fx.clip(
            "serve-jobs-16384x8704.mp4",
            ["-f", "lavfi", "-i", "color=black:size=16384x8704:rate=25", "-frames:v", "1", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"])
        XCTAssertLessThan(try FileManager.default.attributesOfItem(atPath: huge)[.size] as? Int ?? 0, 1_000_000)
        let big = try upload(s, huge, name: "huge")
        let long = try upload(s, try fx.clip("serve-jobs-6s.mp4", seconds: 6, size: "320x240"), name: "long")
        let fast = try upload(
            s,
            try fx.clip(
                "serve-jobs-60fps.mp4", ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=60", "-t", "1", "-c:v", "libx264", "-preset", "ultrafast"]),
            name: "fast")
        let ok = try upload(s, try fx.clip("serve-jobs-2s.mp4", seconds: 2, size: "320x240"), name: "ok")
        let refused = try waitFor(s, big, ["error", "ready", "viewable"], seconds: 60)
        XCTAssertEqual(refused["status"] as? String, "error")
        XCTAssertEqual(refused["error"] as? String, "the picture is 16384x8704, above this server's limit of 4096x4096")
        XCTAssertEqual(try waitFor(s, long, ["error", "ready"])["error"] as? String, "the video lasts 6 s, above this server's limit of 5 s")
        XCTAssertEqual(
            try waitFor(s, fast, ["error", "ready"])["error"] as? String, "the video has 60.00 frames per second, above this server's limit of 50")
        XCTAssertEqual(try waitFor(s, ok, ["error", "ready"])["status"] as? String, "ready")
        XCTAssertEqual((try? FileManager.default.contentsOfDirectory(atPath: data.appendingPathComponent("media/\(big)").path)) ?? [], [], "no ladder made")
    }

    /// Each worker's memory is bounded (--worker-memory): a worker that needs more fails (or
    /// dies), the video ends in error, the server is untouched.
    func testAWorkerBeyondItsMemoryEndsItsVideoInError() throws {
        let data = fx.scratch("serve-jobs-memory")
        let s = server(data, ["--worker-memory", "128", "--job-attempts", "1"])
        try s.start()
        defer { s.stop() }
        let pid = try s.supervisedPID()
        let id = try upload(s, try fx.clip("serve-jobs-short.mp4", seconds: 4, size: "640x360"), name: "needs memory")
        let v = try waitFor(s, id, ["error", "ready"], seconds: 120)
        XCTAssertEqual(v["status"] as? String, "error", "\(v)")
        let reason = v["error"] as? String ?? ""
        XCTAssertFalse(reason.contains(data.path))
        XCTAssertTrue(reason.contains("--worker-memory 128 MiB"), "the reason names the bound: \(reason)")
        XCTAssertEqual(try s.supervisedPID(), pid)
    }

    /// A disk that fills while a ladder is written (an 8 MB tmpfs as the data folder, nearly
    /// filled by a file of the test's): the job waits without spending its only attempt, and the
    /// video is processed by itself once the file is removed.
    func testProcessingWaitsForAFullDiskToFree() throws {
        let data = fx.scratch("serve-jobs-full")
        guard (try? Run.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", data.path]))?.status == 0 else {
            throw XCTSkip("mounting a tmpfs needs root")
        }
        defer { _ = try? Run.run(["umount", "-l", data.path], check: false) }
        let s = server(data, ["--job-attempts", "1"])
        try s.start()
        defer { s.stop() }
        let file = try fx.clip("serve-jobs-short.mp4", seconds: 4, size: "640x360")
        let size = try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int ?? 0
        let free = Int(try Run.run(["df", "--output=avail", "-B1", data.path]).out.split(separator: "\n").last ?? "") ?? 0
        let filler = data.appendingPathComponent("filler").path
        try Run.run(["fallocate", "-l", String(free - size - 256 * 1024), filler])
        let id = try upload(s, file, name: "waits")
        sleep(8)
        let waiting = try video(s, id)
        XCTAssertEqual(waiting["status"] as? String, "processing", "\(waiting)")
        try FileManager.default.removeItem(atPath: filler)
        XCTAssertEqual(try waitFor(s, id, ["ready", "error"], seconds: 60)["status"] as? String, "ready")
    }

    /// A worker that hangs (stopped here with SIGSTOP) is killed once it has been silent for
    /// --worker-stall seconds; the attempt counts.
    func testAHungWorkerIsKilled() throws {
        let data = fx.scratch("serve-jobs-stall")
        let s = server(data, ["--worker-stall", "3", "--job-attempts", "1"])
        try s.start()
        defer { s.stop() }
        let id = try upload(s, try fx.clip("serve-jobs-long.mp4", seconds: 30, size: "1280x720"), name: "hangs")
        let worker = try waitForWorker(data, excluding: [])
        kill(worker, SIGSTOP)
        let v = try waitFor(s, id, ["error", "ready"], seconds: 30)
        XCTAssertEqual(v["error"] as? String, "the processing worker made no progress for 3 s (attempt 1 of 1)", "\(v)")
    }

    /// A worker stopped with SIGTERM (how the server stops a job) cancels its graph through the
    /// runner: it ends within the server's grace, with its own status, and leaves no folder and
    /// no temporary behind.
    func testAStoppedWorkerCancelsItsGraphAndLeavesNothing() throws {
        let folder = fx.scratch("serve-jobs-worker-stop")
        let output = folder.appendingPathComponent("ladder")
        let worker = Process()
        worker.executableURL = URL(fileURLWithPath: binary)
        let clip = try fx.clip("serve-jobs-long.mp4", seconds: 30, size: "1280x720")
        let pipeline = fx.scratch("serve-jobs-worker-stop-pipeline").appendingPathComponent("step.json")
        try """
        {"version": 1, "stages": [
          {"id": "upload", "kind": "files", "paths": ["\(clip)"]},
          {"id": "ladder", "kind": "hls", "inputs": ["upload"], "output": "\(output.path)", "ladder": "360,720", "profile": "feed"}
        ]}
        """.write(to: pipeline, atomically: true, encoding: .utf8)
        worker.arguments = ["serve-worker", pipeline.path]
        let input = Pipe(), lines = Pipe(), errors = Pipe()
        (worker.standardInput, worker.standardOutput, worker.standardError) = (input, lines, errors)
        try worker.run()
        defer { try? input.fileHandleForWriting.close() }
        var heard = Data()
        while !String(decoding: heard, as: UTF8.self).contains("\"progress\":0.1") {
            let chunk = lines.fileHandleForReading.availableData
            XCTAssertFalse(chunk.isEmpty, "the worker ended before a tenth of its ladder: \(String(decoding: heard, as: UTF8.self))")
            if chunk.isEmpty { return }
            heard += chunk
        }
        let stopped = Date()
        kill(worker.processIdentifier, SIGTERM)
        worker.waitUntilExit()
        XCTAssertLessThan(Date().timeIntervalSince(stopped), 2, "within the server's grace (WorkerProcess.stopGrace)")
        XCTAssertEqual(worker.terminationReason, .exit, "it ended by itself, not by the signal")
        XCTAssertEqual(worker.terminationStatus, 130)
        let reason = String(decoding: errors.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertEqual(reason, "stopped before the work was done\n")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder.path), [], "no ladder, no temporary")
    }

    /// DELETE /videos/ID while its ladder is being made: the worker is killed, the video's media
    /// folder is gone and stays gone (nothing recreates it), the server goes on with the next video.
    func testDeletingAVideoStopsItsJob() throws {
        let data = fx.scratch("serve-jobs-delete")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let id = try upload(s, try fx.clip("serve-jobs-long.mp4", seconds: 30, size: "1280x720"), name: "deleted")
        let worker = try waitForWorker(data, excluding: [])
        XCTAssertEqual(try api(s, "DELETE", "/videos/\(id)").status, 204)
        XCTAssertEqual(kill(worker, 0), -1, "the worker is gone")
        let next = try upload(s, try fx.clip("serve-jobs-short.mp4", seconds: 4, size: "640x360"), name: "next")
        XCTAssertEqual(try waitFor(s, next, ["ready", "error"])["status"] as? String, "ready")
        XCTAssertFalse(FileManager.default.fileExists(atPath: data.appendingPathComponent("media/\(id)").path), "no media recreated")
        XCTAssertEqual(try api(s, "GET", "/videos/\(id)").status, 404)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: data.appendingPathComponent("uploads").path).count, 1, "the next video's only")
    }

    /// SIGTERM to the server while a 720p video is `viewable` (its first rung published, the full
    /// ladder being made), then the server started again: a clean stop does not count, the job
    /// runs again and the video ends `ready` with its whole ladder (as ffprobe reads it).
    func testACleanRestartWhileViewableEndsReady() throws {
        let data = fx.scratch("serve-jobs-restart-viewable")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let id = try upload(s, try fx.clip("serve-jobs-long.mp4", seconds: 30, size: "1280x720"), name: "restarted")
        XCTAssertEqual(try waitFor(s, id, ["viewable", "ready", "error"])["status"] as? String, "viewable")
        let pid = try s.supervisedPID()
        kill(pid, SIGTERM)
        for _ in 0..<400 where kill(pid, 0) == 0 { usleep(50_000) }
        XCTAssertNotEqual(kill(pid, 0), 0, "the server ended on SIGTERM")
        try s.start()
        let v = try waitFor(s, id, ["ready", "error"])
        XCTAssertEqual(v["status"] as? String, "ready", "\(v)")
        let master = try XCTUnwrap(v["hls_url"] as? String)
        let heights = try Run.run(["ffprobe", "-v", "error", "-show_entries", "stream=height", "-of", "csv=p=0", master]).out
        XCTAssertTrue(heights.split(separator: "\n").contains("720"), heights)
    }

    /// The binary the server runs from is replaced on disk while it runs (as an upgrade in place
    /// does): its workers still start (from the running image), and a video is processed.
    func testProcessingGoesOnWhenTheBinaryIsReplaced() throws {
        let folder = fx.scratch("serve-jobs-replaced-binary")
        let copy = folder.appendingPathComponent("clipflow").path
        try FileManager.default.copyItem(atPath: binary, toPath: copy)
        let data = folder.appendingPathComponent("data")
        let s = ServerProcess.clipflowServe(binary: copy, data: data, environment: ["CLIPFLOW_API_KEY": key])
        try s.start()
        defer { s.stop() }
        try FileManager.default.removeItem(atPath: copy)
        try FileManager.default.copyItem(atPath: binary, toPath: copy)
        let id = try upload(s, try fx.clip("serve-jobs-short.mp4", seconds: 4, size: "640x360"), name: "after the upgrade")
        let v = try waitFor(s, id, ["ready", "error"], seconds: 120)
        XCTAssertEqual(v["status"] as? String, "ready", "\(v)")
    }

    /// A DELETE /videos/ID that fails (another upload of the video is stuck writing: its file was
    /// swapped for a FIFO nobody reads, so the write blocks past the server's patience; 423): the
    /// video is left as it was, and its processing goes on to `ready`.
    func testAFailedDeleteLeavesTheVideoToBeProcessed() throws {
        let data = fx.scratch("serve-jobs-delete-fails")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let (id, token) = try newVideo(s, name: "kept")
        let base64 = { (text: String) in Data(text.utf8).base64EncodedString() }
        let second = try HTTP.request(
            "POST", "http://127.0.0.1:\(s.port)/files",
            headers: ["Tus-Resumable": "1.0.0", "Upload-Length": "10", "Upload-Metadata": "video_id \(base64(String(id))),token \(base64(token))"])
        XCTAssertEqual(second.status, 201, second.text)
        let location = try XCTUnwrap(second.header("Location"))
        let uploads = data.appendingPathComponent("uploads")
        let stuck = uploads.appendingPathComponent(try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: uploads.path).first)).path
        try upload(s, try fx.clip("serve-jobs-30s-360p.mp4", seconds: 30, size: "640x360"), video: id, token: token)
        try FileManager.default.removeItem(atPath: stuck)
        try Run.run(["mkfifo", stuck])
        let patch = Process()
        patch.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        patch.arguments = [
            "curl", "-sS", "--max-time", "60", "-o", "/dev/null", "-X", "PATCH", "-H", "Tus-Resumable: 1.0.0", "-H", "Upload-Offset: 0", "-H",
            "Content-Type: application/offset+octet-stream", "--data-binary", "0123456789",
            location.hasPrefix("http") ? location : "http://127.0.0.1:\(s.port)\(location)"
        ]
        try patch.run()
        defer {
            // Whatever happened: a reader lets the blocked write end, and curl with it.
            _ = try? Run.run(["timeout", "10", "cat", stuck], check: false)
            patch.waitUntilExit()
        }
        sleep(1)
        let refused = try api(s, "DELETE", "/videos/\(id)")
        XCTAssertEqual(refused.status, 423, refused.text)
        XCTAssertEqual(try video(s, id)["status"] as? String, "processing", "the failed DELETE came while the video was processed")
        let v = try waitFor(s, id, ["ready", "error"], seconds: 150)
        XCTAssertEqual(v["status"] as? String, "ready", "\(v)")
    }

    /// A processing worker gets the server's environment without its secrets: no CLIPFLOW_API_KEY
    /// in /proc/PID/environ, while PATH is there.
    func testAWorkerDoesNotInheritTheAPIKey() throws {
        let data = fx.scratch("serve-jobs-environment")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let id = try upload(s, try fx.clip("serve-jobs-long.mp4", seconds: 30, size: "1280x720"), name: "environment")
        let worker = try waitForWorker(data, excluding: [])
        let environment = try Data(contentsOf: URL(fileURLWithPath: "/proc/\(worker)/environ")).split(separator: 0).map {
            String(decoding: $0, as: UTF8.self)
        }
        XCTAssertTrue(environment.contains { $0.hasPrefix("PATH=") }, "\(environment)")
        XCTAssertFalse(environment.contains { $0.hasPrefix("CLIPFLOW_API_KEY=") }, "the worker holds the API key")
        XCTAssertFalse(environment.contains { $0.contains(key) }, "the worker holds the API key")
        XCTAssertEqual(try api(s, "DELETE", "/videos/\(id)").status, 204)
    }

    /// Fair turns: client A queues 20 uploads, then client B one, on an API server; a worker
    /// server sharing its PostgreSQL database then takes them, and B's video plays before A's
    /// fifth does (in the order they came, it would wait for all twenty).
    func testOneClientsManyUploadsDoNotHoldBackAnothersOne() throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let data = fx.scratch("serve-jobs-fair")
        let s = server(data, ["--role", "api", "--database", pg.url])
        try s.start()
        defer { s.stop() }
        let clip = try fx.clip(
            "serve-fair.mkv", ["-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-t", "3", "-c:v", "mpeg4", "-q:v", "5"])
        // One process makes and uploads A's twenty at once, then B's one.
        let script = """
            import json, sys, requests
            from concurrent.futures import ThreadPoolExecutor
            from tusclient import client
            base, key, clip = sys.argv[1], sys.argv[2], sys.argv[3]
            auth = {"Authorization": "Bearer " + key}
            def send(client_id):
                v = requests.post(base + "/videos", json={"name": "fair", "client_id": client_id}, headers=auth).json()
                token = requests.get(base + "/videos/%d/upload" % v["id"], headers=auth).json()["token"]
                client.TusClient(base + "/files").uploader(clip, metadata={"video_id": str(v["id"]), "token": token}).upload()
                return v["id"]
            with ThreadPoolExecutor(20) as pool:
                ids = list(pool.map(send, [7] * 20))
            print(json.dumps(ids + [send(8)]))
            """
        let made = try Run.run(["python3", "-c", script, "http://127.0.0.1:\(s.port)", key, clip])
        let ids = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(made.out.utf8)) as? [Int])
        let (a, b) = (Array(ids.prefix(20)), ids[20])
        let worker = server(data, ["--role", "worker", "--database", pg.url])
        try worker.start()
        defer { worker.stop() }
        var playing: [Int] = []
        let deadline = Date().addingTimeInterval(240)
        while !playing.contains(b), Date() < deadline {
            let listed = try XCTUnwrap(try api(s, "GET", "/videos?per_page=100").json() as? [[String: Any]])
            for v in listed where ["viewable", "ready"].contains(v["status"] as? String ?? "") {
                if let id = v["id"] as? Int, !playing.contains(id) { playing.append(id) }
            }
            usleep(50_000)
        }
        let before = playing.prefix { $0 != b }.filter { a.contains($0) }
        XCTAssertTrue(playing.contains(b), "B's video never played")
        XCTAssertLessThan(before.count, 5, "A's videos that played before B's: \(before)")
    }
}
