internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// Decodes every video it receives (any format FFmpeg reads; inputs in order, files in arrival
/// order) into raw frames: yuv420p pictures of one size and 32-bit float audio at one rate, on
/// one timeline, as `transcode` decodes them before encoding (`Transcoder.decodeOnly`). Feeds
/// `record` (re-encoding by steps: files -> decode -> record) or any stage taking frames.
/// Decoding starts at end of stream (the first input's shape sets the frame only once every
/// input is known), so what the frames are is announced in band, ahead of the first one
/// (`Item.parameters`: size, time base, nominal rate, display turn, audio format); each picture
/// carries its duration. Belongs to its stage queue; a stop or cancel reaches it through
/// `cancelFlag`.
public final class DecodeStage: Stage {
    public let id: String
    public private(set) var settings: TranscodeSettings
    /// Asked once, as decoding starts, for the settings to decode with instead of `settings` (nil:
    /// those): a ladder's limit once its copy decided which rungs are encoded. May wait; returns
    /// nil at once when the stage is stopping.
    private let finalSettings: (@Sendable (StageContext) -> TranscodeSettings?)?
    /// Whether it reports its progress (a transcode's encoder reports the transcode's instead).
    let reportsProgress: Bool
    private var files = InputOrdered<String>()
    private let cancelFlag = CancellationFlag()
    public var inputTypes: Set<PortType> { [.clips, .video] }
    public var outputType: PortType? { .frames }

    public static let kind = StageKind(
        name: "decode", summary: "decode videos (any format) into raw frames on one timeline: yuv420p pictures and float audio",
        inputs: [.clips, .video], minInputs: 1, output: .frames,
        params: [
            ParamSpec("height", .integer(min: 16, max: 8192), help: "scale to this height (even); default: the longest input's size"),
            ParamSpec("fps", .string, help: "keep (default) or a fixed rate: 30, 29.97, 30000/1001"),
            ParamSpec("upright", .boolean, default: .bool(false), help: "turn rotated pictures in their pixels")
        ],
        queue: LinkLimits(maxItems: 1024, maxBytes: LinkLimits.noByteLimit),
        check: { p, path in
            if case .failure(let problem) = choices(p).resolve() { return [PipelineIssue("\(path).\(problem.option)", problem.message)] }
            return []
        },
        make: { id, p in
            switch choices(p).resolve() {
            case .success(let s): return DecodeStage(id: id, settings: s)
            case .failure(let problem): throw ClipFlowError.badInput("stage '\(id)': \(problem.option): \(problem.message)")
            }
        })

    private static func choices(_ p: StageParams) -> TranscodeChoices {
        var c = TranscodeChoices()
        c.height = p.int("height")
        c.fps = p.string("fps")
        c.upright = p.bool("upright") ?? false
        return c
    }

    public init(
        id: String, settings: TranscodeSettings, reportsProgress: Bool = true, finalSettings: (@Sendable (StageContext) -> TranscodeSettings?)? = nil
    ) {
        self.id = id
        self.settings = settings
        self.reportsProgress = reportsProgress
        self.finalSettings = finalSettings
    }

    public func prepare(_ context: StageContext) throws {
        let flag = cancelFlag
        context.onStop { flag.cancel() }
        context.onCancel { flag.cancel() }
    }

