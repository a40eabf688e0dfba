internal import CClipFlowV4L2
import ClipFlowCore
import ClipFlowMedia
import Foundation

// Streaming reads: poll, DQBUF, copy the picture out, QBUF; drops from sequence gaps.

extension V4L2Device {
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
            // On CLOCK_MONOTONIC (as nearly every driver stamps): the capture clock itself;
            // otherwise the best this process knows is when it dequeued the picture.
            let monotonic = b.flags & UInt32(V4L2_BUF_FLAG_TIMESTAMP_MASK) == UInt32(V4L2_BUF_FLAG_TIMESTAMP_MONOTONIC)
            let clockTime = monotonic ? stamp : SystemClock().now()

            let broken = b.flags & UInt32(V4L2_BUF_FLAG_ERROR) != 0
            let picture = broken ? nil : copyOut(buffers[index], used: Int(b.bytesused), n)
            do { try fd.ioctl("VIDIOC_QBUF", cf_VIDIOC_QBUF, &b) } catch {
                if error.code != ENODEV { throw Self.describe(error, path: path) }
                deviceLost = true
            }
            guard let picture else { brokenFrames += 1; if deviceLost { return .deviceLost }; continue }
            let frame: VideoFrame
            if n.format == .mjpeg {
                let jpeg = try decoder ?? JPEGDecoder()
                decoder = jpeg
                do {
                    let d = try jpeg.decode(picture, time: time, sequence: Int64(seq))
                    frame = VideoFrame(
                        width: d.width, height: d.height, format: d.format, data: d.data, time: time,
                        sequence: Int64(seq), nominalRate: n.fps > 0 ? n.fps : nil, clockTime: clockTime)
                } catch {
                    brokenFrames += 1
                    if deviceLost { return .deviceLost }
                    continue
                }
            } else {
                frame = VideoFrame(
                    width: n.width, height: n.height, format: n.format.output, data: picture, time: time, sequence: Int64(seq),
                    nominalRate: n.fps > 0 ? n.fps : nil, clockTime: clockTime)
            }
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
}
