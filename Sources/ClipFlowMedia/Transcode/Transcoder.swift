internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// What a transcode made.
public struct TranscodeResult: Sendable, Equatable {
    public var output: URL
    public var inputs: Int
    public var width: Int
    public var height: Int
    public var videoFrames: Int
    /// Seconds of video written.
    public var seconds: Double
    public var bytes: Int64
    /// Degrees clockwise in the output's display matrix (0 when pictures were made upright).
    public var rotation: Int
}

/// Decodes any number of inputs, joins them in order and encodes one fast-start MP4:
///
///     demux -> decode -> convert (crop, scale, pad, turn) ----\
///                     \-> resample -> place on the timeline ---> encode -> mux
///
/// The `transcode` kind runs the two halves as stages (`DecodeStage` with `decodeOnly`, then
/// `EncodeStage`), each on its own queue; `run` does both on the calling thread (the decoders and
/// x264/x265 add threads of their own), for a transcode inside other work (a merge's conform). Each clip's audio is kept in sync with its video at every join (see
/// `AudioTimeline`); a clip without audio gets silence when another clip has some.
///
/// Not thread-safe: `run` is called once, from one thread. `cancel` may be set from any thread.
public final class Transcoder {
    public let inputs: [String]
    public let output: URL
    public let settings: TranscodeSettings
    /// An existing file at `output` is replaced (otherwise refused).
    public let overwrite: Bool
    private let progress: ProgressReporter
    private let cancel: CancellationFlag

    public init(
        inputs: [String], output: URL, settings: TranscodeSettings, overwrite: Bool = false, progress: ProgressReporter = SilentProgress(),
        cancel: CancellationFlag = CancellationFlag()
    ) {
        self.inputs = inputs
        self.output = output
        self.settings = settings
        self.overwrite = overwrite
        self.progress = progress
        self.cancel = cancel
    }

    /// The inputs' stream parameters, as the transcode reads them.
    public static func probe(_ path: String) throws -> SourceInfo { try TranscodeInput(path: path).info }

    /// Probes `path` and measures its keyframes' spacing (`KeyframeSpacing`) from the same open
    /// demuxer: the file is opened once.
    public static func probeWithSpacing(_ path: String) throws -> (info: SourceInfo, spacing: KeyframeSpacing) {
        let input = try TranscodeInput(path: path)
        return (input.info, try KeyframeSpacing.measure(input.demuxer))
    }

    public func run() throws -> TranscodeResult {
        let (opened, plan) = try openAll()
        let out = try TranscodeOutput(target: output, replacing: overwrite, plan: plan.output)
        var meter = EncodeProgress(total: plan.totalSeconds)
        do {
            try decodeAll(opened, plan) { item in
                switch item {
                case .picture(let f, let end):
                    try out.encode(picture: f, end: end)
                    if let e = meter.event(done: out.videoSeconds) { progress.report(e) }
                case .audio(let s):
                    try out.encode(audio: s)
                }
            }
            let bytes = try out.finish()
            if let e = meter.event(done: out.videoSeconds, final: true) { progress.report(e) }
            return TranscodeResult(
                output: output, inputs: inputs.count, width: plan.output.frame.width, height: plan.output.frame.height,
                videoFrames: out.videoFrames, seconds: out.videoSeconds, bytes: bytes, rotation: plan.output.rotation)
        } catch {
            out.discard()
            throw error
        }
    }

    /// Decodes and converts the inputs as `run` does, handing each picture (pts in the plan's
    /// output time base) and each run of audio to `deliver` with the plan (its output shape, the
    /// inputs' total seconds), in output order, on the calling thread; encodes nothing (the
    /// `decode` stage). The pictures are laid out as libswscale writes them (aligned rows, padded
    /// buffers), as in `run`.
    func decodeOnly(_ deliver: (DecodedItem, Plan) throws -> Void) throws {
        let (opened, plan) = try openAll()
        try decodeAll(opened, plan) { try deliver($0, plan) }
    }

    private func openAll() throws -> ([TranscodeInput], Plan) {
        _ = FF.setup
        if let p = settings.problem { throw ClipFlowError.badInput(p.description) }
        guard !inputs.isEmpty else { throw ClipFlowError.badInput("no inputs to transcode") }
        let opened = try inputs.map { try TranscodeInput(path: $0) }
        return (opened, makePlan(opened.map(\.info)))
    }

