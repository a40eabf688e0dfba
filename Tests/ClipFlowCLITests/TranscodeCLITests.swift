import XCTest
import Foundation
import ClipFlowTestSupport

/// `clipflow transcode` and `clipflow presets` as a user runs them.
final class TranscodeCLITests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func clipflow(_ args: [String]) throws -> Run { try Run.run([binary] + args, check: false) }

    func testTranscodeReportsProgressWithSpeedAndWritesTheVideo() throws {
        let src = try fx.toneClip(0, seconds: 2, size: "640x360")
        let out = fx.scratch("cli-transcode").appendingPathComponent("small.mp4").path
        let r = try clipflow(["transcode", src, "-o", out, "--preset", "web-360p", "--encoder-preset", "ultrafast", "--events", "json"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let events = r.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        let progress = events.filter { $0["event"] as? String == "progress" && $0["stage"] as? String == "transcode" }
        XCTAssertFalse(progress.isEmpty, "progress events: \(r.out)")
        for p in progress {
            XCTAssertNotNil(p["speed"] as? Double, "every transcode progress event carries speed: \(p)")
            XCTAssertEqual(p["unit"] as? String, "ms")
        }
        XCTAssertEqual((progress.last?["completed"] as? Double) ?? 0, 2000, accuracy: 1)
        XCTAssertEqual(try Probe.stream(out, "v:0", "width,height"), "640,360")
        XCTAssertEqual(try Probe.decodeErrors(out), "")
    }

    func testPresetsAreListedWithTheirSettings() throws {
        let r = try clipflow(["presets"])
        XCTAssertEqual(r.status, 0)
        for name in ["web-1080p", "web-720p", "web-540p", "web-360p", "vertical-1080x1920", "square-1080", "hevc-1080p", "archive"] {
            XCTAssertTrue(r.out.contains(name), "\(name) listed")
        }
        XCTAssertTrue(r.out.contains("CRF 21, capped at 6000k"), r.out)
        let json = try clipflow(["presets", "--json"])
        let list = try JSONSerialization.jsonObject(with: Data(json.out.utf8)) as? [[String: Any]]
        XCTAssertEqual(list?.count, 8)
    }

    func testBadOptionsAndInputsFailClearlyAndLeaveNoOutput() throws {
        let src = try fx.toneClip(0, seconds: 1)
        let dir = fx.scratch("cli-transcode-bad")
        let out = dir.appendingPathComponent("out.mp4").path
        let notVideo = dir.appendingPathComponent("notes.mp4").path
        try "not a video\n".write(toFile: notVideo, atomically: true, encoding: .utf8)
        let cases: [([String], String)] = [
            (["--preset", "web-4k", src], "--preset: unknown preset 'web-4k'"),
            (["--size", "641x360", src], "--size: 641x360: width and height must be even"),
            (["--fit", "zoom", src], "--fit: 'zoom' is not one of contain, cover, stretch"),
            (["--crf", "99", src], "--crf: 99 is out of range"),
            ([src, notVideo], "notes.mp4' is not a video FFmpeg can read")
        ]
        for (args, message) in cases {
            let r = try clipflow(["transcode", "-o", out, "--quiet"] + args)
            XCTAssertNotEqual(r.status, 0, "\(args)")
            XCTAssertTrue(r.stderr.contains(message), "\(args): \(r.stderr)")
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains("out") }, [], "\(args): nothing left")
        }
    }

    func testATranscodeStageInAPipeline() throws {
        let src = try fx.toneClip(0, seconds: 1)
        let dir = fx.scratch("cli-transcode-pipeline")
        let out = dir.appendingPathComponent("web.mp4").path
        let spec: [String: Any] = [
            "version": 1,
            "stages": [
                ["id": "in", "kind": "files", "paths": [src]],
                ["id": "web", "kind": "transcode", "inputs": ["in"], "output": out, "preset": "web-360p", "encoder-preset": "ultrafast"]
            ]
        ]
        let file = dir.appendingPathComponent("p.json").path
        try JSONSerialization.data(withJSONObject: spec).write(to: URL(fileURLWithPath: file))
        let r = try clipflow(["run", file, "--quiet"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(try Probe.decodeErrors(out), "")
        // A bad field is named by its path before anything runs.
        var bad = spec
        bad["stages"] = [
            ["id": "in", "kind": "files", "paths": [src]], ["id": "web", "kind": "transcode", "inputs": ["in"], "output": out, "size": "100x99"]
        ]
        try JSONSerialization.data(withJSONObject: bad).write(to: URL(fileURLWithPath: file))
        let v = try clipflow(["validate", file])
        XCTAssertNotEqual(v.status, 0)
        XCTAssertTrue((v.stderr + v.out).contains("stages[1].size"), v.stderr + v.out)
    }
}

/// `clipflow merge --conform` as a user runs it.
final class MergeConformCLITests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func clipflow(_ args: [String]) throws -> Run { try Run.run([binary] + args, check: false) }

    func testRefusalSaysWhatConformWouldDoAndThePlanListsEveryDifference() throws {
        let a = try fx.toneClip(0, seconds: 2, size: "640x360")
        let b = try fx.toneClip(1, seconds: 2, fps: 25, size: "320x240", rate: 44100, channels: 2)
        let out = fx.scratch("cli-conform").appendingPathComponent("joined.mp4").path
        let refused = try clipflow(["merge", "-o", out, "--quiet", a, b])
        XCTAssertEqual(refused.status, 65)
        XCTAssertTrue(refused.stderr.contains("video size differs (640x360 vs 320x240); --conform would re-encode clip 2"), refused.stderr)
        // On a terminal: a table with every difference of each clip.
        let table = try clipflow(["merge", "--conform", "--plan", a, b])
        XCTAssertEqual(table.status, 0, table.stderr)
        for line in [
            "target: \(a)", "  1  copy", "  2  re-encode", "  \(b)\n", "- video size differs (640x360 vs 320x240)",
            "- audio sample rate differs (48000 Hz vs 44100 Hz)", "- audio channel count differs (1 vs 2)", "- frame rate differs (30 vs 25 fps)"
        ] {
            XCTAssertTrue(table.out.contains(line), "no '\(line)' in:\n\(table.out)")
        }
        // For programs: JSON with --events json.
        let plan = try clipflow(["merge", "--conform", "--plan", "--events", "json", a, b])
        XCTAssertEqual(plan.status, 0, plan.stderr)
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(plan.out.utf8)) as? [String: Any])
        let clips = try XCTUnwrap(json["clips"] as? [[String: Any]])
        XCTAssertEqual(clips.map { $0["action"] as? String }, ["copy", "re-encode"])
        XCTAssertEqual(clips[1]["reason"] as? String, "video size differs (640x360 vs 320x240)")
        let differences = try XCTUnwrap(clips[1]["differences"] as? [String])
        XCTAssertEqual(differences.first, "video size differs (640x360 vs 320x240)")
        for d in ["audio sample rate differs (48000 Hz vs 44100 Hz)", "audio channel count differs (1 vs 2)", "frame rate differs (30 vs 25 fps)"] {
            XCTAssertTrue(differences.contains(d), "\(d) not in \(differences)")
        }
        XCTAssertEqual(clips[0]["differences"] as? [String], [])
        XCTAssertFalse(FileManager.default.fileExists(atPath: out), "--plan writes nothing")
        let joined = try clipflow(["merge", "--conform", "-o", out, a, b])
        XCTAssertEqual(joined.status, 0, joined.stderr)
        XCTAssertTrue(joined.stderr.contains("1 re-encoded to match"), joined.stderr)
        XCTAssertEqual(try Probe.stream(out, "v:0", "width,height"), "640,360")
        XCTAssertEqual(try Probe.decodeErrors(out, keepTimestamps: true), "")
        XCTAssertEqual(try clipflow(["merge", "--plan", a, b]).status, 64, "--plan needs --conform")
    }

    /// A conform's work (two re-encodes, then the copy of every clip) is one progress: in plain
    /// lines and in JSON events it only moves forward, to 100 %, never starting again for the
    /// next clip or for the copy.
    func testConformProgressOnlyMovesForward() throws {
        let a = try fx.toneClip(0, seconds: 3, size: "640x360")
        let b = try fx.toneClip(1, seconds: 1, size: "320x240"), c = try fx.toneClip(2, seconds: 1, size: "320x240")
        let dir = fx.scratch("cli-conform-progress")
        let plain = try clipflow(["merge", "--conform", "--verbose", "-o", dir.appendingPathComponent("plain.mp4").path, a, b, c])
        XCTAssertEqual(plain.status, 0, plain.stderr)
        XCTAssertTrue(plain.stderr.contains("2 re-encoded to match"), plain.stderr)
        let percents = plain.stderr.split(separator: "\n").compactMap { line -> Int? in
            guard line.hasPrefix("merge: "), let pct = line.dropFirst(7).split(separator: "%").first else { return nil }
            return Int(pct)
        }
        XCTAssertGreaterThan(percents.count, 2, plain.stderr)
        XCTAssertEqual(percents, percents.sorted(), "plain lines: \(plain.stderr)")
        XCTAssertEqual(percents.last, 100, plain.stderr)

        let json = try clipflow(["merge", "--conform", "--events", "json", "-o", dir.appendingPathComponent("json.mp4").path, a, b, c])
        XCTAssertEqual(json.status, 0, json.stderr)
        let progress = json.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            .filter { $0["stage"] as? String == "merge" && $0["event"] as? String == "progress" }
        let fractions = progress.compactMap { e -> Double? in
            guard let c = e["completed"] as? Double, let t = e["total"] as? Double, t > 0 else { return nil }
            return c / t
        }
        XCTAssertGreaterThan(fractions.count, 2, json.out)
        XCTAssertEqual(fractions, fractions.sorted(), "JSON events: \(progress)")
        XCTAssertEqual(fractions.last, 1)
        XCTAssertEqual(Set(progress.compactMap { $0["unit"] as? String }).count, 1, "one unit for the whole: \(progress)")
    }
}

