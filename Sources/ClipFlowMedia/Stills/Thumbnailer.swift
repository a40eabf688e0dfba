internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// A limit on a cover image's size: the longer side at most N, or fit within W x H.
public struct ThumbnailSize: Sendable, Equatable {
    public var maxWidth: Int
    public var maxHeight: Int
    public init(maxWidth: Int, maxHeight: Int) { self.maxWidth = maxWidth; self.maxHeight = maxHeight }

    /// Parses "N" or "WxH".
    public init?(parsing s: String) {
        let parts = s.lowercased().split(separator: "x", omittingEmptySubsequences: false)
        if parts.count == 1, let n = Int(parts[0]), n > 0 { maxWidth = n; maxHeight = n; return }
        if parts.count == 2, let w = Int(parts[0]), let h = Int(parts[1]), w > 0, h > 0 { maxWidth = w; maxHeight = h; return }
        return nil
    }

    /// Scales (w, h) down (never up) to fit, keeping the aspect ratio; even sizes for 4:2:0.
    public func fit(width w: Int, height h: Int) -> (Int, Int) {
        let s = min(1.0, min(Double(maxWidth) / Double(w), Double(maxHeight) / Double(h)))
        return (evenSize(Double(w) * s), evenSize(Double(h) * s))
    }
}

func evenSize(_ v: Double) -> Int { max(2, Int((v / 2).rounded()) * 2) }

/// Writes a JPEG cover of a representative frame of a video: upright (the display matrix applied
/// to the pixels), at display size (pixel aspect applied) unless limited.
///
/// "Representative" (`CoverChoice`): the pictures at keyframes near several points spread over
/// the video are decoded and weighed; black, white, blank or fading ones are passed over.
public final class Thumbnailer {
    public struct Result: Sendable { public var width: Int; public var height: Int; public var time: Double }

    let path: String
    let sources: [FileOrigin]
    let cancel: CancellationFlag

    /// `sources`: the clips `path` was joined from (`MergeResult.sources`), or none.
    public init(path: String, sources: [FileOrigin] = [], cancel: CancellationFlag = CancellationFlag()) throws {
        try ClipProbe.checkReadableFile(path)
        self.path = path
        self.sources = sources
        self.cancel = cancel
    }

    /// "'clip.mp4' (4.00-8.00 s of 'out.mp4')" for a time in the video, or "'out.mp4'".
    func origin(at seconds: Double) -> String {
        guard let s = sources.last(where: { $0.start <= seconds }) ?? sources.first else { return "'\(path)'" }
        return String(format: "'%@' (the clip at %.2f-%.2f s of '%@')", s.path, s.start, s.end, path)
    }

