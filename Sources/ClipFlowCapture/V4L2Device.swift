internal import CClipFlowV4L2
import ClipFlowCore
import ClipFlowMedia
import Foundation

// The V4L2 driver client: open and query a camera, negotiate a format, size and rate, and stream
// with memory-mapped buffers. Every kernel call goes through `V4L2Syscalls` (the real kernel, or
// the emulated vivid camera in tests). Owners (habit 1): `DeviceDescriptor` closes the fd,
// `MappedBuffer` unmaps one buffer; `V4L2Device` owns both and is confined to one queue at a time.

// MARK: public value types

/// Pixel formats clipflow can read from a camera.
public enum CameraFormat: String, Sendable, CaseIterable {
    case yuyv, nv12, yuv420, mjpeg

    /// The V4L2 pixel format code (package: the emulated camera answers with the same codes).
    package var fourcc: UInt32 {
        switch self {
        case .yuyv: return cf_V4L2_PIX_FMT_YUYV
        case .nv12: return cf_V4L2_PIX_FMT_NV12
        case .yuv420: return cf_V4L2_PIX_FMT_YUV420
        case .mjpeg: return cf_V4L2_PIX_FMT_MJPEG
        }
    }
    init?(fourcc: UInt32) {
        guard let f = Self.allCases.first(where: { $0.fourcc == fourcc }) else { return nil }
        self = f
    }
    /// The layout of the `VideoFrame`s delivered (MJPEG is decoded to yuv420p).
    public var output: PixelFormat {
        switch self {
        case .yuyv: return .yuyv422
        case .nv12: return .nv12
        case .yuv420, .mjpeg: return .yuv420p
        }
    }
}

/// A discrete frame size and the frame rates offered at it.
public struct CameraSize: Sendable, Equatable {
    public var width: Int
    public var height: Int
    /// Frames per second, fastest first (for a continuous range: its two ends).
    public var frameRates: [Double]
    public init(width: Int, height: Int, frameRates: [Double]) {
        self.width = width
        self.height = height
        self.frameRates = frameRates
    }
}

/// Sizes a camera accepts in steps (V4L2_FRMSIZE_TYPE_STEPWISE/CONTINUOUS).
public struct CameraSizeRange: Sendable, Equatable {
    public var minWidth, maxWidth, stepWidth, minHeight, maxHeight, stepHeight: Int
    public func contains(width: Int, height: Int) -> Bool {
        (minWidth...maxWidth).contains(width) && (minHeight...maxHeight).contains(height)
            && (width - minWidth) % max(stepWidth, 1) == 0 && (height - minHeight) % max(stepHeight, 1) == 0
    }
}

/// One pixel format a camera offers (VIDIOC_ENUM_FMT) with its sizes and rates.
public struct CameraFormatInfo: Sendable, Equatable {
    /// The four-character code, e.g. "YUYV", "MJPG".
    public var fourcc: String
    /// The format as clipflow knows it (nil: one clipflow cannot read).
    public var format: CameraFormat?
    public var description: String
    public var compressed: Bool
    public var sizes: [CameraSize]
    public var sizeRange: CameraSizeRange?

    public func offers(width: Int, height: Int) -> Bool {
        sizes.contains { $0.width == width && $0.height == height } || sizeRange?.contains(width: width, height: height) == true
    }
    /// Whether `fps` is offered at that size (unknown rates count as offered).
    func offers(width: Int, height: Int, fps: Double) -> Bool {
        guard let s = sizes.first(where: { $0.width == width && $0.height == height }) else { return offers(width: width, height: height) }
        return s.frameRates.isEmpty || s.frameRates.contains { abs($0 - fps) < 0.01 }
    }
    /// "YUYV: 320x240 (60, 30, 15 fps), 640x480 (...)".
    public var summary: String {
        var parts = sizes.map { s in "\(s.width)x\(s.height)" + (s.frameRates.isEmpty ? "" : " (\(s.frameRates.map(formatRate).joined(separator: ", ")) fps)") }
        if let r = sizeRange { parts.append("\(r.minWidth)x\(r.minHeight) to \(r.maxWidth)x\(r.maxHeight) in steps of \(r.stepWidth)x\(r.stepHeight)") }
        return "\(fourcc)" + (format.map { " [\($0.rawValue)]" } ?? "") + ": " + (parts.isEmpty ? "no sizes listed" : parts.joined(separator: ", "))
    }
}