/// Clips that differ only where decoding does not look, and covers of merged clips, as a user
/// meets them.
final class MergeCLITests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func clipflow(_ args: [String]) throws -> Run { try Run.run([binary] + args, check: false) }

    /// One phone at 60 and 30 fps: the SPS differ in level and VUI only. Plain merge copies both
    /// with their own parameter sets (no `--conform`), every decoded picture the source's, and
    /// its summary says how many clips carried their own sets.
    func testLevelOnlyDifferencesJoinWithoutConform() throws {
        func phone(_ fps: Int) throws -> String {
            try fx.clip(
                "cli-phone-\(fps).mp4",
                ["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=\(fps)", "-f", "lavfi", "-i", "sine=r=48000", "-t", "1", "-c:v", "libx264", "-c:a", "aac"])
        }
        let a = try phone(60), b = try phone(30)
        let out = fx.scratch("cli-harmonise").appendingPathComponent("joined.mp4").path
        let r = try clipflow(["merge", "-o", out, a, b, a])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stderr.contains("merged 3 clips into \(out) (150 video frames"), r.stderr)
        XCTAssertTrue(r.stderr.contains(", 2 with their own parameter sets"), r.stderr)
        XCTAssertEqual(try Probe.decodeErrors(out, keepTimestamps: true), "")
        func pictures(_ p: String) throws -> [String] {
            try Run.run(["ffmpeg", "-v", "error", "-i", p, "-map", "0:v", "-fps_mode", "passthrough", "-f", "framemd5", "-"]).out
                .split(separator: "\n").filter { !$0.hasPrefix("#") }.map { String($0.split(separator: ",").last!) }
        }
        XCTAssertEqual(try pictures(out), try pictures(a) + pictures(b) + pictures(a), "every decoded picture is the source's")
    }

    /// `--thumbnail` after a merge blames the clip a picture came from (the merge's clips travel
    /// with the video to the cover stage), not the merged file alone.
    func testCoverErrorNamesTheClipThePictureCameFrom() throws {
        let good = try fx.toneClip(0, seconds: 1)
        let dir = fx.scratch("cli-cover-garbage")
        var data = [UInt8](try Data(contentsOf: URL(fileURLWithPath: good)))
        let mdat = try XCTUnwrap(MP4Patch.payload("mdat", in: data))
        for i in mdat { data[i] = 0xFF }
        let bad = dir.appendingPathComponent("garbage.mp4").path
        try Data(data).write(to: URL(fileURLWithPath: bad))
        let out = dir.appendingPathComponent("merged.mp4").path, cover = dir.appendingPathComponent("cover.jpg").path
        let r = try clipflow(["merge", "-o", out, "--thumbnail", cover, bad])
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("no picture for a cover could be decoded from '\(bad)' (the clip at 0.00-1.00 s of '\(out)')"), r.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: cover))
    }
}

