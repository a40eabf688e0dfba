import ClipFlowCore
import ClipFlowTestSupport
import Foundation
import XCTest

@testable import ClipFlowMedia

/// The merge's internal hand-offs: clips opened ahead, rendered join regions.
final class MergeHandOffTests: XCTestCase {
    let fx = Fixtures.shared

    /// Clips come in order with all their packets; `stop` releases a helper waiting with a clip
    /// nobody took, and the copy side then gets `interrupted` instead of waiting.
    func testOpenerHandsClipsOverInOrderAndStopReleasesItsHelper() throws {
        let paths = try (0..<5).map { try fx.toneClip($0, seconds: 1) }
        let clips = try paths.map { try ClipProbe.probe($0) }
        let threads = HelperThreads()
        let opener = ClipOpener(clips: clips, audio: true, threads: threads)
        for i in 0..<2 {
            let (mapped, packets) = try opener.next()
            XCTAssertEqual(mapped.path, paths[i])
            XCTAssertEqual(packets.filter { $0.stream == clips[i].video.streamIndex }.count, clips[i].video.packets)
        }
        usleep(200_000)  // the helper fills the queue and waits with one more clip
        let started = Date()
        opener.stop()
        XCTAssertLessThan(Date().timeIntervalSince(started), 2, "stop releases the waiting helper")
        threads.wait()
        XCTAssertThrowsError(try opener.next()) { XCTAssertEqual($0 as? ClipFlowError, .interrupted) }
    }

    /// A region may arrive before an earlier one still in the encoder: the copy takes them in
    /// region order; an error reaches the taker; a region never delivered ends the wait.
    func testRegionResultsAreTakenInRegionOrderWhateverTheArrivalOrder() throws {
        struct EncoderFailed: Error {}
        let results = Merger.RegionResults(count: 3)
        results.queue.push((index: 1, packets: .failure(EncoderFailed())))
        results.queue.push((index: 0, packets: .success(AudioRegionRenderer.Rendered(frames: 4..<10, packets: []))))
        results.queue.endOfStream()
        XCTAssertEqual(try results.take(0).frames, 4..<10)
        XCTAssertThrowsError(try results.take(1)) { XCTAssertTrue($0 is EncoderFailed) }
        XCTAssertThrowsError(try results.take(2), "the renderer ended without region 3: no endless wait") {
            XCTAssertTrue("\($0)".contains("join 3"), "\($0)")
        }
    }
}
