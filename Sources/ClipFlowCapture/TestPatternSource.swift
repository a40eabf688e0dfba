import ClipFlowCore
import Foundation

/// Source: the synthetic camera (see `TestPatternGenerator`). Pictures and audio are pushed in
/// time order on one output: the audio from picture `n`'s time to the next picture's, then picture `n`.
///
/// Paced in real time (`realtime`, like a camera: when the consumer falls more than a frame behind,
/// the late pictures are skipped and counted, as a camera drops them) or as fast as the consumer
/// takes them. Finite (`duration` or `frames`) or until stopped.
/// Belongs to its stage queue; others read `produced` and `skipped` after the run.
public final class TestPatternSource: Stage {
    public let id: String
    public let settings: TestPatternSettings
    public let realtime: Bool
    /// Pictures to make; nil until stopped.
    public let frameLimit: Int64?
    public private(set) var produced: Int64 = 0
    /// Pictures skipped because the consumer was late (real-time mode only).
    public private(set) var skipped: Int64 = 0
    /// Why pictures are skipped, as the `dropped` events say it: made late, or pushed late to
    /// a consumer that was not ready, a picture whose time has passed is lost.
    public static let skipCause = "skipping pictures: they could not be made and delivered in real time"
    public var inputTypes: Set<PortType> { [] }
    public var outputType: PortType? { .frames }

    public static let kind = StageKind(
        name: "testpattern",
        summary: "synthetic camera: moving picture with frame counter, orientation marker and a flash/beep each second",
        output: .frames,
        params: [
            ParamSpec("width", .integer(min: 64, max: 7680), default: .number(1280), help: "picture width (even)"),
            ParamSpec("height", .integer(min: 64, max: 4320), default: .number(720), help: "picture height (even)"),
            ParamSpec("fps", .number(min: 1, max: 240), default: .number(30), help: "frames per second"),
            ParamSpec("format", .choice(["yuv420p", "nv12", "yuyv422"]), default: .string("yuv420p"), help: "pixel format delivered"),
            ParamSpec("audio", .boolean, default: .bool(true), help: "a 440 Hz tone with a 1 kHz beep on every whole second"),
            ParamSpec("sample-rate", .integer(min: 8000, max: 192_000), default: .number(48000), help: "audio sample rate"),
            ParamSpec("realtime", .boolean, default: .bool(true), help: "pace like a camera (false: as fast as the consumer takes it)"),
            ParamSpec("duration", .number(min: 0, max: nil), default: .number(0), help: "seconds to record (0: until stopped, unless frames is set)"),
            ParamSpec("frames", .integer(min: 0, max: nil), default: .number(0), help: "pictures to make (0: no limit)"),
            ParamSpec(
                "clock", .boolean, default: .bool(false),
                help: "a row of blocks under the counter with the wall-clock time each picture was captured (milliseconds), to read delays off the picture")
        ],
        queue: LinkLimits(maxItems: 64, maxBytes: 64 << 20),
        check: { p, path in
            var issues: [PipelineIssue] = []
            if let w = p.int("width"), w % 2 != 0 { issues.append(PipelineIssue("\(path).width", "expected an even number, got \(w)")) }
            if let h = p.int("height"), h % 2 != 0 { issues.append(PipelineIssue("\(path).height", "expected an even number, got \(h)")) }
            if (p.double("duration") ?? 0) == 0, (p.int("frames") ?? 0) == 0, p.bool("realtime") == false {
                issues.append(PipelineIssue(path, "an unpaced test pattern (\"realtime\": false) needs \"duration\" or \"frames\"; it would never end"))
            }
            return issues
        },
        make: { id, p in
            var s = TestPatternSettings(
                width: p.int("width") ?? 1280, height: p.int("height") ?? 720, fps: p.double("fps") ?? 30,
                format: PixelFormat(rawValue: p.string("format") ?? "yuv420p") ?? .yuv420p,
                sampleRate: p.int("sample-rate") ?? 48000)
            if p.bool("audio") == false { s.sampleRate = 0 }
            s.clock = p.bool("clock") ?? false
            return TestPatternSource(
                id: id, settings: s, realtime: p.bool("realtime") ?? true,
                duration: p.double("duration") ?? 0, frames: Int64(p.int("frames") ?? 0))
        })