/// A disk that fills up mid-write: a 300 KiB tmpfs mounted for the test (root only).
final class FullDiskCLITests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func testAFullDiskFailsNamingTheOutputAndLeavesNothing() throws {
        let mount = fx.scratch("full-disk").path
        let m = try Run.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", mount], check: false)
        guard m.status == 0 else { throw XCTSkip("cannot mount a small tmpfs here (\(m.stderr.trimmingCharacters(in: .whitespacesAndNewlines)))") }
        defer { _ = try? Run.run(["umount", mount], check: false) }
        let src = try fx.toneClip(0, seconds: 4, size: "640x360")
        let out = (mount as NSString).appendingPathComponent("out.mp4")
        let r = try Run.run([binary, "transcode", "--quiet", "--crf", "10", src, "-o", out], check: false)
        XCTAssertEqual(r.status, 1, r.stderr)
        XCTAssertTrue(r.stderr.contains("'\(out)'") && r.stderr.contains("No space left on device"), r.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: mount), [], "nothing left on the full disk")
    }
}

/// Re-encoding by steps in a pipeline: files -> decode -> record.
final class DecodeStagePipelineTests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func testFilesDecodeRecordReencodesByStages() throws {
        let mp4 = try fx.toneClip(0, seconds: 2, size: "640x360")
        let mkv = try fx.clip(
            "steps-hevc.mkv",
            [
                "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-f", "lavfi", "-i", "sine=r=44100", "-t", "1", "-c:v", "libx265", "-preset", "ultrafast",
                "-x265-params", "log-level=error", "-c:a", "aac"
            ])
        let dir = fx.scratch("steps")
        let spec: [String: Any] = [
            "version": 1,
            "stages": [
                ["id": "in", "kind": "files", "paths": [mp4, mkv]],
                ["id": "raw", "kind": "decode", "inputs": ["in"], "height": 240],
                ["id": "enc", "kind": "record", "inputs": ["raw"], "directory": dir.appendingPathComponent("clips").path, "preset": "veryfast"]
            ]
        ]
        let file = dir.appendingPathComponent("p.json").path
        try JSONSerialization.data(withJSONObject: spec).write(to: URL(fileURLWithPath: file))
        let r = try Run.run([binary, "run", "--events", "json", file], check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        let clip = dir.appendingPathComponent("clips/clip-0001.mp4").path
        XCTAssertEqual(try Probe.decodeErrors(clip), "")
        XCTAssertEqual(try Probe.stream(clip, "v:0", "width,height"), "426,240")
        XCTAssertEqual(try Probe.videoFrames(clip), 90, "60 + 30 pictures")
        XCTAssertEqual(Double(try Probe.stream(clip, "a:0", "duration")) ?? 0, 3, accuracy: 0.05)
        XCTAssertGreaterThanOrEqual(try Probe.ssim(clip, mp4, distortedOptions: ["-t", "2"]), 0.95)
        let progress = r.out.split(separator: "\n").filter { $0.contains("\"stage\":\"raw\"") && $0.contains("\"progress\"") }
        XCTAssertFalse(progress.isEmpty)
        XCTAssertTrue(progress.allSatisfy { $0.contains("\"speed\"") }, "\(progress)")
    }

