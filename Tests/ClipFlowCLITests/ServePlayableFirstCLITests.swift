import ClipFlowTestSupport
import Foundation
import XCTest

/// How fast an upload plays, and what its processing costs: a copy of an H.264/AAC upload plays
/// in a browser before its ladder exists, the ladder decodes the upload once (counted in FFmpeg
/// itself) and takes over what the first step made, and a video never waits for another's ladder
/// to become playable.
final class ServePlayableFirstCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "playable-first-test-key"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func server(_ data: URL, _ extra: [String] = [], environment: [String: String] = [:]) -> ServerProcess {
        .clipflowServe(binary: binary, data: data, extra, environment: environment.merging(["CLIPFLOW_API_KEY": key]) { a, _ in a })
    }

    func api(_ s: ServerProcess, _ method: String, _ path: String, json: Any? = nil) throws -> HTTPReply {
        try HTTP.request(method, "http://127.0.0.1:\(s.port)\(path)", headers: ["Authorization": "Bearer \(key)"], json: json)
    }

    func video(_ s: ServerProcess, _ id: Int) throws -> [String: Any] {
        try XCTUnwrap(try api(s, "GET", "/videos/\(id)").json() as? [String: Any])
    }

    /// The spare workers of server `s` waiting for a step: its children named clipflow-spare.
    func spares(_ s: ServerProcess) throws -> [Int32] {
        let server = try s.supervisedPID()
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(server)/task")) ?? []
        let children = tasks.flatMap { task in
            ((try? String(contentsOfFile: "/proc/\(server)/task/\(task)/children", encoding: .utf8)) ?? "").split(separator: " ").compactMap { Int32($0) }
        }
        return children.filter { pid in
            (try? String(contentsOfFile: "/proc/\(pid)/comm", encoding: .utf8))?.trimmingCharacters(in: .whitespacesAndNewlines) == "clipflow-spare"
        }
    }

    func waitForSpare(_ s: ServerProcess, besides old: Set<Int32> = []) throws -> Int32 {
        for _ in 0..<200 {
            if let pid = try spares(s).first(where: { !old.contains($0) }) { return pid }
            usleep(50_000)
        }
        throw ServerError("no spare worker besides \(old.sorted()) within 10 s")
    }

    func renditions(_ v: [String: Any]) -> [String] {
        ((v["renditions"] as? [[String: Any]]) ?? []).filter { $0["status"] as? String == "ready" }.compactMap { $0["name"] as? String }
    }

    /// Polls the video until its status is one of `ends`; returns it and the progress values seen.
    func waitFor(_ s: ServerProcess, _ id: Int, _ ends: Set<String>, seconds: Double = 240) throws -> ([String: Any], [Double]) {
        let deadline = Date().addingTimeInterval(seconds)
        var last: [String: Any] = [:]
        var progress: [Double] = []
        while Date() < deadline {
            last = try video(s, id)
            for r in (last["renditions"] as? [[String: Any]]) ?? [] { if let p = r["progress"] as? Double { progress.append(p) } }
            if ends.contains(last["status"] as? String ?? "") { return (last, progress) }
            usleep(50_000)
        }
        throw ServerError("video \(id) never reached \(ends): \(last)")
    }

    /// A video made by the API, its file uploaded with tuspy; returns its id.
    func upload(_ s: ServerProcess, _ file: String, name: String) throws -> Int {
        let made = try XCTUnwrap(try api(s, "POST", "/videos", json: ["name": name]).json() as? [String: Any])
        let id = try XCTUnwrap(made["id"] as? Int)
        let token = try XCTUnwrap((try api(s, "GET", "/videos/\(id)/upload").json() as? [String: Any])?["token"] as? String)
        let script = """
            import sys
            from tusclient import client
            u = client.TusClient(sys.argv[1]).uploader(sys.argv[2], chunk_size=8 << 20, metadata={"filename": "v.mp4", "video_id": sys.argv[3], "token": sys.argv[4]})
            u.upload()
            """
        try Run.run(["python3", "-c", script, "http://127.0.0.1:\(s.port)/files", file, String(id), token])
        return id
    }

    /// H.264/AAC with a keyframe every second, as clipflow's merges and phones write: copyable.
    /// `rate`: the video's bit rate (as x264 chooses when nil).
    func copyable(_ name: String, seconds: Int, size: String, rate: String? = nil) throws -> String {
        try fx.clip(
            name,
            [
                "-f", "lavfi", "-i", "testsrc2=size=\(size):rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", String(seconds), "-c:v", "libx264",
                "-preset", "ultrafast", "-g", "30", "-pix_fmt", "yuv420p", "-c:a", "aac", "-movflags", "+faststart"
            ] + (rate.map { ["-b:v", $0, "-maxrate", $0, "-bufsize", $0] } ?? []))
    }

    /// The copy is published first and plays in chromium while the ladder is still being made;
    /// the ladder that follows lints clean and plays, takes the copy's audio as it is (one file,
    /// two names) and, as the upload fits the top rung (a phone's bit rate), the copy as that rung
    /// (1080p is not encoded); the copy stays for players in the middle of it. Progress never goes
    /// back.
    func testACopyPlaysBeforeTheLadderExists() throws {
        let data = fx.scratch("serve-playable-copy")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        // The copy runs in the worker started before it was needed, which a new spare replaces.
        let spare = try waitForSpare(s)
        let id = try upload(s, try copyable("serve-playable-copy.mp4", seconds: 12, size: "1920x1080", rate: "8M"), name: "copied first")
        let (viewable, _) = try waitFor(s, id, ["viewable", "ready", "error"], seconds: 60)
        XCTAssertEqual(viewable["status"] as? String, "viewable", "\(viewable)")
        XCTAssertEqual(renditions(viewable), ["copy"])
        XCTAssertEqual(kill(spare, 0), -1, "the spare took the copy and ended with it")
        let next = try waitForSpare(s, besides: [spare])
        XCTAssertEqual(try spares(s), [next], "one spare")
        let first = try XCTUnwrap(viewable["hls_url"] as? String)
        XCTAssertEqual(try Run.run([binary, "hls", "lint", first], check: false).status, 0)
        let played = try XCTUnwrap(try Probe.browserPlayback([first], options: ["--rate", "8"]).first)
        XCTAssertEqual(played["ended"] as? Bool, true, "\(played)")
        XCTAssertEqual(played["width"] as? Int, 1920, "\(played)")
        XCTAssertTrue((played["segments"] as? [String] ?? []).allSatisfy { $0.contains("copy") }, "\(played)")
        XCTAssertEqual(try video(s, id)["status"] as? String, "viewable", "the copy played before the ladder was done")

        let (ready, progress) = try waitFor(s, id, ["ready", "error"])
        XCTAssertEqual(ready["status"] as? String, "ready", "\(ready)")
        XCTAssertEqual(Set(renditions(ready)), ["copy", "720p", "540p", "360p"])
        XCTAssertEqual(progress, progress.sorted(), "progress only moves forward")
        XCTAssertGreaterThan(progress.count, 1)
        let full = try XCTUnwrap(ready["hls_url"] as? String)
        XCTAssertNotEqual(full, first)
        XCTAssertEqual(try Run.run([binary, "hls", "lint", full], check: false).status, 0)
        let master = try HTTP.request("GET", full).text
        XCTAssertTrue(master.contains("RESOLUTION=1920x1080,FRAME-RATE=30.000,AUDIO=\"audio\"\ncopy.m3u8\n"), master)
        XCTAssertFalse(master.contains("1080p.m3u8"), master)
        let again = try XCTUnwrap(try Probe.browserPlayback([full], options: ["--rate", "8"]).first)
        XCTAssertEqual(again["ended"] as? Bool, true, "\(again)")
        XCTAssertEqual(try HTTP.request("GET", first).status, 200, "the superseded copy is still served")
        let media = data.appendingPathComponent("media/\(id)")
        let folders = try FileManager.default.contentsOfDirectory(atPath: media.path).sorted()
        let fullFolder = try XCTUnwrap(folders.first { $0.hasSuffix("-full") }), copyFolder = try XCTUnwrap(folders.first { $0.hasSuffix("-copy") })
        let shared = try FileManager.default.attributesOfItem(atPath: media.appendingPathComponent("\(fullFolder)/audio/init.mp4").path)
        XCTAssertEqual((shared[.referenceCount] as? Int) ?? 0, 2, "the ladder's audio is the copy's file")
        let top = try FileManager.default.attributesOfItem(atPath: media.appendingPathComponent("\(fullFolder)/copy/seg-1.m4s").path)
        XCTAssertEqual((top[.referenceCount] as? Int) ?? 0, 2, "the ladder's top rung is the copy's file")
        XCTAssertTrue(FileManager.default.fileExists(atPath: media.appendingPathComponent("\(copyFolder)/master.m3u8").path))
        // The seek preview comes with the ladder (from its smallest rung), not with the copy,
        // which publishes without decoding a picture per segment.
        XCTAssertFalse(FileManager.default.fileExists(atPath: media.appendingPathComponent("\(copyFolder)/storyboard.vtt").path))
        XCTAssertTrue(FileManager.default.fileExists(atPath: media.appendingPathComponent("\(fullFolder)/storyboard.vtt").path))
        let feed = try XCTUnwrap(try api(s, "GET", "/feed.json").json() as? [String: Any])
        let entry = try XCTUnwrap((feed["videos"] as? [[String: Any]])?.first)
        XCTAssertTrue((entry["storyboard"] as? String ?? "").hasSuffix("\(fullFolder)/storyboard.vtt"), "\(entry)")
        // The spare ends with the server.
        let waiting = try waitForSpare(s)
        s.stop()
        for _ in 0..<100 where kill(waiting, 0) == 0 { usleep(50_000) }
        XCTAssertEqual(kill(waiting, 0), -1, "the spare ended with its server")
    }

    /// The reference flow's upload: fragments joined turned 90 degrees by `clipflow merge` (a
    /// phone's portrait video). Its copy carries the turn: chromium shows it portrait.
    func testATurnedMergeIsCopiedAndShownTurned() throws {
        let data = fx.scratch("serve-playable-turned")
        let s = server(data)
        try s.start()
        defer { s.stop() }
        let turned = fx.scratch("serve-playable-turned-src").appendingPathComponent("turned.mp4").path
        try? FileManager.default.removeItem(atPath: turned)
        try Run.run([binary, "merge", try copyable("serve-playable-turned.mp4", seconds: 6, size: "1280x720"), "--rotate", "90", "--output", turned, "--quiet"])
        let id = try upload(s, turned, name: "portrait")
        let (viewable, _) = try waitFor(s, id, ["viewable", "ready", "error"], seconds: 60)
        XCTAssertEqual(renditions(viewable), ["copy"], "\(viewable)")
        let first = try XCTUnwrap(viewable["hls_url"] as? String)
        let played = try XCTUnwrap(try Probe.browserPlayback([first], options: ["--rate", "4"]).first)
        XCTAssertEqual(played["ended"] as? Bool, true, "\(played)")
        XCTAssertEqual(played["width"] as? Int, 720, "shown turned: \(played)")
        XCTAssertEqual(played["height"] as? Int, 1280, "shown turned: \(played)")
        let initSegment = try HTTP.request("GET", first.replacingOccurrences(of: "master.m3u8", with: "copy/init.mp4")).body
        let file = fx.scratch("serve-playable-turned-src").appendingPathComponent("init.mp4")
        try initSegment.write(to: file)
        let rotation = try Run.run(["ffprobe", "-v", "error", "-show_entries", "stream_side_data=rotation", "-of", "csv=p=0", file.path]).out
        XCTAssertEqual(rotation.trimmingCharacters(in: .whitespacesAndNewlines), "-90", "ffprobe reads the turn from the copy's init segment")
        let (ready, _) = try waitFor(s, id, ["ready", "error"])
        XCTAssertEqual(Set(renditions(ready)), ["720p", "540p", "360p"], "\(ready)")
    }

    /// Decoded pictures counted inside FFmpeg (a preloaded wrapper of avcodec_receive_frame, in the
    /// server and every worker): a copyable upload is decoded once, for its ladder; one that is
    /// not (HEVC) is decoded for its smallest rung and once more for the other rungs, and the
    /// ladder takes the smallest rung's files as they are.
    func testOneDecodePerUpload() throws {
        let scratch = fx.scratch("serve-playable-decodes")
        let preload = scratch.appendingPathComponent("decoded_frames.so").path
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        let cflags = try Run.run(["pkg-config", "--cflags", "libavcodec"]).out.split(separator: " ").map {
            String($0).trimmingCharacters(in: .whitespacesAndNewlines)
        }
        try Run.run(
            ["gcc", "-shared", "-fPIC", "-O1", "-o", preload, root.appendingPathComponent("Servers/decoded_frames.c").path] + cflags.filter { !$0.isEmpty }
                + ["-ldl"])
        let log = scratch.appendingPathComponent("decoded.log")
        let data = scratch.appendingPathComponent("data")
        let s = server(data, environment: ["LD_PRELOAD": preload, "DECODED_FRAMES_LOG": log.path])
        try s.start()
        defer { s.stop() }
        func decoded() -> Int { ((try? FileManager.default.attributesOfItem(atPath: log.path)[.size] as? Int) ?? nil) ?? 0 }

        let frames = 12 * 30
        let h264 = try upload(s, try copyable("serve-playable-decodes.mp4", seconds: 12, size: "1280x720"), name: "h264")
        XCTAssertEqual(try waitFor(s, h264, ["ready", "error"]).0["status"] as? String, "ready")
        let once = decoded()
        XCTAssertGreaterThanOrEqual(once, frames, "the ladder decoded every picture")
        XCTAssertLessThan(once, frames + frames / 10, "one decode (a probe may decode a few pictures)")

        let hevc = try fx.clip(
            "serve-playable-decodes-hevc.mov",
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "12", "-c:v", "libx265", "-preset",
                "ultrafast", "-x265-params", "log-level=error:keyint=30", "-tag:v", "hvc1", "-c:a", "aac"
            ])
        let other = try upload(s, hevc, name: "hevc")
        let (first, _) = try waitFor(s, other, ["viewable", "ready", "error"])
        XCTAssertEqual(renditions(first), ["360p"], "not copyable: the smallest rung first")
        let (ready, _) = try waitFor(s, other, ["ready", "error"])
        XCTAssertEqual(ready["status"] as? String, "ready", "\(ready)")
        let twice = decoded() - once
        XCTAssertGreaterThanOrEqual(twice, 2 * frames)
        XCTAssertLessThan(twice, 2 * frames + frames / 10, "the smallest rung's decode, then the other rungs' one")
        let media = data.appendingPathComponent("media/\(other)")
        let full = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: media.path).first { $0.hasSuffix("-full") })
        let smallest = try FileManager.default.attributesOfItem(atPath: media.appendingPathComponent("\(full)/360p/init.mp4").path)
        XCTAssertEqual((smallest[.referenceCount] as? Int) ?? 0, 2, "the ladder's 360p is the first step's file")
        let heights = try Run.run(["ffprobe", "-v", "error", "-show_entries", "stream=height", "-of", "csv=p=0", try XCTUnwrap(ready["hls_url"] as? String)])
        XCTAssertEqual(Set(heights.out.split(separator: "\n").map(String.init)).intersection(["720", "540", "360"]).count, 3, heights.out)
    }

    /// One worker, three uploads back to back: each becomes playable while the first one's ladder
    /// is still being made (a playable step never waits for a ladder), and that ladder's worker
    /// runs at a lower CPU priority (nice 10 and the idle policy, every thread) than the server. Deleted while their
    /// ladders are made or queued, they leave no worker running and no folder.
    func testAVideoNeverWaitsForAnothersLadderToPlay() throws {
        let data = fx.scratch("serve-playable-queue")
        let s = server(data, ["--workers", "1"])
        try s.start()
        defer { s.stop() }
        let file = try copyable("serve-playable-queue.mp4", seconds: 20, size: "1280x720")
        let ids = try (0..<3).map { try upload(s, file, name: "queued \($0)") }
        for id in ids {
            let (v, _) = try waitFor(s, id, ["viewable", "ready", "error"], seconds: 60)
            XCTAssertEqual(v["status"] as? String, "viewable", "\(v)")
        }
        XCTAssertEqual(try video(s, ids[0])["status"] as? String, "viewable", "all three play before the first ladder is done")
        let ladder = try Run.run(["pgrep", "-f", "serve-worker \(data.path)/media/[0-9]+/\\.a.*-full\\.json"], check: false).out
        let ladderPID = try XCTUnwrap(Int32(ladder.split(separator: "\n").first ?? ""), "a ladder worker runs: \(ladder)")
        // A thread the worker starts runs at most 0.25 s before it is put at nice 10, idle.
        var (ladderNice, ladderPolicies) = (threadNiceValues(ladderPID), threadPolicies(ladderPID))
        for _ in 0..<10 where Set(ladderNice) != [10] || Set(ladderPolicies) != [5] {
            usleep(100_000)
            (ladderNice, ladderPolicies) = (threadNiceValues(ladderPID), threadPolicies(ladderPID))
        }
        XCTAssertGreaterThan(ladderNice.count, 2, "the ladder worker's threads")
        XCTAssertEqual(Set(ladderNice), [10], "every thread of the ladder worker at nice 10")
        XCTAssertEqual(Set(ladderPolicies), [5], "every thread of the ladder worker under SCHED_IDLE")
        // The server's own threads keep their priorities (libdispatch sets some by QoS, within a
        // few steps of 0) and the normal policy.
        let serverNice = threadNiceValues(try s.supervisedPID())
        XCTAssertTrue(serverNice.allSatisfy { $0 < 10 }, "the server's threads: \(serverNice)")
        XCTAssertEqual(Set(threadPolicies(try s.supervisedPID())), [0], "the server's threads keep the normal policy")
        for id in ids { XCTAssertEqual(try api(s, "DELETE", "/videos/\(id)").status, 204) }
        let workers = try Run.run(["pgrep", "-f", "serve-worker \(data.path)/"], check: false)
        XCTAssertEqual(workers.out, "", "no worker left")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: data.appendingPathComponent("media").path), [], "no folder left")
        for id in ids { XCTAssertEqual(try api(s, "GET", "/videos/\(id)").status, 404) }
    }

    /// The nice value of each thread of process `pid` (field 19 of /proc/PID/task/TID/stat).
    private func threadNiceValues(_ pid: Int32) -> [Int] { threadStatField(pid, 19) }

    /// The scheduling policy of each thread of process `pid` (field 41: 0 normal, 5 idle).
    private func threadPolicies(_ pid: Int32) -> [Int] { threadStatField(pid, 41) }

    /// Field `n` (counted from 1, as proc(5) does) of each thread's /proc/PID/task/TID/stat.
    private func threadStatField(_ pid: Int32, _ n: Int) -> [Int] {
        let tasks = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return tasks.compactMap { tid in
            guard let stat = try? String(contentsOfFile: "/proc/\(pid)/task/\(tid)/stat", encoding: .utf8),
                let close = stat.lastIndex(of: ")")
            else { return nil }
            // After the name (field 2) comes field 3.
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            return fields.count > n - 3 ? Int(fields[n - 3]) : nil
        }
    }
}
