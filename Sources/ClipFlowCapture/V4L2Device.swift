internal import CClipFlowV4L2
import ClipFlowCore
import ClipFlowMedia
import Foundation

// The V4L2 driver client: open and query a camera (this file), list what it offers
// (+Enumeration), negotiate a format, size and rate (+Negotiation), set up the memory-mapped
// buffer queue (+BufferQueue) and read frames (+Reading). Every kernel call goes through
// `V4L2Syscalls` (the real kernel, or the emulated vivid camera in tests).

/// An open camera. Use from one queue at a time: `configure`, then `start`, `read` frames,
/// `stop` (also done by deinit). Owns the descriptor and the mapped buffers. Not Sendable: its
/// owner (a `V4L2Source`, on its stage queue) keeps it.
public final class V4L2Device {
    public let path: String
    public let driver: String
    public let card: String
    public let busInfo: String
    /// VIDEO_CAPTURE and STREAMING are both offered (after device_caps).
    public let isCaptureDevice: Bool

    public internal(set) var negotiated: NegotiatedFormat?
    /// Frames the driver dropped before we dequeued them, from gaps in the buffer sequence.
    public internal(set) var droppedFrames = 0
    /// Pictures skipped because the driver flagged them broken or their MJPEG did not decode.
    public internal(set) var brokenFrames = 0
    /// The device went away (unplugged) while streaming.
    public internal(set) var deviceLost = false

    let fd: DeviceDescriptor
    var buffers: [MappedBuffer] = []
    var buffersRequested = false
    var streaming = false
    var bytesPerLine = 0
    var lastSequence: UInt32?
    var firstTimestamp: Double?
    var decoder: JPEGDecoder?

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
            return .badInput(
                "camera '\(path)': no such device; is the camera plugged in?"
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
    static func describe(_ e: V4L2CallError, path: String) -> ClipFlowError {
        switch e.code {
        case EBUSY: return busyError(path)
        case ENODEV: return .failure("camera '\(path)' was unplugged (\(e))")
        default: return .failure("camera '\(path)': \(e)")
        }
    }

    // MARK: closing

    /// Stops and closes the device.
    public func close() {
        stop()
        fd.close()
    }
}