    /// Writes the cover to `url` (fitted within `limit`) and the same picture, smaller, to each of
    /// `also` (fitted within its size); existing files there are replaced only with `replacing`.
    public func write(to url: URL, limit: ThumbnailSize? = nil, also: [(URL, ThumbnailSize)] = [], replacing: Bool = false) throws -> Result {
        let dmx = try Demuxer(path: path)
        var vi = -1
        for i in 0..<dmx.streamCount where dmx.codecpar(i).pointee.codec_type == AVMEDIA_TYPE_VIDEO {
            if (dmx.stream(i).pointee.disposition & AV_DISPOSITION_ATTACHED_PIC) == 0 { vi = i; break }
        }
        guard vi >= 0 else { throw ClipFlowError.badInput("'\(path)' has no video track to take a cover from") }
        let st = dmx.stream(vi).pointee
        let tb = st.time_base
        let start = st.start_time == FF.noPTS ? 0 : st.start_time
        let duration = st.duration > 0 ? st.duration : rescale(dmx.ctx.pointee.duration, AVRational(num: 1, den: Int32(AV_TIME_BASE)), tb)
        let rotation = Self.clockwiseTurn(of: dmx.stream(vi))
        let dec = try CodecContext.decoder(for: dmx.codecpar(vi), what: "video decoder", threads: 2)

        var choice = CoverChoice<Frame>()
        // Candidates that cannot be reached or decoded are passed over; the first such problem
        // is reported only if no candidate decodes.
        var firstProblem: String? = nil
        let pkt = try Packet()
        for frac in CoverChoice<Frame>.fractions {
            try cancel.check()
            let target = start + Int64(Double(max(duration, 1)) * frac)
            let seconds = Double(target - start) * tb.double
            var seek = dmx.trySeek(stream: vi, to: target)
            if case .done = seek {} else { seek = dmx.trySeek(stream: vi, to: target, flags: 0) }  // else the next keyframe
            let why: String
            switch seek {
            case .done: why = ""
            case .noFrame: why = "no keyframe near it"
            case .failed(let rc): why = FF.describe(rc)
            }
            if !why.isEmpty {
                firstProblem = firstProblem ?? String(format: "%@: cannot seek to %.2f s: %@", origin(at: seconds), seconds, why)
                continue
            }
            avcodec_flush_buffers(dec.ctx)
            let decoded: Frame?
            do { decoded = try Self.firstFrame(dmx, dec, vi, pkt) } catch let e as ClipFlowError where e.kind != .interrupted {
                firstProblem = firstProblem ?? String(format: "%@: the picture near %.2f s cannot be decoded (%@)", origin(at: seconds), seconds, e.message)
                avcodec_flush_buffers(dec.ctx)
                continue
            }
            guard let frame = decoded else { continue }
            choice.consider(frame, time: Double(frame.f.pointee.best_effort_timestamp - start) * tb.double, luma: try LumaStats(of: frame))
        }
        // Last resort: the first picture, decoded from the first packet whatever its keyframe flag
        // says (a sync-sample table that marks no keyframe early enough leaves nothing to seek to).
        if choice.chosen == nil, case .done = dmx.trySeek(stream: vi, to: start, flags: AVSEEK_FLAG_BACKWARD | AVSEEK_FLAG_ANY) {
            avcodec_flush_buffers(dec.ctx)
            if let frame = try? Self.firstFrame(dmx, dec, vi, pkt) {
                choice.consider(frame, time: Double(frame.f.pointee.best_effort_timestamp - start) * tb.double, luma: LumaStats(mean: 0, deviation: 0))
            }
        }
        guard let chosen = choice.chosen else {
            let from = firstProblem ?? (sources.isEmpty ? "'\(path)'" : "'\(path)' (joined from \(sources.map { "'\($0.path)'" }.joined(separator: ", ")))")
            throw ClipFlowError.badInput("no picture for a cover could be decoded from \(from)")
        }
        let (width, height) = try Self.writeCovers(of: chosen.picture, turned: rotation, to: url, limit: limit, also: also, replacing: replacing)
        return Result(width: width, height: height, time: chosen.time)
    }

    /// Writes `picture` as a cover to `url` (`upright`: turned `rotation`, fitted within `limit`)
    /// and, smaller, to each of `also`; returns the cover's size.
    static func writeCovers(
        of picture: Frame, turned rotation: Int, to url: URL, limit: ThumbnailSize?, also: [(URL, ThumbnailSize)], replacing: Bool
    ) throws -> (width: Int, height: Int) {
        var size = (width: 0, height: 0)
        for (i, (target, fit)) in ([(url, limit)] + also.map { ($0.0, Optional($0.1)) }).enumerated() {
            let upright = try upright(picture, turned: rotation, limit: fit)
            if i == 0 { size = (Int(upright.f.pointee.width), Int(upright.f.pointee.height)) }
            let out = try AtomicOutput(target: target, label: "cover", replacing: replacing)
            try out.write(try encodeJPEG(upright))
            try out.commit()
        }
        return size
    }

    /// The clockwise turn (0, 90, 180 or 270) of `stream`'s display matrix; 0 without one.
    static func clockwiseTurn(of stream: UnsafeMutablePointer<AVStream>) -> Int {
        let rot = cf_stream_display_rotation(stream)
        return rot.isNaN ? 0 : ((Int((-rot).rounded()) % 360) + 360) % 360
    }

