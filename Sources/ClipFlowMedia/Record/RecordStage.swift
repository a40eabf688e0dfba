import ClipFlowCore
import Foundation
import Synchronization

/// Commands for a running record stage, from any thread (a terminal, a signal, a test). Applied
/// on the stage's queue, in the order sent, before the next frame (and, at the end, before the
/// last fragment is closed). Thread-safe.
public final class RecordControl: Sendable {
    /// `deleteLast`: the stage's recorder deletes the last fragment (`FragmentRecorder.deleteLast`),
    /// so its seconds leave the total `max-duration` counts.
    public enum Command: Sendable, Equatable { case pause, resume, split, deleteLast }
    /// What became of a `deleteLast` command.
    public enum Deletion: Sendable, Equatable {
        /// The fragment at `path` was deleted; `seconds` left the recording's total.
        case deleted(path: String, seconds: Double)
        /// The directory held no fragment.
        case nothingToDelete
        /// The fragment could not be deleted: why.
        case failed(String)
        /// The recording had ended before the command could be carried out: nothing was deleted.
        case recordingEnded
    }
    typealias Answer = @Sendable (Deletion) -> Void
    private struct State {
        var pending: [Command] = []
        /// One answer per `deleteLast` in `pending`, in order.
        var answers: [Answer] = []
        /// Answers of the `deleteLast`s taken and not yet carried out, in order.
        var due: [Answer] = []
        var ended = false
    }
    private let state = Mutex(State())
    public init() {}

    /// Sends a command; a `deleteLast` sent this way is carried out without an answer.
    public func send(_ c: Command) {
        if c == .deleteLast { return deleteLast { _ in } }
        state.withLock { $0.pending.append(c) }
    }

    /// Sends `deleteLast`; `answer` is called once, on the stage's queue when it carries it out,
    /// or at once (`.recordingEnded`) when the stage has ended.
    public func deleteLast(answer: @escaping @Sendable (Deletion) -> Void) {
        let ended = state.withLock { s -> Bool in
            if !s.ended {
                s.pending.append(.deleteLast)
                s.answers.append(answer)
            }
            return s.ended
        }
        if ended { answer(.recordingEnded) }
    }

    /// The commands sent since the last take, in order; each `deleteLast` among them is answered
    /// with `answerDeletion`, in the same order.
    func take() -> [Command] {
        state.withLock { s in
            defer {
                s.pending = []
                s.due += s.answers
                s.answers = []
            }
            return s.pending
        }
    }

    /// Answers the earliest `deleteLast` taken and not yet answered.
    func answerDeletion(_ d: Deletion) {
        let answer = state.withLock { s in s.due.isEmpty ? nil : s.due.removeFirst() }
        answer?(d)
    }

    /// Ends the control: commands still pending, and any sent from now on, are not carried out
    /// (a `deleteLast` is answered `.recordingEnded`).
    func end() {
        let left = state.withLock { s -> [Answer] in
            s.ended = true
            s.pending = []
            defer {
                s.due = []
                s.answers = []
            }
            return s.due + s.answers
        }
        for answer in left { answer(.recordingEnded) }
    }
}

/// Encodes raw frames into clip fragments (see `FragmentRecorder`) and passes each fragment on
/// the moment it is closed. One input carries the pictures (and maybe their audio); a second
/// may carry audio alone (a microphone): the recording then starts with its first sound (a
/// notice says how many pictures before it were left out), pictures wait for the audio of their
/// instant, and once the pictures end the stage ends as soon as their audio is in. On a graceful
/// stop, a cancel or a failure upstream, the open fragment is finalised: what was recorded is
/// kept and playable.
/// Belongs to its stage queue; `control` is thread-safe (commands from any thread).
public final class RecordStage: Stage {
    public let id: String
    public let options: RecordOptions
    public let control: RecordControl
    /// What a status line shows; updated on this stage's queue, read from anywhere.
    public let status: RecordStatus
    public private(set) var recorder: FragmentRecorder?
    /// What the input carries now (from `negotiate`, then in-band changes).
    public private(set) var incoming: StreamParameters?
    /// Which input carries the pictures, and which audio alone (nil: none).
    private var pictureInput = 0
    private var audioInput: Int?
    private var picturesEnded = false
    private var reportedOverruns = 0
    private var reportedStart = false
    private var lastProgress = -1
    public var inputTypes: Set<PortType> { [.frames] }
    public var outputType: PortType? { .clips }

