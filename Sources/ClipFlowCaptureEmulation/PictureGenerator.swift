internal import CClipFlowV4L2
import ClipFlowCapture
import ClipFlowCore
import ClipFlowMedia
import Foundation

/// Draws the emulator's pictures: a horizontal luma gradient, a bright bar that moves 8 pixels
/// per frame, and the sequence number in 32 8x8 blocks along the top. The background is made
/// once per format and size; each frame copies it and draws the bar and the code.
final class PictureGenerator {
    let fourcc: UInt32
    let size: EmulatedVivid.FrameSize
    private let packed: Bool  // YUYV: luma at every other byte
    private var background: [UInt8]  // in the device's layout (yuv420p for MJPEG)
    private let encoder: JPEGEncoder?

    init(fourcc: UInt32, size: EmulatedVivid.FrameSize) {
        self.fourcc = fourcc
        self.size = size
        let w = size.width, h = size.height
        packed = fourcc == cf_V4L2_PIX_FMT_YUYV
        func luma(_ x: Int) -> UInt8 { UInt8(16 + 219 * x / max(w - 1, 1)) }
        func u(_ y: Int) -> UInt8 { UInt8(64 + 128 * y / max(h - 1, 1)) }
        if packed {
            background = [UInt8](repeating: 0, count: w * h * 2)
            for y in 0..<h {
                for x in stride(from: 0, to: w - 1, by: 2) {
                    let o = (y * w + x) * 2
                    background[o] = luma(x); background[o + 1] = u(y); background[o + 2] = luma(x + 1); background[o + 3] = 160
                }
            }
        } else {
            let cw = (w + 1) / 2, ch = (h + 1) / 2
            background = [UInt8](repeating: 0, count: w * h + 2 * cw * ch)
            for y in 0..<h { for x in 0..<w { background[y * w + x] = luma(x) } }
            for y in 0..<ch {
                for x in 0..<cw {
                    if fourcc == cf_V4L2_PIX_FMT_NV12 {
                        background[w * h + y * cw * 2 + 2 * x] = u(2 * y)
                        background[w * h + y * cw * 2 + 2 * x + 1] = 160
                    } else {
                        background[w * h + y * cw + x] = u(2 * y)
                        background[w * h + cw * ch + y * cw + x] = 160
                    }
                }
            }
        }
        encoder = fourcc == cf_V4L2_PIX_FMT_MJPEG ? try? JPEGEncoder(width: w, height: h) : nil
    }

    /// Draws frame `sequence` at `dst` (`flash`: white below the code, as a camera filming a
    /// flash sees it). Returns bytes used, or -1 when it does not fit (or the JPEG encoder
    /// failed): the buffer is then flagged ERROR, as a driver does.
    func draw(sequence: UInt32, flash: Bool = false, into dst: UnsafeMutableRawPointer, capacity: Int) -> Int {
        var picture = background
        let w = size.width, h = size.height, step = packed ? 2 : 1
        picture.withUnsafeMutableBufferPointer { p in
            if flash { for y in min(8, h)..<h { for x in 0..<w { p[(y * w + x) * step] = 235 } } }
            let bar = Int(sequence) * 8 % w
            for y in 16..<h { for x in bar..<min(bar + 16, w) { p[(y * w + x) * step] = 235 } }
            for i in 0..<32 where 8 * i + 8 <= w {
                let v: UInt8 = (sequence >> (31 - UInt32(i))) & 1 == 1 ? 235 : 16
                for y in 0..<min(8, h) { for x in 8 * i..<8 * i + 8 { p[(y * w + x) * step] = v } }
            }
        }
        if fourcc == cf_V4L2_PIX_FMT_MJPEG {
            let frame = VideoFrame(width: w, height: h, format: .yuv420p, data: Data(picture), time: 0, sequence: Int64(sequence))
            guard let encoder, let jpeg = try? encoder.encode(frame), jpeg.count <= capacity else { return -1 }
            jpeg.copyBytes(to: dst.assumingMemoryBound(to: UInt8.self), count: jpeg.count)
            return jpeg.count
        }
        guard picture.count <= capacity else { return -1 }
        picture.withUnsafeBytes { src in if let b = src.baseAddress { dst.copyMemory(from: b, byteCount: src.count) } }
        return picture.count
    }
}

extension CameraFormat {
    /// The kernel's description string for ENUM_FMT, as vivid reports it.
    var kernelDescription: String {
        switch self {
        case .yuyv: return "YUYV 4:2:2"
        case .nv12: return "Y/UV 4:2:0"
        case .yuv420: return "Planar YUV 4:2:0"
        case .mjpeg: return "Motion-JPEG"
        }
    }
}
