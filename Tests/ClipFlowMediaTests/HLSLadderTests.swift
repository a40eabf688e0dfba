import XCTest
@testable import ClipFlowMedia
import ClipFlowTestSupport

/// A ladder from one decode, judged by ffprobe, PyPI m3u8 and chromium.
final class HLSLadderTests: XCTestCase {
    let fx = Fixtures.shared

    func testTwoRungLadderWithAlignedKeyframeSegmentsPlays() throws {
        let src = try fx.clip(
            "ladder-src.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "6", "-c:v", "libx264", "-preset",
                "ultrafast",
                "-c:a", "aac"
            ])
        let dir = fx.scratch("ladder").appendingPathComponent("hls")
        let rungs = [LadderRung(name: "720p", height: 720, maxRate: 3_500_000), LadderRung(name: "360p", height: 360, maxRate: 1_000_000)]
        let r = try HLSLadderWriter(inputs: [src], directory: dir, rungs: rungs, schedule: SegmentSchedule(length: 2), encoderPreset: "ultrafast").run()
        XCTAssertEqual(r.segments, 3)
        for rung in ["720p", "360p"] {
            let folder = dir.appendingPathComponent(rung)
            let segs = (0..<3).map { folder.appendingPathComponent("seg-\($0).m4s").path }
            let all = fx.scratch("ladder-\(rung)").appendingPathComponent("all.mp4").path
            try Data((try ([folder.appendingPathComponent("init.mp4").path] + segs).map { try Data(contentsOf: URL(fileURLWithPath: $0)) }).joined())
                .write(to: URL(fileURLWithPath: all))
            XCTAssertEqual(try Probe.decodeErrors(all), "", rung)
            XCTAssertEqual(try Probe.videoFrames(all), 180, rung)
            for s in segs {
                let info = try XCTUnwrap(FragmentInfo([UInt8](try Data(contentsOf: URL(fileURLWithPath: s)))))
                XCTAssertTrue(info.startsWithSyncSample, s)
                XCTAssertEqual(info.sampleCount, 60, s)
            }
        }
        let played = try XCTUnwrap(try Probe.browserPlayback([r.master.path]).first)
        XCTAssertEqual(played["ended"] as? Bool, true, "\(played)")
        XCTAssertTrue(played["error"] is NSNull, "\(played)")
        // On a slow network the player takes the lower rendition (the segments it fetches say which).
        let slow = try XCTUnwrap(try Probe.browserPlayback([r.master.path], options: ["--rate", "1", "--throttle", "2500"]).first)
        XCTAssertEqual(slow["ended"] as? Bool, true, "\(slow)")
        let fetched = (slow["segments"] as? [String] ?? []).filter { !$0.hasPrefix("audio/") }
        XCTAssertTrue(fetched.suffix(2).allSatisfy { $0.hasPrefix("360p/") }, "\(fetched)")
        XCTAssertEqual(try Probe.stream(dir.appendingPathComponent("poster.jpg").path, "v:0", "width,height"), "1280,720")
        let feed = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(contentsOf: dir.appendingPathComponent("feed.json"))) as? [String: Any])
        let video = try XCTUnwrap((feed["videos"] as? [[String: Any]])?.first)
        XCTAssertEqual(video["id"] as? String, "hls")
        XCTAssertEqual(video["master"] as? String, "master.m3u8")
        XCTAssertEqual((video["duration"] as? Double) ?? 0, 6, accuracy: 0.05)
        let prefetch = try XCTUnwrap(video["prefetch"] as? [[String: String]])
        XCTAssertEqual(prefetch.map { $0["segment"] ?? "" }, ["360p/seg-0.m4s", "audio/seg-0.m4s"])
        for p in prefetch { XCTAssertTrue(FileManager.default.fileExists(atPath: dir.appendingPathComponent(p["init"]!).path)) }
        // Nothing is replaced.
        XCTAssertThrowsError(try HLSLadderWriter(inputs: [src], directory: dir, rungs: rungs, schedule: SegmentSchedule(length: 2)).run()) { e in
            XCTAssertTrue("\(e)".contains("exists"), "\(e)")
        }
    }
}