    /// Every input in order, each closed once read.
    private func decodeAll(_ inputs: [TranscodeInput], _ plan: Plan, _ deliver: (DecodedItem) throws -> Void) throws {
        var opened: [TranscodeInput?] = inputs
        let converter = PictureConverter(frame: plan.output.frame, pool: try PicturePool(size: plan.output.frame))
        var timeline = plan.output.audio.map { AudioTimeline(channels: $0.channels, rate: $0.rate) }
        var clock = VideoClock(plan: plan)
        for i in opened.indices {
            let input = opened[i]!
            opened[i] = nil
            try decode(input, clip: plan.clips[i], plan: plan, converter: converter, clock: &clock, timeline: &timeline, deliver: deliver)
        }
    }

    /// "2 h 5 min", "3.2 s": a span of time for people.
    static func duration(_ seconds: Double) -> String {
        if seconds < 120 { return String(format: "%.1f s", seconds) }
        let minutes = Int((seconds / 60).rounded())
        return minutes < 120 ? "\(minutes) min" : "\(minutes / 60) h \(minutes % 60) min"
    }

    // MARK: the plan

    /// How each clip is turned and placed, and the output's shape.
    struct Plan {
        struct Clip {
            var placement: Placement
            /// How the decoded pixels are written: mirrored or not, then turned clockwise.
            var orientation: DisplayOrientation
        }
        var output: TranscodeOutput.Plan
        var clips: [Clip]
        /// Sum of the inputs' durations (progress).
        var totalSeconds: Double
    }

    /// The input whose shape and rate the output takes: the display size covering the most
    /// seconds over all inputs (as `merge --conform` picks its target), and within it the
    /// longest input (the first of equals). Most of the output then looks like its inputs: many
    /// short portrait fragments beside one longer landscape clip stay portrait.
    static func reference(_ infos: [SourceInfo]) -> SourceInfo {
        var seconds: [PictureSize: Double] = [:]
        for i in infos { seconds[i.video.displaySize, default: 0] += i.duration }
        var best = infos[0]
        for i in infos.dropFirst() {
            let (s, b) = (seconds[i.video.displaySize]!, seconds[best.video.displaySize]!)
            if s > b || (s == b && i.video.displaySize == best.video.displaySize && i.duration > best.duration) { best = i }
        }
        return best
    }

    private func makePlan(_ infos: [SourceInfo]) -> Plan {
        var s = settings
        let reference = Self.reference(infos)
        let rotations = Set(infos.map(\.video.rotation))
        if !s.upright, rotations.count > 1 {
            s.upright = true
            progress.notice(
                "the inputs are turned differently (\(rotations.sorted().map { "\($0)" }.joined(separator: ", ")) degrees): turning their pixels upright")
        }
        let displayFrame = TranscodeGeometry.frame(for: reference.video.displaySize, s)
        // Pixels are written turned back by the output's display matrix (a pure rotation); each
        // clip's pixels are turned by the difference between its own matrix and that one, and
        // mirrored if its own matrix mirrors.
        let metadataTurn = s.upright ? 0 : s.outputRotation ?? reference.video.rotation
        let written = metadataTurn % 180 == 0 ? displayFrame : displayFrame.swapped
        let clips = infos.map { info -> Plan.Clip in
            let turn = (info.video.rotation - metadataTurn + 360) % 360
            let stored = PictureSize(width: info.video.width, height: info.video.height)
            let source = turn % 180 == 0 ? stored : stored.swapped
            return Plan.Clip(
                placement: TranscodeGeometry.place(source, in: written, fit: s.fit, upscale: s.upscale),
                orientation: DisplayOrientation(turn: turn, mirrored: info.video.mirrored))
        }
        let timeBase: AVRational, rate: AVRational
        switch s.frameRate {
        case .fixed(let n, let d):
            rate = AVRational(num: Int32(n), den: Int32(d))
            timeBase = AVRational(num: Int32(d), den: Int32(n))
        case .keep:
            rate = av_d2q(reference.video.frameRate ?? 30, 1_001_000)
            timeBase = AVRational(num: 1, den: 90_000)
        }
        let withAudio = infos.compactMap(\.audio)
        var audio: (rate: Int, channels: Int)? = s.audioFormat.map { ($0.rate, $0.channels) }
        if audio == nil, !withAudio.isEmpty, !s.noAudio {
            let rates = Set(withAudio.map(\.sampleRate))
            audio = (rates.count == 1 ? rates.first! : 48_000, min(2, withAudio.map(\.channels).max()!))
        }
        return Plan(
            output: TranscodeOutput.Plan(frame: written, timeBase: timeBase, frameRate: rate, rotation: metadataTurn, audio: audio, settings: s),
            clips: clips, totalSeconds: infos.reduce(0) { $0 + $1.duration })
    }

