internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// The choice of a cover among candidate pictures of a video, taken near `fractions` of its
/// length: pictures that are black, white, blank or fading (low mean, high mean or low contrast of
/// their luma, `LumaStats`) are passed over, and the one with the most detail wins; when every
/// candidate is passed over, the most detailed of them. Used by `Thumbnailer` (candidates sought
/// in a file) and `PassingCoverChoice` (candidates taken as pictures pass). A value type owned by
/// its user.
struct CoverChoice<Picture> {
    /// Where candidates are taken, as fractions of the video's length, in the order tried.
    static var fractions: [Double] { [0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 0.02] }

    typealias Candidate = (picture: Picture, time: Double)
    private var best: (score: Double, candidate: Candidate)?
    private var fallback: (score: Double, candidate: Candidate)?

    /// Weighs `picture` (at `time` seconds) by `luma`, its statistics. Keeps at most the best
    /// picture so far, and a fallback only while no picture is usable.
    mutating func consider(_ picture: Picture, time: Double, luma: LumaStats) {
        let score = luma.deviation
        if luma.mean > 24 && luma.mean < 232 && score > 10, best == nil || score > best!.score {
            best = (score, (picture, time))
            fallback = nil
        } else if best == nil, fallback == nil || score > fallback!.score {
            fallback = (score, (picture, time))
        }
    }

    /// The cover, once at least one candidate was weighed.
    var chosen: Candidate? { (best ?? fallback)?.candidate }
}

/// Mean and standard deviation of a picture's luma, measured on a grey copy of at most 64x36
/// (never enlarged: a picture of extreme shape, 4094x2, cannot be stretched to 16:9).
struct LumaStats {
    var mean: Double
    var deviation: Double

    init(mean: Double, deviation: Double) {
        self.mean = mean
        self.deviation = deviation
    }

    init(of frame: Frame) throws {
        let f = frame.f.pointee
        let gw = max(1, min(64, Int(f.width))), gh = max(1, min(36, Int(f.height)))
        let g = try Frame()
        g.f.pointee.width = Int32(gw)
        g.f.pointee.height = Int32(gh)
        g.f.pointee.format = AV_PIX_FMT_GRAY8.rawValue
        try FF.check(av_frame_get_buffer(g.f, 0), "allocating")
        try Scaler(
            srcW: f.width, srcH: f.height, srcFormat: AVPixelFormat(rawValue: f.format),
            dstW: Int32(gw), dstH: Int32(gh), dstFormat: AV_PIX_FMT_GRAY8
        ).scale(frame, into: g)
        var sum = 0.0, sq = 0.0
        guard let d = g.data(0) else {
            (mean, deviation) = (0, 0)
            return
        }
        let ls = g.linesize(0)
        for y in 0..<gh { for x in 0..<gw { let v = Double(d[y * ls + x]); sum += v; sq += v * v } }
        let n = Double(gw * gh)
        mean = sum / n
        deviation = (max(0, sq / n - mean * mean)).squareRoot()
    }
}

/// A cover chosen from raw pictures as they pass (a ladder's decoded, upright pictures on their
/// way to an encoder), as `Thumbnailer` chooses one from a file: the first picture at or after
/// each of `CoverChoice.fractions` of the stream's length is weighed; with no length known, or
/// none of those reached, the first picture is the cover. One picture is kept at a time, by
/// reference (its bytes are shared, not copied). Owned by the stage that feeds it.
struct PassingCoverChoice {
    private var choice = CoverChoice<VideoFrame>()
    /// Candidate times still ahead, earliest first.
    private var ahead: [Double] = []
    private var first: VideoFrame?
    private let wrapper: Frame

    init() throws { wrapper = try Frame() }

    /// The stream's length in seconds (announced in band, `StreamParameters.duration`).
    mutating func expect(duration: Double) {
        ahead = duration > 0 ? CoverChoice<VideoFrame>.fractions.map { $0 * duration }.sorted() : []
    }

    /// Looks at `v` (a picture in `VideoFrame`'s layout).
    mutating func look(at v: VideoFrame) throws {
        if first == nil, choice.chosen == nil { first = v }
        guard let next = ahead.first, v.time >= next - 1e-6 else { return }
        ahead.removeAll { $0 <= v.time + 1e-6 }
        let luma = try PicturePacker.withFrame(v, in: wrapper, what: "the cover") { try LumaStats(of: $0) }
        choice.consider(v, time: v.time, luma: luma)
        first = nil  // a candidate is kept: the first picture is not needed any more
    }

    /// The cover: the chosen picture and its time, or nil when no picture passed.
    var chosen: (picture: VideoFrame, time: Double)? { choice.chosen ?? first.map { ($0, $0.time) } }
}
