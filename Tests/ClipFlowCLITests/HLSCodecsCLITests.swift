import XCTest
import Foundation
import ClipFlowTestSupport

/// `--codecs h264,av1`: AV1 rungs beside the H.264 ladder, judged by ffprobe/ffmpeg and chromium,
/// in `clipflow hls` and in `clipflow serve`'s feed.
final class HLSCodecsCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "codecs-test-api-key"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    var root: URL { URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent() }

    func clipflow(_ args: [String]) throws -> Run { try Run.run([binary] + args, check: false) }

    /// As a phone's upload is: H.264 High at a sensible bit rate, a keyframe every second, AAC;
    /// its own pictures are the top rung (passthrough), which pays for a 720p AV1 rung.
    func phoneLike(_ name: String, seconds: Int) throws -> String {
        try fx.clip(
            name,
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", String(seconds), "-c:v", "libx264",
                "-preset", "veryfast", "-profile:v", "high", "-g", "30", "-b:v", "2M", "-maxrate", "3M", "-bufsize", "4M", "-pix_fmt", "yuv420p",
                "-c:a", "aac"
            ])
    }

    func testAnAV1LadderSaysItsCodecsAndPlaysInFFmpegAndThroughMSE() throws {
        let src = try phoneLike("codecs-phone.mp4", seconds: 4)
        let out = fx.scratch("codecs-av1").appendingPathComponent("hls")
        let r = try clipflow(["hls", src, "-o", out.path, "--codecs", "h264,av1", "--profile", "feed", "--encoder-preset", "ultrafast"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertFalse(r.stderr.contains("Svt[info]"), "SVT-AV1's banner is not the user's: \(r.stderr)")
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: out.path))
        XCTAssertTrue(names.isSuperset(of: ["copy", "540p", "360p", "720p-av1", "540p-av1", "360p-av1", "audio"]), "\(names)")
        XCTAssertFalse(names.contains("720p"), "the source's own pictures are the 720p rung: \(names)")
        let lint = try clipflow(["hls", "lint", out.path])
        XCTAssertTrue(lint.out.contains("\"errors\":0,\"warnings\":0"), lint.out)

        // The master: H.264 variants first (every player's), then AV1, each CODECS as ffprobe
        // reads the stream (profile Main: 0; its level; 8 bits).
        let master = try String(contentsOf: out.appendingPathComponent("master.m3u8"), encoding: .utf8)
        let variants = master.split(separator: "\n").filter { $0.hasPrefix("#EXT-X-STREAM-INF") }.map(String.init)
        let kinds = variants.map { $0.contains("CODECS=\"av01.") ? "av1" : $0.contains("CODECS=\"avc1.") ? "h264" : "?" }
        XCTAssertEqual(kinds, ["h264", "h264", "h264", "av1", "av1", "av1"], master)
        for name in ["720p-av1", "360p-av1"] {
            let playlist = out.appendingPathComponent("\(name).m3u8").path
            // (ffprobe lists an HLS stream under its program too: the first line.)
            func probe(_ field: String) throws -> String { String(try Probe.stream(playlist, "v:0", field).split(separator: "\n").first ?? "") }
            XCTAssertEqual(try probe("codec_name,profile"), "av1,Main")
            let level = try XCTUnwrap(Int(try probe("level")))
            let expected = "CODECS=\"av01.0.\(String(format: "%02d", level))M.08,mp4a.40.2\""
            let line = master.components(separatedBy: "\n").firstIndex { $0 == "\(name).m3u8" }.map { master.components(separatedBy: "\n")[$0 - 1] }
            XCTAssertTrue(line?.contains(expected) == true, "\(expected) in \(line ?? master)")
            // ffmpeg decodes every picture without an error.
            let decoded = try Run.run(["ffmpeg", "-v", "error", "-i", playlist, "-map", "0:v", "-f", "framemd5", "-"], check: false)
            XCTAssertEqual(decoded.stderr, "", name)
            XCTAssertEqual(decoded.out.split(separator: "\n").filter { !$0.hasPrefix("#") }.count, 120, name)
        }
        // Chromium plays the AV1 rendition through Media Source Extensions, every picture.
        let played = try XCTUnwrap(
            try Probe.browserPlayback([out.appendingPathComponent("720p-av1.m3u8").path], options: ["--mse", "av01.0.05M.08"]).first)
        XCTAssertEqual(played["ended"] as? Bool, true, "\(played)")
        XCTAssertEqual(played["frames"] as? Int, 120, "\(played)")
        XCTAssertEqual(played["width"] as? Int, 1280, "\(played)")

        // The encoders' own settings are refused before any work.
        XCTAssertNotEqual(try clipflow(["hls", src, "-o", out.path + "-x", "--codecs", "av1"]).status, 0, "H.264 is every player's fallback")
    }

    /// When the top rung is encoded, the AV1 rungs stop at 540p (the ladder's time), and the
    /// notice says why 720p has none.
    func testAnEncodedTopRungLeavesTheTallAV1RungOut() throws {
        let src = try phoneLike("codecs-phone.mp4", seconds: 4)
        for (label, args) in [("off", ["--passthrough", "off"]), ("refused", ["--passthrough-rate", "0.1"])] {
            let out = fx.scratch("codecs-top-encoded-\(label)").appendingPathComponent("hls")
            let r = try clipflow(["hls", src, "-o", out.path, "--codecs", "h264,av1", "--profile", "feed", "--encoder-preset", "ultrafast"] + args)
            XCTAssertEqual(r.status, 0, r.stderr)
            let names = Set(try FileManager.default.contentsOfDirectory(atPath: out.path))
            XCTAssertTrue(names.isSuperset(of: ["720p", "540p", "360p", "540p-av1", "360p-av1", "audio"]), "\(label): \(names)")
            XCTAssertFalse(names.contains("720p-av1") || names.contains("copy"), "\(label): \(names)")
            let master = try String(contentsOf: out.appendingPathComponent("master.m3u8"), encoding: .utf8)
            XCTAssertFalse(master.contains("720p-av1"), master)
            XCTAssertEqual(try clipflow(["hls", "lint", out.path]).status, 0, label)
            if label == "refused" {
                XCTAssertTrue(r.stderr.contains("720p-av1 left out: the top rung is encoded"), r.stderr)
            }
        }
    }

    /// `serve --codecs h264,av1`: the ladder step adds the AV1 rungs, and the feed page's player in
    /// chromium (which decodes AV1) plays them.
    func testTheFeedPlaysAV1WhereTheBrowserDecodesIt() throws {
        let s = ServerProcess.clipflowServe(
            binary: binary, data: fx.scratch("serve-codecs"), ["--codecs", "h264,av1"], environment: ["CLIPFLOW_API_KEY": key])
        try s.start()
        defer { s.stop() }
        let (id, upload) = try s.newVideo(key: key, ["name": "av1"])
        try s.tusUpload(try phoneLike("serve-codecs-phone.mp4", seconds: 6), video: id, token: upload)
        let ready = try s.waitForVideo(id, key: key, seconds: 240) as [String: Any]
        XCTAssertEqual(ready["status"] as? String, "ready", "\(ready)")
        let names = ((ready["renditions"] as? [[String: Any]]) ?? []).compactMap { $0["name"] as? String }
        XCTAssertTrue(Set(names).isSuperset(of: ["720p-av1", "540p-av1", "360p-av1", "360p"]), "\(names)")
        let hls = try XCTUnwrap(ready["hls_url"] as? String)
        XCTAssertEqual(try clipflow(["hls", "lint", hls]).status, 0)

        let r = try Run.run(
            ["python3", root.appendingPathComponent("scripts/watch-check").path, "http://127.0.0.1:\(s.port)/", "--timeout", "60"], check: false)
        let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.out.utf8)) as? [String: Any], r.stderr)
        XCTAssertEqual(r.status, 0, "\(report)")
        let segments = (report["media"] as? [[Any]] ?? []).compactMap { $0.last as? String }.filter { $0.hasSuffix(".m4s") }
        XCTAssertFalse(segments.isEmpty, "\(report)")
        XCTAssertTrue(segments.filter { !$0.contains("/audio/") }.allSatisfy { $0.contains("-av1/") }, "the feed chose AV1: \(segments)")
    }
}
