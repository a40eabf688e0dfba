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

    /// The largest difference between two runs of samples, and where it is (the whole arrays
    /// are too long for a failure message).
    static func largestDifference(_ a: [Float], _ b: [Float]) -> String {
        guard a.count == b.count else { return "lengths \(a.count) and \(b.count)" }
        guard let k = a.indices.max(by: { abs(a[$0] - b[$0]) < abs(a[$1] - b[$1]) }), a[k] != b[k] else { return "0" }
        return "\(abs(a[k] - b[k])) at sample \(k)"
    }

    /// Clips without perceptual noise substitution: the noise a decoder substitutes comes from
    /// a random state that runs on from everything it decoded before, so with it no two decodes
    /// that started at different places give the same samples.
    func noiselessToneClip(_ i: Int, seconds: Double) throws -> String {
        try fx.toneClip(i, seconds: seconds, channels: 2, extra: ["-aac_pns", "0"], tag: "-nopns")
    }

    /// A range is decoded from a frame and a half before it (AAC LC): exactly the samples of a
    /// continuous decode of the whole clip (the ffmpeg CLI's, edit list applied), wherever the
    /// range starts on the frame grid.
    func testARangeDecodesAsAContinuousDecodeDoes() throws {
        let path = try noiselessToneClip(1, seconds: 6)
        let clip = try ClipProbe.probe(path)
        XCTAssertEqual(clip.audio?.objectType, 2)
        let whole = try Probe.audioSamples(path, mono: false)  // L R L R ...
        let n = min(clip.audioSamples, Int64(whole.count / 2))
        for start in [1_024, 2_047, 2_048, 2_049, 2_560, 3_071, n / 2 - 511, n - 9_000] {
            let range = start..<(start + 4_096)
            let pcm = try samples(clip, range).pcm
            for ch in 0..<2 {
                let expected = (0..<4_096).map { whole[(Int(start) + $0) * 2 + ch] }
                XCTAssertEqual(Self.largestDifference(pcm[ch], expected), "0", "channel \(ch), range \(range)")
            }
        }
    }

    /// Clips whose audio is configured alike share one decoder, and a decoder that has just
    /// decoded one clip decodes the next as a fresh one does.
    func testClipsConfiguredAlikeShareOneDecoder() throws {
        let paths = try (0..<3).map { try noiselessToneClip($0, seconds: 2) }
        let clips = try paths.map { try ClipProbe.probe($0) }
        let a = try XCTUnwrap(clips[0].audio)
        var start: Int64 = 0
        let planned = clips.map { c -> AudioJoinPlan.Clip in
            defer { start += c.audioSamples }
            return .init(start: start, length: c.audioSamples, priming: c.audio!.priming, frames: Int64(c.audio!.packets))
        }
        let plan = try AudioJoinPlan(clips: planned)
        var shared = DecoderCache(clips: clips, channels: Int(a.channels))
        let all = try shared.timeline(plan: plan, from: 0, to: start)
        XCTAssertEqual(shared.decoderOpens, 1)
        for (i, c) in clips.enumerated() {
            // The same clip alone, through a decoder of its own.
            let own = try samples(c, 0..<c.audioSamples).pcm
            let from = Int(planned[i].start)
            for ch in 0..<2 {
                let joined = Array(all[ch][from..<(from + Int(c.audioSamples))])
                XCTAssertEqual(Self.largestDifference(joined, own[ch]), "0", "clip \(i), channel \(ch)")
            }
        }
    }
}
