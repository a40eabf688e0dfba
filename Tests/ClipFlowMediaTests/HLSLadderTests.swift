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
