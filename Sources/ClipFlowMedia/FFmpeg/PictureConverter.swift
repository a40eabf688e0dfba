internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// Buffers for pictures of one format and size (AVBufferPool). A frame holding one returns it
/// to the pool when unreffed, on whatever thread (FFmpeg locks the pool). Owner: the
/// converter, on the decoding thread; freed in deinit (the pool itself lives on until its last
/// buffer comes back).
///
/// Every buffer ends with `padding` spare bytes, as FFmpeg's own picture buffers do: libswscale's
/// SIMD code reads (and, in rows narrower than its vectors, writes) past the last pixel of a
/// plane, which without them would be past the end of the allocation.
final class PicturePool {
    let size: PictureSize
    let format: AVPixelFormat
    static let align: Int32 = 32
    static let padding = Int32(AV_INPUT_BUFFER_PADDING_SIZE)
    /// Row alignment: 32 (SIMD-friendly rows, what libswscale writes into), or 1 for pictures
    /// whose planes follow one another without padding (`VideoFrame`'s layout: handed on without
    /// a copy; filled by copying, never by libswscale).
    let alignment: Int32
    private let pool: OpaquePointer

    init(size: PictureSize, format: AVPixelFormat = AV_PIX_FMT_YUV420P, alignment: Int32 = PicturePool.align) throws {
        self.size = size
        self.format = format
        self.alignment = alignment
        let bytes = av_image_get_buffer_size(format, Int32(size.width), Int32(size.height), alignment)
        try FF.check(bytes, "picture buffers of \(size)")
        guard let p = av_buffer_pool_init(Int(bytes + Self.padding), nil) else { throw ClipFlowError.failure("out of memory (picture buffers of \(size))") }
        pool = p
    }
    deinit {
        var p: OpaquePointer? = pool
        av_buffer_pool_uninit(&p)
    }

    /// A frame with a picture buffer of its own (contents undefined).
    func picture() throws -> Frame {
        let f = try Frame()
        try FF.check(cf_frame_from_pool(f.f, pool, format, Int32(size.width), Int32(size.height), alignment), "a picture of \(size)")
        return f
    }
}

/// Turns decoded pictures of any format FFmpeg decodes into yuv420p pictures of the output frame:
/// crops, scales (libswscale, bicubic), turns the pixels when a clip is made upright, and paints
/// the frame's uncovered pixels black. One per transcode; confined to the decoding thread.
final class PictureConverter {
    let frame: PictureSize
    private let pool: PicturePool
    private var scaler: OpaquePointer?
    private var scalerKey: [Int32] = []
    /// The scaled picture before it is turned (for upright clips), reused.
    private var turning: Frame?

    init(frame: PictureSize, pool: PicturePool) {
        self.frame = frame
        self.pool = pool
    }
    deinit { if let s = scaler { sws_freeContext(s) } }

    /// A new output picture of `decoded`, placed by `placement` (in display orientation when
    /// `orientation` is not upright: the decoded pixels are then mirrored if it says so and
    /// turned its `turn` degrees clockwise).
    func convert(_ decoded: Frame, placement: Placement, orientation: DisplayOrientation = .upright) throws -> Frame {
        let out = try pool.picture()
        if placement.pads { paintBlack(out) }
        let stored = PictureSize(width: Int(decoded.f.pointee.width), height: Int(decoded.f.pointee.height))
        let turn = orientation.turn
        var crop = TranscodeGeometry.storedRect(placement.crop, turned: turn, stored: stored)
        if orientation.mirrored { crop.x = stored.width - crop.x - crop.width }
        let d = placement.dest
        if orientation == .upright {
            try scale(decoded, crop: crop, into: out, at: d, size: PictureSize(width: d.width, height: d.height))
            return out
        }
        let scaled = turn % 180 == 0 ? PictureSize(width: d.width, height: d.height) : PictureSize(width: d.height, height: d.width)
        let t: Frame
        if let turning, Int(turning.f.pointee.width) == scaled.width, Int(turning.f.pointee.height) == scaled.height {
            t = turning
        } else {
            t = try Frame()
            t.f.pointee.width = Int32(scaled.width)
            t.f.pointee.height = Int32(scaled.height)
            t.f.pointee.format = AV_PIX_FMT_YUV420P.rawValue
            try FF.check(av_frame_get_buffer(t.f, PicturePool.align), "a picture to turn")
            turning = t
        }
        try scale(decoded, crop: crop, into: t, at: PixelRect(x: 0, y: 0, width: scaled.width, height: scaled.height), size: scaled)
        for plane in 0..<3 {
            let shift = plane == 0 ? 0 : 1
            guard let from = t.data(plane), let into = out.data(plane) else { throw ClipFlowError.failure("internal: a picture without plane \(plane)") }
            orientPlane(
                from: from, stride: t.linesize(plane), width: scaled.width >> shift, height: scaled.height >> shift,
                into: into + (d.y >> shift) * out.linesize(plane) + (d.x >> shift), stride: out.linesize(plane), orientation)
        }
        return out
    }