func formatRate(_ r: Double) -> String { r == r.rounded() ? String(Int(r)) : String(format: "%.2f", r) }

/// What to ask a camera for. `format` nil is "auto": the best raw format offering the size
/// (yuv420, then nv12, then yuyv), else MJPEG.
public struct CaptureRequest: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public var fps: Double
    public var format: CameraFormat?
    public init(width: Int = 1280, height: Int = 720, fps: Double = 30, format: CameraFormat? = nil) {
        self.width = width
        self.height = height
        self.fps = fps
        self.format = format
    }
}

/// What the camera agreed to (after the driver adjusted the request).
public struct NegotiatedFormat: Sendable, Equatable {
    public var format: CameraFormat
    public var width: Int
    public var height: Int
    /// Frames per second the driver reports (0: it does not say).
    public var fps: Double
    public var requested: CaptureRequest
    public var sizeAdjusted: Bool { width != requested.width || height != requested.height }
    /// One line for a notice: "/dev/video0: MJPEG 1280x720 at 30 fps (asked 1000x700)".
    public var summary: String {
        var s = "\(format.rawValue) \(width)x\(height) at \(fps > 0 ? formatRate(fps) : "an unknown rate of") fps"
        if sizeAdjusted { s += " (asked for \(requested.width)x\(requested.height); the camera adjusted it)" }
        if fps > 0, abs(fps - requested.fps) > 0.01 { s += " (asked for \(formatRate(requested.fps)) fps)" }
        return s
    }
}

/// A camera as `clipflow devices` lists it.
public struct CameraInfo: Sendable, Equatable {
    public var path: String
    public var card: String
    public var driver: String
    public var busInfo: String
    public var formats: [CameraFormatInfo]
    /// Why the device could not be queried (permission denied, busy, ...), or nil.
    public var problem: String?
    public var description: String {
        if let problem { return "\(path): \(problem)" }
        return (["\(path): \(card) (driver \(driver), \(busInfo))"] + formats.map { "  " + $0.summary }).joined(separator: "\n")
    }
}

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

// MARK: owners

/// A failed V4L2 call: which one and the errno (habit 2: the operation and the OS's words).
struct V4L2CallError: Error, CustomStringConvertible {
    let operation: String
    let errno: SyscallErrno
    var code: Int32 { errno.code }
    var description: String { "\(operation) failed: \(errno)" }
}

/// The device's file descriptor. Closed by `close()` or deinit.
final class DeviceDescriptor: @unchecked Sendable {
    let fd: Int32
    let syscalls: any V4L2Syscalls
    private var open = true

    init(path: String, syscalls: any V4L2Syscalls) throws(SyscallErrno) {
        fd = try syscalls.open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC)
        self.syscalls = syscalls
    }
    deinit { close() }

    func close() {
        guard open else { return }
        open = false
        try? syscalls.close(fd)
    }

    /// The one checked helper for V4L2 ioctls: runs `request` on `value` (the request's struct).
    func ioctl<T>(_ operation: String, _ request: UInt, _ value: inout T) throws(V4L2CallError) {
        do { try withUnsafeMutablePointer(to: &value) { p throws(SyscallErrno) in _ = try syscalls.ioctl(fd, request, UnsafeMutableRawPointer(p)) } } catch {
            throw V4L2CallError(operation: operation, errno: error)
        }
    }
}

