import XCTest
import Foundation
import ClipFlowTestSupport

/// `clipflow record` and `clipflow clips` as a user runs them.
final class RecordCLITests: XCTestCase {
    let fx = Fixtures.shared
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }
    func clipflow(_ args: [String]) throws -> Run { try Run.run([binary] + args, check: false) }

    func hiddenFiles(_ dir: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.hasPrefix(".") }
    }

    /// SIGINT while recording until stopped: exit 130, every fragment (the open one included) is a
    /// complete, decodable MP4, and no temporary file is left.
    func testSigintFinalisesTheOpenFragment() throws {
        let dir = fx.scratch("cli-record-sigint").path
        let (status, text) = try Run.interrupt(
            binary, ["record", "-o", dir, "--size", "320x240", "--segment", "1"],
            after: "clip-0002.mp4: 30 pictures")
        XCTAssertEqual(status, 130, text)
        XCTAssertTrue(text.contains("the open clip was finalised"), text)
        let clips = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".mp4") }.sorted()
        XCTAssertGreaterThanOrEqual(clips.count, 3, "two closed fragments and the open one: \(clips)")
        XCTAssertEqual(hiddenFiles(dir), [])
        for c in clips {
            let p = (dir as NSString).appendingPathComponent(c)
            XCTAssertEqual(try Probe.decodeErrors(p), "", c)
            XCTAssertGreaterThan(try Probe.videoFrames(p), 0, c)
            XCTAssertEqual(try Probe.stream(p, "a:0", "codec_name"), "aac", c)
        }
    }

    func testClipsListsAndDeletesTheLastClip() throws {
        let dir = fx.scratch("cli-clips").path
        let r = try clipflow(["record", "-o", dir, "--size", "320x240", "--duration", "2", "--segment", "1", "--fast", "--quiet"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let list = try clipflow(["clips", dir])
        XCTAssertEqual(list.status, 0)
        XCTAssertEqual(
            list.out,
            """
            clip-0001.mp4     1.00 s  320x240  30 frames
            clip-0002.mp4     1.00 s  320x240  30 frames
            2 clips, 2.00 s

            """)
        let del = try clipflow(["clips", dir, "--delete-last"])
        XCTAssertEqual(del.out, "deleted \(dir)/clip-0002.mp4\n")
        XCTAssertEqual(try clipflow(["clips", dir]).out.split(separator: "\n").last, "1 clip, 1.00 s")
        // Recording again numbers on after what is there.
        XCTAssertEqual(try clipflow(["record", "-o", dir, "--size", "320x240", "--duration", "1", "--fast", "--quiet"]).status, 0)
        XCTAssertTrue(FileManager.default.fileExists(atPath: "\(dir)/clip-0002.mp4"))
        XCTAssertEqual(try clipflow(["clips", dir, "--delete-last"]).status, 0)
        XCTAssertEqual(try clipflow(["clips", dir, "--delete-last"]).status, 0)
        let none = try clipflow(["clips", dir, "--delete-last"])
        XCTAssertEqual(none.status, 65)
        XCTAssertEqual(none.stderr, "error: no clips (clip-NNNN.mp4) in '\(dir)'\n")
    }

    func testBadOptionsAreRefusedBeforeRecording() throws {
        let dir = fx.scratch("cli-record-bad").path
        let size = try clipflow(["record", "-o", dir, "--size", "321x240"])
        XCTAssertNotEqual(size.status, 0)
        XCTAssertTrue(size.stderr.contains("--size expects WxH with positive even numbers (got '321x240')"), size.stderr)
        let preset = try clipflow(["record", "-o", dir, "--preset", "warp", "--duration", "1"])
        XCTAssertEqual(preset.status, 65)
        XCTAssertTrue(preset.stderr.contains("unknown preset 'warp'"), preset.stderr)
        let clock = try clipflow(["record", "-o", dir, "--source", "v4l2", "--clock", "--duration", "1"])
        XCTAssertNotEqual(clock.status, 0)
        XCTAssertTrue(clock.stderr.contains("--clock draws on the test pattern; a camera's pictures are its own"), clock.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), [])
    }

    /// Numbers no frame count can hold are refused before recording, not a crash (SIGILL).
    func testDurationsBeyondAnyFrameCountAreRefused() throws {
        let dir = fx.scratch("cli-record-huge").path
        for (source, option, value) in [
            ("v4l2", "--duration", "inf"), ("testpattern", "--duration", "1e19"),
            ("v4l2", "--segment", "nan"), ("testpattern", "--max-duration", "-1"),
            ("testpattern", "--fps", "inf")
        ] {
            let r = try clipflow(["record", "-o", dir, "--source", source, "--device", "/dev/null", option, value, "--fast"])
            XCTAssertEqual(r.status, 64, "\(option) \(value): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains(option), "\(option) \(value): \(r.stderr)")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), [])
    }

    /// Interactive start/stop: pause closes the clip, resume starts the next, q ends normally.
    func testInteractivePauseResumeQuit() throws {
        let dir = fx.scratch("cli-record-interactive").path
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["record", "-o", dir, "--size", "320x240", "--interactive"]
        let input = Pipe(), err = Pipe()
        p.standardInput = input
        p.standardError = err
        p.standardOutput = FileHandle.nullDevice
        try p.run()
        var seen = ""
        func waitFor(_ marker: String) {
            while !seen.contains(marker) {
                let d = err.fileHandleForReading.availableData
                if d.isEmpty { return }
                seen += String(decoding: d, as: UTF8.self)
            }
        }
        func send(_ s: String) { input.fileHandleForWriting.write((s + "\n").data(using: .utf8)!) }
        waitFor("camera: test pattern")
        usleep(1_000_000)
        send("p"); waitFor("clip-0001.mp4")
        usleep(300_000)
        send("r"); waitFor("record: recording")
        usleep(700_000)
        send("q")
        let rest = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        seen += String(decoding: rest, as: UTF8.self)
        XCTAssertEqual(p.terminationStatus, 0, seen)
        let clips = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".mp4") }.sorted()
        XCTAssertEqual(clips, ["clip-0001.mp4", "clip-0002.mp4"], seen)
        XCTAssertTrue(seen.contains("recorded 2 clips"), seen)
        for c in clips { XCTAssertEqual(try Probe.decodeErrors("\(dir)/\(c)"), "") }
    }

    func runWithEnv(_ args: [String], _ env: [String: String]) throws -> Run { try Run.run([binary] + args, env: env, check: false) }

    func testDevicesListsTheEmulatedCamera() throws {
        let r = try runWithEnv(["devices"], ["CLIPFLOW_V4L2_EMULATE": "1"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.out.hasPrefix("/dev/video0: vivid (driver vivid"), r.out)
        XCTAssertTrue(r.out.contains("MJPG [mjpeg]: 320x240 (60, 30, 15 fps)"), r.out)
        let bad = try runWithEnv(["devices"], ["CLIPFLOW_V4L2_EMULATE": "warp"])
        XCTAssertNotEqual(bad.status, 0)
        XCTAssertTrue(bad.stderr.contains("CLIPFLOW_V4L2_EMULATE"), bad.stderr)
    }

    /// The emulated camera is there only when asked for: without CLIPFLOW_V4L2_EMULATE the
    /// binary talks to the kernel, so every camera it lists is a device node that exists (the
    /// emulated /dev/video0 has none), and with no node at all it says so.
    func testDevicesWithoutTheVariableListsRealCamerasOnly() throws {
        let r = try runWithEnv(["devices"], ["CLIPFLOW_V4L2_EMULATE": ""])
        XCTAssertEqual(r.status, 0, r.stderr)
        let nodes = (try? FileManager.default.contentsOfDirectory(atPath: "/dev"))?.filter { $0.hasPrefix("video") } ?? []
        if nodes.isEmpty { XCTAssertTrue(r.out.contains("no cameras found"), r.out) }
        let listed = r.out.split(separator: "\n").filter { $0.hasPrefix("/dev/") }.map { String($0.prefix { $0 != ":" }) }
        for path in listed { XCTAssertTrue(FileManager.default.fileExists(atPath: path), "\(path) is listed but is not a device node") }
    }

    /// The camera unplugged mid-recording (ENODEV): the open fragment is finalised and playable,
    /// earlier ones are untouched, and the exit status says it went wrong.
    func testUnpluggedCameraFinalisesWhatWasRecorded() throws {
        let dir = fx.scratch("cli-record-unplug").path
        let r = try runWithEnv(
            ["record", "--source", "v4l2", "-o", dir, "--size", "640x480", "--format", "mjpeg", "--segment", "1"],
            ["CLIPFLOW_V4L2_EMULATE": "unplug-after=45"])
        XCTAssertEqual(r.status, 1, r.stderr)
        XCTAssertTrue(r.stderr.contains("error: /dev/video0: the camera went away (unplugged?); recorded 2 clips, 1.50 s"), r.stderr)
        XCTAssertEqual(try Probe.videoFrames("\(dir)/clip-0001.mp4"), 30)
        XCTAssertEqual(try Probe.videoFrames("\(dir)/clip-0002.mp4"), 15)
        for c in ["clip-0001.mp4", "clip-0002.mp4"] { XCTAssertEqual(try Probe.decodeErrors("\(dir)/\(c)"), "") }
        XCTAssertEqual(hiddenFiles(dir), [])
    }

    /// A fixed-length camera recording (4 s in 2 s fragments at 30 fps) is exactly two fragments of
    /// 60 pictures, even when the kernel's timestamps jitter (the first frame stamped late used to
    /// let a 121st picture through, into a third, one-picture fragment); `clips --delete-last`
    /// then deletes the second fragment, the clip just recorded.
    func testFixedLengthRecordingIsExactlyTwoFragmentsDespiteTimestampJitter() throws {
        let dir = fx.scratch("cli-record-exact").path
        let r = try runWithEnv(
            ["record", "--source", "v4l2", "-o", dir, "--size", "320x240", "--fps", "30", "--duration", "4", "--segment", "2"],
            ["CLIPFLOW_V4L2_EMULATE": "jitter=4"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stderr.contains("recorded 2 clips, 4.00 s, into \(dir)\n"), r.stderr)
        let clips = try FileManager.default.contentsOfDirectory(atPath: dir).sorted()
        XCTAssertEqual(clips, ["clip-0001.mp4", "clip-0002.mp4"])
        for c in clips {
            XCTAssertEqual(try Probe.videoFrames("\(dir)/\(c)"), 60, c)
            // Timing is kept from the (jittered, by at most 4 ms) timestamps.
            XCTAssertEqual(Double(try Probe.stream("\(dir)/\(c)", "v:0", "duration")) ?? 0, 2.0, accuracy: 0.005, c)
        }
        let del = try clipflow(["clips", dir, "--delete-last"])
        XCTAssertEqual(del.out, "deleted \(dir)/clip-0002.mp4\n")
    }

    /// The lines of `stderr` that tell of pictures lost (dropped, skipped, missing), the
    /// recording's directory `dir` (whose name may hold those words) written DIR.
    /// "1 picture", "2 pictures": the summary's count of dropped pictures.
    func pictures(_ n: Int) -> String { "\(n) picture\(n == 1 ? "" : "s")" }

    func lossLines(_ stderr: String, dir: String) -> [String] {
        stderr.replacingOccurrences(of: dir, with: "DIR").split(separator: "\n").map(String.init).filter { l in
            ["drop", "skip", "missing"].contains { l.lowercased().contains($0) }
        }
    }

    /// The camera dropping pictures (the reader stalled for 2 s, longer than the capture buffers
    /// hold): told once, by the summary, which blames no queue and counts every drop, matching the
    /// pictures missing from the fragments.
    func testCameraDropsAreCountedInTheSummary() throws {
        let dir = fx.scratch("cli-record-drops").path
        let r = try runWithEnv(
            ["record", "--source", "v4l2", "-o", dir, "--size", "320x240", "--duration", "4"],
            ["CLIPFLOW_V4L2_EMULATE": "stall=10:2000"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertFalse(r.stderr.contains("input queue full"), r.stderr)
        let frames = try Probe.videoFrames("\(dir)/clip-0001.mp4")
        XCTAssertLessThan(frames, 120)
        let dropped = 120 - frames
        let summary = "recorded 1 clip, 4.00 s, into DIR; \(pictures(dropped)) dropped: \(dropped) by the camera (it was not read in time)"
        XCTAssertEqual(lossLines(r.stderr, dir: dir), [summary], r.stderr)
    }

    /// A test pattern too big to make in real time skips the pictures it is late with: told
    /// once, by the summary, with that cause (not as a camera's sequence gaps, nor a consumer's
    /// fault, nor a queue's).
    func testTestPatternSkipsAreToldOnceWithTheirCause() throws {
        let dir = fx.scratch("cli-record-late").path
        let r = try clipflow(["record", "-o", dir, "--size", "3840x2160", "--fps", "240", "--duration", "1", "--encoder-preset", "ultrafast"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let frames = try Probe.videoFrames("\(dir)/clip-0001.mp4")
        XCTAssertLessThan(frames, 240, "this machine made 4K at 240 fps in real time; make it bigger")
        let late = 240 - frames
        XCTAssertEqual(
            lossLines(r.stderr, dir: dir),
            ["recorded 1 clip, 1.00 s, into DIR; \(pictures(late)) dropped: \(late) by the test pattern (they could not be made and delivered in real time)"],
            r.stderr)
    }

    /// In a pipeline, with no summary of the command's own, the source tells its drops once, at
    /// the first, with their cause; the record stage does not tell them again.
    func testAPipelinesSourceTellsItsDropsOnceWithTheirCause() throws {
        let dir = fx.scratch("cli-record-late-pipeline")
        let p = dir.appendingPathComponent("late.json").path
        try """
        {"version": 1, "stages": [
          {"id": "camera", "kind": "testpattern", "width": 3840, "height": 2160, "fps": 240, "duration": 1},
          {"id": "record", "kind": "record", "inputs": ["camera"], "directory": "\(dir.path)/clips", "encoder-preset": "ultrafast"}
        ]}
        """.write(toFile: p, atomically: true, encoding: .utf8)
        let r = try clipflow(["run", p])
        XCTAssertEqual(r.status, 0, r.stderr)
        let lines = lossLines(r.stderr, dir: dir.path)
        XCTAssertEqual(lines.count, 1, r.stderr)
        XCTAssertTrue(
            lines.first?.hasPrefix("camera: skipping pictures: they could not be made and delivered in real time (") ?? false, r.stderr)
    }

    /// Pictures the camera delivers broken are lost pictures too: the summary counts them with
    /// the camera's drops, matching the pictures missing from the fragment.
    func testBrokenPicturesAreCountedInTheSummary() throws {
        let dir = fx.scratch("cli-record-broken").path
        let r = try runWithEnv(
            ["record", "--source", "v4l2", "-o", dir, "--size", "320x240", "--duration", "2"],
            ["CLIPFLOW_V4L2_EMULATE": "broken-every=10"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(try Probe.videoFrames("\(dir)/clip-0001.mp4"), 54)
        let lines = lossLines(r.stderr, dir: dir)
        XCTAssertEqual(lines.count, 1, r.stderr)
        XCTAssertTrue(lines.first?.hasPrefix("recorded 1 clip, ") ?? false, r.stderr)
        let told = " s, into DIR; 6 pictures dropped: 6 broken (flagged by the driver, or MJPEG that did not decode)"
        XCTAssertTrue(lines.first?.hasSuffix(told) ?? false, r.stderr)
    }

    /// A reader stalled for 300 ms (9 frames at 30 fps) loses nothing: the capture buffers (32
    /// asked for; 4 once, which dropped 5 pictures here) hold them.
    func testShortStallLosesNoPicture() throws {
        let dir = fx.scratch("cli-record-stall").path
        let r = try runWithEnv(
            ["record", "--source", "v4l2", "-o", dir, "--size", "320x240", "--duration", "2"],
            ["CLIPFLOW_V4L2_EMULATE": "stall=10:300"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(lossLines(r.stderr, dir: dir), [], r.stderr)
        XCTAssertTrue(r.stderr.contains("recorded 1 clip, 2.00 s, into \(dir)\n"), r.stderr)
        XCTAssertEqual(try Probe.videoFrames("\(dir)/clip-0001.mp4"), 60)
    }

    func testMissingCameraIsAClearError() throws {
        let dir = fx.scratch("cli-record-missing").path
        let r = try runWithEnv(["record", "--source", "v4l2", "--device", "/dev/video7", "-o", dir], ["CLIPFLOW_V4L2_EMULATE": "1"])
        XCTAssertEqual(r.status, 65, r.stderr)
        XCTAssertTrue(r.stderr.contains("/dev/video7"), r.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), [])
    }
    /// `d` under `--max-duration`: the deleted clip's seconds leave the recorder's total, so the
    /// recording goes on until the clips that exist reach the cap (ffprobe's durations), and the
    /// answer names the deleted clip on standard output.
    func testDeleteLastFreesItsSecondsUnderMaxDuration() throws {
        let dir = fx.scratch("cli-record-delete-max").path
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["record", "-o", dir, "--size", "320x240", "--segment", "1", "--max-duration", "3", "--interactive"]
        let input = Pipe(), err = Pipe(), out = Pipe()
        p.standardInput = input
        p.standardError = err
        p.standardOutput = out
        try p.run()
        // The recording ends by itself (max-duration) within seconds; a hung one is ended.
        DispatchQueue.global().asyncAfter(deadline: .now() + 60) { if p.isRunning { kill(p.processIdentifier, SIGKILL) } }
        var seen = ""
        func waitFor(_ marker: String) {
            while !seen.contains(marker) {
                let d = err.fileHandleForReading.availableData
                if d.isEmpty { return }
                seen += String(decoding: d, as: UTF8.self)
            }
        }
        waitFor("clip-0001.mp4: ")
        input.fileHandleForWriting.write(Data("d\n".utf8))
        let rest = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        try? input.fileHandleForWriting.close()
        seen += String(decoding: rest, as: UTF8.self)
        let answers = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertEqual(p.terminationStatus, 0, seen)
        XCTAssertTrue(answers.hasPrefix("deleted clip-0001.mp4 ("), answers)
        XCTAssertTrue(answers.hasSuffix("; still recording clip-0002.mp4\n"), answers)
        let clips = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".mp4") }.sorted()
        XCTAssertEqual(clips, ["clip-0002.mp4", "clip-0003.mp4", "clip-0004.mp4"], seen)
        let total = try clips.reduce(0.0) { $0 + (Double(try Probe.stream("\(dir)/\($1)", "v:0", "duration")) ?? -1) }
        XCTAssertEqual(total, 3, accuracy: 0.05, "the clips that exist fill the cap: \(seen)")
        // Pictures the test pattern could not make in time on a loaded machine are told on the same line.
        let summary = String(format: "recorded 3 clips, %.2f s, into \(dir)", total)
        XCTAssertTrue(seen.contains(summary + "\n") || seen.contains(summary + "; "), seen)
    }

    /// The record stage's libx264 preset is `encoder-preset` in a pipeline, as on the command
    /// line; `preset`, its old name, is still read, with a warning; both together are refused.
    func testPipelineEncoderPresetAndItsOldName() throws {
        let dir = fx.scratch("cli-record-pipeline-preset").path
        func pipeline(_ name: String, _ presetFields: String) throws -> String {
            let path = "\(dir)/\(name).json"
            let text = """
                {"version": 1, "stages": [
                  {"id": "camera", "kind": "testpattern", "width": 320, "height": 240, "duration": 1, "realtime": false},
                  {"id": "record", "kind": "record", "inputs": ["camera"], "directory": "\(dir)/\(name)", \(presetFields)}
                ]}
                """
            try text.write(toFile: path, atomically: true, encoding: .utf8)
            return path
        }
        let old = "'preset' is the old name of 'encoder-preset'"
        let new = try clipflow(["run", try pipeline("new", #""encoder-preset": "ultrafast""#)])
        XCTAssertEqual(new.status, 0, new.stderr)
        XCTAssertFalse(new.stderr.contains(old), new.stderr)
        let renamed = try clipflow(["run", try pipeline("old", #""preset": "ultrafast""#)])
        XCTAssertEqual(renamed.status, 0, renamed.stderr)
        XCTAssertTrue(renamed.stderr.contains("record: warning: \(old); it is still read"), renamed.stderr)
        // libx264 writes its settings into the stream: the preset took effect both ways.
        for sub in ["new", "old"] {
            let settings = try Run.run(["mediainfo", "--Inform=Video;%Encoded_Library_Settings%", "\(dir)/\(sub)/clip-0001.mp4"]).out
            XCTAssertTrue(settings.contains("subme=0"), "\(sub): ultrafast sets subme=0: \(settings)")
        }
        let both = try clipflow(["validate", try pipeline("both", #""encoder-preset": "ultrafast", "preset": "fast""#)])
        XCTAssertEqual(both.status, 65, both.stderr)
        XCTAssertTrue(both.stderr.contains("stages[1].preset: \(old); give 'encoder-preset' only"), both.stderr)
    }
}