    public static let kind = StageKind(
        name: "record", summary: "encode raw frames (H.264 + AAC) into clip fragments, each a complete MP4 when closed",
        inputs: [.frames], minInputs: 1, maxInputs: 2, output: .clips,
        params: [
            ParamSpec("directory", .path, required: true, help: "where fragments go (<prefix>-NNNN.mp4, numbered on from what is there)"),
            ParamSpec("prefix", .string, default: .string("clip"), help: "fragment file name prefix"),
            ParamSpec("segment", .number(min: 0, max: nil), default: .number(0), help: "seconds per fragment (0: one fragment until stopped)"),
            ParamSpec(
                "max-duration", .number(min: 0, max: nil), default: .number(0), help: "stop once the directory's fragments reach this many seconds (0: no cap)"),
            ParamSpec(
                "encoder-preset", .choice(RecordOptions.presets),
                help: "libx264 speed preset (default veryfast, which keeps 720p30 in real time on 2 cores; ultrafast for 1080p30)"),
            ParamSpec("preset", .choice(RecordOptions.presets), help: "old name of encoder-preset: still read, with a warning"),
            ParamSpec("crf", .integer(min: 0, max: 51), default: .number(23), help: "libx264 quality (lower: better, bigger)"),
            ParamSpec("keyframe-interval", .number(min: 0.04, max: 60), default: .number(2), help: "longest run between keyframes, seconds")
        ],
        // Raw pictures are large: at most 32 frames (about 1 s of video with its audio) or 128 MiB.
        queue: LinkLimits(maxItems: 64, maxBytes: 128 << 20),
        check: { p, path in
            if p.string("preset") != nil, p.string("encoder-preset") != nil {
                return [PipelineIssue("\(path).preset", "\(RecordStage.oldPresetName); give 'encoder-preset' only")]
            }
            if let prefix = p.string("prefix"),
                prefix.isEmpty || prefix.contains("/") || prefix.unicodeScalars.contains(where: PipelineValidator.isControl)
            {
                return [
                    PipelineIssue("\(path).prefix", "expected a file name prefix (no '/', no control characters), got \(PipelineValidator.escaped(prefix))")
                ]
            }
            guard let d = p.string("directory") else { return [] }
            var isDir: ObjCBool = false
            if FileManager.default.fileExists(atPath: d, isDirectory: &isDir) {
                if !isDir.boolValue { return [PipelineIssue("\(path).directory", "'\(d)' exists and is not a directory")] }
                if !FileManager.default.isWritableFile(atPath: d) {
                    return [PipelineIssue("\(path).directory", "'\(d)': permission denied (cannot write there)")]
                }
            }
            return []
        },
        make: { id, p in
            var o = RecordOptions(directory: p.string("directory")!)
            o.prefix = p.string("prefix") ?? "clip"
            o.segmentSeconds = p.double("segment") ?? 0
            o.maxSeconds = p.double("max-duration") ?? 0
            o.preset = p.string("encoder-preset") ?? p.string("preset") ?? o.preset
            o.crf = p.int("crf") ?? 23
            o.keyframeSeconds = p.double("keyframe-interval") ?? 2
            let stage = RecordStage(id: id, options: o)
            if p.string("preset") != nil { stage.warnings.append("\(RecordStage.oldPresetName); it is still read, but name it 'encoder-preset'") }
            return stage
        })

    /// What a pipeline that names the libx264 preset `preset` is told.
    static let oldPresetName = "'preset' is the old name of 'encoder-preset'"

    /// Warnings about the stage's parameters, emitted when it is prepared.
    var warnings: [String] = []