    public func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        try checkPorts(inputs)
        return StreamParameters(port: .frames)
    }

    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        if let p = item.path { files.append(p, input: input) }
        return .ok
    }

    public func drain(_ context: StageContext) throws {
        guard !files.isEmpty else { throw ClipFlowError.badInput("no videos reached the decode stage") }
        if let finalSettings, let s = finalSettings(context) { settings = s }
        if context.stopRequested { return }
        var sequence: Int64 = 0
        var samples: Int64 = 0
        let started = Date()
        var lastReport = Date.distantPast
        let t = Transcoder(inputs: files.all, output: URL(fileURLWithPath: "/dev/null"), settings: settings, cancel: cancelFlag)
        // Pictures wait for the first audio (a picture or two): a recorder sets up its audio
        // track from what it has when the first picture comes.
        var waiting: [Item] = []
        var packer: PicturePacker?
        var audioStarted = false
        var announced = false
        func send(_ v: Item) throws {
            if context.push(v) == .flushing { throw ClipFlowError.interrupted }
        }
        do {
            try t.decodeOnly { item, plan in
                let shape = plan.output
                if !announced {
                    announced = true
                    if context.push(.parameters(Self.parameters(of: shape, duration: plan.totalSeconds))) == .flushing { throw ClipFlowError.interrupted }
                }
                switch item {
                case .picture(let f, let end):
                    let time = Double(f.f.pointee.pts) * shape.timeBase.double
                    if packer == nil { packer = try PicturePacker(size: shape.frame) }
                    let packed = try packer!.planes(of: f)
                    var v = Item.frame(
                        .video(
                            VideoFrame(
                                width: shape.frame.width, height: shape.frame.height, format: .yuv420p, data: packed.bytes, time: time, sequence: sequence,
                                nominalRate: shape.frameRate.double > 0 ? shape.frameRate.double : nil, duration: max(0, end - time))))
                    v.facts[DecodedPicture.self] = DecodedPicture(frame: packed.frame)
                    sequence += 1
                    if shape.audio != nil, !audioStarted { waiting.append(v) } else { try send(v) }
                    let now = Date()
                    if reportsProgress, now.timeIntervalSince(lastReport) >= 0.25 {
                        lastReport = now
                        let wall = now.timeIntervalSince(started)
                        context.progress(Int64(end * 1000), of: Int64(max(plan.totalSeconds, end) * 1000), unit: "ms", speed: wall > 0 ? end / wall : nil)
                    }
                case .audio(let s):
                    let a = AudioChunk(sampleRate: shape.audio?.rate ?? 48_000, channels: s.channels.count, samples: s.interleaved, firstSample: samples)
                    samples += Int64(s.count)
                    if context.push(.frame(.audio(a))) == .flushing { throw ClipFlowError.interrupted }
                    if !audioStarted {
                        audioStarted = true
                        for v in waiting { try send(v) }
                        waiting = []
                    }
                }
            }
            for v in waiting { try send(v) }
        } catch let e as ClipFlowError where e.kind == .interrupted && context.stopRequested && !context.cancellation.isCancelled {
            return
        }
        context.emit(DecodeSummary(inputs: files.all.count, videoFrames: sequence, audioSamples: samples))
    }

    /// What the frames of `shape` are, as the stages taking them are told; `duration`: the
    /// inputs' total seconds.
    static func parameters(of shape: TranscodeOutput.Plan, duration: Double) -> StreamParameters {
        StreamParameters(
            port: .frames,
            video: VideoParameters(
                width: shape.frame.width, height: shape.frame.height, pixelFormat: .yuv420p,
                frameRate: shape.frameRate.double > 0 ? shape.frameRate.double : nil,
                timeBase: Rational(Int(shape.timeBase.num), Int(shape.timeBase.den)), rotation: shape.rotation),
            audio: shape.audio.map { AudioParameters(sampleRate: $0.rate, channels: $0.channels) }, duration: duration)
    }
}

/// A decoded picture's own reference-counted FFmpeg frame, carried beside its `VideoFrame` (whose
/// bytes are the frame's): an FFmpeg consumer takes a reference to it (`av_frame_ref`) instead
/// of copying the bytes. A picture is never written once decoded, so any number of consumers may
/// take references to it at once.
struct DecodedPicture: ItemFact {
    let frame: Frame

    /// Whether `v`'s bytes are this frame's pixels (a stage that changed the picture and kept the
    /// fact would make them differ).
    func holds(_ v: VideoFrame) -> Bool {
        guard let y = frame.data(0), Int(frame.f.pointee.width) == v.width, Int(frame.f.pointee.height) == v.height else { return false }
        return v.data.withUnsafeBytes { $0.baseAddress == UnsafeRawPointer(y) }
    }
}

/// yuv420p pictures of one size in `VideoFrame`'s layout (planes one after another, rows without
/// padding) as `Data` over FFmpeg buffers: the bytes hold a reference to their buffer until the
/// last copy of the `Data` is gone. Every buffer has `PicturePool.padding` spare bytes after the
/// picture, so a consumer may hand the planes to libswscale as they are. Pictures are not written
/// to once decoded, so sharing them is safe. Confined to the decoding thread.
final class PicturePacker {
    let size: PictureSize
    /// Packed pictures, filled by copying rows (for sizes whose aligned rows are not packed).
    private let packed: PicturePool

