internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// The end of a transcode's graph (`files -> ID.decode -> ID`): encodes raw frames into one
/// fast-start H.264/HEVC MP4 (`TranscodeOutput`), then passes the file on. What it encodes is
/// announced in band before the first frame (`Item.parameters`: the decode's picture size, time
/// base, nominal rate, display turn and audio format; known only once every input has been
/// probed); pictures are yuv420p of that one size, audio 32-bit float at that one rate. All or
/// nothing: a stop, a cancel or a failure leaves no output. Reports progress in encoded seconds
/// against the announced duration, with the speed. Belongs to its stage queue.
final class EncodeStage: Stage {
    let id: String
    let output: String
    let settings: TranscodeSettings
    /// An existing file at `output` is replaced (otherwise refused).
    let overwrite: Bool
    private var file: TranscodeOutput?
    private var announced: StreamParameters?
    /// Points at the current picture's bytes while it is encoded (owns no buffer).
    private var wrapper: Frame?
    private var meter = EncodeProgress(total: 0)
    var inputTypes: Set<PortType> { [.frames] }
    var outputType: PortType? { .video }

    init(id: String, output: String, settings: TranscodeSettings, overwrite: Bool) {
        self.id = id
        self.output = output
        self.settings = settings
        self.overwrite = overwrite
    }

    func prepare(_ context: StageContext) throws { try createFolder(of: output) }

    func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        try checkPorts(inputs)
        return StreamParameters(port: .video, container: "mp4")
    }

    func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        if context.stopRequested { return .flushing }
        switch item.payload {
        case .parameters(let p): try open(p)
        case .video(let v):
            try encode(v, decoded: item.facts[DecodedPicture.self])
            report(v.time + (v.duration ?? 0), context)
        case .audio(let a): try encode(a)
        default: break
        }
        return .ok
    }

    /// The first parameters open the output; later ones must describe the same streams (a
    /// transcode writes one picture size and one audio format).
    private func open(_ p: StreamParameters) throws {
        if let announced {
            guard announced.video == p.video, announced.audio == p.audio else {
                throw ClipFlowError.badInput("transcode '\(id)': the streams changed mid-way (\(announced) to \(p)); one output holds one picture size")
            }
            return
        }
        guard let v = p.video, v.codec == "rawvideo", v.pixelFormat == .yuv420p, v.width > 0, v.height > 0, let tb = v.timeBase else {
            throw ClipFlowError.badInput("transcode '\(id)': expected yuv420p pictures of a known size and time base, got \(p)")
        }
        if let a = p.audio, a.codec != "pcm_f32" { throw ClipFlowError.badInput("transcode '\(id)': expected float audio, got \(a.codec)") }
        let plan = TranscodeOutput.Plan(
            frame: PictureSize(width: v.width, height: v.height), timeBase: AVRational(num: Int32(tb.num), den: Int32(tb.den)),
            frameRate: v.frameRate.map { av_d2q($0, 1_001_000) } ?? AVRational(num: 0, den: 1), rotation: v.rotation,
            audio: p.audio.map { ($0.sampleRate, $0.channels) }, settings: settings)
        file = try TranscodeOutput(target: URL(fileURLWithPath: output), replacing: overwrite, plan: plan)
        wrapper = try Frame()
        announced = p
        meter = EncodeProgress(total: p.duration ?? 0)
    }

    private func report(_ done: Double, final: Bool = false, _ context: StageContext) {
        if let e = meter.event(done: done, final: final) { StageProgress(context: context).report(e) }
    }

    /// Encodes `v`: a reference to its `decoded` frame when it carries one whose pixels are `v`'s
    /// own bytes, otherwise its bytes (which the encoder copies).
    private func encode(_ v: VideoFrame, decoded: DecodedPicture?) throws {
        guard let file, let wrapper, let shape = announced?.video, let tb = shape.timeBase else {
            throw ClipFlowError.failure("internal: transcode '\(id)' got a picture before its parameters")
        }
        guard v.format == .yuv420p, v.width == shape.width, v.height == shape.height else {
            throw ClipFlowError.badInput(
                "transcode '\(id)': a \(v.width)x\(v.height) \(v.format.rawValue) picture among \(shape.width)x\(shape.height) yuv420p ones")
        }
        let pts = Int64((v.time * Double(tb.den) / Double(tb.num)).rounded())
        if let decoded, decoded.holds(v) {
            let picture = try Frame()
            try FF.check(av_frame_ref(picture.f, decoded.frame.f), "sharing a picture")
            picture.f.pointee.pts = pts
            try file.encode(picture: picture, end: v.time + (v.duration ?? 0))
            return
        }
        try PicturePacker.withPaddedBytes(v.data) { bytes in
            try FF.check(
                cf_frame_wrap(wrapper.f, bytes.assumingMemoryBound(to: UInt8.self), AV_PIX_FMT_YUV420P, Int32(v.width), Int32(v.height)), "wrapping a picture")
            wrapper.f.pointee.pts = pts
            try file.encode(picture: wrapper, end: v.time + (v.duration ?? 0))
        }
    }

    private func encode(_ a: AudioChunk) throws {
        guard let file else { throw ClipFlowError.failure("internal: transcode '\(id)' got audio before its parameters") }
        try file.encode(audio: PlanarSamples(interleaved: a.samples, channelCount: a.channels, frames: a.frameCount))
    }

    func drain(_ context: StageContext) throws {
        // A stop before or during the work writes nothing; the command says so once.
        if context.stopRequested { return }
        guard let file, let shape = announced?.video else { throw ClipFlowError.badInput("no pictures reached transcode '\(id)'") }
        let bytes = try file.finish()
        self.file = nil
        report(file.videoSeconds, final: true, context)
        context.emit(.output(path: output))
        context.emit(
            TranscodeSummary(
                width: shape.width, height: shape.height, videoFrames: file.videoFrames, seconds: file.videoSeconds, bytes: bytes, rotation: shape.rotation))
        context.push(.file(output, type: .video))
    }

    /// A transcode that did not complete leaves nothing.
    func finish(_ context: StageContext, outcome: StageOutcome) {
        file?.discard()
        file = nil
    }
}

/// What a transcode wrote: its encode's `result` event.
public struct TranscodeSummary: StageResult, Equatable {
    public var width: Int
    public var height: Int
    public var videoFrames: Int
    /// Seconds of video.
    public var seconds: Double
    public var bytes: Int64
    /// Clockwise degrees written into the display matrix.
    public var rotation: Int

    public init(width: Int, height: Int, videoFrames: Int, seconds: Double, bytes: Int64, rotation: Int) {
        self.width = width
        self.height = height
        self.videoFrames = videoFrames
        self.seconds = seconds
        self.bytes = bytes
        self.rotation = rotation
    }

    public var fields: [EventField] {
        [
            .init("width", .integer(Int64(width))), .init("height", .integer(Int64(height))), .init("video_frames", .integer(Int64(videoFrames))),
            .init("seconds", .number(seconds)), .init("bytes", .integer(bytes)), .init("rotation", .integer(Int64(rotation)))
        ]
    }

    public init(fields f: [EventField]) {
        self.init(
            width: f.int("width"), height: f.int("height"), videoFrames: f.int("video_frames"), seconds: f.double("seconds"), bytes: f.int64("bytes"),
            rotation: f.int("rotation"))
    }
}
