internal import CClipFlowV4L2
import ClipFlowCapture
import ClipFlowCore
import ClipFlowMedia
import Foundation

// The emulated buffer queue (vb2's rules) and the frame clock: REQBUFS, QUERYBUF, QBUF, DQBUF,
// STREAMOFF; frames falling due fill queued buffers or are dropped. Called under `lock`.

extension EmulatedVivid {
    func requestBuffers(_ fd: Int32, _ r: UnsafeMutablePointer<v4l2_requestbuffers>) throws(SyscallErrno) {
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

    func queryBuffer(_ b: UnsafeMutablePointer<v4l2_buffer>) throws(SyscallErrno) {
        try checkType(b.pointee.type)
        let i = Int(b.pointee.index)
        guard i < buffers.count else { throw SyscallErrno(EINVAL) }
        describe(i, into: b)
    }

    func queueBuffer(_ fd: Int32, _ b: UnsafeMutablePointer<v4l2_buffer>) throws(SyscallErrno) {
        try checkType(b.pointee.type)
        try checkOwner(fd)
        let i = Int(b.pointee.index)
        guard owner == fd, i < buffers.count, b.pointee.memory == V4L2_MEMORY_MMAP.rawValue,
            buffers[i].state == .dequeued
        else { throw SyscallErrno(EINVAL) }
        buffers[i].state = .queued
        queued.append(i)
        describe(i, into: b)
    }

    func dequeueBuffer(_ fd: Int32, _ b: UnsafeMutablePointer<v4l2_buffer>) throws(SyscallErrno) {
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
    func describe(_ i: Int, into b: UnsafeMutablePointer<v4l2_buffer>) {
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

    func checkType(_ type: UInt32) throws(SyscallErrno) {
        guard type == V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue, configuration.captureDevice else { throw SyscallErrno(EINVAL) }
    }

    /// Another descriptor (or, with `busy`, another process) owns the buffer queue.
    func checkOwner(_ fd: Int32) throws(SyscallErrno) {
        if configuration.busy || (owner != nil && owner != fd) { throw SyscallErrno(EBUSY) }
    }

    func offers(_ code: UInt32) -> Bool { configuration.formats.contains { $0.fourcc == code } }

    func dueTime(_ k: UInt32) -> Double {
        streamStart + Double(k + 1) * Double(interval.num) / Double(interval.den)
    }

    /// Whether frame `k` is due on a whole second (`Configuration.flashOnWholeSeconds`).
    func flashes(_ k: UInt32) -> Bool {
        guard configuration.flashOnWholeSeconds else { return false }
        let t = dueTime(k)
        return abs(t - t.rounded()) < 0.25 * Double(interval.num) / Double(interval.den)
    }

    /// How late frame `k`'s timestamp is (see `Configuration.timestampJitter`).
    func lateness(_ k: UInt32) -> Double {
        let j = configuration.timestampJitter
        guard j > 0 else { return 0 }
        if k == 0 { return j }
        // Knuth's multiplicative hash: a fixed, evenly spread share in [0, 1).
        return j / 2 * Double(k &* 2_654_435_761 % 1000) / 1000
    }

    /// Produces every frame due by now: into the next queued buffer, or dropped.
    func advance() {
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

    func fillBuffer(_ i: Int, sequence: UInt32, time: Double) {
        guard let memory else { return }
        if generator == nil || generator?.fourcc != fourcc || generator?.size != size {
            generator = PictureGenerator(fourcc: fourcc, size: size)
        }
        let dst = memory.base + i * bufferLength
        let broken = configuration.brokenEvery.map { (Int(sequence) + 1) % $0 == 0 } ?? false
        let used = broken ? -1 : (generator?.draw(sequence: sequence, flash: flashes(sequence), into: dst, capacity: bufferLength) ?? 0)
        buffers[i].bytesused = max(used, 0)
        buffers[i].flags = used < 0 ? UInt32(V4L2_BUF_FLAG_ERROR) : (fourcc == cf_V4L2_PIX_FMT_MJPEG ? UInt32(V4L2_BUF_FLAG_KEYFRAME) : 0)
        buffers[i].sequence = sequence
        buffers[i].time = time
    }

    /// STREAMOFF: every buffer goes back to the application (dequeued), unfilled.
    func streamOff() {
        streaming = false
        queued.removeAll()
        done.removeAll()
        for i in buffers.indices { buffers[i].state = .dequeued }
    }

    func freeQueue() {
        buffers = []
        memory = nil
        owner = nil
        bufferLength = 0
    }
}
