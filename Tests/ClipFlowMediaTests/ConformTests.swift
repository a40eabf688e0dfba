import XCTest
import ClipFlowCore
@testable import ClipFlowMedia
import ClipFlowTestSupport

/// `merge --conform`: the plan and the joins, judged by ffprobe/ffmpeg.
final class ConformTests: XCTestCase {
    let fx = Fixtures.shared

    /// One phone, two frame rates (the ffmpeg CLI's x264 defaults): the parameter sets differ
    /// only in level and VUI timing.
    func phoneClip(fps: Int, seconds: Double = 2, size: String = "1280x720", extra: [String] = []) throws -> String {
        try fx.clip(
            "phone-\(size)-\(fps)-\(seconds)\(extra.joined()).mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=\(size):rate=\(fps)", "-f", "lavfi", "-i", "sine=r=48000", "-t", String(seconds), "-c:v", "libx264", "-c:a",
                "aac"
            ]
                + extra)
    }

    func testLevelAndTimingDifferencesDoNotChangeDecoding() throws {
        let a = try ClipProbe.probe(try phoneClip(fps: 60)), b = try ClipProbe.probe(try phoneClip(fps: 30))
        let ca = try XCTUnwrap(AVCConfiguration(a.video.extradata)), cb = try XCTUnwrap(AVCConfiguration(b.video.extradata))
        XCTAssertEqual(ca.level, 32)
        XCTAssertEqual(cb.level, 31)
        XCTAssertEqual(ca.bytes, a.video.extradata, "the record is written back as read")
        XCTAssertNotNil(ca.decodingKey)
        XCTAssertEqual(ca.decodingKey, cb.decodingKey)
        XCTAssertTrue(ConformPlan.harmonisable(a, b))
        let small = try ClipProbe.probe(try phoneClip(fps: 30, size: "640x360"))
        XCTAssertFalse(ConformPlan.harmonisable(a, small))
    }
}

extension ConformTests {
    func merge(_ inputs: [String], conform: Bool = true, name: String = #function) throws -> (String, MergeResult) {
        let out = fx.scratch(name).appendingPathComponent("out.mp4")
        if conform { return (out.path, try ConformingMerger(inputs: inputs, options: MergeOptions(output: out)).run().0) }
        return (out.path, try Merger(inputs: inputs, options: MergeOptions(output: out)).run())
    }

    /// MD5 of every decoded picture, in order.
    func pictureHashes(_ path: String) throws -> [String] {
        try Run.run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:v", "-fps_mode", "passthrough", "-f", "framemd5", "-"]).out
            .split(separator: "\n").filter { !$0.hasPrefix("#") }.map { String($0.split(separator: ",").last!).trimmingCharacters(in: .whitespaces) }
    }

    func packetHashes(_ path: String) throws -> [String] {
        try Run.run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:v", "-c", "copy", "-f", "framemd5", "-"]).out
            .split(separator: "\n").filter { !$0.hasPrefix("#") }.map { String($0.split(separator: ",").last!).trimmingCharacters(in: .whitespaces) }
    }

    func testOnePhoneAtTwoFrameRatesJoinsByCopyWithHarmonisedParameterSets() throws {
        let a = try phoneClip(fps: 60), b = try phoneClip(fps: 30)
        let plan = try ConformPlan.make([a, b])
        XCTAssertEqual(plan.clips.map(\.action), [.copy, .harmonise])
        XCTAssertEqual(plan.clips[1].differences, ["H.264 level differs (3.2 vs 3.1)", "frame rate differs (60 vs 30 fps)"])
        // Lossless, so plain merge does it too (no `--conform`), as `--conform` does.
        let (plain, copied) = try merge([a, b], conform: false)
        XCTAssertEqual(copied.ownParameterSets, 1)
        XCTAssertEqual(try pictureHashes(plain), try pictureHashes(a) + pictureHashes(b))
        let (out, r) = try merge([a, b])
        XCTAssertEqual(r.videoFrames, 180)
        XCTAssertEqual(try Probe.decodeErrors(out, keepTimestamps: true), "")
        XCTAssertEqual(try Probe.stream(out, "v:0", "level"), "32", "the track declares the higher level")
        // Nothing re-encoded: every decoded picture is the source's, and every packet but the
        // second clip's first (which carries its parameter sets in front) is copied as it was.
        XCTAssertEqual(try pictureHashes(out), try pictureHashes(a) + pictureHashes(b))
        let packets = try packetHashes(out), sources = try packetHashes(a) + packetHashes(b)
        XCTAssertEqual(packets.count, sources.count)
        XCTAssertEqual(zip(packets, sources).enumerated().filter { $0.element.0 != $0.element.1 }.map(\.offset), [120])
        XCTAssertEqual(Double(try Probe.stream(out, "a:0", "duration")) ?? 0, Double(try Probe.stream(out, "v:0", "duration")) ?? -1, accuracy: 0.05)
    }

