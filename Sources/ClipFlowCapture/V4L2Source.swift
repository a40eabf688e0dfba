import ClipFlowCore
import Foundation

/// Source: frames from a V4L2 camera (port type `frames`), as `Item.frame(.video(...))`.
///
/// `prepare` opens the camera and negotiates the format (so a missing, busy or unsuitable camera
/// fails before anything runs) and emits a notice with what was agreed. `produce` streams until
/// `frames` frames were pushed, a frame's slot on the negotiated rate's grid reaches `duration`
/// (exactly duration x fps pictures when none is dropped), the graph stops, or the
/// camera is unplugged: then it emits a notice, sets `deviceLost` and ends the stream normally so
/// that downstream stages finalise what was recorded. Frames the driver dropped are counted from
/// gaps in the kernel's sequence numbers, broken pictures (skipped) in `brokenFrames`; each is
/// reported as `.dropped` events of its own cause (`lostCause`, `brokenCause`).
///
/// Belongs to its stage queue (others read its counters after the run); owns the `V4L2Device`
/// from `prepare` to `finish`. A stop or cancel is seen through `context.stopRequested`, polled
/// at least every `pollMs`.
public final class V4L2Source: Stage {
    public let id: String
    public let device: String
    public let request: CaptureRequest
    /// Seconds of video to capture (0: until stopped).
    public let duration: Double
    /// Frames to capture (0: unlimited).
    public let frameLimit: Int
    private let syscalls: (any V4L2Syscalls)?
    private var camera: V4L2Device?

    public private(set) var negotiated: NegotiatedFormat?
    public private(set) var framesPushed = 0
    public private(set) var droppedFrames = 0
    /// Pictures the camera delivered broken (flagged by the driver, or MJPEG that did not decode): skipped.
    public private(set) var brokenFrames = 0
    /// The camera went away mid-stream.
    public private(set) var deviceLost = false
    /// Why pictures are missing from the kernel's sequence, as the `dropped` events say it.
    public static let lostCause = "dropping pictures: the camera was not read in time (no capture buffer was free)"
    /// Why broken pictures are left out, as the `dropped` events say it.
    public static let brokenCause = "skipping broken pictures (flagged by the driver, or MJPEG that did not decode)"

    public var inputTypes: Set<PortType> { [] }
    public var outputType: PortType? { .frames }

    /// The frame slot a picture's time falls in, at `fps` (nearest: timestamps jitter by less
    /// than half a frame either way).
    /// Saturates: a time beyond any frame count (or a driver's absurd rate) gives `Int64.max`.
    static func slot(of time: Double, fps: Double) -> Int64 {
        let s = (time * fps).rounded()
        return s.isFinite && s < 9.0e18 ? Int64(max(s, 0)) : Int64.max
    }

    /// How long `produce` waits without a frame before failing (a camera that stopped sending).
    static let stallSeconds = 5.0
    static let pollMs: Int32 = 100

    public static let kind = StageKind(
        name: "v4l2", summary: "source: frames from a Video4Linux2 camera",
        output: .frames,
        params: [
            ParamSpec("device", .path, default: .string("/dev/video0"), help: "camera device node ('clipflow devices' lists them)"),
            ParamSpec("width", .integer(min: 16, max: 8192), default: .number(1280), help: "picture width (the camera may adjust it)"),
            ParamSpec("height", .integer(min: 16, max: 8192), default: .number(720), help: "picture height (the camera may adjust it)"),
            ParamSpec("fps", .number(min: 1, max: 240), default: .number(30), help: "frames per second to ask for"),
            ParamSpec(
                "format", .choice(["auto", "yuyv", "nv12", "yuv420", "mjpeg"]), default: .string("auto"),
                help: "camera pixel format; auto: the best raw format offering the size, else MJPEG (decoded to yuv420p)"),
            ParamSpec("duration", .number(min: 0, max: nil), default: .number(0), help: "seconds to capture (0: until stopped)"),
            ParamSpec("frames", .integer(min: 0, max: nil), default: .number(0), help: "frames to capture (0: unlimited)")
        ],
        make: { id, p in
            let f = p.string("format") ?? "auto"
            return V4L2Source(
                id: id, device: p.string("device") ?? "/dev/video0",
                request: CaptureRequest(
                    width: p.int("width") ?? 1280, height: p.int("height") ?? 720,
                    fps: p.double("fps") ?? 30, format: CameraFormat(rawValue: f)),
                duration: p.double("duration") ?? 0, frames: p.int("frames") ?? 0)
        })