    init(size: PictureSize) throws {
        self.size = size
        packed = try PicturePool(size: size, alignment: 1)
    }

    /// The planes of `picture` (a converter's output: aligned rows, padded buffer), and the
    /// reference-counted frame that holds them. A picture whose aligned rows are already packed
    /// (widths that are multiples of 64) is shared as it is; any other is copied row by row into
    /// a packed buffer.
    func planes(of picture: Frame) throws -> (bytes: Data, frame: Frame) {
        let w = size.width, h = size.height, cw = (w + 1) / 2, ch = (h + 1) / 2
        let held: Frame
        if let y = picture.data(0), picture.linesize(0) == w, picture.linesize(1) == cw, picture.linesize(2) == cw,
            picture.data(1) == y + w * h, picture.data(2) == y + w * h + cw * ch
        {
            held = try Frame()
            try FF.check(av_frame_ref(held.f, picture.f), "sharing a picture")
        } else {
            held = try packed.picture()
            try FF.check(av_frame_copy(held.f, picture.f), "packing a \(w)x\(h) picture")
        }
        guard let base = held.data(0) else { throw ClipFlowError.failure("internal: a decoded picture has no pixels") }
        let count = PixelFormat.yuv420p.frameBytes(width: w, height: h) ?? 0
        return (Data(bytesNoCopy: base, count: count, deallocator: .custom { _, _ in withExtendedLifetime(held) {} }), held)
    }

    /// Pictures of fewer bytes than this may be held by `Data` as a copy of their bytes, not
    /// their buffer (Foundation stores up to 14 bytes inline), and so without the padding.
    static let smallestShared = 64

    /// Calls `body` with the bytes of a picture from `planes(of:)`, followed by at least
    /// `PicturePool.padding` readable bytes: its own buffer, or a padded copy of a picture
    /// smaller than `smallestShared`.
    static func withPaddedBytes<R>(_ picture: Data, _ body: (UnsafeRawPointer) throws -> R) throws -> R {
        if picture.count >= smallestShared {
            return try picture.withUnsafeBytes { try body($0.baseAddress!) }
        }
        var copy = [UInt8](repeating: 0, count: picture.count + Int(PicturePool.padding))
        copy.replaceSubrange(0..<picture.count, with: picture)
        return try copy.withUnsafeBytes { try body($0.baseAddress!) }
    }

    /// Calls `body` with `wrapper` pointing at the pixels of `v` (a picture from `planes(of:)`,
    /// or any of `VideoFrame`'s layout), for libswscale to read in place; `wrapper` must not be
    /// read after `body` returns. `what` names the picture in errors.
    static func withFrame<R>(_ v: VideoFrame, in wrapper: Frame, what: String, _ body: (Frame) throws -> R) throws -> R {
        guard let pixels = v.format.ffmpeg else {
            throw ClipFlowError.badInput("\(what): \(v.format.rawValue) pictures cannot be encoded (decode them first)")
        }
        guard let need = v.format.frameBytes(width: v.width, height: v.height), v.data.count >= need, need > 0 else {
            throw ClipFlowError.badInput("\(what): a picture of \(v.data.count) bytes is too small for \(v.width)x\(v.height) \(v.format.rawValue)")
        }
        return try withPaddedBytes(v.data) { base in
            try FF.check(
                cf_frame_wrap(wrapper.f, base.assumingMemoryBound(to: UInt8.self), pixels, Int32(v.width), Int32(v.height)), "a \(v.width)x\(v.height) picture")
            return try body(wrapper)
        }
    }
}

/// What a decode stage decoded: its `result` event.
public struct DecodeSummary: StageResult, Equatable {
    public var inputs: Int
    public var videoFrames: Int64
    public var audioSamples: Int64

    public init(inputs: Int, videoFrames: Int64, audioSamples: Int64) {
        self.inputs = inputs
        self.videoFrames = videoFrames
        self.audioSamples = audioSamples
    }

    public var fields: [EventField] {
        [.init("inputs", .integer(Int64(inputs))), .init("video_frames", .integer(videoFrames)), .init("audio_samples", .integer(audioSamples))]
    }

    public init(fields f: [EventField]) { self.init(inputs: f.int("inputs"), videoFrames: f.int64("video_frames"), audioSamples: f.int64("audio_samples")) }
}