    func testMixedClipsReencodeOnlyTheClipsThatDiffer() throws {
        let a = try phoneClip(fps: 30, seconds: 2)
        let small = try fx.clip(
            "conform-small.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=25", "-f", "lavfi", "-i", "sine=r=44100", "-t", "1.5", "-c:v", "libx264", "-profile:v", "main",
                "-c:a", "aac"
            ])
        let silent = try fx.clip("conform-silent.mkv", ["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-t", "1", "-c:v", "libx264", "-an"])
        let b = try phoneClip(fps: 30, seconds: 1)
        let inputs = [a, small, silent, b]
        let plan = try ConformPlan.make(inputs)
        XCTAssertEqual(plan.clips.map(\.action), [.copy, .reencode, .reencode, .copy])
        XCTAssertEqual(plan.clips[1].reason, "video size differs (1280x720 vs 640x360)")
        XCTAssertTrue(plan.json.contains("\"action\":\"re-encode\""))
        XCTAssertThrowsError(try merge(inputs, conform: false))
        let (out, r) = try merge(inputs)
        XCTAssertEqual(try Probe.decodeErrors(out, keepTimestamps: true), "")
        XCTAssertEqual(try Probe.stream(out, "v:0", "width,height"), "1280,720")
        // 60 + 45 (1.5 s at the target's 30 fps) + 30 + 30 pictures, within one a clip.
        XCTAssertEqual(Double(r.videoFrames), 165, accuracy: 2)
        XCTAssertEqual(Double(try Probe.stream(out, "v:0", "duration")) ?? 0, 5.5, accuracy: 0.1)
        XCTAssertEqual(Double(try Probe.stream(out, "a:0", "duration")) ?? 0, Double(try Probe.stream(out, "v:0", "duration")) ?? -1, accuracy: 0.05)
        // The copied clips are bit-exact: the first clip's packets lead the output, the last's end it.
        let packets = try packetHashes(out), first = try packetHashes(a), last = try packetHashes(b)
        XCTAssertEqual(Array(packets.prefix(first.count)), first)
        XCTAssertEqual(Array(packets.suffix(last.count).dropFirst()), Array(last.dropFirst()), "the last clip's first packet carries its parameter sets")
        // The re-encoded 640x360 clip (2.0 to 3.5 s of the output), scaled up, against its source.
        XCTAssertGreaterThanOrEqual(try Probe.ssim(out, small, distortedOptions: ["-ss", "2", "-t", "1.5"]), 0.95)
        // A viewer: chromium plays it to its end, across the parameter set changes.
        let played = try XCTUnwrap(try Probe.browserPlayback([out]).first)
        XCTAssertEqual(played["ended"] as? Bool, true, "\(played)")
        XCTAssertTrue(played["error"] is NSNull, "\(played)")
        XCTAssertEqual(Double((played["frames"] as? Int) ?? 0), Double(r.videoFrames), accuracy: 3)
        // No working files left next to the output.
        let left = try FileManager.default.contentsOfDirectory(atPath: (out as NSString).deletingLastPathComponent)
        XCTAssertEqual(left, ["out.mp4"])
    }
}

extension ConformTests {
    func testAPresetSetsTheTargetAndTheReencodesSettings() throws {
        let a = try phoneClip(fps: 60), b = try phoneClip(fps: 30)
        // web-720p keeps these 720p clips as they are: the plan is the one without a preset.
        let keep = try ConformPlan.make([a, b], preset: TranscodePreset.named("web-720p"))
        XCTAssertEqual(keep.clips.map(\.action), [.copy, .harmonise])
        // web-360p makes them smaller: nothing can be copied, everything is re-encoded with it.
        let smaller = try ConformPlan.make([a, b], preset: TranscodePreset.named("web-360p"))
        XCTAssertEqual(smaller.clips.map(\.action), [.reencode, .reencode])
        XCTAssertEqual(smaller.clips[0].reason, "the preset web-360p makes 640x360 h264, the clips are 1280x720 h264")
        let out = fx.scratch("conform-preset").appendingPathComponent("out.mp4")
        let (r, _) = try ConformingMerger(inputs: [a, b], options: MergeOptions(output: out), preset: TranscodePreset.named("web-360p")).run()
        XCTAssertEqual(r.clips, 2)
        XCTAssertEqual(try Probe.stream(out.path, "v:0", "profile,width,height"), "High,640,360")
        XCTAssertEqual(try Probe.videoFrames(out.path), 180)
        XCTAssertEqual(try Probe.decodeErrors(out.path, keepTimestamps: true), "")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out.deletingLastPathComponent().path), ["out.mp4"])
    }
}

extension ConformTests {
    func testClipsReencodedToJoinHEVCClips() throws {
        func hevc(_ i: Int) throws -> String {
            try fx.clip(
                "conform-hevc-\(i).mp4",
                [
                    "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30,trim=start_frame=\(i * 30):end_frame=\(i * 30 + 30),setpts=PTS-STARTPTS",
                    "-f", "lavfi", "-i", "sine=r=48000", "-t", "1", "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error",
                    "-tag:v", "hvc1", "-c:a", "aac"
                ])
        }
        let a = try hevc(0), b = try hevc(1)
        let h264 = try fx.toneClip(0, seconds: 1, size: "480x270")  // 16:9: it fills the frame when scaled up
        let plan = try ConformPlan.make([a, h264, b])
        XCTAssertEqual(plan.clips.map(\.action), [.copy, .reencode, .copy])
        let (out, r) = try merge([a, h264, b])
        XCTAssertEqual(r.videoFrames, 90)
        XCTAssertEqual(try Probe.stream(out, "v:0", "codec_name,codec_tag_string,width,height"), "hevc,hvc1,640,360")
        XCTAssertEqual(try Probe.decodeErrors(out, keepTimestamps: true), "")
        let packets = try packetHashes(out), first = try packetHashes(a)
        XCTAssertEqual(Array(packets.prefix(first.count)), first, "the first HEVC clip is copied bit for bit")
        XCTAssertGreaterThanOrEqual(try Probe.ssim(out, h264, distortedOptions: ["-ss", "1", "-t", "1"]), 0.95)
    }
}