    /// The transcode's graph (decode, then the encoder stage) on files other tools wrote: every
    /// picture comes out, the sound lasts as long as the pictures, ffmpeg decodes it cleanly, and
    /// a phone clip keeps its turn.
    func testTheGraphTakesFilesOtherToolsWrote() throws {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let picture = ["-f", "lavfi", "-i", "testsrc2=size=426x240:rate=25", "-t", "2"]
        let inputs: [(name: String, path: String, turn: Int?)] = [
            ("GStreamer splitmuxsink", root.appendingPathComponent("fixtures/gstreamer/splitmux00.mp4").path, nil),
            (
                "WebM VP9 + Opus",
                try fx.clip(
                    "other-vp9.webm",
                    picture + ["-f", "lavfi", "-i", "sine=r=48000", "-t", "2", "-c:v", "libvpx-vp9", "-deadline", "realtime", "-c:a", "libopus"]),
                nil
            ),
            (
                "MKV H.264 + PCM 44.1 kHz",
                try fx.clip(
                    "other-pcm.mkv", picture + ["-f", "lavfi", "-i", "sine=r=44100", "-t", "2", "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "pcm_s16le"]),
                nil
            ),
            (
                "phone-style MOV, HEVC hvc1 turned 90",
                // Encoded, then turned by a stream copy (the ffmpeg CLI writes the matrix only so).
                try fx.clip(
                    "other-phone.mov",
                    [
                        "-i",
                        try fx.clip(
                            "other-phone-hevc.mp4",
                            picture + [
                                "-f", "lavfi", "-i", "sine=r=48000", "-t", "2", "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error",
                                "-tag:v", "hvc1", "-c:a", "aac"
                            ]), "-c", "copy", "-metadata:s:v:0", "rotate=270", "-f", "mov"
                    ]),
                -90
            )
        ]
        let dir = fx.scratch("cli-transcode-other-tools")
        for (i, input) in inputs.enumerated() {
            let out = dir.appendingPathComponent("out-\(i).mp4").path
            let r = try Run.run([binary, "transcode", "--quiet", "--encoder-preset", "ultrafast", input.path, "-o", out], check: false)
            XCTAssertEqual(r.status, 0, "\(input.name): \(r.stderr)")
            XCTAssertEqual(try Probe.decodeErrors(out), "", input.name)
            XCTAssertEqual(try Probe.videoFrames(out), try Probe.videoFrames(input.path), input.name)
            let video = Double(try Probe.stream(out, "v:0", "duration").split(separator: ",").first ?? "") ?? 0
            let audio = Double(try Probe.stream(out, "a:0", "duration").split(separator: ",").first ?? "") ?? 0
            XCTAssertEqual(audio, video, accuracy: 0.05, "\(input.name): sound as long as the pictures")
            XCTAssertEqual(try Probe.rotation(out), input.turn, input.name)
        }
    }
}