    /// `syscalls` nil: the process-wide default (`V4L2System.defaultSyscalls()`).
    public init(
        id: String, device: String = "/dev/video0", request: CaptureRequest = CaptureRequest(),
        duration: Double = 0, frames: Int = 0, syscalls: (any V4L2Syscalls)? = nil
    ) {
        self.id = id
        self.device = device
        self.request = request
        self.duration = duration
        frameLimit = frames
        self.syscalls = syscalls
    }

    public func prepare(_ context: StageContext) throws {
        let cam = try V4L2Device(path: device, syscalls: syscalls ?? V4L2System.defaultSyscalls())
        let n = try cam.configure(request)
        camera = cam
        negotiated = n
        context.emit(.notice("camera \(device) (\(cam.card)): \(n.summary)"))
    }

    /// Announces what the camera agreed to in `prepare`: raw pictures of the negotiated size, in
    /// the layout it delivers (MJPEG arrives decoded, as yuv420p), at the negotiated rate.
    public func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        guard let n = negotiated else { return StreamParameters(port: .frames) }
        return StreamParameters(
            port: .frames,
            video: VideoParameters(width: n.width, height: n.height, pixelFormat: n.format.output, frameRate: n.fps > 0 ? n.fps : request.fps))
    }

    public func produce(_ context: StageContext) throws {
        guard let cam = camera else { throw ClipFlowError.failure("v4l2 source '\(id)': produce before prepare") }
        if stopping(context) { return }
        try cam.start()
        let rate = (cam.negotiated?.fps).flatMap { $0 > 0 ? $0 : nil } ?? request.fps
        // `duration` is a number of frame slots (30 fps x 4 s: slots 0 ..< 120), not a time
        // compared with timestamps: real timestamps jitter, and a picture stamped 3.9995 s would
        // otherwise be one more, starting a fragment of its own.
        let lastFrame: Int64? = duration > 0 ? max(1, Self.slot(of: duration, fps: rate)) : nil
        var quiet = 0.0
        loop: while !stopping(context) {
            switch try cam.read(timeoutMs: Self.pollMs) {
            case .timeout:
                quiet += Double(Self.pollMs) / 1000
                if quiet >= Self.stallSeconds {
                    throw ClipFlowError.failure(
                        "camera \(device) sent no frame for \(Int(Self.stallSeconds)) seconds; is it covered by another program, or broken?")
                }
            case .deviceLost:
                deviceLost = true
                context.emit(.notice("camera \(device) was unplugged after \(framesPushed) frames; ending the recording there"))
                finishStream(cam, context)
                return
            case .frame(let f):
                quiet = 0
                if let last = lastFrame, Self.slot(of: f.time, fps: rate) >= last { finishStream(cam, context); return }
                reportDrops(cam, context)
                let r = context.push(.frame(.video(f)))
                framesPushed += 1
                if framesPushed % 30 == 0 { report(context) }
                if r != .ok || (frameLimit > 0 && framesPushed >= frameLimit) { break loop }
            }
        }
        finishStream(cam, context)
    }

    private func stopping(_ context: StageContext) -> Bool { context.stopRequested }

    private func report(_ context: StageContext) {
        context.progress(Int64(framesPushed), of: Int64(frameLimit), unit: "frames")
    }

    /// The camera's drops and broken pictures since the last report, as `dropped` events.
    private func reportDrops(_ cam: V4L2Device, _ context: StageContext) {
        if cam.droppedFrames != droppedFrames {
            droppedFrames = cam.droppedFrames
            context.emit(.dropped(count: droppedFrames, cause: Self.lostCause))
        }
        if cam.brokenFrames != brokenFrames {
            brokenFrames = cam.brokenFrames
            context.emit(.dropped(count: brokenFrames, cause: Self.brokenCause))
        }
    }

    private func finishStream(_ cam: V4L2Device, _ context: StageContext) {
        reportDrops(cam, context)
        report(context)
        cam.stop()
    }

    public func finish(_ context: StageContext, outcome: StageOutcome) {
        camera?.close()
        camera = nil
    }
}