extension HLSLadderTests {
    func testPortraitSourcesGetPortraitRenditions() throws {
        let plain = try fx.clip(
            "ladder-portrait-src.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "2", "-c:v", "libx264", "-preset",
                "ultrafast",
                "-c:a", "aac"
            ])
        let turned = fx.scratch("ladder-portrait").appendingPathComponent("turned.mp4")
        _ = try Merger(inputs: [plain], options: MergeOptions(output: turned, rotate: 90)).run()  // displayed 720x1280, as a phone's
        let dir = fx.scratch("ladder-portrait-out").appendingPathComponent("hls")
        _ = try HLSLadderWriter(inputs: [turned.path], directory: dir, schedule: SegmentSchedule(length: 2), encoderPreset: "ultrafast").run()
        let master = try String(contentsOf: dir.appendingPathComponent("master.m3u8"), encoding: .utf8)
        XCTAssertTrue(master.contains("RESOLUTION=720x1280"), master)
        XCTAssertTrue(master.contains("RESOLUTION=540x960"), master)
        XCTAssertTrue(master.contains("RESOLUTION=360x640"), master)
        XCTAssertFalse(master.contains("1080"), "never above the source: \(master)")
        XCTAssertEqual(try HLSLint.lint(directory: dir), [])
    }

    func testSegmentSchedules() {
        XCTAssertEqual(SegmentSchedule.vod.boundary(after: 0), 6)
        XCTAssertEqual(SegmentSchedule.vod.boundary(after: 6), 12)
        XCTAssertEqual(SegmentSchedule.feed.boundary(after: 0), 1)
        XCTAssertEqual(SegmentSchedule.feed.boundary(after: 1), 3)
        XCTAssertEqual(SegmentSchedule.feed.boundary(after: 2.5), 3)
        XCTAssertEqual(SegmentSchedule.feed.boundary(after: 3), 5)
    }

    func testFeedProfileStartsWithAOneSecondSegment() throws {
        let src = try fx.clip(
            "ladder-feed-src.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "5", "-c:v", "libx264", "-preset", "ultrafast",
                "-c:a", "aac"
            ])
        let dir = fx.scratch("ladder-feed").appendingPathComponent("hls")
        let r = try HLSLadderWriter(
            inputs: [src], directory: dir, rungs: [LadderRung(name: "360p", height: 360, maxRate: 1_000_000)], schedule: .feed, encoderPreset: "ultrafast"
        ).run()
        XCTAssertEqual(r.segments, 3)  // 0-1, 1-3, 3-5
        let counts = try (0..<3).map { i in
            try XCTUnwrap(FragmentInfo([UInt8](try Data(contentsOf: dir.appendingPathComponent("360p/seg-\(i).m4s"))))).sampleCount
        }
        XCTAssertEqual(counts, [30, 60, 60])
        let playlist = try String(contentsOf: dir.appendingPathComponent("360p.m3u8"), encoding: .utf8)
        XCTAssertTrue(playlist.contains("#EXT-X-TARGETDURATION:2"), playlist)
        XCTAssertTrue(playlist.contains("#EXTINF:1.000000,"), playlist)
    }
}

/// `HLSLint` on our ladders, on the ffmpeg CLI's, and on seeded defects.
final class HLSLintTests: XCTestCase {
    let fx = Fixtures.shared