/// One memory-mapped capture buffer. Unmapped in deinit.
final class MappedBuffer: @unchecked Sendable {
    let address: UnsafeMutableRawPointer
    let length: Int
    private let syscalls: any V4L2Syscalls
    init(fd: Int32, length: Int, offset: Int, syscalls: any V4L2Syscalls) throws(V4L2CallError) {
        do { address = try syscalls.mmap(length: length, prot: PROT_READ | PROT_WRITE, flags: MAP_SHARED, fd: fd, offset: offset) } catch {
            throw V4L2CallError(operation: "mmap of a \(length)-byte buffer", errno: error)
        }
        self.length = length
        self.syscalls = syscalls
    }
    deinit { try? syscalls.munmap(address, length: length) }
}

// MARK: the device

/// An open camera. Use from one queue at a time: `configure`, then `start`, `read` frames,
/// `stop` (also done by deinit). Owns the descriptor and the mapped buffers.
public final class V4L2Device: @unchecked Sendable {
    public let path: String
    public let driver: String
    public let card: String
    public let busInfo: String
    /// VIDEO_CAPTURE and STREAMING are both offered (after device_caps).
    public let isCaptureDevice: Bool

    public private(set) var negotiated: NegotiatedFormat?
    /// Frames the driver dropped before we dequeued them, from gaps in the buffer sequence.
    public private(set) var droppedFrames = 0
    /// Frames delivered by `read`.
    public private(set) var framesRead = 0
    /// Frames the driver flagged as broken, or MJPEG pictures that did not decode (skipped).
    public private(set) var corruptFrames = 0
    /// The device went away (unplugged) while streaming.
    public private(set) var deviceLost = false

    private let fd: DeviceDescriptor
    private var buffers: [MappedBuffer] = []
    private var buffersRequested = false
    private var streaming = false
    private var bytesPerLine = 0
    private var lastSequence: UInt32?
    private var firstTimestamp: Double?
    private var decoder: JPEGDecoder?

    /// Opens `path` (O_RDWR | O_NONBLOCK) and queries what it is (VIDIOC_QUERYCAP).
    public convenience init(path: String, syscalls: any V4L2Syscalls) throws {
        try self.init(path: path, syscalls: syscalls, requireCapture: true)
    }

    init(path: String, syscalls: any V4L2Syscalls, requireCapture: Bool) throws {
        self.path = path
        do { fd = try DeviceDescriptor(path: path, syscalls: syscalls) } catch {
            throw Self.openError(path, error, syscalls)
        }
        var cap = v4l2_capability()
        do { try fd.ioctl("VIDIOC_QUERYCAP", cf_VIDIOC_QUERYCAP, &cap) } catch {
            if error.code == ENOTTY {
                throw ClipFlowError.badInput("'\(path)' is not a Video4Linux device (it does not answer VIDIOC_QUERYCAP)")
            }
            throw Self.describe(error, path: path)
        }
        driver = cString(&cap.driver)
        card = cString(&cap.card)
        busInfo = cString(&cap.bus_info)
        // device_caps describes this node; capabilities the whole physical device.
        let caps = cap.capabilities & UInt32(V4L2_CAP_DEVICE_CAPS) != 0 ? cap.device_caps : cap.capabilities
        let capture = caps & UInt32(V4L2_CAP_VIDEO_CAPTURE) != 0, stream = caps & UInt32(V4L2_CAP_STREAMING) != 0
        isCaptureDevice = capture && stream
        if requireCapture && !capture {
            throw ClipFlowError.badInput("'\(path)' (\(card), driver \(driver)) is not a video capture device; run 'clipflow devices' to see the cameras")
        }
        if requireCapture && !stream {
            throw ClipFlowError.badInput("camera '\(path)' (\(card)) does not support streaming I/O with memory-mapped buffers, which clipflow needs")
        }
    }

    deinit { close() }

    private static func openError(_ path: String, _ e: SyscallErrno, _ syscalls: any V4L2Syscalls) -> ClipFlowError {
        switch e.code {
        case ENOENT, ENODEV, ENXIO:
            let others = syscalls.deviceNodes().filter { $0 != path }
            return .badInput("camera '\(path)': no such device; is the camera plugged in?"
                + (others.isEmpty ? " (no video devices found)" : " (video devices found: \(others.joined(separator: ", ")); run 'clipflow devices')"))
        case EACCES, EPERM:
            return .badInput("camera '\(path)': permission denied; add your user to the 'video' group (sudo usermod -aG video $USER) and log in again")
        case EBUSY:
            return busyError(path)
        default:
            return .failure("camera '\(path)': cannot open it: \(e)")
        }
    }