    // MARK: decoding one input

    private func decode(
        _ input: TranscodeInput, clip: Plan.Clip, plan: Plan, converter: PictureConverter, clock: inout VideoClock,
        timeline: inout AudioTimeline?, deliver: (DecodedItem) throws -> Void
    ) throws {
        let path = input.info.path
        let vdec = try input.videoDecoder()
        let adec = timeline != nil ? try input.audioDecoder() : nil
        let resampler = plan.output.audio.map { AudioResampler(rate: $0.rate, channels: $0.channels) }
        let vtb = input.videoTimeBase.double
        let start = input.videoStart
        let atb = input.audioIndex.map { input.demuxer.stream($0).pointee.time_base.double } ?? 0
        let rate = Double(plan.output.audio?.rate ?? 0)
        let packet = try Packet()
        let frame = try Frame()
        var pictures = 0
        var lastTime = -Double.infinity
        clock.beginClip()

        func emitAudio(_ s: PlanarSamples) throws { try deliver(.audio(s)) }
        /// A decoded picture shown at output `pts` until `end` (VideoClock decides which and when).
        func show(_ decoded: Frame, _ pts: Int64, _ end: Double) throws {
            let picture: Frame
            do { picture = try converter.convert(decoded, placement: clip.placement, orientation: clip.orientation) } catch let e as ClipFlowError {
                throw ClipFlowError(e.kind, "input '\(path)': \(e.message)")
            }
            picture.f.pointee.pts = pts
            try deliver(.picture(picture, end: end))
        }
        func takePictures() throws {
            while try vdec.receive(frame) {
                let pts = frame.f.pointee.best_effort_timestamp
                let t = pts == FF.noPTS ? max(0, lastTime) : Double(pts - start) * vtb
                let dur = frame.f.pointee.pkt_duration > 0 ? Double(frame.f.pointee.pkt_duration) * vtb : clock.nominalFrame
                defer { frame.unref() }
                // Pictures before the clip's start (edit-list preroll) or out of order are not shown.
                guard t >= -1e-6, t > lastTime else { continue }
                if let longest = clock.longestGap, lastTime > -Double.infinity, t - lastTime > longest {
                    throw ClipFlowError.badInput(
                        "input '\(path)': it shows nothing for \(Self.duration(t - lastTime)) (from \(Self.duration(lastTime)) to \(Self.duration(t)) into it); "
                            + "an MP4 track cannot hold a pause longer than \(Self.duration(longest)) between two pictures at this time scale. "
                            + "Cut the clip at the pause and give the parts as separate inputs, or give a fixed frame rate (--fps) to fill the pause")
                }
                lastTime = t
                pictures += 1
                try clock.take(frame, at: t, duration: dur, show)
                if var tl = timeline {
                    try tl.release(upTo: Int64((clock.clipEnd * rate).rounded()), emitAudio)
                    timeline = tl
                }
            }
        }
        func takeAudio() throws {
            guard let adec, let resampler else { return }
            while try adec.receive(frame) {
                defer { frame.unref() }
                let pts = frame.f.pointee.best_effort_timestamp
                let position = pts == FF.noPTS ? nil : Int64(((Double(pts) * atb - Double(start) * vtb) * rate).rounded())
                timeline?.add(try resampler.convert(frame), at: position)
            }
        }

        while try input.demuxer.read(into: packet) {
            try cancel.check()
            let si = Int(packet.p.pointee.stream_index)
            if packet.p.pointee.flags & AV_PKT_FLAG_CORRUPT != 0 {
                let at =
                    packet.p.pointee.pts == FF.noPTS
                    ? "" : String(format: " near %.2f s", Double(packet.p.pointee.pts) * input.demuxer.stream(si).pointee.time_base.double)
                throw ClipFlowError.badInput("input '\(path)' is truncated or damaged\(at): a packet is incomplete")
            }
            if si == input.videoIndex {
                if !(try vdec.send(packet)) {
                    try takePictures()
                    _ = try vdec.send(packet)
                }
                try takePictures()
            } else if si == input.audioIndex, let adec {
                if !(try adec.send(packet)) {
                    try takeAudio()
                    _ = try adec.send(packet)
                }
                try takeAudio()
            }
        }
        _ = try vdec.send(nil)
        try takePictures()
        if let adec, let resampler {
            _ = try adec.send(nil)
            try takeAudio()
            timeline?.add(try resampler.flush(), at: nil)
        }
        guard pictures > 0 else { throw ClipFlowError.badInput("input '\(path)': no picture in it could be decoded") }
        try clock.endClip(show)
        if var tl = timeline {
            try tl.endClip(at: Int64((clock.offset * rate).rounded()), emitAudio)
            timeline = tl
        }
    }
}

