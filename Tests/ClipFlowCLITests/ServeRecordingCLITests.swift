import ClipFlowTestSupport
import Foundation
import XCTest

/// Publishing while recording: `clipflow record --publish` against a real `clipflow serve`. The
/// live playlists grow while the test pattern records and decode (ffmpeg); the video plays from
/// its start within a second of its last fragment; the merged MP4 holds every picture and sound
/// sample of the fragments (ffprobe, ffmpeg); a recorder killed mid-recording leaves a video of
/// the fragments it closed; a link that drops mid-recording loses and duplicates nothing.
final class ServeRecordingCLITests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func get(_ port: Int, _ path: String) throws -> HTTPReply { try HTTP.request("GET", "http://127.0.0.1:\(port)\(path)") }

    func video(_ port: Int, _ id: Int) throws -> [String: Any] { try XCTUnwrap(try get(port, "/videos/\(id)").json() as? [String: Any]) }

    func waitFor(_ what: String, seconds: Double = 60, _ check: () throws -> Bool) throws {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if (try? check()) == true { return }
            usleep(50_000)
        }
        XCTFail("never: \(what)")
        throw ServerError("never: \(what)")
    }

    /// `record` of the test pattern (1 s fragments, 320x240 with sound) publishing on `url`,
    /// started in the background.
    func recorder(_ dir: String, seconds: Int, url: String, clock: Bool = false) throws -> (Process, Pipe) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments =
            ["record", "-o", dir, "--size", "320x240", "--duration", String(seconds), "--segment", "1", "--publish", url] + (clock ? ["--clock"] : [])
        let err = Pipe()
        p.standardError = err
        p.standardOutput = FileHandle.nullDevice
        p.standardInput = FileHandle.nullDevice
        try p.run()
        return (p, err)
    }

    /// Uploads `file` with tuspy (another TUS client) and `metadata`: "stored", or "refused STATUS".
    func tuspy(_ port: Int, _ file: String, _ metadata: [String: String]) throws -> String {
        let script = """
            import json, sys
            from tusclient import client
            from tusclient.exceptions import TusCommunicationError
            u = client.TusClient(sys.argv[1]).uploader(sys.argv[2], metadata=json.loads(sys.argv[3]))
            try:
                u.upload()
                print("stored")
            except TusCommunicationError as e:
                print("refused", e.status_code)
            """
        let meta = String(decoding: try JSONSerialization.data(withJSONObject: metadata), as: UTF8.self)
        return try Run.run(["python3", "-c", script, "http://127.0.0.1:\(port)/files", file, meta]).out.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    func uploadToken(_ port: Int, _ id: Int) throws -> String {
        try XCTUnwrap((try get(port, "/videos/\(id)/upload").json() as? [String: Any])?["token"] as? String)
    }

    /// The presentation times of the live video's pictures (ffprobe over its playlist).
    func liveTimes(_ port: Int, video: Int = 1) throws -> [Double] {
        try Run.run([
            "ffprobe", "-v", "error", "-select_streams", "v", "-show_entries", "packet=pts_time", "-of", "csv=p=0",
            "http://127.0.0.1:\(port)/media/\(video)/live/copy.m3u8"
        ]).out.split(separator: "\n").compactMap { Double($0) }
    }

    /// The live video holds each fragment in `dir` (a segment each) and each of their pictures
    /// once (no picture lost, none twice).
    func assertEveryPictureOnce(_ port: Int, _ dir: String, file: StaticString = #filePath, line: UInt = #line) throws {
        let clips = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasPrefix("clip-") && $0.hasSuffix(".mp4") }
        let pictures = try clips.map { try counts(dir + "/" + $0).pictures }.reduce(0, +)
        XCTAssertEqual(segments(try get(port, "/media/1/live/copy.m3u8").text), clips.count, file: file, line: line)
        let times = try liveTimes(port)
        XCTAssertEqual(times.count, pictures, "every picture once", file: file, line: line)
        XCTAssertEqual(Set(times).count, times.count, "no picture twice", file: file, line: line)
    }

    func segments(_ playlist: String) -> Int { playlist.split(separator: "\n").filter { $0.hasPrefix("#EXTINF") }.count }

    /// Pictures and decoded sound samples of a file (ffprobe, ffmpeg).
    func counts(_ file: String) throws -> (pictures: Int, samples: Int) {
        let probe = try Run.run([
            "ffprobe", "-v", "error", "-count_frames", "-select_streams", "v", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", file
        ])
        let pcm = try Run.run(["ffmpeg", "-v", "error", "-i", file, "-map", "0:a", "-f", "s16le", "-ac", "1", "-"])
        return (Int(probe.out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1, pcm.stdout.count / 2)
    }

    /// The server's log line of the recording becoming viewable: seconds after its last
    /// fragment's last byte.
    func viewableSeconds(_ s: ServerProcess) throws -> Double? {
        let log = try String(contentsOf: s.stderrURL, encoding: .utf8)
        let line = log.split(separator: "\n").last { $0.contains("phase=live") && $0.contains("status=viewable") }
        return line?.split(separator: " ").first { $0.hasPrefix("seconds=") }.flatMap { Double($0.dropFirst(8)) }
    }

    func testRecordingPlaysLiveAndIsInTheFeedAsItStops() throws {
        let data = fx.scratch("serve-recording")
        let s = ServerProcess.clipflowServe(binary: binary, data: data)
        try s.start()
        defer { s.stop() }
        let dir = fx.scratch("serve-recording-clips").path
        let (p, err) = try recorder(dir, seconds: 20, url: "http://127.0.0.1:\(s.port)")
        var live = ""
        try waitFor("the live playlist", seconds: 20) {
            live = try get(s.port, "/media/1/live/copy.m3u8").text
            return segments(live) >= 2
        }
        XCTAssertTrue(live.contains("#EXT-X-PLAYLIST-TYPE:EVENT"), live)
        XCTAssertFalse(live.contains("#EXT-X-ENDLIST"), live)
        XCTAssertEqual(try video(s.port, 1)["status"] as? String, "recording")
        let feed = try XCTUnwrap(try get(s.port, "/feed.json").json() as? [String: Any])
        XCTAssertEqual((feed["videos"] as? [[String: Any]])?.first?["status"] as? String, "recording")
        // The live video decodes as it stands (ffmpeg reads the EVENT playlist once).
        let decode = try Run.run(["ffmpeg", "-v", "error", "-i", "http://127.0.0.1:\(s.port)/media/1/live/master.m3u8", "-f", "null", "-"], check: false)
        XCTAssertEqual(decode.status, 0, decode.stderr)
        XCTAssertEqual(decode.stderr, "")
        let before = segments(live)
        try waitFor("the live playlist growing", seconds: 10) { segments(try get(s.port, "/media/1/live/copy.m3u8").text) > before }
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, said)
        XCTAssertTrue(said.contains("published 20 fragments as video 1"), said)
        try waitFor("viewable", seconds: 10) { ["viewable", "ready"].contains(try video(s.port, 1)["status"] as? String) }
        let seconds = try XCTUnwrap(try viewableSeconds(s))
        XCTAssertLessThan(seconds, 1, "from the last fragment's last byte to playable")
        let closed = try get(s.port, "/media/1/live/copy.m3u8").text
        XCTAssertTrue(closed.hasSuffix("#EXT-X-ENDLIST\n"), closed)
        XCTAssertEqual(segments(closed), 20)
        // The whole live video: every picture of the fragments, timestamps continuous.
        let clips = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".mp4") }.sorted().map { dir + "/" + $0 }
        XCTAssertEqual(clips.count, 20)
        let pictures = try clips.map { try counts($0).pictures }.reduce(0, +)
        // The sound samples the recorder put in the fragments, as it says (a decoder also
        // outputs the padding of each fragment's last AAC frame).
        let samples = said.split(separator: "\n").compactMap { line -> Int? in
            guard line.hasSuffix(" audio samples") else { return nil }
            return line.split(separator: " ").dropLast(2).last.flatMap { Int($0) }
        }.reduce(0, +)
        XCTAssertEqual(samples, 20 * 48000, said)
        let times = try liveTimes(s.port)
        XCTAssertEqual(times.count, pictures)
        XCTAssertEqual(zip(times, times.dropFirst()).filter { $0.1 <= $0.0 }.count, 0, "the fragments' timelines follow each other")
        XCTAssertEqual(times.last ?? 0, 20 - 1.0 / 30, accuracy: 0.01, "the fragments' timelines follow each other")
        // The merged MP4 (the video's upload): every picture and sound sample.
        try waitFor("ready", seconds: 120) { try video(s.port, 1)["status"] as? String == "ready" }
        // The served MP4 (the video's download: the merged fragments).
        let download = try get(s.port, "/videos/1/download")
        XCTAssertEqual(download.status, 200)
        XCTAssertEqual(download.headers.first { $0.key.lowercased() == "content-type" }?.value, "video/mp4")
        let mp4 = data.appendingPathComponent("downloaded.mp4").path
        try download.body.write(to: URL(fileURLWithPath: mp4))
        let whole = try counts(mp4)
        XCTAssertEqual(whole.pictures, pictures)
        // Every sample, but the merge ends its sound on a whole AAC frame (it drops the last
        // frame's part past the pictures' end rather than trimming it): under 1024 short.
        XCTAssertTrue((0..<1024).contains(samples - whole.samples), "\(whole.samples) of \(samples) samples")
        let feedAfter = try XCTUnwrap(try get(s.port, "/feed.json").json() as? [String: Any])
        XCTAssertEqual((feedAfter["videos"] as? [Any])?.count, 1)
    }

    /// chromium on the feed page: the recording plays with its LIVE mark, near its live edge (the
    /// clock burned into each picture, read from what is presented), and the mark goes when it ends.
    func testTheFeedPlaysARecordingLiveWithItsMark() throws {
        let s = ServerProcess.clipflowServe(binary: binary, data: fx.scratch("serve-recording-feed"))
        try s.start()
        defer { s.stop() }
        let dir = fx.scratch("serve-recording-feed-clips").path
        let (p, _) = try recorder(dir, seconds: 8, url: "http://127.0.0.1:\(s.port)", clock: true)
        defer { p.waitUntilExit() }
        try waitFor("the first fragment live", seconds: 20) { segments(try get(s.port, "/media/1/live/copy.m3u8").text) >= 1 }
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let r = try Run.run(
            ["python3", root.appendingPathComponent("scripts/live-measure").path, "http://127.0.0.1:\(s.port)", "--seconds", "4", "--until-ended", "40"],
            check: false)
        let seen = try XCTUnwrap(try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any], r.stderr)
        XCTAssertEqual(r.status, 0, "\(seen)")
        XCTAssertEqual(seen["playing"] as? Bool, true, "\(seen)")
        XCTAssertEqual(seen["live_mark"] as? Bool, true, "\(seen)")
        XCTAssertEqual(seen["ended"] as? Bool, true, "the LIVE mark goes when the recording ends: \(seen)")
        XCTAssertEqual((seen["errors"] as? [Any])?.count, 0, "\(seen)")
        // Behind the camera by less than a few fragments (benchmarks/live measures it unloaded).
        let p50 = try XCTUnwrap(seen["p50_ms"] as? Double, "\(seen)")
        XCTAssertGreaterThan(p50, 0)
        XCTAssertLessThan(p50, 6000, "\(seen)")
    }

    func testKilledRecorderLeavesItsFragmentsAndAFragmentIsStoredOnce() throws {
        let data = fx.scratch("serve-recording-killed")
        let s = ServerProcess.clipflowServe(binary: binary, data: data, ["--recording-timeout", "2"])
        try s.start()
        defer { s.stop() }
        let dir = fx.scratch("serve-recording-killed-clips").path
        let (p, _) = try recorder(dir, seconds: 30, url: "http://127.0.0.1:\(s.port)")
        try waitFor("three fragments live", seconds: 20) { segments(try get(s.port, "/media/1/live/copy.m3u8").text) >= 3 }
        // Fragment 0 again, by another TUS client (tuspy), as after a lost answer: taken, and
        // stored once.
        let first = try XCTUnwrap(try FileManager.default.contentsOfDirectory(atPath: dir).sorted().first { $0.hasPrefix("clip-") && $0.hasSuffix(".mp4") })
        let bytes = try Data(contentsOf: URL(fileURLWithPath: dir + "/" + first))
        let again = try tuspy(s.port, dir + "/" + first, ["filename": first, "video_id": "1", "token": try uploadToken(s.port, 1), "fragment": "0"])
        XCTAssertEqual(again, "stored")
        let uploads = data.appendingPathComponent("uploads")
        try waitFor("fragment 0 stored once", seconds: 15) {
            try FileManager.default.contentsOfDirectory(atPath: uploads.path).filter {
                (try? Data(contentsOf: uploads.appendingPathComponent($0))) == bytes
            }.count == 1
        }
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        let live = segments(try get(s.port, "/media/1/live/copy.m3u8").text)
        try waitFor("ended by the timeout", seconds: 30) { ["viewable", "ready"].contains(try video(s.port, 1)["status"] as? String) }
        let closed = try get(s.port, "/media/1/live/copy.m3u8").text
        XCTAssertTrue(closed.hasSuffix("#EXT-X-ENDLIST\n"), closed)
        XCTAssertGreaterThanOrEqual(segments(closed), live)
        let decode = try Run.run(["ffmpeg", "-v", "error", "-i", "http://127.0.0.1:\(s.port)/media/1/live/master.m3u8", "-f", "null", "-"], check: false)
        XCTAssertEqual(decode.status, 0, decode.stderr)
        XCTAssertEqual(decode.stderr, "")
        // The merge of what closed: as many pictures as the live video.
        let livePictures = try Run.run([
            "ffprobe", "-v", "error", "-select_streams", "v", "-count_packets", "-show_entries", "stream=nb_read_packets", "-of", "csv=p=0",
            "http://127.0.0.1:\(s.port)/media/1/live/copy.m3u8"
        ]).out.trimmingCharacters(in: .whitespacesAndNewlines)
        try waitFor("ready", seconds: 120) { try video(s.port, 1)["status"] as? String == "ready" }
        let download = try get(s.port, "/videos/1/download")
        XCTAssertEqual(download.status, 200)
        let mp4 = data.appendingPathComponent("downloaded.mp4")
        try download.body.write(to: mp4)
        XCTAssertEqual(try counts(mp4.path).pictures, Int(livePictures.split(separator: "\n").first ?? ""), livePictures)
    }

    func testALinkDownForTwentySecondsLosesAndDuplicatesNothing() throws {
        let data = fx.scratch("serve-recording-link")
        let s = ServerProcess.clipflowServe(binary: binary, data: data)
        try s.start()
        defer { s.stop() }
        let proxy = try FaultProxy.start(upstream: "http://127.0.0.1:\(s.port)")
        defer { proxy.stop() }
        let dir = fx.scratch("serve-recording-link-clips").path
        let (p, err) = try recorder(dir, seconds: 8, url: proxy.url)
        try waitFor("two fragments live", seconds: 20) { segments(try get(s.port, "/media/1/live/copy.m3u8").text) >= 2 }
        // Every connection through the proxy is cut at once, as a dropped link cuts it.
        try proxy.setRules([["action": "cut", "after_bytes": 0, "times": -1]])
        let down = Date()
        Thread.sleep(forTimeInterval: 20)
        try proxy.setRules([])
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, said)
        XCTAssertGreaterThan(Date().timeIntervalSince(down), 20)
        XCTAssertGreaterThan(try proxy.stats().faultsApplied, 0, "the link was down")
        try waitFor("viewable", seconds: 20) { ["viewable", "ready"].contains(try video(s.port, 1)["status"] as? String) }
        try assertEveryPictureOnce(s.port, dir)
    }

    /// The server killed (SIGKILL) mid-recording and started again: the recorder's uploads go on
    /// where they were, and the video has every fragment once.
    func testAServerKilledMidRecordingLosesNothing() throws {
        let s = ServerProcess.clipflowServe(binary: binary, data: fx.scratch("serve-recording-restart"))
        try s.start()
        defer { s.stop() }
        let dir = fx.scratch("serve-recording-restart-clips").path
        let (p, err) = try recorder(dir, seconds: 10, url: "http://127.0.0.1:\(s.port)")
        try waitFor("three fragments live", seconds: 20) { segments(try get(s.port, "/media/1/live/copy.m3u8").text) >= 3 }
        let pid = try s.supervisedPID()
        kill(pid, SIGKILL)
        for _ in 0..<200 where kill(pid, 0) == 0 { usleep(50_000) }
        Thread.sleep(forTimeInterval: 2)
        try s.start()
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, said)
        try waitFor("viewable", seconds: 30) { ["viewable", "ready"].contains(try video(s.port, 1)["status"] as? String) }
        try assertEveryPictureOnce(s.port, dir)
    }

    /// Fragments made by the ffmpeg CLI (a `-c copy` cut of an MKV, a MOV, an MP4), sent by tuspy
    /// out of order, the last from another camera (another picture size): appended in index order, the changed one after a discontinuity
    /// with its own init section (ffmpeg decodes the whole), and conformed in the merged MP4.
    func testFragmentsFromAnotherToolThatChangeCameraAreJoined() throws {
        let s = ServerProcess.clipflowServe(binary: binary, data: fx.scratch("serve-recording-other"))
        try s.start()
        defer { s.stop() }
        let made = try XCTUnwrap(
            try HTTP.request("POST", "http://127.0.0.1:\(s.port)/videos", json: ["name": "camera change", "recording": true]).json() as? [String: Any])
        let id = try XCTUnwrap(made["id"] as? Int)
        XCTAssertEqual(made["status"] as? String, "recording")
        let dir = fx.scratch("serve-recording-other-clips")
        var files: [String] = []
        // Fragment 0: a `-c copy` cut of an MKV; fragment 1: a phone-style MOV; fragment 2: MP4
        // from another camera.
        func encode(_ size: String, seconds: Int, into f: String, _ extra: [String] = []) throws {
            try Run.run(
                [
                    "ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=\(size):rate=30", "-f", "lavfi", "-i", "sine=f=440:r=48000", "-t",
                    String(seconds), "-c:v", "libx264", "-g", "30", "-pix_fmt", "yuv420p", "-c:a", "aac"
                ] + extra + [f])
        }
        let mkv = dir.appendingPathComponent("source.mkv").path
        try encode("320x240", seconds: 3, into: mkv)
        files.append(dir.appendingPathComponent("part0.mp4").path)
        try Run.run(["ffmpeg", "-v", "error", "-y", "-ss", "1", "-i", mkv, "-t", "1", "-c", "copy", files[0]])
        files.append(dir.appendingPathComponent("part1.mov").path)
        try encode("320x240", seconds: 1, into: files[1], ["-f", "mov"])
        files.append(dir.appendingPathComponent("part2.mp4").path)
        try encode("480x360", seconds: 1, into: files[2])
        let token = try uploadToken(s.port, id)
        func send(_ i: Int) throws -> String {
            try tuspy(s.port, files[i], ["filename": "part\(i).mp4", "video_id": String(id), "token": token, "fragment": String(i)])
        }
        XCTAssertEqual(try send(1), "stored")
        Thread.sleep(forTimeInterval: 1)
        XCTAssertEqual(try get(s.port, "/media/\(id)/live/copy.m3u8").status, 404, "fragment 1 waits for fragment 0")
        XCTAssertEqual(try send(0), "stored")
        try waitFor("two fragments live", seconds: 20) { try get(s.port, "/media/\(id)/live/f00001/master.m3u8").status == 200 }
        let early = try HTTP.request("POST", "http://127.0.0.1:\(s.port)/videos/\(id)/end", json: ["fragments": 1])
        XCTAssertEqual(early.status, 409, "two fragments play already: \(early.text)")
        XCTAssertEqual(try send(2), "stored")
        XCTAssertEqual(
            try tuspy(s.port, files[0], ["filename": "x.mp4", "video_id": String(id), "token": token, "fragment": "zero"]), "refused 400")
        let ended = try HTTP.request("POST", "http://127.0.0.1:\(s.port)/videos/\(id)/end", json: ["fragments": 3])
        XCTAssertEqual(ended.status, 202, ended.text)
        XCTAssertEqual(try HTTP.request("POST", "http://127.0.0.1:\(s.port)/videos/\(id)/end", json: ["fragments": 4]).status, 409)
        try waitFor("viewable", seconds: 30) { ["viewable", "ready"].contains(try video(s.port, id)["status"] as? String) }
        let live = try get(s.port, "/media/\(id)/live/copy.m3u8").text
        // The camera change starts after a discontinuity with its own init section (the MOV's
        // sample description differs from the MKV cut's too: one more there, harmless).
        XCTAssertTrue(live.contains("#EXT-X-DISCONTINUITY\n#EXT-X-MAP:URI=\"f00002/copy/init.mp4\""), live)
        XCTAssertTrue(live.hasSuffix("#EXT-X-ENDLIST\n"), live)
        let decode = try Run.run(
            ["ffmpeg", "-v", "error", "-i", "http://127.0.0.1:\(s.port)/media/\(id)/live/master.m3u8", "-f", "null", "-"], check: false)
        XCTAssertEqual(decode.status, 0, decode.stderr)
        XCTAssertEqual(try tuspy(s.port, files[0], ["filename": "x.mp4", "video_id": String(id), "token": token, "fragment": "3"]), "refused 409")
        try waitFor("ready", seconds: 120) { try video(s.port, id)["status"] as? String == "ready" }
        let v = try video(s.port, id)
        // About 3 s: the MKV cut's video runs 1.19 s (it carries the pictures before its cut).
        XCTAssertEqual(v["duration"] as? Double ?? 0, 3.1, accuracy: 0.15, "\(v)")
        let master = try XCTUnwrap(v["hls_url"] as? String)
        let whole = try Run.run(["ffmpeg", "-v", "error", "-i", master, "-f", "null", "-"], check: false)
        XCTAssertEqual(whole.stderr, "")
    }

    /// The answer to a fragment's creation is lost (the server made the upload, the recorder
    /// never heard): the recorder sends it again, the server stores it once, and the recording
    /// is whole (it is never deleted for a fragment's failure).
    func testALostAnswerSendsAFragmentAgainAndItIsStoredOnce() throws {
        let s = ServerProcess.clipflowServe(binary: binary, data: fx.scratch("serve-recording-lost"))
        try s.start()
        defer { s.stop() }
        let proxy = try FaultProxy.start(upstream: "http://127.0.0.1:\(s.port)")
        defer { proxy.stop() }
        try proxy.setRules([["method": "POST", "path_contains": "/upload", "skip": 1, "times": 1, "action": "drop_response"]])
        let dir = fx.scratch("serve-recording-lost-clips").path
        let (p, err) = try recorder(dir, seconds: 4, url: proxy.url)
        let said = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 0, said)
        XCTAssertEqual(try proxy.stats().faultsApplied, 1, "one creation's answer was lost")
        try waitFor("viewable", seconds: 30) { ["viewable", "ready"].contains(try video(s.port, 1)["status"] as? String) }
        try assertEveryPictureOnce(s.port, dir)
    }
}
