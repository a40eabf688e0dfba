internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

// Single JPEG pictures to and from packed yuv420p `VideoFrame`s: MJPEG cameras deliver one JPEG per
// frame (JPEGDecoder), and the emulated camera makes them (JPEGEncoder). Only this module imports
// FFmpeg, so capture code uses these two classes. JPEGEncoder is also the one encoder of every
// JPEG this module writes (covers, storyboards).
//
// Threading: each coder is confined to one queue at a time (owner classes: one owner per FFmpeg object).

/// Decodes JPEG pictures (MJPEG frames) into packed yuv420p (limited range, as encoders expect).
/// `@unchecked Sendable`: owns its codec, packet, frame and scaler; used by one thread at a time.
public final class JPEGDecoder: @unchecked Sendable {
    private let codec: CodecContext
    private let packet: Packet
    private let decoded: Frame
    private var scaler: Scaler?
    private var scalerKey: (Int32, Int32, Int32) = (0, 0, -1)

    public init() throws {
        _ = FF.setup
        guard let par = avcodec_parameters_alloc() else { throw ClipFlowError.failure("out of memory (JPEG decoder)") }
        var p: UnsafeMutablePointer<AVCodecParameters>? = par
        defer { avcodec_parameters_free(&p) }
        par.pointee.codec_type = AVMEDIA_TYPE_VIDEO
        par.pointee.codec_id = AV_CODEC_ID_MJPEG
        codec = try CodecContext.decoder(for: par, what: "JPEG decoder")
        packet = try Packet()
        decoded = try Frame()
    }

    /// Decodes one complete JPEG picture. Throws when the data is not a decodable JPEG.
    public func decode(_ data: Data, time: Double, sequence: Int64) throws -> VideoFrame {
        packet.unref()
        try FF.check(av_new_packet(packet.p, Int32(data.count)), "JPEG frame \(sequence): allocating a packet")
        data.withUnsafeBytes { src in
            if let b = src.baseAddress { memcpy(packet.p.pointee.data, b, data.count) }
        }
        _ = try codec.send(packet)
        decoded.unref()
        guard try codec.receive(decoded) else {
            throw ClipFlowError.failure("JPEG frame \(sequence): the decoder returned no picture (\(data.count) bytes of input)")
        }
        let w = decoded.f.pointee.width, h = decoded.f.pointee.height, fmt = decoded.f.pointee.format
        if scaler == nil || scalerKey != (w, h, fmt) {
            scaler = try Scaler(srcW: w, srcH: h, srcFormat: AVPixelFormat(fmt), dstW: w, dstH: h, dstFormat: AV_PIX_FMT_YUV420P)
            scalerKey = (w, h, fmt)
        }
        let out = try Frame()
        out.f.pointee.width = w
        out.f.pointee.height = h
        out.f.pointee.format = AV_PIX_FMT_YUV420P.rawValue
        try FF.check(av_frame_get_buffer(out.f, 0), "JPEG frame \(sequence): allocating a picture")
        guard let scaler else { throw ClipFlowError.failure("JPEG frame \(sequence): no scaler") }
        try scaler.scale(decoded, into: out)
        return VideoFrame(
            width: Int(w), height: Int(h), format: .yuv420p, data: packPlanes(out, Int(w), Int(h)),
            time: time, sequence: sequence)
    }
}

/// Encodes pictures as baseline JPEG (full range yuvj420p, as cameras send): packed yuv420p
/// `VideoFrame`s (limited range), or yuvj420p frames (`encode(picture:)`). One encoder per picture
/// size.
/// `@unchecked Sendable`: owns its codec, scaler and packet; used by one thread at a time.
public final class JPEGEncoder: @unchecked Sendable {
    public let width: Int
    public let height: Int
    private let quality: Int
    private let codec: CodecContext
    private var scaler: Scaler?
    private let packet: Packet

    /// `quality`: JPEG quantiser scale from 2 (best) to 31.
    public init(width: Int, height: Int, quality: Int = 3) throws {
        _ = FF.setup
        self.width = width
        self.height = height
        self.quality = quality
        codec = try CodecContext.encoder(named: "mjpeg", what: "JPEG encoder") { c in
            c.pointee.width = Int32(width)
            c.pointee.height = Int32(height)
            c.pointee.pix_fmt = AV_PIX_FMT_YUVJ420P
            c.pointee.time_base = AVRational(num: 1, den: 30)
            c.pointee.flags |= Int32(AV_CODEC_FLAG_QSCALE)
            c.pointee.global_quality = Int32(FF_QP2LAMBDA) * Int32(quality)
        }
        packet = try Packet()
    }