    /// `duration` seconds or `frames` pictures, whichever is set and smaller (both 0: until stopped).
    public init(id: String, settings: TestPatternSettings, realtime: Bool = true, duration: Double = 0, frames: Int64 = 0) {
        self.id = id
        self.settings = settings
        self.realtime = realtime
        var limit: Int64? = frames > 0 ? frames : nil
        if duration > 0 {
            let slots = (duration * settings.fps).rounded()
            let d = slots.isFinite && slots < 9.0e18 ? max(1, Int64(slots)) : Int64.max
            limit = min(limit ?? d, d)
        }
        frameLimit = limit
    }

    public func prepare(_ context: StageContext) throws {
        if let p = settings.problem { throw ClipFlowError.badInput("\(id): \(p)") }
    }

    /// Announces its pictures (raw, the set size, format and rate) and its audio (raw float).
    public func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        Self.parameters(settings)
    }

    /// What a test pattern with `settings` delivers.
    public static func parameters(_ settings: TestPatternSettings) -> StreamParameters {
        StreamParameters(
            port: .frames,
            video: VideoParameters(width: settings.width, height: settings.height, pixelFormat: settings.format, frameRate: settings.fps),
            audio: settings.sampleRate > 0 ? AudioParameters(sampleRate: settings.sampleRate, channels: settings.channels) : nil)
    }

    public func produce(_ context: StageContext) throws {
        let gen = try TestPatternGenerator(settings)
        let clock = context.clock
        let start = clock.now()
        // The wall-clock time of `start`: a paced picture's clock row shows when it was due.
        let wallStart = Date().timeIntervalSince1970
        var n: Int64 = 0
        context.emit(
            .notice(
                "test pattern \(settings.width)x\(settings.height) \(settings.format.rawValue) at \(settings.fps) fps"
                    + (settings.sampleRate > 0 ? ", audio \(settings.sampleRate) Hz" : ", no audio")
                    + (realtime ? ", real time" : ", as fast as possible") + (settings.clock ? ", with its clock" : "")))
        while frameLimit.map({ n < $0 }) ?? true {
            if context.stopRequested { break }
            if realtime {
                let due = start + Double(n) / settings.fps
                clock.sleep(until: due, stop: { context.stopRequested })
                if context.stopRequested { break }
                // A camera does not wait: a picture whose time has passed by more than a frame is lost.
                if clock.now() > due + 1 / settings.fps, frameLimit.map({ n + 1 < $0 }) ?? true {
                    skipped += 1
                    if settings.sampleRate > 0 {
                        let r = gen.audioRange(forFrame: n)
                        if context.push(.frame(.audio(gen.audio(from: r.lowerBound, count: Int(r.count))))) != .ok { break }
                    }
                    n += 1
                    context.emit(.dropped(count: Int(skipped), cause: Self.skipCause))
                    continue
                }
            }
            // Audio first: a recorder learns the audio format before the first picture opens a fragment.
            if settings.sampleRate > 0 {
                let r = gen.audioRange(forFrame: n)
                if context.push(.frame(.audio(gen.audio(from: r.lowerBound, count: Int(r.count))))) != .ok { break }
            }
            // Paced: the picture's time on the capture clock, so a microphone recorded beside it lines up.
            let clockTime = realtime ? start + Double(n) / settings.fps : nil
            let wallClock = settings.clock ? (realtime ? wallStart + Double(n) / settings.fps : Date().timeIntervalSince1970) : nil
            if context.push(.frame(.video(gen.video(frame: n, clockTime: clockTime, wallClock: wallClock)))) != .ok { break }
            n += 1
            produced += 1
            if n % 30 == 0 { context.progress(n, of: frameLimit ?? 0, unit: "frames") }
        }
        context.progress(n, of: frameLimit ?? n, unit: "frames")
    }
}