    private static func busyError(_ path: String) -> ClipFlowError {
        .badInput("camera '\(path)' is busy: another program is using it; close that program (or its browser tab) and try again")
    }

    /// A ClipFlowError for a failed call, naming the device.
    private static func describe(_ e: V4L2CallError, path: String) -> ClipFlowError {
        switch e.code {
        case EBUSY: return busyError(path)
        case ENODEV: return .failure("camera '\(path)' was unplugged (\(e))")
        default: return .failure("camera '\(path)': \(e)")
        }
    }

    // MARK: what it offers

    /// Formats, sizes and rates (ENUM_FMT, ENUM_FRAMESIZES, ENUM_FRAMEINTERVALS).
    public func formats() throws -> [CameraFormatInfo] {
        var out: [CameraFormatInfo] = []
        for index in 0... {
            var d = v4l2_fmtdesc()
            d.index = UInt32(index)
            d.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            guard try enumerate("VIDIOC_ENUM_FMT", cf_VIDIOC_ENUM_FMT, &d) else { break }
            let (sizes, range) = try frameSizes(d.pixelformat)
            out.append(CameraFormatInfo(fourcc: fourccString(d.pixelformat), format: CameraFormat(fourcc: d.pixelformat),
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
                return (sizes, CameraSizeRange(minWidth: Int(r.min_width), maxWidth: Int(r.max_width), stepWidth: Int(r.step_width),
                                               minHeight: Int(r.min_height), maxHeight: Int(r.max_height), stepHeight: Int(r.step_height)))
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

    // MARK: negotiation

    /// Chooses a format for `request`, sets it (S_FMT, accepting the driver's size) and the
    /// frame rate (S_PARM, reading back what the driver set).
    @discardableResult
    public func configure(_ request: CaptureRequest) throws -> NegotiatedFormat {
        guard !streaming else { throw ClipFlowError.failure("camera '\(path)': cannot change the format while streaming") }
        guard request.width > 0, request.height > 0, request.fps > 0 else {
            throw ClipFlowError.badInput("camera '\(path)': asked for \(request.width)x\(request.height) at \(request.fps) fps; width, height and fps must be positive")
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
            ?? first(size, raw: false) ?? first({ _ in true }, raw: true) ?? first({ _ in true }, raw: false) {
            return f
        }
        throw unsupported("any format clipflow reads (yuyv, nv12, yuv420, mjpeg)", offered)
    }

    private func unsupported(_ what: String, _ offered: [CameraFormatInfo]) -> ClipFlowError {
        .badInput("camera '\(path)' (\(card)) does not support \(what); it supports:\n"
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

    // MARK: streaming

    /// Capture buffers asked for by default; the driver grants what it can (vb2: at most 32).
    /// Queued buffers are the only slack between the camera and a reader descheduled under
    /// load: 32 hold about a second at 30 fps, as many as the ffmpeg CLI is granted.
    public static let defaultBufferCount = 32

    /// Requests `bufferCount` memory-mapped buffers (the driver may grant fewer; at least 2 are
    /// needed), maps and queues them all, and starts streaming.
    public func start(bufferCount: Int = V4L2Device.defaultBufferCount) throws {
        guard let n = negotiated else { throw ClipFlowError.failure("camera '\(path)': start before configure") }
        guard !streaming else { return }
        do {
            var req = v4l2_requestbuffers()
            req.count = UInt32(bufferCount)
            req.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            req.memory = V4L2_MEMORY_MMAP.rawValue
            try fd.ioctl("VIDIOC_REQBUFS", cf_VIDIOC_REQBUFS, &req)
            buffersRequested = true
            guard req.count >= 2 else {
                throw ClipFlowError.failure("camera '\(path)': the driver gave \(req.count) buffer(s) for \(n.summary); at least 2 are needed")
            }
            for i in 0..<Int(req.count) {
                var b = bufferStruct(i)
                try fd.ioctl("VIDIOC_QUERYBUF", cf_VIDIOC_QUERYBUF, &b)
                buffers.append(try MappedBuffer(fd: fd.fd, length: Int(b.length), offset: Int(b.m.offset), syscalls: fd.syscalls))
            }
            for i in buffers.indices {
                var b = bufferStruct(i)
                try fd.ioctl("VIDIOC_QBUF", cf_VIDIOC_QBUF, &b)
            }
            var type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            try fd.ioctl("VIDIOC_STREAMON", cf_VIDIOC_STREAMON, &type)
            streaming = true
            lastSequence = nil
            firstTimestamp = nil
        } catch let e as V4L2CallError {
            stop()
            throw Self.describe(e, path: path)
        } catch {
            stop()
            throw error
        }
    }

    private func bufferStruct(_ i: Int) -> v4l2_buffer {
        var b = v4l2_buffer()
        b.index = UInt32(i)
        b.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        b.memory = V4L2_MEMORY_MMAP.rawValue
        return b
    }

    /// What `read` got.
    public enum ReadResult: Sendable {
        case frame(VideoFrame)
        /// No frame within the timeout.
        case timeout
        /// The camera went away (unplugged): no more frames will come.
        case deviceLost
    }

    /// Waits up to `timeoutMs` for the next frame: poll, DQBUF, copy the picture out, QBUF the
    /// buffer back at once (MJPEG is decoded after the buffer is back with the driver).
    public func read(timeoutMs: Int32) throws -> ReadResult {
        guard streaming else { throw ClipFlowError.failure("camera '\(path)': read before start") }
        guard let n = negotiated else { throw ClipFlowError.failure("camera '\(path)': read before configure") }
        while true {
            let revents: Int16
            do { revents = try fd.syscalls.poll(fd.fd, events: Int16(POLLIN), timeoutMs: timeoutMs) } catch {
                throw ClipFlowError.failure("camera '\(path)': poll failed: \(error)")
            }
            if revents == 0 { return .timeout }
            if revents & Int16(POLLIN) == 0 {
                // POLLERR/POLLHUP while streaming: the device is gone.
                deviceLost = true
                return .deviceLost
            }
            var b = bufferStruct(0)
            do { try fd.ioctl("VIDIOC_DQBUF", cf_VIDIOC_DQBUF, &b) } catch {
                if error.code == EAGAIN { continue }
                if error.code == ENODEV { deviceLost = true; return .deviceLost }
                throw Self.describe(error, path: path)
            }
            let index = Int(b.index)
            guard index < buffers.count else { throw ClipFlowError.failure("camera '\(path)': driver returned buffer \(index) of \(buffers.count)") }

            let seq = b.sequence
            // The sequence restarts at 0 on STREAMON: frames before the first dequeued one and
            // gaps afterwards were dropped by the driver (no buffer was queued in time).
            droppedFrames += Int(lastSequence.map { seq > $0 ? seq - $0 - 1 : 0 } ?? seq)
            lastSequence = seq
            let stamp = Double(b.timestamp.tv_sec) + Double(b.timestamp.tv_usec) / 1e6
            if firstTimestamp == nil { firstTimestamp = stamp }
            let time = stamp - (firstTimestamp ?? stamp)

            let broken = b.flags & UInt32(V4L2_BUF_FLAG_ERROR) != 0
            let picture = broken ? nil : copyOut(buffers[index], used: Int(b.bytesused), n)
            do { try fd.ioctl("VIDIOC_QBUF", cf_VIDIOC_QBUF, &b) } catch {
                if error.code != ENODEV { throw Self.describe(error, path: path) }
                deviceLost = true
            }
            guard let picture else { corruptFrames += 1; if deviceLost { return .deviceLost }; continue }
            let frame: VideoFrame
            if n.format == .mjpeg {
                let jpeg = try decoder ?? JPEGDecoder()
                decoder = jpeg
                do {
                    let d = try jpeg.decode(picture, time: time, sequence: Int64(seq))
                    frame = VideoFrame(width: d.width, height: d.height, format: d.format, data: d.data, time: time,
                                       sequence: Int64(seq), nominalRate: n.fps > 0 ? n.fps : nil)
                } catch {
                    corruptFrames += 1
                    if deviceLost { return .deviceLost }
                    continue
                }
            } else {
                frame = VideoFrame(width: n.width, height: n.height, format: n.format.output, data: picture, time: time, sequence: Int64(seq),
                                   nominalRate: n.fps > 0 ? n.fps : nil)
            }
            framesRead += 1
            return .frame(frame)
        }
    }

    /// Copies a filled buffer out without row padding. Nil when it holds less than a picture.
    private func copyOut(_ buf: MappedBuffer, used: Int, _ n: NegotiatedFormat) -> Data? {
        let bytes = buf.address.assumingMemoryBound(to: UInt8.self)
        if n.format == .mjpeg {
            guard used > 0, used <= buf.length else { return nil }
            return Data(bytes: bytes, count: used)
        }
        let w = n.width, h = n.height
        // Rows of each plane: (bytes per row, rows, source stride).
        let bpl = max(bytesPerLine, n.format == .yuyv ? w * 2 : w)
        let cw = (w + 1) / 2, ch = (h + 1) / 2
        let planes: [(Int, Int, Int)]
        switch n.format {
        case .yuyv: planes = [(cw * 4, h, bpl)]
        case .nv12: planes = [(w, h, bpl), (cw * 2, ch, bpl)]
        case .yuv420, .mjpeg: planes = [(w, h, bpl), (cw, ch, bpl / 2), (cw, ch, bpl / 2)]
        }
        let need = planes.reduce(0) { $0 + $1.2 * ($1.1 - 1) + $1.0 }
        let available = used > 0 ? min(used, buf.length) : buf.length
        guard need <= available, planes.reduce(0, { $0 + $1.2 * $1.1 }) <= buf.length else { return nil }
        if planes.allSatisfy({ $0.0 == $0.2 }) { return Data(bytes: bytes, count: planes.reduce(0) { $0 + $1.0 * $1.1 }) }
        var out = Data(capacity: planes.reduce(0) { $0 + $1.0 * $1.1 })
        var src = 0
        for (row, rows, stride) in planes {
            for y in 0..<rows { out.append(bytes + src + y * stride, count: row) }
            src += stride * rows
        }
        return out
    }

    /// Stops streaming (STREAMOFF), unmaps the buffers and frees them (REQBUFS 0). Safe to call
    /// again, and after the device was unplugged (errors are ignored: nothing more can be done).
    public func stop() {
        if streaming {
            var type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            try? fd.ioctl("VIDIOC_STREAMOFF", cf_VIDIOC_STREAMOFF, &type)
            streaming = false
        }
        buffers.removeAll()   // munmap each (MappedBuffer.deinit)
        if buffersRequested {
            var req = v4l2_requestbuffers()
            req.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            req.memory = V4L2_MEMORY_MMAP.rawValue
            try? fd.ioctl("VIDIOC_REQBUFS", cf_VIDIOC_REQBUFS, &req)
            buffersRequested = false
        }
    }

    /// Stops and closes the device.
    public func close() {
        stop()
        fd.close()
    }
}

/// A NUL-terminated C char array (a tuple) as a String.
private func cString<T>(_ field: inout T) -> String {
    withUnsafeBytes(of: &field) { raw in
        let bytes = raw.prefix { $0 != 0 }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// "YUYV", "MJPG", ... from a fourcc.
private func fourccString(_ code: UInt32) -> String {
    let bytes = (0..<4).map { UInt8((code >> (8 * UInt32($0))) & 0xff) }
    return String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespaces)
}
