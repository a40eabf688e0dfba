internal import CClipFlowV4L2
import ClipFlowCore
import ClipFlowMedia
import Foundation

// Format negotiation: choose a format for a request, S_FMT (accepting the size the driver
// adjusts to) and S_PARM (reading back the rate it set).

extension V4L2Device {

    /// Chooses a format for `request`, sets it (S_FMT, accepting the driver's size) and the
    /// frame rate (S_PARM, reading back what the driver set).
    @discardableResult
    public func configure(_ request: CaptureRequest) throws -> NegotiatedFormat {
        guard !streaming else { throw ClipFlowError.failure("camera '\(path)': cannot change the format while streaming") }
        guard request.width > 0, request.height > 0, request.fps > 0 else {
            throw ClipFlowError.badInput(
                "camera '\(path)': asked for \(request.width)x\(request.height) at \(request.fps) fps; width, height and fps must be positive")
        }
        let offered = try formats()
        let chosen = try choose(request, offered)

        var f = v4l2_format()
        f.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        f.fmt.pix.width = UInt32(request.width)
        f.fmt.pix.height = UInt32(request.height)
        f.fmt.pix.pixelformat = chosen.fourcc
        f.fmt.pix.field = V4L2_FIELD_NONE.rawValue
        do { try fd.ioctl("VIDIOC_S_FMT", cf_VIDIOC_S_FMT, &f) } catch { throw Self.describe(error, path: path) }
        // Drivers never fail S_FMT for an unknown format: they answer with one they have.
        guard f.fmt.pix.pixelformat == chosen.fourcc else {
            throw unsupported("\(chosen.rawValue) (the driver answered with \(fourccString(f.fmt.pix.pixelformat)))", offered)
        }
        let width = Int(f.fmt.pix.width), height = Int(f.fmt.pix.height)
        guard width > 0, height > 0 else { throw unsupported("\(request.width)x\(request.height) \(chosen.rawValue)", offered) }
        bytesPerLine = Int(f.fmt.pix.bytesperline)

        let fps = try setFrameRate(request.fps)
        let n = NegotiatedFormat(format: chosen, width: width, height: height, fps: fps, requested: request)
        negotiated = n
        decoder = nil
        return n
    }

    private func choose(_ r: CaptureRequest, _ offered: [CameraFormatInfo]) throws -> CameraFormat {
        if let want = r.format {
            guard offered.contains(where: { $0.format == want }) else { throw unsupported(want.rawValue, offered) }
            return want
        }
        let known = offered.filter { $0.format != nil }
        let order: [CameraFormat] = [.yuv420, .nv12, .yuyv, .mjpeg]
        func first(_ ok: (CameraFormatInfo) -> Bool, raw: Bool) -> CameraFormat? {
            order.filter { ($0 != .mjpeg) == raw }.first { f in known.contains { $0.format == f && ok($0) } }
        }
        let sizeAndRate = { (i: CameraFormatInfo) in i.offers(width: r.width, height: r.height, fps: r.fps) }
        let size = { (i: CameraFormatInfo) in i.offers(width: r.width, height: r.height) }
        // Raw at the size and rate, MJPEG at the size and rate, then either at the size, then
        // anything (S_FMT will adjust the size).
        if let f = first(sizeAndRate, raw: true) ?? first(sizeAndRate, raw: false) ?? first(size, raw: true)
            ?? first(size, raw: false) ?? first({ _ in true }, raw: true) ?? first({ _ in true }, raw: false)
        {
            return f
        }
        throw unsupported("any format clipflow reads (yuyv, nv12, yuv420, mjpeg)", offered)
    }

    private func unsupported(_ what: String, _ offered: [CameraFormatInfo]) -> ClipFlowError {
        .badInput(
            "camera '\(path)' (\(card)) does not support \(what); it supports:\n"
                + (offered.isEmpty ? "  nothing it lists" : offered.map { "  " + $0.summary }.joined(separator: "\n")))
    }

    /// S_PARM with 1/fps when the driver can set it; returns the rate G_PARM reports (0: unknown).
    private func setFrameRate(_ fps: Double) throws -> Double {
        var p = v4l2_streamparm()
        p.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        do { try fd.ioctl("VIDIOC_G_PARM", cf_VIDIOC_G_PARM, &p) } catch {
            if error.code == EINVAL || error.code == ENOTTY { return 0 }
            throw Self.describe(error, path: path)
        }
        if p.parm.capture.capability & UInt32(V4L2_CAP_TIMEPERFRAME) != 0 {
            p.parm.capture.timeperframe = v4l2_fract(numerator: 1000, denominator: UInt32((fps * 1000).rounded()))
            do { try fd.ioctl("VIDIOC_S_PARM", cf_VIDIOC_S_PARM, &p) } catch { throw Self.describe(error, path: path) }
        }
        let t = p.parm.capture.timeperframe
        return t.numerator > 0 ? Double(t.denominator) / Double(t.numerator) : 0
    }
}
