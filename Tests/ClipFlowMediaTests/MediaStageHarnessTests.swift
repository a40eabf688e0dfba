import XCTest
import Foundation
import ClipFlowCore
import ClipFlowMedia
import ClipFlowTestSupport

/// The record stage alone in the harness: raw pictures in, a clip item out as each fragment
/// closes, its events, nothing left at finish. (Merge and thumbnail: `MediaStageTests`.)
final class MediaStageHarnessTests: XCTestCase {
    let fx = Fixtures.shared

    func picture(_ n: Int, width: Int = 160, height: Int = 128) -> VideoFrame {
        var data = Data(count: width * height * 3 / 2)
        data[0..<(width * height)] = Data(repeating: UInt8(40 + n % 100), count: width * height)
        return VideoFrame(width: width, height: height, format: .yuv420p, data: data, time: Double(n) / 30, sequence: Int64(n), nominalRate: 30)
    }

    func testRecordStagePassesOnEachFragmentAsItCloses() throws {
        let dir = fx.scratch("record-harness").path
        var o = RecordOptions(directory: dir)
        o.segmentSeconds = 1
        let h = StageHarness(RecordStage(id: "rec", options: o))
        try h.prepare()
        let caps = StreamParameters(port: .frames, video: VideoParameters(width: 160, height: 128, pixelFormat: .yuv420p, frameRate: 30))
        XCTAssertEqual(try h.negotiate([caps]), StreamParameters(port: .clips, container: "mp4"))
        for n in 0..<30 { XCTAssertEqual(try h.push(.frame(.video(picture(n)))), .ok) }
        XCTAssertNil(h.pull(), "the first fragment is still open")
        XCTAssertEqual(try h.push(.frame(.video(picture(30)))), .ok)
        let first = try XCTUnwrap(h.pull(), "the 31st picture closed the first fragment")
        XCTAssertEqual(first.type, .clips)
        XCTAssertEqual(first.path, dir + "/clip-0001.mp4")
        XCTAssertEqual(first.bytes, Int64(try Data(contentsOf: URL(fileURLWithPath: dir + "/clip-0001.mp4")).count))
        for n in 31..<45 { _ = try h.push(.frame(.video(picture(n)))) }
        try h.endOfStream()
        XCTAssertEqual(h.pull()?.path, dir + "/clip-0002.mp4")
        XCTAssertEqual(h.finish().count, 0)
        XCTAssertEqual(try Probe.videoFrames(dir + "/clip-0001.mp4"), 30)
        XCTAssertEqual(try Probe.videoFrames(dir + "/clip-0002.mp4"), 15)
        XCTAssertEqual(
            h.events.filter {
                if case .output = $0.kind { return true }; return false
            }.count, 2)
    }

    /// Refused when offered something it cannot encode (the harness's view of negotiation).
    func testRecordStageRefusesMJPEGWhenNegotiating() throws {
        let h = StageHarness(RecordStage(id: "rec", options: RecordOptions(directory: fx.scratch("record-harness-mjpeg").path)))
        let mjpeg = StreamParameters(port: .frames, video: VideoParameters(width: 640, height: 480, pixelFormat: .mjpeg))
        XCTAssertThrowsError(try h.negotiate([mjpeg])) { e in
            XCTAssertEqual((e as? StreamMismatch)?.parameter, "pixel format")
        }
        h.finish()
    }

    /// A merge only lists the clips it receives: its queue never blocks on their size on disk.
    func testMergeQueueHasNoByteLimit() {
        XCTAssertEqual(MergeStage.kind.queue.maxBytes, LinkLimits.noByteLimit)
        XCTAssertEqual(MergeStage.kind.queue.maxItems, 1024)
    }
}
