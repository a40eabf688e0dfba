internal import CClipFlowV4L2
import ClipFlowCore
import ClipFlowMedia
import Foundation

// What a camera offers: the device list and VIDIOC_ENUM_FMT / ENUM_FRAMESIZES / ENUM_FRAMEINTERVALS.

/// Lists cameras.
public enum V4L2Devices {
    /// Every video capture device among the device nodes (nodes that are not capture devices,
    /// such as a webcam's metadata node, are left out; nodes that cannot be opened are listed
    /// with the reason).
    public static func list(syscalls: any V4L2Syscalls) -> [CameraInfo] {
        syscalls.deviceNodes().compactMap { path in
            do {
                let d = try V4L2Device(path: path, syscalls: syscalls, requireCapture: false)
                guard d.isCaptureDevice else { return nil }
                return CameraInfo(path: path, card: d.card, driver: d.driver, busInfo: d.busInfo, formats: try d.formats())
            } catch {
                return CameraInfo(path: path, card: "", driver: "", busInfo: "", formats: [], problem: "\(error)")
            }
        }
    }
}

extension V4L2Device {

    /// Formats, sizes and rates (ENUM_FMT, ENUM_FRAMESIZES, ENUM_FRAMEINTERVALS).
    public func formats() throws -> [CameraFormatInfo] {
        var out: [CameraFormatInfo] = []
        for index in 0... {
            var d = v4l2_fmtdesc()
            d.index = UInt32(index)
            d.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            guard try enumerate("VIDIOC_ENUM_FMT", cf_VIDIOC_ENUM_FMT, &d) else { break }
            let (sizes, range) = try frameSizes(d.pixelformat)
            out.append(
                CameraFormatInfo(
                    fourcc: fourccString(d.pixelformat), format: CameraFormat(fourcc: d.pixelformat),
                    description: cString(&d.description),
                    compressed: d.flags & UInt32(V4L2_FMT_FLAG_COMPRESSED) != 0, sizes: sizes, sizeRange: range))
        }
        return out
    }

    /// Runs one step of an ENUM_* ioctl: false past the end (EINVAL), or when the driver does
    /// not implement it (ENOTTY).
    private func enumerate<T>(_ op: String, _ req: UInt, _ value: inout T) throws -> Bool {
        do { try fd.ioctl(op, req, &value); return true } catch {
            if error.code == EINVAL || error.code == ENOTTY { return false }
            throw Self.describe(error, path: path)
        }
    }

    private func frameSizes(_ code: UInt32) throws -> ([CameraSize], CameraSizeRange?) {
        var sizes: [CameraSize] = []
        for index in 0... {
            var s = v4l2_frmsizeenum()
            s.index = UInt32(index)
            s.pixel_format = code
            guard try enumerate("VIDIOC_ENUM_FRAMESIZES", cf_VIDIOC_ENUM_FRAMESIZES, &s) else { break }
            if s.type == V4L2_FRMSIZE_TYPE_DISCRETE.rawValue {
                let w = Int(s.discrete.width), h = Int(s.discrete.height)
                sizes.append(CameraSize(width: w, height: h, frameRates: try frameRates(code, w, h)))
            } else {
                // STEPWISE or CONTINUOUS (step 1): one entry describes every size.
                let r = s.stepwise
                return (
                    sizes,
                    CameraSizeRange(
                        minWidth: Int(r.min_width), maxWidth: Int(r.max_width), stepWidth: Int(r.step_width),
                        minHeight: Int(r.min_height), maxHeight: Int(r.max_height), stepHeight: Int(r.step_height))
                )
            }
        }
        return (sizes, nil)
    }

    private func frameRates(_ code: UInt32, _ w: Int, _ h: Int) throws -> [Double] {
        var rates: [Double] = []
        for index in 0... {
            var v = v4l2_frmivalenum()
            v.index = UInt32(index)
            v.pixel_format = code
            v.width = UInt32(w)
            v.height = UInt32(h)
            guard try enumerate("VIDIOC_ENUM_FRAMEINTERVALS", cf_VIDIOC_ENUM_FRAMEINTERVALS, &v) else { break }
            if v.type == V4L2_FRMIVAL_TYPE_DISCRETE.rawValue {
                if v.discrete.numerator > 0 { rates.append(Double(v.discrete.denominator) / Double(v.discrete.numerator)) }
            } else {
                // A range of intervals: fastest (min interval) and slowest.
                for f in [v.stepwise.min, v.stepwise.max] where f.numerator > 0 { rates.append(Double(f.denominator) / Double(f.numerator)) }
                break
            }
        }
        return rates.sorted(by: >)
    }
}
