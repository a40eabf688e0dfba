internal import CClipFlowV4L2
import ClipFlowCapture
import ClipFlowCore
import ClipFlowMedia
import Foundation

// The emulated camera's identity and formats: QUERYCAP, ENUM_FMT / FRAMESIZES / FRAMEINTERVALS,
// G/S/TRY_FMT and G/S_PARM, answered as vivid does. Called under `lock`.

extension EmulatedVivid {
    func queryCap(_ c: UnsafeMutablePointer<v4l2_capability>) {
        c.pointee = v4l2_capability()
        copyString("vivid", into: &c.pointee.driver)
        copyString("vivid", into: &c.pointee.card)
        copyString("platform:vivid-000", into: &c.pointee.bus_info)
        c.pointee.version = 0x06_01_00
        let node: UInt32 = configuration.captureDevice ? UInt32(V4L2_CAP_VIDEO_CAPTURE) : UInt32(V4L2_CAP_VIDEO_OUTPUT)
        c.pointee.device_caps = node | UInt32(V4L2_CAP_STREAMING) | UInt32(V4L2_CAP_READWRITE)
        // The physical device has both nodes; device_caps says what this one does.
        c.pointee.capabilities = c.pointee.device_caps | UInt32(V4L2_CAP_VIDEO_CAPTURE) | UInt32(V4L2_CAP_VIDEO_OUTPUT) | UInt32(V4L2_CAP_DEVICE_CAPS)
    }

    func enumFormat(_ d: UnsafeMutablePointer<v4l2_fmtdesc>) throws(SyscallErrno) {
        try checkType(d.pointee.type)
        let i = Int(d.pointee.index)
        guard i < configuration.formats.count else { throw SyscallErrno(EINVAL) }
        let f = configuration.formats[i]
        let (index, type) = (d.pointee.index, d.pointee.type)
        d.pointee = v4l2_fmtdesc()
        d.pointee.index = index
        d.pointee.type = type
        d.pointee.pixelformat = f.fourcc
        d.pointee.flags = f == .mjpeg ? UInt32(V4L2_FMT_FLAG_COMPRESSED) : 0
        copyString(f.kernelDescription, into: &d.pointee.description)
    }

    func enumSizes(_ s: UnsafeMutablePointer<v4l2_frmsizeenum>) throws(SyscallErrno) {
        guard offers(s.pointee.pixel_format), Int(s.pointee.index) < configuration.sizes.count else { throw SyscallErrno(EINVAL) }
        let z = configuration.sizes[Int(s.pointee.index)]
        s.pointee.type = V4L2_FRMSIZE_TYPE_DISCRETE.rawValue
        s.pointee.discrete = v4l2_frmsize_discrete(width: UInt32(z.width), height: UInt32(z.height))
    }

    func intervals(for z: FrameSize) -> [(num: UInt32, den: UInt32)] {
        z.width * z.height <= 1280 * 720 ? [(1, 60), (1, 30), (1, 15)] : [(1, 30), (1, 15)]
    }

    func enumIntervals(_ v: UnsafeMutablePointer<v4l2_frmivalenum>) throws(SyscallErrno) {
        let z = FrameSize(Int(v.pointee.width), Int(v.pointee.height))
        guard offers(v.pointee.pixel_format), configuration.sizes.contains(z) else { throw SyscallErrno(EINVAL) }
        let list = intervals(for: z)
        guard Int(v.pointee.index) < list.count else { throw SyscallErrno(EINVAL) }
        let t = list[Int(v.pointee.index)]
        v.pointee.type = V4L2_FRMIVAL_TYPE_DISCRETE.rawValue
        v.pointee.discrete = v4l2_fract(numerator: t.num, denominator: t.den)
    }

    func getFormat(_ f: UnsafeMutablePointer<v4l2_format>) throws(SyscallErrno) {
        try checkType(f.pointee.type)
        fill(f, fourcc: fourcc, size: size)
    }

    /// TRY_FMT: adjusts the request to what the device can do (never fails for a capture type).
    func tryFormat(_ f: UnsafeMutablePointer<v4l2_format>) throws(SyscallErrno) {
        try checkType(f.pointee.type)
        let want = f.pointee.fmt.pix
        let code = offers(want.pixelformat) ? want.pixelformat : (configuration.formats.first?.fourcc ?? fourcc)
        let nearest =
            configuration.sizes.min { a, b in
                abs(a.width - Int(want.width)) + abs(a.height - Int(want.height)) < abs(b.width - Int(want.width)) + abs(b.height - Int(want.height))
            } ?? size
        fill(f, fourcc: code, size: nearest)
    }

    func fill(_ f: UnsafeMutablePointer<v4l2_format>, fourcc: UInt32, size z: FrameSize) {
        let type = f.pointee.type
        f.pointee = v4l2_format()
        f.pointee.type = type
        f.pointee.fmt.pix.width = UInt32(z.width)
        f.pointee.fmt.pix.height = UInt32(z.height)
        f.pointee.fmt.pix.pixelformat = fourcc
        f.pointee.fmt.pix.field = V4L2_FIELD_NONE.rawValue
        f.pointee.fmt.pix.colorspace = fourcc == cf_V4L2_PIX_FMT_MJPEG ? V4L2_COLORSPACE_JPEG.rawValue : V4L2_COLORSPACE_SRGB.rawValue
        let (bpl, image) = Self.layout(fourcc, z)
        f.pointee.fmt.pix.bytesperline = UInt32(bpl)
        f.pointee.fmt.pix.sizeimage = UInt32(image)
    }

    /// bytesperline and sizeimage of a format (MJPEG: a worst case for one compressed picture).
    static func layout(_ fourcc: UInt32, _ z: FrameSize) -> (Int, Int) {
        switch fourcc {
        case cf_V4L2_PIX_FMT_YUYV: return (z.width * 2, z.width * 2 * z.height)
        case cf_V4L2_PIX_FMT_MJPEG: return (0, z.width * z.height * 2)
        default: return (z.width, z.width * z.height * 3 / 2)
        }
    }

    func getParm(_ p: UnsafeMutablePointer<v4l2_streamparm>) throws(SyscallErrno) {
        try checkType(p.pointee.type)
        let type = p.pointee.type
        p.pointee = v4l2_streamparm()
        p.pointee.type = type
        p.pointee.parm.capture.capability = UInt32(V4L2_CAP_TIMEPERFRAME)
        p.pointee.parm.capture.timeperframe = v4l2_fract(numerator: interval.num, denominator: interval.den)
        p.pointee.parm.capture.readbuffers = 1
    }

    /// The offered interval nearest to `t` for the current size.
    func nearestInterval(_ t: (num: UInt32, den: UInt32)) -> (num: UInt32, den: UInt32) {
        let want = Double(t.num) / Double(t.den)
        return intervals(for: size).min { abs(Double($0.num) / Double($0.den) - want) < abs(Double($1.num) / Double($1.den) - want) } ?? (1, 30)
    }
}

/// Copies a string into a fixed C char array (a tuple), NUL-terminated.
func copyString<T>(_ s: String, into field: inout T) {
    withUnsafeMutableBytes(of: &field) { raw in
        raw.initializeMemory(as: UInt8.self, repeating: 0)
        let bytes = Array(s.utf8.prefix(raw.count - 1))
        raw.copyBytes(from: bytes)
    }
}
