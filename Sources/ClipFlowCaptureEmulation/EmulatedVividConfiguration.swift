import ClipFlowCapture
import ClipFlowCore
import Foundation

extension EmulatedVivid {
    /// What the emulated camera offers and which faults it injects.
    public struct Configuration: Sendable {
        public var path = "/dev/video0"
        public var formats: [Format] = Format.allCases
        /// Discrete frame sizes, smallest first.
        public var sizes: [FrameSize] = [FrameSize(320, 240), FrameSize(640, 480), FrameSize(1280, 720), FrameSize(1920, 1080)]
        /// open gives ENOENT: no camera.
        public var missing = false
        /// open gives EACCES: the user may not use the camera.
        public var permissionDenied = false
        /// Another process owns the buffer queue: S_FMT, REQBUFS and STREAMON give EBUSY.
        public var busy = false
        /// The camera is unplugged when the frame after the Nth captured one is due: ioctls then
        /// give ENODEV, poll POLLERR | POLLHUP, and open ENOENT.
        public var unplugAfterFrames: Int?
        /// false: an output-only node (no VIDEO_CAPTURE capability).
        public var captureDevice = true
        /// Buffer timestamps are late by up to this many seconds, as a real driver's are (its
        /// thread wakes late): the first frame after STREAMON by the full amount (the thread
        /// starting up), later ones by a fixed pseudo-random share of half of it. 0: exact.
        public var timestampJitter = 0.0
        /// After this many frames were dequeued, the next `poll` first sleeps `seconds`, as a
        /// reader descheduled under load: frames falling due meanwhile fill the queued buffers,
        /// the rest are dropped.
        public var readerStall: (afterFrames: Int, seconds: Double)?
        /// Every Nth frame (sequence N-1, 2N-1, ...) is delivered flagged V4L2_BUF_FLAG_ERROR with
        /// no bytes, as a driver does for a picture it could not capture. nil: none.
        public var brokenEvery: Int?
        /// Frames fall due on the capture clock's grid (multiples of the frame interval since the
        /// clock's origin), and the frame due at each whole second shows a flash (white): a
        /// microphone test beeps at the same whole seconds and checks where both land.
        public var flashOnWholeSeconds = false

        public init() {}

        /// Parses `CLIPFLOW_V4L2_EMULATE` options (see `V4L2Emulation`).
        public init(options: String) throws {
            var inFormats = false
            for raw in options.split(separator: ",") {
                let token = raw.trimmingCharacters(in: .whitespaces)
                let parts = token.split(separator: "=", maxSplits: 1).map(String.init)
                if parts.count == 1, inFormats, let f = Format(rawValue: token) { formats.append(f); continue }
                inFormats = false
                switch (parts[0], parts.count == 2 ? parts[1] : nil) {
                case ("1", nil): break
                case ("busy", nil): busy = true
                case ("denied", nil): permissionDenied = true
                case ("missing", nil): missing = true
                case ("output", nil): captureDevice = false
                case ("flash", nil): flashOnWholeSeconds = true
                case ("unplug-after", let v?):
                    guard let n = Int(v), n >= 0 else {
                        throw ClipFlowError.badInput("\(V4L2Emulation.environmentVariable): unplug-after needs a number of frames, got '\(v)'")
                    }
                    unplugAfterFrames = n
                case ("jitter", let v?):
                    guard let ms = Double(v), ms >= 0, ms.isFinite else {
                        throw ClipFlowError.badInput("\(V4L2Emulation.environmentVariable): jitter needs milliseconds, got '\(v)'")
                    }
                    timestampJitter = ms / 1000
                case ("broken-every", let v?):
                    guard let n = Int(v), n >= 1 else {
                        throw ClipFlowError.badInput("\(V4L2Emulation.environmentVariable): broken-every needs a number of frames from 1, got '\(v)'")
                    }
                    brokenEvery = n
                case ("stall", let v?):
                    let p = v.split(separator: ":").map(String.init)
                    guard p.count == 2, let n = Int(p[0]), n >= 0, let ms = Double(p[1]), ms >= 0, ms.isFinite else {
                        throw ClipFlowError.badInput("\(V4L2Emulation.environmentVariable): stall needs FRAMES:MILLISECONDS, got '\(v)'")
                    }
                    readerStall = (n, ms / 1000)
                case ("formats", let v?):
                    guard let f = Format(rawValue: v) else {
                        throw ClipFlowError.badInput(
                            "\(V4L2Emulation.environmentVariable): unknown format '\(v)'; known: \(Format.allCases.map(\.rawValue).joined(separator: ", "))")
                    }
                    formats = [f]
                    inFormats = true
                default:
                    throw ClipFlowError.badInput(
                        "\(V4L2Emulation.environmentVariable): unknown option '\(token)'; known: 1, formats=yuyv,nv12,yuv420,mjpeg, unplug-after=N, jitter=MS, stall=FRAMES:MS, broken-every=N, flash, busy, denied, missing, output"
                    )
                }
            }
        }
    }

    public struct FrameSize: Sendable, Equatable {
        public var width: Int
        public var height: Int
        public init(_ width: Int, _ height: Int) { self.width = width; self.height = height }
    }
}
