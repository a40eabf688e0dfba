internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// When a ladder's top rung is the source's own pictures (a passthrough: its packets cut into
/// segments at its keyframes, the lower rungs encoded and cut at the same instants), and why not.
/// A source fits when a player takes it as a rendition of that rung: H.264 (8-bit 4:2:0;
/// Baseline, Main or High) or HEVC (Main or Main 10) with its parameter sets in MP4 form, at a
/// level such a picture needs (H.264 4.2, HEVC 4.1 up to 1080 lines), upright and not mirrored
/// (the encoded rungs are upright pixels), no larger than a quarter above the rung, an average
/// bit rate within `maxRate` times the rung's cap, starting with a keyframe, never longer than
/// a segment without one, and no picture shown before a keyframe decoded after it (closed GOPs:
/// each segment stands alone). H.264 plays in every browser: it stands in for the rung. HEVC plays in
/// Safari and where the system decodes it, not everywhere: it is a rendition beside the rung,
/// which is encoded too, so every player has the whole H.264 ladder.
public struct Passthrough: Sendable, Equatable {
    /// The highest average bit rate a source passed through may have, as a multiple of its rung's
    /// cap (`LadderRung.maxRate`).
    public var maxRate: Double

    public init(maxRate: Double = Passthrough.defaultMaxRate) { self.maxRate = maxRate }

    public static let defaultMaxRate = 2.0

    /// What a source is to a ladder.
    enum Verdict: Equatable {
        /// Its packets are the rung (H.264): the rung is not encoded.
        case standsIn
        /// Its packets are a rendition beside the rung (HEVC), which is encoded too.
        case beside
        case refused(String)
    }

    /// The rung a source whose short side is `short` pixels stands in for: the tallest not above
    /// it (the one an automatic ladder tops out at), else the smallest.
    static func rung(forShortSide short: Int, in rungs: [LadderRung]) -> LadderRung? {
        rungs.filter { $0.height <= short }.max { $0.height < $1.height } ?? rungs.min { $0.height < $1.height }
    }

    /// What stream `stream` of `source` is to `rung` by its parameters (codec, level, picture),
    /// before its packets are read (`refusal(keys:...)` judges those).
    func verdict(_ source: Demuxer, stream: Int, rung: LadderRung) -> Verdict {
        let par = source.codecpar(stream).pointee
        let verdict: Verdict
        switch par.codec_id {
        case AV_CODEC_ID_H264: verdict = .standsIn
        case AV_CODEC_ID_HEVC: verdict = .beside
        default: return .refused("its video is \(String(cString: avcodec_get_name(par.codec_id))), and only H.264 (or HEVC beside it) is passed through")
        }
        if let why = refusal(par, verdict: verdict, rung: rung) ?? refusal(picture: source, stream: stream, rung: rung) { return .refused(why) }
        return verdict
    }

    /// What the codec's own fields refuse.
    private func refusal(_ par: AVCodecParameters, verdict: Verdict, rung: LadderRung) -> String? {
        let format = AVPixelFormat(rawValue: par.format)
        let formatName = av_get_pix_fmt_name(format).map { String(cString: $0) } ?? "of an unknown pixel format"
        if verdict == .beside {
            if par.extradata_size < 23 || par.extradata?[0] != 1 { return "its HEVC parameter sets are not stored in MP4 form (hvcC)" }
            if ![1, 2].contains(par.profile) { return "its HEVC profile (\(par.profile)) is not Main or Main 10" }
            if format != AV_PIX_FMT_YUV420P && format != AV_PIX_FMT_YUV420P10LE { return "its pictures are \(formatName), not 4:2:0" }
            let maxLevel = rung.height <= 1080 ? 123 : rung.height <= 1440 ? 150 : 153
            if par.level > maxLevel {
                return "its HEVC level \(Double(par.level) / 30) is above \(Double(maxLevel) / 30), the most a \(rung.name) rendition needs"
            }
            return nil
        }
        if par.extradata_size < 7 || par.extradata?[0] != 1 { return "its H.264 parameter sets are not stored in MP4 form (avcC)" }
        if format != AV_PIX_FMT_YUV420P && format != AV_PIX_FMT_YUVJ420P { return "its pictures are \(formatName), not 8-bit 4:2:0" }
        if ![66, 77, 100].contains(par.profile & ~(FF_PROFILE_H264_CONSTRAINED | FF_PROFILE_H264_INTRA)) || par.profile & FF_PROFILE_H264_INTRA != 0 {
            return "its H.264 profile (\(par.profile)) is not Baseline, Main or High"
        }
        let maxLevel = rung.height <= 1080 ? 42 : rung.height <= 1440 ? 51 : 52
        if par.level > maxLevel {
            return "its H.264 level \(Double(par.level) / 10) is above \(Double(maxLevel) / 10), the most a \(rung.name) rendition needs"
        }
        return nil
    }

    /// What the picture refuses.
    private func refusal(picture source: Demuxer, stream: Int, rung: LadderRung) -> String? {
        let par = source.codecpar(stream).pointee
        let orientation = DisplayOrientation(of: source, stream: stream)
        if orientation.mirrored || orientation.turn != 0 {
            return "its pictures are \(orientation.mirrored ? "mirrored" : "turned") by a display matrix, and the encoded rungs are upright pixels"
        }
        let aspect = par.sample_aspect_ratio
        if aspect.num > 0, aspect.num != aspect.den { return "its pixels are not square (\(aspect.num):\(aspect.den))" }
        let short = Int(min(par.width, par.height))
        if Double(short) > Double(rung.height) * 1.25 {
            return "its pictures are \(par.width)x\(par.height), more than a quarter above the \(rung.name) rung"
        }
        return nil
    }

    /// Why a source whose packets are `keys` cannot be `rung` (nil: it can): its keyframes and bit
    /// rate. `halfFrame`: seconds, the tolerance on the keyframes' spacing.
    func refusal(keys: SourceKeyframes, rung: LadderRung, schedule: SegmentSchedule, halfFrame: Double) -> String? {
        if !keys.startsWithKeyframe { return "its video does not start with a keyframe" }
        if keys.leadingPictures { return "its keyframes begin open GOPs (pictures shown before a keyframe are decoded after it)" }
        if keys.longestGap > schedule.length + halfFrame {
            return String(format: "its keyframes are up to %.1f s apart, and a segment is %g s", keys.longestGap, schedule.length)
        }
        let cap = Double(rung.maxRate) * maxRate
        if keys.averageRate > cap {
            return String(format: "its video averages %.1f Mbit/s, above %.1f Mbit/s", keys.averageRate / 1e6, cap / 1e6)
                + " (\(String(format: "%g", maxRate)) times the \(rung.name) rung's cap)"
        }
        return nil
    }
}