    /// One JPEG picture of `frame` (which must be yuv420p of this encoder's size).
    public func encode(_ frame: VideoFrame) throws -> Data {
        guard frame.format == .yuv420p, frame.width == width, frame.height == height,
            frame.data.count >= PixelFormat.yuv420p.frameBytes(width: width, height: height) ?? 0
        else {
            throw ClipFlowError.failure("JPEG encoder for \(width)x\(height) yuv420p got \(frame.width)x\(frame.height) \(frame.format.rawValue)")
        }
        let src = try Frame(), dst = try Frame()
        for (f, fmt) in [(src, AV_PIX_FMT_YUV420P), (dst, AV_PIX_FMT_YUVJ420P)] {
            f.f.pointee.width = Int32(width)
            f.f.pointee.height = Int32(height)
            f.f.pointee.format = fmt.rawValue
            try FF.check(av_frame_get_buffer(f.f, 0), "JPEG encoder: allocating a picture")
        }
        unpackPlanes(frame.data, into: src, width, height)
        if scaler == nil {
            scaler = try Scaler(
                srcW: Int32(width), srcH: Int32(height), srcFormat: AV_PIX_FMT_YUV420P,
                dstW: Int32(width), dstH: Int32(height), dstFormat: AV_PIX_FMT_YUVJ420P)
        }
        try scaler!.scale(src, into: dst)
        dst.f.pointee.pts = frame.sequence
        return try encode(picture: dst)
    }

    /// One JPEG picture of `picture`, a yuvj420p frame of this encoder's size.
    func encode(picture: Frame) throws -> Data {
        guard picture.f.pointee.format == AV_PIX_FMT_YUVJ420P.rawValue, picture.f.pointee.width == width, picture.f.pointee.height == height else {
            throw ClipFlowError.failure("JPEG encoder for \(width)x\(height) yuvj420p got \(picture.f.pointee.width)x\(picture.f.pointee.height)")
        }
        picture.f.pointee.quality = Int32(FF_QP2LAMBDA) * Int32(quality)
        try codec.send(frame: picture)
        packet.unref()
        guard try codec.receive(packet: packet), let d = packet.p.pointee.data, packet.p.pointee.size > 0 else {
            throw ClipFlowError.failure("the JPEG encoder produced nothing")
        }
        return Data(bytes: d, count: Int(packet.p.pointee.size))
    }
}

/// Plane sizes of a 4:2:0 picture: (width, height) of Y, U, V.
private func planeSizes(_ w: Int, _ h: Int) -> [(Int, Int)] {
    [(w, h), ((w + 1) / 2, (h + 1) / 2), ((w + 1) / 2, (h + 1) / 2)]
}

/// Copies the three planes of a yuv420p frame into one buffer without row padding (`VideoFrame`).
func packPlanes(_ f: Frame, _ w: Int, _ h: Int) -> Data {
    var out = Data(count: PixelFormat.yuv420p.frameBytes(width: w, height: h) ?? 0)
    out.withUnsafeMutableBytes { raw in
        guard var dst = raw.baseAddress else { return }
        for (i, (pw, ph)) in planeSizes(w, h).enumerated() {
            guard let src = f.data(i) else { continue }
            for y in 0..<ph { memcpy(dst + y * pw, src + y * f.linesize(i), pw) }
            dst += pw * ph
        }
    }
    return out
}

/// The reverse of `packPlanes`: packed yuv420p into a frame's (padded) planes.
private func unpackPlanes(_ data: Data, into f: Frame, _ w: Int, _ h: Int) {
    data.withUnsafeBytes { raw in
        guard var src = raw.baseAddress else { return }
        for (i, (pw, ph)) in planeSizes(w, h).enumerated() {
            guard let dst = f.data(i) else { continue }
            for y in 0..<ph { memcpy(dst + y * f.linesize(i), src + y * pw, pw) }
            src += pw * ph
        }
    }
}
