import XCTest
@testable import ClipFlowMedia
import ClipFlowTestSupport

/// The join renderer reads the audio near clip edges from the probe's edge tables (pread, no
/// demuxer); anything else goes through the clip's demuxer. Both must give the same samples.
final class JoinAudioSourceTests: XCTestCase {
    let fx = Fixtures.shared

    /// One clip's timeline samples [from, to) through a fresh decoder cache.
    func samples(_ clip: ClipInfo, _ range: Range<Int64>) throws -> (pcm: [[Float]], demuxerOpens: Int) {
        let a = try XCTUnwrap(clip.audio)
        let plan = try AudioJoinPlan(clips: [
            .init(
                start: 0, length: clip.audioSamples, priming: a.priming,
                frames: Int64(a.packets))
        ])
        var cache = DecoderCache(clips: [clip], channels: Int(a.channels))
        let pcm = try cache.timeline(plan: plan, from: range.lowerBound, to: range.upperBound)
        return (pcm, cache.demuxerOpens)
    }

    func testEdgeTablesAndTheDemuxerGiveTheSameSamples() throws {
        let path = try fx.toneClip(0, seconds: 6, channels: 2)
        let clip = try ClipProbe.probe(path)
        let a = try XCTUnwrap(clip.audio)
        XCTAssertEqual(a.edges.total, a.packets)
        XCTAssertEqual(a.edges.head.count, AudioEdges.edgeCount)
        XCTAssertEqual(a.edges.tail.count, AudioEdges.edgeCount)
        var noEdges = clip
        noEdges.audio!.edges = AudioEdges()
        let n = clip.audioSamples
        XCTAssertGreaterThan(n, 6 * 48_000 - 1024)
        // The start, the end, and the middle of the clip (outside the edges: demuxer either way).
        for range in [0..<9_000, (n - 9_000)..<n, (n / 2 - 4_000)..<(n / 2 + 4_000)] {
            let viaEdges = try samples(clip, range)
            let viaDemuxer = try samples(noEdges, range)
            XCTAssertEqual(viaDemuxer.demuxerOpens, 1)
            let middle =
                range.lowerBound > 48 * 1024
                && range.upperBound < n - 48 * 1024
            XCTAssertEqual(viaEdges.demuxerOpens, middle ? 1 : 0, "range \(range)")
            XCTAssertEqual(viaEdges.pcm.count, 2)
            XCTAssertEqual(viaEdges.pcm, viaDemuxer.pcm, "range \(range)")
            // Not silence: a tone was decoded.
            XCTAssertGreaterThan(viaEdges.pcm[0].map { abs($0) }.max() ?? 0, 0.05, "range \(range)")
        }
    }
}
