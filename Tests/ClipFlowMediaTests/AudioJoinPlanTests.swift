import XCTest
@testable import ClipFlowMedia

/// Table tests of the audio join planner: every output frame produced once, copies placed at or
/// just before their exact position, regions wide enough for a gentle slide.
final class AudioJoinPlanTests: XCTestCase {
    typealias C = AudioJoinPlan.Clip

    func clip(_ start: Int64, _ length: Int64, priming: Int64 = 1024) -> C {
        C(start: start, length: length, priming: priming, frames: (priming + length + 1023) / 1024)
    }

    func testSingleClipIsCopiedWhole() throws {
        let p = try AudioJoinPlan(clips: [clip(0, 192_000)])
        XCTAssertEqual(p.regions, [])
        XCTAssertEqual(p.copies.map(\.frames), [0..<189])
        XCTAssertEqual(p.frameCount, 189)
        XCTAssertEqual(p.lastFrameDuration, 192_000 + 1024 - 188 * 1024)
    }

    func testTable() throws {
        struct Row { let name: String; let clips: [C] }
        let rows: [Row] = [
            Row(name: "two 4 s clips at 48 kHz (half-frame misaligned)", clips: [clip(0, 192_000), clip(192_000, 192_000)]),
            Row(name: "aligned join", clips: [clip(0, 1024 * 100), clip(1024 * 100, 1024 * 50)]),
            Row(name: "44.1 kHz, Apple priming 2112", clips: [clip(0, 176_400, priming: 2112), clip(176_400, 176_400, priming: 2112)]),
            Row(
                name: "tiny middle clip swallowed by one region",
                clips: [clip(0, 96_000), clip(96_000, 2_000), clip(98_000, 96_000)]),
            Row(name: "audio shorter than video (gap)", clips: [clip(0, 90_000), clip(96_000, 96_000)]),
            Row(name: "audio longer than video (trimmed)", clips: [C(start: 0, length: 120_000, priming: 1024, frames: 119), clip(96_000, 96_000)]),
            Row(name: "sixty joins", clips: (0..<60).map { clip(Int64($0) * 192_000, 192_000) })
        ]
        for row in rows {
            let p = try AudioJoinPlan(clips: row.clips)
            // Exactly once, in order (validate() also checks this; repeat it here as the spec):
            // copies and the frames regions must re-encode; a region's optional frames (room to
            // repair a join) lie in the copies of the clips on their side.
            for r in p.regions {
                XCTAssertTrue(r.frames.lowerBound <= r.least.lowerBound && r.least.upperBound <= r.frames.upperBound, row.name)
                for k in r.frames where !r.least.contains(k) {
                    let clip = k < r.least.lowerBound ? r.clips.lowerBound : r.clips.upperBound
                    XCTAssertTrue(p.copies.contains { $0.clip == clip && $0.frames.contains(k) }, "\(row.name): optional frame \(k)")
                }
            }
            var covered: [Range<Int64>] = p.copies.map(\.frames) + p.regions.map(\.least)
            covered.sort { $0.lowerBound < $1.lowerBound }
            var next: Int64 = 0
            for r in covered { XCTAssertEqual(r.lowerBound, next, row.name); next = r.upperBound }
            XCTAssertEqual(next, p.frameCount, row.name)
            // Shifts in (-1024, 0]; regions at least the requested length.
            for i in row.clips.indices {
                let s = p.copyShift(clip: i)
                XCTAssertTrue(s <= 0 && s > -1024, "\(row.name): shift \(s)")
            }
            for r in p.regions {
                XCTAssertGreaterThanOrEqual(r.least.count, 6, row.name)
                XCTAssertEqual(r.slideZone.count, (r.frames.count - 2) * 1024, row.name)
            }
            // Total length: timeline end within one frame.
            let outSamples = (p.frameCount - 1) * 1024 + p.lastFrameDuration - p.priming
            XCTAssertLessThan(abs(outSamples - p.timelineEnd), 1024, row.name)
        }
    }

    func testCopiedFramesNeverOverlapTheNextClipsStart() throws {
        // Clip 0's audio runs 24000 samples into clip 1's video: its copied frames must end before.
        let p = try AudioJoinPlan(clips: [C(start: 0, length: 120_000, priming: 1024, frames: 119), clip(96_000, 96_000)])
        XCTAssertEqual(p.ends[0], 96_000)
        let c0 = try XCTUnwrap(p.copies.first { $0.clip == 0 })
        // Last copied frame's second half ends within clip 0's kept audio.
        XCTAssertLessThanOrEqual((c0.frames.upperBound - c0.offset) * 1024, 1024 + 96_000)
    }

    func testRegionSlidesOnlyAwayFromItsSeams() {
        let r = AudioJoinPlan.Region(frames: 10..<20, leftShift: 0, rightShift: -900, clips: 0...1)
        // The seams (one frame each side of the region's edges) keep the copied clips' shifts:
        // the shift may change only in raw [11*1024, 19*1024).
        XCTAssertEqual(r.slideZone, 11 * 1024..<19 * 1024)
    }
}
