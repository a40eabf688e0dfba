internal import CClipFlowV4L2
import ClipFlowCapture
import ClipFlowCore
import ClipFlowMedia
import Foundation

/// A camera behind the syscall seam that behaves as the kernel's `vivid` test driver does, for
/// tests and CI (no camera, no v4l2loopback).
///
/// It answers the same ioctls with the same `<linux/videodev2.h>` structs and errnos:
/// - QUERYCAP: driver and card "vivid", VIDEO_CAPTURE | STREAMING | READWRITE | DEVICE_CAPS;
/// - ENUM_FMT / ENUM_FRAMESIZES (discrete 320x240, 640x480, 1280x720, 1920x1080) /
///   ENUM_FRAMEINTERVALS (1/30 and 1/15, and 1/60 up to 1280x720); past the end: EINVAL;
/// - G/S/TRY_FMT: an unknown pixel format becomes the first one offered, a size the nearest
///   offered one (as `v4l2_find_nearest_size`); G/S_PARM picks the nearest offered interval;
/// - REQBUFS (MMAP only), QUERYBUF, mmap at the QUERYBUF offsets (real shared memory, so each
///   mmap is a real mapping and `liveMappings` counts them), QBUF, DQBUF, STREAMON, STREAMOFF
///   with vb2's rules: REQBUFS/S_FMT while streaming or from a second descriptor: EBUSY;
///   REQBUFS 0 while buffers are still mapped: EBUSY; QBUF of a bad index or of a buffer not
///   dequeued: EINVAL; DQBUF with nothing ready: EAGAIN; STREAMOFF returns every buffer to the
///   application; the sequence restarts at STREAMON.
///
/// Frames are paced by `clock`: frame k is due at STREAMON + (k + 1) x interval. When it is due
/// and a buffer is queued, the buffer is filled (a gradient with a moving bar, and the sequence
/// number as a code of 32 8x8 blocks along the top, see `sequenceCode(in:)`), time-stamped with
/// the due time (made late by `timestampJitter`) and can be dequeued; with no buffer queued the
/// frame is dropped and `sequence` still advances, as the kernel does. `poll` waits on the clock
/// for a frame or the timeout (after a `readerStall`, if one is configured).
///
/// Deviation from the kernel: DQBUF never blocks (the driver code always opens O_NONBLOCK).
/// @unchecked Sendable: every mutable field is read and written under `lock` (never held while
/// sleeping).
public final class EmulatedVivid: V4L2Syscalls, @unchecked Sendable {
    /// The emulated formats are the ones the driver code reads (same fourccs).
    public typealias Format = CameraFormat

    enum BufferState { case dequeued, queued, done }
    struct Buffer {
        var state = BufferState.dequeued
        var bytesused = 0
        var sequence: UInt32 = 0
        var time = 0.0
        var flags: UInt32 = 0
    }