/// Output timestamps of the pictures of joined clips: each clip continues where the previous
/// ended. `keep`: every picture keeps its time. `fixed`: output frame k (at k / rate) shows the
/// latest picture whose time rounds to k or before, so pictures are repeated or dropped by
/// timestamp; a picture is converted only if it is shown. Confined to the decoding thread.
struct VideoClock {
    /// Output seconds where the current clip starts (after `endClip`: where the next one starts).
    private(set) var offset = 0.0
    /// Seconds from the clip's start to the end of its latest picture.
    private(set) var clipEnd = 0.0
    let nominalFrame: Double
    /// The longest time between two pictures an MP4 track can record at the output's time scale
    /// (a sample lasts at most 2^31 - 1 ticks); nil at a fixed rate, where pictures repeat.
    let longestGap: Double?
    private let fixed: Bool
    private let tick: Double
    private var lastPTS: Int64 = -1
    private var nextIndex: Int64 = 0
    /// The fixed-rate picture waiting to learn how many output frames it covers.
    private var pending: Frame?

    init(plan: Transcoder.Plan) {
        let o = plan.output
        tick = o.timeBase.double
        nominalFrame = o.frameRate.double > 0 ? 1 / o.frameRate.double : 1.0 / 30
        if case .fixed = o.settings.frameRate { fixed = true } else { fixed = false }
        longestGap = fixed ? nil : Double(Int32.max) * tick
    }

    mutating func beginClip() { clipEnd = 0 }

    typealias Emit = (_ decoded: Frame, _ pts: Int64, _ end: Double) throws -> Void

    /// A decoded picture at `t` seconds into the clip, shown for `duration`.
    mutating func take(_ decoded: Frame, at t: Double, duration: Double, _ emit: Emit) throws {
        clipEnd = max(clipEnd, t + duration)
        if !fixed {
            var pts = Int64(((offset + t) / tick).rounded())
            if pts <= lastPTS { pts = lastPTS + 1 }
            lastPTS = pts
            try emit(decoded, pts, offset + t + duration)
            return
        }
        try flushPending(before: Int64(((offset + t) / tick).rounded()), emit)
        let held = try Frame()
        try FF.check(av_frame_ref(held.f, decoded.f), "keeping a picture")
        pending = held
    }

    /// Ends the clip at the end of its last picture.
    mutating func endClip(_ emit: Emit) throws {
        if fixed { try flushPending(before: Int64(((offset + clipEnd) / tick).rounded()), emit) }
        pending = nil
        offset += clipEnd
    }

    private mutating func flushPending(before index: Int64, _ emit: Emit) throws {
        guard let p = pending else { return }
        while nextIndex < index {
            try emit(p, nextIndex, Double(nextIndex + 1) * tick)
            nextIndex += 1
        }
    }
}

/// What decoding hands on: a converted picture (pts set, in the output's time base; `end`: where
/// it stops showing, seconds) or a run of audio at the output's rate.
enum DecodedItem {
    case picture(Frame, end: Double)
    case audio(PlanarSamples)
}

/// A transcode's progress in encoded seconds against the inputs' total, with the speed: an event
/// every quarter second, and a last one when done. Confined to the encoding side.
struct EncodeProgress {
    let total: Double
    private let started = Date()
    private var lastReport = Date.distantPast

    init(total: Double) { self.total = total }

    /// The event due once `done` seconds are encoded (nil: too soon after the last; `final`:
    /// always).
    mutating func event(done: Double, final: Bool = false) -> ProgressEvent? {
        let now = Date()
        guard final || now.timeIntervalSince(lastReport) >= 0.25 else { return nil }
        lastReport = now
        let wall = now.timeIntervalSince(started)
        return ProgressEvent(
            phase: "transcode", completed: Int64((done * 1000).rounded()), total: Int64((max(total, done) * 1000).rounded()), unit: "ms",
            speed: wall > 0 ? done / wall : nil)
    }
}