    public init(id: String, options: RecordOptions, control: RecordControl = RecordControl(), status: RecordStatus = RecordStatus()) {
        self.id = id
        self.options = options
        self.control = control
        self.status = status
    }

    public func prepare(_ context: StageContext) throws {
        for w in warnings { context.emit(.notice("warning: \(w)")) }
        let r = try FragmentRecorder(options: options)
        let status = status
        r.onClosed = { clip in
            status.update { $0.fragmentsClosed += 1 }
            context.emit(.output(path: clip.path))
            context.emit(
                .notice(
                    String(
                        format: "%@: %d pictures, %.2f s, %lld audio samples",
                        (clip.path as NSString).lastPathComponent, clip.videoFrames, clip.seconds, clip.audioSamples)))
            context.push(.file(clip.path, type: .clips))
        }
        if r.full { context.emit(.notice("the directory already holds \(options.maxSeconds) s of clips (max-duration); nothing will be recorded")) }
        recorder = r
    }

    /// Takes raw pictures it can encode (yuv420p, nv12, yuyv422) and raw float audio; announces
    /// MP4 clip fragments.
    public func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        try checkPorts(inputs)
        for (i, p) in inputs.enumerated() {
            if let (parameter, reason) = Self.refusal(p) { throw StreamMismatch(input: i, parameter: parameter, reason: reason) }
        }
        if inputs.count == 2 {
            // One picture stream, and audio from one place.
            guard let v = inputs.firstIndex(where: { $0.video != nil }) else {
                throw StreamMismatch(input: 0, parameter: "video", reason: "neither input carries pictures; record takes one picture stream")
            }
            let other = 1 - v
            if inputs[other].video != nil {
                throw StreamMismatch(input: other, parameter: "video", reason: "a second picture stream; record takes one (and audio alone beside it)")
            }
            if inputs[v].audio != nil, inputs[other].audio != nil {
                throw StreamMismatch(input: other, parameter: "audio", reason: "audio from two places (the pictures' input carries audio too)")
            }
            pictureInput = v
            audioInput = inputs[other].audio != nil ? other : nil
        }
        if inputs.indices.contains(pictureInput) { incoming = inputs[pictureInput] }
        if let r = recorder, let a = audioInput.map({ inputs[$0] }) ?? incoming, let audio = a.audio {
            r.expectAudio(sampleRate: audio.sampleRate, channels: audio.channels)
            r.audioInputOpen = audioInput != nil
            r.separateAudio = audioInput != nil
        }
        return StreamParameters(port: .clips, container: "mp4")
    }

    public func inputEnded(_ input: Int, _ context: StageContext) throws -> FlowResult {
        guard let r = recorder else { return .ok }
        if input == audioInput {
            r.audioInputOpen = false
            try r.releasePictures()
            reportStart(r, context)
            return .ok
        }
        picturesEnded = true
        return r.picturesWaiting == 0 ? .flushing : .ok
    }

    /// Why the recorder cannot take a stream with these parameters, or nil.
    static func refusal(_ p: StreamParameters) -> (parameter: String, reason: String)? {
        if let v = p.video {
            let encodable: [PixelFormat] = [.yuv420p, .nv12, .yuyv422]
            guard v.codec == "rawvideo", let f = v.pixelFormat, encodable.contains(f) else {
                let offered = v.codec == "rawvideo" ? v.pixelFormat?.rawValue ?? "unknown" : v.codec
                return ("pixel format", "\(offered) offered; record encodes raw yuv420p, nv12 or yuyv422 pictures (decode it first)")
            }
            if v.width <= 0 || v.height <= 0 { return ("size", "\(v.width)x\(v.height) is not a picture size") }
        }
        if let a = p.audio, a.codec != "pcm_f32" {
            return ("audio codec", "\(a.codec) offered; record encodes raw 32-bit float samples")
        }
        return nil
    }

    /// An in-band change: a new picture size or layout closes the open fragment, and the next
    /// picture starts one with the new parameters (each fragment has one size, as a phone's do).
    private func adapt(to p: StreamParameters, _ r: FragmentRecorder, _ context: StageContext) throws {
        if let (parameter, reason) = Self.refusal(p) { throw ClipFlowError.badInput("record '\(id)': \(parameter): \(reason)") }
        let old = incoming?.video
        incoming = p
        guard let new = p.video, let old, (old.width, old.height, old.pixelFormat) != (new.width, new.height, new.pixelFormat) else { return }
        if !r.paused {
            try r.pause()
            r.resume()
        }
        context.emit(.notice("pictures now \(new.width)x\(new.height) \(new.pixelFormat?.rawValue ?? ""); the next fragment starts with them"))
    }

    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        if let p = item.parameters, let r = recorder {
            if input == audioInput { return .ok }
            try adapt(to: p, r, context)
            return .ok
        }
        guard let r = recorder, let media = item.media else { return .ok }
        try carryOut(control.take(), r, context)
        if !(try r.append(media)) {
            context.emit(.notice(String(format: "reached the maximum record time (%.1f s)", options.maxSeconds)))
            return .endOfStream
        }
        publish(r)
        reportStart(r, context)
        if r.audioOverruns != reportedOverruns {
            reportedOverruns = r.audioOverruns
            context.emit(
                .notice(
                    String(
                        format: "audio lost %d time%@ (%.3f s in all): filled with silence of the same length, sync kept", r.audioOverruns,
                        r.audioOverruns == 1 ? "" : "s", r.audioLostSeconds)))
        }
        // The pictures ended and their audio is in: nothing more to take.
        if picturesEnded && r.picturesWaiting == 0 { return .flushing }
        let secs = Int(r.totalSeconds)
        if secs != lastProgress {
            lastProgress = secs
            context.progress(Int64(secs), of: Int64(options.maxSeconds), unit: "seconds")
        }
        return .ok
    }

    /// Once the recording started: how many pictures it left out waiting for the first sound of
    /// its audio input, if any.
    private func reportStart(_ r: FragmentRecorder, _ context: StageContext) {
        guard !reportedStart, r.recordingStarted else { return }
        reportedStart = true
        let n = r.picturesBeforeSound
        if n > 0 {
            context.emit(
                .notice("the recording starts with the first sound of its audio input: \(n) picture\(n == 1 ? "" : "s") before it left out"))
        }
    }

    /// Carries out commands, in the order they were sent.
    private func carryOut(_ commands: [RecordControl.Command], _ r: FragmentRecorder, _ context: StageContext) throws {
        for c in commands {
            switch c {
            case .pause: try r.pause(); context.emit(.notice("paused"))
            case .resume: r.resume(); context.emit(.notice("recording"))
            case .split: if !r.paused { try r.pause(); r.resume() }
            case .deleteLast:
                do {
                    if let d = try r.deleteLast() {
                        control.answerDeletion(.deleted(path: d.path, seconds: d.seconds))
                    } else {
                        control.answerDeletion(.nothingToDelete)
                    }
                } catch {
                    control.answerDeletion(.failed((error as? ClipFlowError)?.message ?? "\(error)"))
                }
                publish(r)
            }
        }
    }

    public func drain(_ context: StageContext) throws {
        // What was asked before the end acts before the open fragment closes.
        if let r = recorder { try carryOut(control.take(), r, context) }
        control.end()
        try recorder?.finish()
        if let r = recorder { publish(r) }
    }

    /// Copies the recorder's state into `status`.
    private func publish(_ r: FragmentRecorder) {
        let total = r.totalSeconds
        status.update { s in
            s.fragment = r.currentFragment
            s.fragmentSeconds = r.openFragmentSeconds
            s.totalSeconds = total
            s.paused = r.paused
            s.picturesMissing = r.missingPictures
            s.audioOverruns = r.audioOverruns
            s.audioGapSeconds = r.audioLostSeconds
            s.audioLevel = r.audioLevel
        }
    }

    public func finish(_ context: StageContext, outcome: StageOutcome) {
        control.end()
        // Failed or cancelled elsewhere: still finalise the open fragment (recorded data is kept).
        if outcome != .completed, let r = recorder {
            if (try? r.finish()) == nil { r.abandon() }
        }
    }
}