    /// Scales `crop` of `src` to `size` at `at` in `dst` (yuv420p).
    private func scale(_ src: Frame, crop: PixelRect, into dst: Frame, at: PixelRect, size: PictureSize) throws {
        let fmt = src.f.pointee.format
        let key = [fmt, Int32(crop.width), Int32(crop.height), Int32(size.width), Int32(size.height)]
        if scaler == nil || key != scalerKey {
            if let s = scaler { sws_freeContext(s) }
            scaler = sws_getContext(
                Int32(crop.width), Int32(crop.height), AVPixelFormat(fmt), Int32(size.width), Int32(size.height), AV_PIX_FMT_YUV420P,
                SWS_BICUBIC, nil, nil, nil)
            scalerKey = key
            guard scaler != nil else {
                let name = av_get_pix_fmt_name(AVPixelFormat(fmt)).map { String(cString: $0) } ?? "format \(fmt)"
                throw ClipFlowError.badInput(
                    "its \(name) pictures of \(crop.width)x\(crop.height) cannot be scaled to \(size) (libswscale refuses a change of shape this large); "
                        + "pad or crop the video to a less extreme shape first (for example ffmpeg -vf pad=...)")
            }
        }
        guard let desc = av_pix_fmt_desc_get(AVPixelFormat(fmt)) else { throw ClipFlowError.failure("unknown pixel format \(fmt)") }
        var steps = [Int32](repeating: 0, count: 4)
        av_image_fill_max_pixsteps(&steps, nil, desc)
        let chromaW = Int(desc.pointee.log2_chroma_w), chromaH = Int(desc.pointee.log2_chroma_h)
        var srcPlanes = [UnsafePointer<UInt8>?](repeating: nil, count: 4)
        var srcStrides = [Int32](repeating: 0, count: 4)
        for p in 0..<4 {
            guard let base = src.data(p) else { continue }
            let isChroma = p == 1 || p == 2
            let x = isChroma ? crop.x >> chromaW : crop.x, y = isChroma ? crop.y >> chromaH : crop.y
            srcPlanes[p] = UnsafePointer(base + y * src.linesize(p) + x * Int(steps[p]))
            srcStrides[p] = Int32(src.linesize(p))
        }
        var dstPlanes = [UnsafeMutablePointer<UInt8>?](repeating: nil, count: 4)
        var dstStrides = [Int32](repeating: 0, count: 4)
        for p in 0..<3 {
            let shift = p == 0 ? 0 : 1
            dstPlanes[p] = dst.data(p)! + (at.y >> shift) * dst.linesize(p) + (at.x >> shift)
            dstStrides[p] = Int32(dst.linesize(p))
        }
        let rows = sws_scale(scaler, srcPlanes, srcStrides, 0, Int32(crop.height), dstPlanes, dstStrides)
        try FF.check(rows, "scaling a picture")
    }

    /// Black in limited-range yuv420p: Y 16, U and V 128.
    private func paintBlack(_ f: Frame) {
        for p in 0..<3 {
            let h = p == 0 ? frame.height : frame.height / 2
            memset(f.data(p)!, p == 0 ? 16 : 128, f.linesize(p) * h)
        }
    }
}

/// Writes one 8-bit plane of `width` x `height`, mirrored left to right if `orientation` says
/// so and then turned its `turn` degrees clockwise, into `dst` (`height` x `width` for 90 and 270).
func orientPlane(
    from src: UnsafePointer<UInt8>, stride ss: Int, width w: Int, height h: Int,
    into dst: UnsafeMutablePointer<UInt8>, stride ds: Int, _ orientation: DisplayOrientation
) {
    let m = orientation.mirrored
    // The source column shown at `x` of the (unturned) picture.
    @inline(__always) func column(_ x: Int) -> Int { m ? w - 1 - x : x }
    switch orientation.turn {
    case 90:  // dst is h wide, w tall: dst(x, y) = mirrored(y, h - 1 - x)
        for y in 0..<w {
            let row = dst + y * ds, sx = column(y)
            for x in 0..<h { row[x] = src[(h - 1 - x) * ss + sx] }
        }
    case 180:  // dst(x, y) = mirrored(w - 1 - x, h - 1 - y)
        for y in 0..<h {
            let row = dst + y * ds, from = src + (h - 1 - y) * ss
            for x in 0..<w { row[x] = from[column(w - 1 - x)] }
        }
    case 270:  // dst is h wide, w tall: dst(x, y) = mirrored(w - 1 - y, x)
        for y in 0..<w {
            let row = dst + y * ds, sx = column(w - 1 - y)
            for x in 0..<h { row[x] = src[x * ss + sx] }
        }
    default:
        for y in 0..<h {
            let row = dst + y * ds, from = src + y * ss
            if m {
                for x in 0..<w { row[x] = from[w - 1 - x] }
            } else {
                memcpy(row, from, w)
            }
        }
    }
}
