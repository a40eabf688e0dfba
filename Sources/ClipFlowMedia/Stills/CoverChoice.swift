internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// The choice of a cover among candidate pictures of a video, taken near `fractions` of its
/// length: pictures that are black, white, blank or fading (low mean, high mean or low contrast of
/// their luma, `LumaStats`) are passed over, and the one with the most detail wins; when every
/// candidate is passed over, the most detailed of them. Used by `Thumbnailer` (candidates sought
/// in a file) and `PassingCoverChoice` (candidates taken as pictures pass). `Picture` is what is
/// kept of the chosen candidate (a decoded frame, or covers encoded from it). A value type owned
/// by its user.
struct CoverChoice<Picture> {
    /// Where candidates are taken, as fractions of the video's length, in the order tried.
    static var fractions: [Double] { [0.1, 0.25, 0.4, 0.55, 0.7, 0.85, 0.02] }

    typealias Candidate = (picture: Picture, time: Double)
    private var best: (score: Double, candidate: Candidate)?
    private var fallback: (score: Double, candidate: Candidate)?

    /// Weighs a candidate at `time` seconds by `luma`, its statistics; `picture` makes what is
    /// kept of it, called only when it becomes the choice. Keeps at most the best so far, and a
    /// fallback only while no candidate is usable.
    mutating func consider(time: Double, luma: LumaStats, _ picture: () throws -> Picture) rethrows {
        let score = luma.deviation
        if luma.mean > 24 && luma.mean < 232 && score > 10, best == nil || score > best!.score {
            best = (score, (try picture(), time))
            fallback = nil
        } else if best == nil, fallback == nil || score > fallback!.score {
            fallback = (score, (try picture(), time))
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
/// none of those reached, the first picture is the cover. What is kept of the chosen picture is
/// what `make` makes of it when it is chosen (the covers, encoded), not the picture: no picture is
/// held beyond the first, and that one only until a candidate is weighed. Owned by the stage that
/// feeds it.
struct PassingCoverChoice<Cover> {
    private var choice = CoverChoice<Cover>()
    private let make: (VideoFrame) throws -> Cover
    /// Candidate times still ahead, earliest first.
    private var ahead: [Double] = []
    private var first: VideoFrame?
    private let wrapper: Frame

    init(_ make: @escaping (VideoFrame) throws -> Cover) throws {
        self.make = make
        wrapper = try Frame()
    }

    /// The stream's length in seconds (announced in band, `StreamParameters.duration`).
    mutating func expect(duration: Double) {
        ahead = duration > 0 ? CoverChoice<Cover>.fractions.map { $0 * duration }.sorted() : []
    }

    /// Looks at `v` (a picture in `VideoFrame`'s layout).
    mutating func look(at v: VideoFrame) throws {
        if first == nil, choice.chosen == nil { first = v }
        guard let next = ahead.first, v.time >= next - 1e-6 else { return }
        ahead.removeAll { $0 <= v.time + 1e-6 }
        let luma = try PicturePacker.withFrame(v, in: wrapper, what: "the cover") { try LumaStats(of: $0) }
        let make = self.make
        try choice.consider(time: v.time, luma: luma) { try make(v) }
        first = nil  // a candidate is weighed: the first picture is not needed any more
    }

    /// The cover and the time of its picture, or nil when no picture passed.
    func chosen() throws -> (cover: Cover, time: Double)? {
        if let c = choice.chosen { return (c.picture, c.time) }
        guard let first else { return nil }
        return (try make(first), first.time)
    }
}