    /// The queue's memory: one shared-memory object the application maps per buffer, and the
    /// emulator's own mapping of all of it. Freed when the queue is.
    final class QueueMemory {
        let fd: Int32
        let base: UnsafeMutableRawPointer
        let total: Int
        init(total: Int) throws(SyscallErrno) {
            let name = "/clipflow-vivid-\(getpid())-\(UInt64.random(in: 0...UInt64.max))"
            let fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0o600)
            if fd < 0 { throw SyscallErrno(errno) }
            shm_unlink(name)
            guard ftruncate(fd, off_t(total)) == 0,
                let p = Glibc.mmap(nil, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), p != MAP_FAILED
            else {
                let e = errno
                Glibc.close(fd)
                throw SyscallErrno(e)
            }
            self.fd = fd
            base = p
            self.total = total
        }
        deinit {
            Glibc.munmap(base, total)
            Glibc.close(fd)
        }
    }

    public let configuration: Configuration
    let clock: any Clock
    let lock = NSLock()

    // Device state (kept across opens, as a driver's is).
    var fourcc: UInt32
    var size: FrameSize
    var interval = (num: UInt32(1), den: UInt32(30))
    var unplugged = false
    // Descriptors: fd -> non-blocking.
    var fds: [Int32: Bool] = [:]
    var nextFD: Int32 = 1000
    // The buffer queue (vb2): its owner, buffers, memory and the application's mappings.
    var owner: Int32?
    var buffers: [Buffer] = []
    var bufferLength = 0
    var memory: QueueMemory?
    var mappings: [UnsafeMutableRawPointer: (buffer: Int, length: Int)] = [:]
    var queued: [Int] = []
    var done: [Int] = []
    var streaming = false
    var streamStart = 0.0
    var frameIndex: UInt32 = 0
    var captured = 0
    var dequeued = 0
    var stalled = false
    var generator: PictureGenerator?

    public init(_ configuration: Configuration = Configuration(), clock: any Clock) {
        self.configuration = configuration
        self.clock = clock
        fourcc = configuration.formats.first?.fourcc ?? cf_V4L2_PIX_FMT_YUYV
        size = configuration.sizes.first(where: { $0.width == 640 }) ?? configuration.sizes.first ?? FrameSize(640, 480)
    }

    // MARK: what tests read

    /// Application mappings of buffers not yet unmapped.
    public var liveMappings: Int { locked { mappings.count } }
    /// Descriptors open on the device.
    public var openDescriptors: Int { locked { fds.count } }
    public var isStreaming: Bool { locked { streaming } }
    /// Frames filled into buffers since the device was created.
    public var capturedFrames: Int { locked { captured } }

    /// Reads back the sequence code the emulator draws (32 blocks of 8x8 luma along the top,
    /// most significant bit first) from a raw frame. Nil for compressed frames.
    public static func sequenceCode(in frame: VideoFrame) -> UInt32? {
        guard frame.width >= 256, frame.height >= 8 else { return nil }
        let stride: Int, step: Int
        switch frame.format {
        case .yuyv422: stride = frame.width * 2; step = 2
        case .yuv420p, .nv12: stride = frame.width; step = 1
        case .mjpeg: return nil
        }
        var v: UInt32 = 0
        guard frame.data.count >= 8 * stride else { return nil }
        frame.data.withUnsafeBytes { (b: UnsafeRawBufferPointer) in
            for i in 0..<32 {
                let y: UInt8 = b[4 * stride + (8 * i + 4) * step]
                v = v << 1 | (y > 128 ? 1 : 0)
            }
        }
        return v
    }

    // MARK: V4L2Syscalls

    public func deviceNodes() -> [String] { configuration.missing ? [] : [configuration.path] }

    public func open(_ path: String, _ flags: Int32) throws(SyscallErrno) -> Int32 {
        try locked { () throws(SyscallErrno) -> Int32 in
            guard path == configuration.path, !configuration.missing, !unplugged else { throw SyscallErrno(ENOENT) }
            if configuration.permissionDenied { throw SyscallErrno(EACCES) }
            guard flags & O_ACCMODE == O_RDWR else { throw SyscallErrno(EINVAL) }
            let fd = nextFD
            nextFD += 1
            fds[fd] = flags & O_NONBLOCK != 0
            return fd
        }
    }

    public func close(_ fd: Int32) throws(SyscallErrno) {
        try locked { () throws(SyscallErrno) in
            guard fds.removeValue(forKey: fd) != nil else { throw SyscallErrno(EBADF) }
            // Closing the owner stops streaming and frees the queue (the application's mappings
            // stay valid until unmapped, as with the kernel).
            if owner == fd { streamOff(); freeQueue() }
        }
    }

    public func mmap(length: Int, prot: Int32, flags: Int32, fd: Int32, offset: Int) throws(SyscallErrno) -> UnsafeMutableRawPointer {
        try locked { () throws(SyscallErrno) -> UnsafeMutableRawPointer in
            guard fds[fd] != nil else { throw SyscallErrno(EBADF) }
            if unplugged { throw SyscallErrno(ENODEV) }
            guard owner == fd, let memory, offset % bufferLength == 0, offset / bufferLength < buffers.count,
                length > 0, length <= bufferLength, flags & MAP_SHARED != 0
            else { throw SyscallErrno(EINVAL) }
            guard let p = Glibc.mmap(nil, length, prot, MAP_SHARED, memory.fd, off_t(offset)), p != MAP_FAILED else {
                throw SyscallErrno(errno)
            }
            mappings[p] = (offset / bufferLength, length)
            return p
        }
    }

    public func munmap(_ address: UnsafeMutableRawPointer, length: Int) throws(SyscallErrno) {
        try locked { () throws(SyscallErrno) in
            guard mappings[address]?.length == length else { throw SyscallErrno(EINVAL) }
            if Glibc.munmap(address, length) != 0 { throw SyscallErrno(errno) }
            mappings[address] = nil
        }
    }

    public func poll(_ fd: Int32, events: Int16, timeoutMs: Int32) throws(SyscallErrno) -> Int16 {
        let stall = locked { () -> Double? in
            guard let s = configuration.readerStall, !stalled, dequeued >= s.afterFrames else { return nil }
            stalled = true
            return s.seconds
        }
        if let stall { clock.sleep(until: clock.now() + stall, stop: { false }) }
        let deadline = timeoutMs < 0 ? Double.infinity : clock.now() + Double(timeoutMs) / 1000
        while true {
            let (revents, next) = locked { () -> (Int16, Double) in
                guard fds[fd] != nil else { return (Int16(POLLNVAL), 0) }
                advance()
                if unplugged { return (Int16(POLLERR | POLLHUP), 0) }
                if !done.isEmpty { return (Int16(POLLIN | POLLRDNORM) & (events | Int16(POLLERR | POLLHUP)), 0) }
                if !streaming || owner != fd { return (Int16(POLLERR), 0) }
                return (0, dueTime(frameIndex))
            }
            if revents != 0 { return revents }
            if clock.now() >= deadline { return 0 }
            clock.sleep(until: min(next, deadline), stop: { false })
        }
    }

    @discardableResult
    public func ioctl(_ fd: Int32, _ request: UInt, _ arg: UnsafeMutableRawPointer) throws(SyscallErrno) -> Int32 {
        try locked { () throws(SyscallErrno) -> Int32 in
            guard fds[fd] != nil else { throw SyscallErrno(EBADF) }
            if unplugged { throw SyscallErrno(ENODEV) }
            switch request {
            case cf_VIDIOC_QUERYCAP: queryCap(arg.assumingMemoryBound(to: v4l2_capability.self))
            case cf_VIDIOC_ENUM_FMT: try enumFormat(arg.assumingMemoryBound(to: v4l2_fmtdesc.self))
            case cf_VIDIOC_ENUM_FRAMESIZES: try enumSizes(arg.assumingMemoryBound(to: v4l2_frmsizeenum.self))
            case cf_VIDIOC_ENUM_FRAMEINTERVALS: try enumIntervals(arg.assumingMemoryBound(to: v4l2_frmivalenum.self))
            case cf_VIDIOC_G_FMT: try getFormat(arg.assumingMemoryBound(to: v4l2_format.self))
            case cf_VIDIOC_TRY_FMT: try tryFormat(arg.assumingMemoryBound(to: v4l2_format.self))
            case cf_VIDIOC_S_FMT:
                let f = arg.assumingMemoryBound(to: v4l2_format.self)
                try tryFormat(f)
                try checkOwner(fd)
                if streaming || !buffers.isEmpty { throw SyscallErrno(EBUSY) }
                fourcc = f.pointee.fmt.pix.pixelformat
                size = FrameSize(Int(f.pointee.fmt.pix.width), Int(f.pointee.fmt.pix.height))
                interval = nearestInterval(interval)
                generator = nil
            case cf_VIDIOC_G_PARM: try getParm(arg.assumingMemoryBound(to: v4l2_streamparm.self))
            case cf_VIDIOC_S_PARM:
                let p = arg.assumingMemoryBound(to: v4l2_streamparm.self)
                guard p.pointee.type == V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue else { throw SyscallErrno(EINVAL) }
                let t = p.pointee.parm.capture.timeperframe
                interval = nearestInterval(t.numerator == 0 || t.denominator == 0 ? (1, 30) : (t.numerator, t.denominator))
                try getParm(p)
            case cf_VIDIOC_REQBUFS: try requestBuffers(fd, arg.assumingMemoryBound(to: v4l2_requestbuffers.self))
            case cf_VIDIOC_QUERYBUF: try queryBuffer(arg.assumingMemoryBound(to: v4l2_buffer.self))
            case cf_VIDIOC_QBUF: try queueBuffer(fd, arg.assumingMemoryBound(to: v4l2_buffer.self))
            case cf_VIDIOC_DQBUF: try dequeueBuffer(fd, arg.assumingMemoryBound(to: v4l2_buffer.self))
            case cf_VIDIOC_STREAMON:
                try checkType(arg.load(as: UInt32.self))
                try checkOwner(fd)
                guard owner == fd, !buffers.isEmpty else { throw SyscallErrno(EINVAL) }
                if !streaming {
                    streaming = true
                    streamStart = clock.now()
                    if configuration.flashOnWholeSeconds {
                        // On the grid: due times are whole multiples of the interval.
                        let period = Double(interval.num) / Double(interval.den)
                        streamStart = (streamStart / period).rounded(.down) * period
                    }
                    frameIndex = 0
                }
            case cf_VIDIOC_STREAMOFF:
                try checkType(arg.load(as: UInt32.self))
                try checkOwner(fd)
                streamOff()
            default: throw SyscallErrno(ENOTTY)
            }
            return 0
        }
    }

    func locked<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }
}