    func ladder(_ name: String, schedule: SegmentSchedule = SegmentSchedule(length: 2)) throws -> URL {
        let src = try fx.clip(
            "lint-src.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "6", "-c:v", "libx264", "-preset",
                "ultrafast",
                "-c:a", "aac"
            ])
        let dir = fx.scratch(name).appendingPathComponent("hls")
        let rungs = [LadderRung(name: "720p", height: 720, maxRate: 3_500_000), LadderRung(name: "360p", height: 360, maxRate: 1_000_000)]
        _ = try HLSLadderWriter(inputs: [src], directory: dir, rungs: rungs, schedule: schedule, encoderPreset: "ultrafast").run()
        return dir
    }

    func codes(_ f: [LintFinding], _ s: LintFinding.Severity) -> Set<String> { Set(f.filter { $0.severity == s }.map(\.code)) }

    func testOurLadderIsClean() throws {
        XCTAssertEqual(try HLSLint.lint(directory: try ladder("lint-clean")), [])
    }

    func testFFmpegsOwnLadderIsFlagged() throws {
        let dir = fx.scratch("lint-ffmpeg")
        try Run.run(
            [
                "ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "6",
                "-filter_complex", "[0:v]split=2[a][b];[a]scale=-2:720[v0];[b]scale=-2:360[v1]", "-map", "[v0]", "-map", "[v1]", "-map", "1:a",
                "-c:v", "libx264", "-preset", "ultrafast", "-crf", "23", "-g", "60", "-sc_threshold", "0", "-c:a", "aac", "-f", "hls", "-hls_segment_type",
                "fmp4",
                "-var_stream_map", "v:0,agroup:aud v:1,agroup:aud a:0,agroup:aud", "-master_pl_name", "master.m3u8", "-hls_time", "2",
                "-hls_playlist_type", "vod", "-hls_segment_filename", dir.appendingPathComponent("out_%v_%03d.m4s").path,
                "-hls_fmp4_init_filename", "init_%v.mp4", dir.appendingPathComponent("out_%v.m3u8").path
            ])
        let f = try HLSLint.lint(directory: dir)
        XCTAssertTrue(codes(f, .error).contains("bandwidth-below-peak"), "\(f)")
        XCTAssertTrue(
            codes(f, .warning).isSuperset(of: ["missing-average-bandwidth", "missing-frame-rate", "no-iframe-playlists", "independent-segments"]), "\(f)")
    }

    func testSeededDefectsAreFound() throws {
        let dir = try ladder("lint-seeded")
        // A wrong CODECS.
        let master = dir.appendingPathComponent("master.m3u8")
        let text = try String(contentsOf: master, encoding: .utf8)
        try text.replacingOccurrences(of: "avc1.64001f", with: "avc1.640028").replacingOccurrences(of: "avc1.42c01f", with: "avc1.640028")
            .write(to: master, atomically: true, encoding: .utf8)
        // A segment longer than the target.
        let p720 = dir.appendingPathComponent("720p.m3u8")
        let media = try String(contentsOf: p720, encoding: .utf8)
        try media.replacingOccurrences(of: "#EXTINF:2.000000,\n720p/seg-1.m4s", with: "#EXTINF:3.600000,\n720p/seg-1.m4s").write(
            to: p720, atomically: true, encoding: .utf8)
        // A rendition cut elsewhere: 360p from a ladder with a 1 s first segment.
        let other = try ladder("lint-other", schedule: .feed)
        try FileManager.default.removeItem(at: dir.appendingPathComponent("360p"))
        try FileManager.default.copyItem(at: other.appendingPathComponent("360p"), to: dir.appendingPathComponent("360p"))
        try FileManager.default.removeItem(at: dir.appendingPathComponent("360p.m3u8"))
        try FileManager.default.copyItem(at: other.appendingPathComponent("360p.m3u8"), to: dir.appendingPathComponent("360p.m3u8"))
        let f = try HLSLint.lint(directory: dir)
        // The three seeded defects (the swapped rendition's rates also differ from what the master
        // declares, which the lint rightly reports too).
        XCTAssertTrue(codes(f, .error).isSuperset(of: ["codecs-mismatch", "segment-too-long", "misaligned"]), "\(f)")
        XCTAssertTrue(f.contains { $0.code == "misaligned" && $0.file == "360p.m3u8" })
    }
}
