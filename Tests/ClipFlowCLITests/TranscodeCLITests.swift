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

    func testRefusalSaysWhatConformWouldDoAndThePlanIsJSON() throws {
        let a = try fx.toneClip(0, seconds: 2, size: "640x360")
        let b = try fx.toneClip(1, seconds: 2, size: "320x240")
        let out = fx.scratch("cli-conform").appendingPathComponent("joined.mp4").path
        let refused = try clipflow(["merge", "-o", out, "--quiet", a, b])
        XCTAssertEqual(refused.status, 65)
        XCTAssertTrue(refused.stderr.contains("video size differs (640x360 vs 320x240); --conform would re-encode clip 2"), refused.stderr)
        let plan = try clipflow(["merge", "--conform", "--plan", a, b])
        XCTAssertEqual(plan.status, 0, plan.stderr)
        let json = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(plan.out.utf8)) as? [String: Any])
        let clips = try XCTUnwrap(json["clips"] as? [[String: Any]])
        XCTAssertEqual(clips.map { $0["action"] as? String }, ["copy", "re-encode"])
        XCTAssertEqual(clips[1]["reason"] as? String, "video size differs (640x360 vs 320x240)")
        XCTAssertFalse(FileManager.default.fileExists(atPath: out), "--plan writes nothing")
        let joined = try clipflow(["merge", "--conform", "-o", out, a, b])
        XCTAssertEqual(joined.status, 0, joined.stderr)
        XCTAssertTrue(joined.stderr.contains("1 re-encoded to match"), joined.stderr)
        XCTAssertEqual(try Probe.stream(out, "v:0", "width,height"), "640,360")
        XCTAssertEqual(try Probe.decodeErrors(out, keepTimestamps: true), "")
        XCTAssertEqual(try clipflow(["merge", "--plan", a, b]).status, 64, "--plan needs --conform")
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
}
