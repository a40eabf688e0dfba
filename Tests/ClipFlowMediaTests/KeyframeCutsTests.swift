import XCTest
@testable import ClipFlowMedia

/// Where a ladder holding the source's packets starts its segments (`SourceKeyframes.cuts`), and
/// what the segment schedule makes of the cuts.
final class KeyframeCutsTests: XCTestCase {
    let half = 0.5 / 30

    func keys(_ times: [Double], end: Double) -> SourceKeyframes {
        SourceKeyframes(times: times, startsWithKeyframe: true, end: end, bytes: 0)
    }

    func testAKeyframeEverySecondCutsOnTheSchedule() {
        let k = keys((0..<20).map(Double.init), end: 20)
        XCTAssertEqual(k.cuts(.vod, halfFrame: half), [0, 6, 12, 18])
        XCTAssertEqual(k.cuts(.feed, halfFrame: half), [0, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19])
        XCTAssertEqual(k.longestGap, 1)
    }

    func testTheNearestKeyframeNeverMakesAShortSegment() {
        // Scene cuts at 0.2 and 6.5, then every 5 s: nothing cut 0.2 s in; 6.5 is nearer 6 than 11.
        let k = keys([0, 0.2, 6.5, 11.5, 16.5], end: 20)
        XCTAssertEqual(k.cuts(.vod, halfFrame: half), [0, 6.5, 11.5, 16.5])
        // A keyframe within half a frame of the end starts no segment.
        XCTAssertEqual(keys([0, 6, 11.99], end: 12).cuts(.vod, halfFrame: half), [0, 6])
        XCTAssertEqual(keys([0, 1.001, 3.003], end: 5).cuts(.feed, halfFrame: half), [0, 1.001, 3.003])
    }

    func testASchedulesBoundariesFollowItsCuts() {
        let s = SegmentSchedule.feed.cutting(at: [0, 2.002, 4.004])
        XCTAssertEqual(s.boundary(after: 0), 2.002)
        XCTAssertEqual(s.boundary(after: 2.002), 4.004)
        XCTAssertEqual(s.boundary(after: 5), .infinity)
        XCTAssertEqual(s.boundary(after: 5, ticksPerSecond: 90_000), Int64.max)
        XCTAssertEqual(SegmentSchedule.feed.boundary(after: 0.5, ticksPerSecond: 90_000), 90_000)
    }

    func testCodecListsAndRungNames() {
        XCTAssertEqual(VideoCodec.parse("h264"), [.h264])
        XCTAssertEqual(VideoCodec.parse("AV1, h264"), [.h264, .av1])
        for bad in ["", "av1", "h264,h264", "h264,vp9"] { XCTAssertNil(VideoCodec.parse(bad), bad) }
        XCTAssertEqual(LadderRung.standard[1].inAV1.name, "720p-av1")
        XCTAssertEqual(LadderRung.height(named: "720p-av1"), 720)
        XCTAssertEqual(LadderRung.ordered(["360p-av1", "copy", "360p", "1080p", "720p-av1"]), ["copy", "1080p", "360p", "720p-av1", "360p-av1"])
    }
}
