internal import CClipFlowV4L2
import ClipFlowCore
import ClipFlowMedia
import Foundation

// The memory-mapped buffer queue: REQBUFS, QUERYBUF + mmap, QBUF, STREAMON; and back (STREAMOFF,
// munmap, REQBUFS 0).

extension V4L2Device {
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

    func bufferStruct(_ i: Int) -> v4l2_buffer {
        var b = v4l2_buffer()
        b.index = UInt32(i)
        b.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
        b.memory = V4L2_MEMORY_MMAP.rawValue
        return b
    }

    /// Stops streaming (STREAMOFF), unmaps the buffers and frees them (REQBUFS 0). Safe to call
    /// again, and after the device was unplugged (errors are ignored: nothing more can be done).
    public func stop() {
        if streaming {
            var type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            try? fd.ioctl("VIDIOC_STREAMOFF", cf_VIDIOC_STREAMOFF, &type)
            streaming = false
        }
        buffers.removeAll()  // munmap each (MappedBuffer.deinit)
        if buffersRequested {
            var req = v4l2_requestbuffers()
            req.type = V4L2_BUF_TYPE_VIDEO_CAPTURE.rawValue
            req.memory = V4L2_MEMORY_MMAP.rawValue
            try? fd.ioctl("VIDIOC_REQBUFS", cf_VIDIOC_REQBUFS, &req)
            buffersRequested = false
        }
    }
}
