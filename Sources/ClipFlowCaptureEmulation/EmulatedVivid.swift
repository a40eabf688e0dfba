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

    private enum BufferState { case dequeued, queued, done }
    private struct Buffer {
        var state = BufferState.dequeued
        var bytesused = 0
        var sequence: UInt32 = 0
        var time = 0.0
        var flags: UInt32 = 0
    }

    /// The queue's memory: one shared-memory object the application maps per buffer, and the
    /// emulator's own mapping of all of it. Freed when the queue is.
    private final class QueueMemory {
        let fd: Int32
        let base: UnsafeMutableRawPointer
        let total: Int
        init(total: Int) throws(SyscallErrno) {
            let name = "/clipflow-vivid-\(getpid())-\(UInt64.random(in: 0...UInt64.max))"
            let fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0o600)
            if fd < 0 { throw SyscallErrno(errno) }
            shm_unlink(name)
            guard ftruncate(fd, off_t(total)) == 0,
                  let p = Glibc.mmap(nil, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0), p != MAP_FAILED else {
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
    private let clock: any Clock
    private let lock = NSLock()

    // Device state (kept across opens, as a driver's is).
    private var fourcc: UInt32
    private var size: FrameSize
    private var interval = (num: UInt32(1), den: UInt32(30))
    private var unplugged = false
    // Descriptors: fd -> non-blocking.
    private var fds: [Int32: Bool] = [:]
    private var nextFD: Int32 = 1000
    // The buffer queue (vb2): its owner, buffers, memory and the application's mappings.
    private var owner: Int32?
    private var buffers: [Buffer] = []
    private var bufferLength = 0
    private var memory: QueueMemory?
    private var mappings: [UnsafeMutableRawPointer: (buffer: Int, length: Int)] = [:]
    private var queued: [Int] = []
    private var done: [Int] = []
    private var streaming = false
    private var streamStart = 0.0
    private var frameIndex: UInt32 = 0
    private var captured = 0
    private var dequeued = 0
    private var stalled = false
    private var generator: PictureGenerator?

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
                  length > 0, length <= bufferLength, flags & MAP_SHARED != 0 else { throw SyscallErrno(EINVAL) }
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

    // MARK: ioctls

    private func queryCap(_ c: UnsafeMutablePointer<v4l2_capability>) {
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

    private func enumFormat(_ d: UnsafeMutablePointer<v4l2_fmtdesc>) throws(SyscallErrno) {
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

    private func enumSizes(_ s: UnsafeMutablePointer<v4l2_frmsizeenum>) throws(SyscallErrno) {
        guard offers(s.pointee.pixel_format), Int(s.pointee.index) < configuration.sizes.count else { throw SyscallErrno(EINVAL) }
        let z = configuration.sizes[Int(s.pointee.index)]
        s.pointee.type = V4L2_FRMSIZE_TYPE_DISCRETE.rawValue
        s.pointee.discrete = v4l2_frmsize_discrete(width: UInt32(z.width), height: UInt32(z.height))
    }

    private func intervals(for z: FrameSize) -> [(num: UInt32, den: UInt32)] {
        z.width * z.height <= 1280 * 720 ? [(1, 60), (1, 30), (1, 15)] : [(1, 30), (1, 15)]
    }

    private func enumIntervals(_ v: UnsafeMutablePointer<v4l2_frmivalenum>) throws(SyscallErrno) {
        let z = FrameSize(Int(v.pointee.width), Int(v.pointee.height))
        guard offers(v.pointee.pixel_format), configuration.sizes.contains(z) else { throw SyscallErrno(EINVAL) }
        let list = intervals(for: z)
        guard Int(v.pointee.index) < list.count else { throw SyscallErrno(EINVAL) }
        let t = list[Int(v.pointee.index)]
        v.pointee.type = V4L2_FRMIVAL_TYPE_DISCRETE.rawValue
        v.pointee.discrete = v4l2_fract(numerator: t.num, denominator: t.den)
    }

    private func getFormat(_ f: UnsafeMutablePointer<v4l2_format>) throws(SyscallErrno) {
        try checkType(f.pointee.type)
        fill(f, fourcc: fourcc, size: size)
    }

    /// TRY_FMT: adjusts the request to what the device can do (never fails for a capture type).
    private func tryFormat(_ f: UnsafeMutablePointer<v4l2_format>) throws(SyscallErrno) {
        try checkType(f.pointee.type)
        let want = f.pointee.fmt.pix
        let code = offers(want.pixelformat) ? want.pixelformat : (configuration.formats.first?.fourcc ?? fourcc)
        let nearest = configuration.sizes.min { a, b in
            abs(a.width - Int(want.width)) + abs(a.height - Int(want.height)) < abs(b.width - Int(want.width)) + abs(b.height - Int(want.height))
        } ?? size
        fill(f, fourcc: code, size: nearest)
    }

    private func fill(_ f: UnsafeMutablePointer<v4l2_format>, fourcc: UInt32, size z: FrameSize) {
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
    private static func layout(_ fourcc: UInt32, _ z: FrameSize) -> (Int, Int) {
        switch fourcc {
        case cf_V4L2_PIX_FMT_YUYV: return (z.width * 2, z.width * 2 * z.height)
        case cf_V4L2_PIX_FMT_MJPEG: return (0, z.width * z.height * 2)
        default: return (z.width, z.width * z.height * 3 / 2)
        }
    }

    private func getParm(_ p: UnsafeMutablePointer<v4l2_streamparm>) throws(SyscallErrno) {
        try checkType(p.pointee.type)
        let type = p.pointee.type
        p.pointee = v4l2_streamparm()
        p.pointee.type = type
        p.pointee.parm.capture.capability = UInt32(V4L2_CAP_TIMEPERFRAME)
        p.pointee.parm.capture.timeperframe = v4l2_fract(numerator: interval.num, denominator: interval.den)
        p.pointee.parm.capture.readbuffers = 1
    }

    /// The offered interval nearest to `t` for the current size.
    private func nearestInterval(_ t: (num: UInt32, den: UInt32)) -> (num: UInt32, den: UInt32) {
        let want = Double(t.num) / Double(t.den)
        return intervals(for: size).min { abs(Double($0.num) / Double($0.den) - want) < abs(Double($1.num) / Double($1.den) - want) } ?? (1, 30)
    }

    private func requestBuffers(_ fd: Int32, _ r: UnsafeMutablePointer<v4l2_requestbuffers>) throws(SyscallErrno) {
        try checkType(r.pointee.type)
        guard r.pointee.memory == V4L2_MEMORY_MMAP.rawValue else { throw SyscallErrno(EINVAL) }
        try checkOwner(fd)
        if streaming || !mappings.isEmpty { throw SyscallErrno(EBUSY) }
        freeQueue()
        let count = r.pointee.count == 0 ? 0 : min(max(Int(r.pointee.count), 2), 32)
        r.pointee.count = UInt32(count)
        r.pointee.capabilities = UInt32(V4L2_BUF_CAP_SUPPORTS_MMAP)
        guard count > 0 else { return }
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        bufferLength = (Self.layout(fourcc, size).1 + page - 1) / page * page
        memory = try QueueMemory(total: bufferLength * count)
        buffers = Array(repeating: Buffer(), count: count)
        owner = fd
    }

    private func queryBuffer(_ b: UnsafeMutablePointer<v4l2_buffer>) throws(SyscallErrno) {
        try checkType(b.pointee.type)
        let i = Int(b.pointee.index)
        guard i < buffers.count else { throw SyscallErrno(EINVAL) }
        describe(i, into: b)
    }

    private func queueBuffer(_ fd: Int32, _ b: UnsafeMutablePointer<v4l2_buffer>) throws(SyscallErrno) {
        try checkType(b.pointee.type)
        try checkOwner(fd)
        let i = Int(b.pointee.index)
        guard owner == fd, i < buffers.count, b.pointee.memory == V4L2_MEMORY_MMAP.rawValue,
              buffers[i].state == .dequeued else { throw SyscallErrno(EINVAL) }
        buffers[i].state = .queued
        queued.append(i)
        describe(i, into: b)
    }

    private func dequeueBuffer(_ fd: Int32, _ b: UnsafeMutablePointer<v4l2_buffer>) throws(SyscallErrno) {
        try checkType(b.pointee.type)
        try checkOwner(fd)
        guard b.pointee.memory == V4L2_MEMORY_MMAP.rawValue, streaming, owner == fd else { throw SyscallErrno(EINVAL) }
        advance()
        if unplugged { throw SyscallErrno(ENODEV) }
        guard !done.isEmpty else { throw SyscallErrno(EAGAIN) }
        let i = done.removeFirst()
        buffers[i].state = .dequeued
        dequeued += 1
        describe(i, into: b)
    }

    /// Fills a v4l2_buffer with buffer `i`'s state, as QUERYBUF/QBUF/DQBUF return it.
    private func describe(_ i: Int, into b: UnsafeMutablePointer<v4l2_buffer>) {
        let x = buffers[i]
        let type = b.pointee.type
        b.pointee = v4l2_buffer()
        b.pointee.index = UInt32(i)
        b.pointee.type = type
        b.pointee.memory = V4L2_MEMORY_MMAP.rawValue
        b.pointee.m.offset = UInt32(i * bufferLength)
        b.pointee.length = UInt32(bufferLength)
        b.pointee.bytesused = UInt32(x.bytesused)
        b.pointee.field = V4L2_FIELD_NONE.rawValue
        b.pointee.sequence = x.sequence
        let sec = x.time.rounded(.down)
        b.pointee.timestamp = timeval(tv_sec: Int(sec), tv_usec: min(999_999, Int(((x.time - sec) * 1e6).rounded())))
        var flags = x.flags | UInt32(V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC) | UInt32(V4L2_BUF_FLAG_TSTAMP_SRC_EOF)
        if x.state == .queued { flags |= UInt32(V4L2_BUF_FLAG_QUEUED) }
        if x.state == .done { flags |= UInt32(V4L2_BUF_FLAG_DONE) }
        if mappings.values.contains(where: { $0.buffer == i }) { flags |= UInt32(V4L2_BUF_FLAG_MAPPED) }
        b.pointee.flags = flags
    }

    // MARK: the queue and the frame clock

    private func checkType(_ type: UInt32) throws(SyscallErrno) {
        guard type == V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue, configuration.captureDevice else { throw SyscallErrno(EINVAL) }
    }

    /// Another descriptor (or, with `busy`, another process) owns the buffer queue.
    private func checkOwner(_ fd: Int32) throws(SyscallErrno) {
        if configuration.busy || (owner != nil && owner != fd) { throw SyscallErrno(EBUSY) }
    }

    private func offers(_ code: UInt32) -> Bool { configuration.formats.contains { $0.fourcc == code } }

    private func dueTime(_ k: UInt32) -> Double {
        streamStart + Double(k + 1) * Double(interval.num) / Double(interval.den)
    }

    /// How late frame `k`'s timestamp is (see `Configuration.timestampJitter`).
    private func lateness(_ k: UInt32) -> Double {
        let j = configuration.timestampJitter
        guard j > 0 else { return 0 }
        if k == 0 { return j }
        // Knuth's multiplicative hash: a fixed, evenly spread share in [0, 1).
        return j / 2 * Double(k &* 2_654_435_761 % 1000) / 1000
    }

    /// Produces every frame due by now: into the next queued buffer, or dropped.
    private func advance() {
        guard streaming, !unplugged else { return }
        let now = clock.now()
        while dueTime(frameIndex) <= now {
            if let n = configuration.unplugAfterFrames, captured >= n { unplugged = true; return }
            if !queued.isEmpty {
                let i = queued.removeFirst()
                fillBuffer(i, sequence: frameIndex, time: dueTime(frameIndex) + lateness(frameIndex))
                buffers[i].state = .done
                done.append(i)
                captured += 1
            }
            frameIndex &+= 1
        }
    }

    private func fillBuffer(_ i: Int, sequence: UInt32, time: Double) {
        guard let memory else { return }
        if generator == nil || generator?.fourcc != fourcc || generator?.size != size {
            generator = PictureGenerator(fourcc: fourcc, size: size)
        }
        let dst = memory.base + i * bufferLength
        let broken = configuration.brokenEvery.map { (Int(sequence) + 1) % $0 == 0 } ?? false
        let used = broken ? -1 : (generator?.draw(sequence: sequence, into: dst, capacity: bufferLength) ?? 0)
        buffers[i].bytesused = max(used, 0)
        buffers[i].flags = used < 0 ? UInt32(V4L2_BUF_FLAG_ERROR) : (fourcc == cf_V4L2_PIX_FMT_MJPEG ? UInt32(V4L2_BUF_FLAG_KEYFRAME) : 0)
        buffers[i].sequence = sequence
        buffers[i].time = time
    }

    /// STREAMOFF: every buffer goes back to the application (dequeued), unfilled.
    private func streamOff() {
        streaming = false
        queued.removeAll()
        done.removeAll()
        for i in buffers.indices { buffers[i].state = .dequeued }
    }

    private func freeQueue() {
        buffers = []
        memory = nil
        owner = nil
        bufferLength = 0
    }

    private func locked<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body()
    }
}

/// Copies a string into a fixed C char array (a tuple), NUL-terminated.
private func copyString<T>(_ s: String, into field: inout T) {
    withUnsafeMutableBytes(of: &field) { raw in
        raw.initializeMemory(as: UInt8.self, repeating: 0)
        let bytes = Array(s.utf8.prefix(raw.count - 1))
        raw.copyBytes(from: bytes)
    }
}