    /// `frame` (any pixel format) as full-range 4:2:0 at display size (pixel aspect applied, then
    /// turned `rotation` degrees clockwise), fitted within `limit`.
    static func upright(_ frame: Frame, turned rotation: Int, limit: ThumbnailSize?) throws -> Frame {
        let f = frame.f.pointee
        var dw = Double(f.width), dh = Double(f.height)
        let sar = f.sample_aspect_ratio
        if sar.num > 0 && sar.den > 0 && sar.num != sar.den { dw = dw * Double(sar.num) / Double(sar.den) }
        let turned = rotation == 90 || rotation == 270
        let (ow, oh) = (limit ?? ThumbnailSize(maxWidth: 1 << 20, maxHeight: 1 << 20))
            .fit(width: Int(turned ? dh : dw), height: Int(turned ? dw : dh))
        let (sw, sh) = turned ? (oh, ow) : (ow, oh)  // size before turning
        let scaled = try Frame()
        scaled.f.pointee.width = Int32(sw)
        scaled.f.pointee.height = Int32(sh)
        scaled.f.pointee.format = AV_PIX_FMT_YUVJ420P.rawValue
        try FF.check(av_frame_get_buffer(scaled.f, 0), "allocating the cover")
        let scaler = try Scaler(
            srcW: f.width, srcH: f.height, srcFormat: AVPixelFormat(rawValue: f.format),
            dstW: Int32(sw), dstH: Int32(sh), dstFormat: AV_PIX_FMT_YUVJ420P)
        try scaler.scale(frame, into: scaled)
        return try turn(scaled, clockwise: rotation)
    }

    /// The first picture stream `vi` decodes to from where `dmx` stands (at most 64 packets in),
    /// or nil.
    static func firstFrame(_ dmx: Demuxer, _ dec: CodecContext, _ vi: Int, _ pkt: Packet) throws -> Frame? {
        let frame = try Frame()
        var sent = 0
        while try dmx.read(into: pkt) {
            guard Int(pkt.p.pointee.stream_index) == vi else { continue }
            _ = try dec.send(pkt)
            sent += 1
            if try dec.receive(frame) { return frame }
            if sent > 64 { break }
        }
        _ = try dec.send(nil)
        if try dec.receive(frame) { avcodec_flush_buffers(dec.ctx); return frame }
        return nil
    }

    /// Turns a YUV 4:2:0 picture clockwise by 0/90/180/270 degrees.
    static func turn(_ src: Frame, clockwise deg: Int) throws -> Frame {
        if deg == 0 { return src }
        let w = Int(src.f.pointee.width), h = Int(src.f.pointee.height)
        let dst = try Frame()
        dst.f.pointee.width = Int32(deg == 180 ? w : h)
        dst.f.pointee.height = Int32(deg == 180 ? h : w)
        dst.f.pointee.format = src.f.pointee.format
        try FF.check(av_frame_get_buffer(dst.f, 0), "allocating the cover")
        for plane in 0..<3 {
            let pw = plane == 0 ? w : w / 2, ph = plane == 0 ? h : h / 2
            guard let s = src.data(plane), let d = dst.data(plane) else { continue }
            let sl = src.linesize(plane), dl = dst.linesize(plane)
            let ow = deg == 180 ? pw : ph, oh = deg == 180 ? ph : pw
            for y in 0..<oh {
                for x in 0..<ow {
                    let (sx, sy): (Int, Int)
                    switch deg {
                    case 90: (sx, sy) = (y, ph - 1 - x)
                    case 180: (sx, sy) = (pw - 1 - x, ph - 1 - y)
                    default: (sx, sy) = (pw - 1 - y, x)
                    }
                    d[y * dl + x] = s[sy * sl + sx]
                }
            }
        }
        return dst
    }

    /// `frame` (yuvj420p) as a JPEG of the covers' quality.
    static func encodeJPEG(_ frame: Frame) throws -> Data {
        frame.f.pointee.pts = 0
        return try JPEGEncoder(width: Int(frame.f.pointee.width), height: Int(frame.f.pointee.height), quality: 3).encode(picture: frame)
    }
}
