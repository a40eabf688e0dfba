import ClipFlowCore
import Foundation
import Synchronization

/// Stage kinds backed by FFmpeg: `merge`, `transcode`, `decode`, `thumbnail` and `record`.
public enum MediaStages {
    public static func register(into r: StageRegistry) {
        r.register(MergeStage.kind)
        r.register(TranscodeStage.kind)
        r.register(DecodeStage.kind)
        r.register(HLSStage.kind)
        r.register(ThumbnailStage.kind)
        r.register(RecordStage.kind)
    }
}

/// Creates the folder an output goes in (a pipeline's stages do; the commands check it exists).
func createFolder(of output: String) throws {
    let dir = (output as NSString).deletingLastPathComponent
    guard !dir.isEmpty else { return }
    do { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) } catch {
        throw ClipFlowError.output("cannot create the directory of '\(output)': \(error.localizedDescription)")
    }
}

/// Forwards a merge's progress to the stage's events.
struct StageProgress: ProgressReporter {
    let context: StageContext
    func report(_ e: ProgressEvent) { context.progress(e.completed, of: e.total, unit: e.unit, speed: e.speed) }
    func notice(_ message: String) { context.emit(.notice(message)) }
}

/// Joins every clip it receives (inputs in order, clips in arrival order) into one fast-start
/// MP4 at end of stream, then passes the file on. On a graceful stop (first SIGINT) it writes
/// nothing when `onStop` is "discard" (a merge is all or nothing), or joins the clips that
/// arrived when it is "finish" (a recording pipeline: stopping the recording still yields the
/// video). The output never exists half-written.
/// Belongs to its stage queue; a stop or cancel reaches it through `cancelFlag` (thread-safe).
public final class MergeStage: Stage {
    public let id: String
    public let output: String
    public let rotate: Int
    /// The output's display turn, whatever the clips carry (nil: theirs plus `rotate`).
    public let setRotation: Int?
    /// An existing file at `output` is replaced (otherwise refused).
    public let overwrite: Bool
    /// "discard" or "finish": what a graceful stop does (see above).
    public let onStop: String
    /// Bytes reserved up front for the index (`MergeOptions.moovReserveOverride`); nil: estimated.
    public var moovReserveOverride: Int?
    /// Clips that differ are joined too (`ConformingMerger`): re-encoded where needed.
    public let conform: Bool
    /// With `conform`: the re-encodes' settings and the target (`ConformPlan.make(_:preset:)`).
    public let preset: TranscodePreset?
    private var clips = InputOrdered<String>()
    private let cancelFlag = CancellationFlag()
    public var inputTypes: Set<PortType> { [.clips] }
    public var outputType: PortType? { .video }

    public static let kind = StageKind(
        name: "merge", summary: "join clips losslessly into one fast-start MP4 (sample-accurate audio joins)",
        inputs: [.clips], minInputs: 1, output: .video,
        params: [
            ParamSpec("output", .path, required: true, role: .writes, help: "the merged MP4 (written under a temporary name, renamed when complete)"),
            ParamSpec(
                "rotate", .integerChoice([0, 90, 180, 270]), default: .number(0),
                help: "turn the displayed picture clockwise by this much more than the clips' own turn (display matrix; pixels untouched)"),
            ParamSpec(
                "set-rotation", .integerChoice([0, 90, 180, 270]),
                help: "the displayed picture's clockwise turn, replacing the clips' own (ffmpeg's -display_rotation, which counts counter-clockwise)"),
            .overwrite,
            ParamSpec(
                "on-stop", .choice(["discard", "finish"]), default: .string("discard"),
                help: "on a graceful stop (first SIGINT): write nothing, or join the clips that arrived (use finish after a recorder)"),
            ParamSpec(
                "conform", .boolean, default: .bool(false),
                help: "join clips that differ: copy what matches the majority, re-encode only the clips that differ"),
            ParamSpec(
                "preset", .choice(TranscodePreset.all.map(\.name)),
                help: "with conform: the target format and the re-encodes' settings (`clipflow presets`)")
        ],
        // A merge only lists the clips it receives until its inputs end: up to 1024 clips wait,
        // whatever their size on disk (a byte limit here would block the recording feeding it).
        queue: LinkLimits(maxItems: 1024, maxBytes: LinkLimits.noByteLimit),
        check: { p, path in
            if p.int("set-rotation") != nil, (p.int("rotate") ?? 0) != 0 {
                return [
                    PipelineIssue("\(path).set-rotation", "give \"rotate\" (a turn added to the clips' own) or \"set-rotation\" (the turn itself), not both")
                ]
            }
            if p.string("preset") != nil, p.bool("conform") != true {
                return [PipelineIssue("\(path).preset", "a preset goes with \"conform\": true (it sets what the clips that differ are re-encoded to)")]
            }
            guard let o = p.string("output") else { return [] }
            let dir = (o as NSString).deletingLastPathComponent
            let d = dir.isEmpty ? "." : dir
            var isDir: ObjCBool = false
            if FileManager.default.fileExists(atPath: d, isDirectory: &isDir), !isDir.boolValue {
                return [PipelineIssue("\(path).output", "'\(d)' is not a directory")]
            }
            if FileManager.default.fileExists(atPath: d), !FileManager.default.isWritableFile(atPath: d) {
                return [PipelineIssue("\(path).output", "cannot write into '\(d)' (permission denied)")]
            }
            return []
        },
        files: { p in StageFiles(writes: p.string("output").map { [FileField("output", $0)] } ?? []) },
        make: { id, p in
            MergeStage(
                id: id, output: p.string("output")!, rotate: p.int("rotate") ?? 0, setRotation: p.int("set-rotation"), overwrite: p.bool("overwrite") ?? false,
                onStop: p.string("on-stop") ?? "discard", conform: p.bool("conform") ?? false, preset: p.string("preset").flatMap { TranscodePreset.named($0) })
        })

    public init(
        id: String, output: String, rotate: Int = 0, setRotation: Int? = nil, overwrite: Bool = false, onStop: String = "discard", conform: Bool = false,
        preset: TranscodePreset? = nil
    ) {
        self.id = id
        self.output = output
        self.rotate = rotate
        self.setRotation = setRotation
        self.overwrite = overwrite
        self.onStop = onStop
        self.conform = conform
        self.preset = preset
    }

    public func prepare(_ context: StageContext) throws {
        let flag = cancelFlag
        if onStop == "discard" { context.onStop { flag.cancel() } }
        context.onCancel { flag.cancel() }
        try createFolder(of: output)
    }

    public func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        try checkPorts(inputs)
        return StreamParameters(port: .video, container: "mp4")
    }

    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        if let p = item.path { clips.append(p, input: input) }
        return .ok
    }

    public func drain(_ context: StageContext) throws {
        // A stop before or during the work writes nothing; the command says so once.
        if context.stopRequested && onStop == "discard" { return }
        guard !clips.isEmpty else { throw ClipFlowError.badInput("no clips reached the merge") }
        var options = MergeOptions(output: URL(fileURLWithPath: output), rotate: rotate)
        options.setRotation = setRotation
        options.overwrite = overwrite
        options.moovReserveOverride = moovReserveOverride
        var merged: [FileOrigin] = []
        do {
            let r: MergeResult
            if conform {
                let (merged, plan) = try ConformingMerger(
                    inputs: clips.all, options: options, preset: preset, progress: StageProgress(context: context), cancel: cancelFlag
                ).run()
                r = merged
                context.emit(
                    .result([
                        .init("reencoded_clips", .integer(Int64(plan.reencoded.count))), .init("harmonised_clips", .integer(Int64(plan.harmonised.count)))
                    ]))
            } else {
                r = try Merger(inputs: clips.all, options: options, progress: StageProgress(context: context), cancel: cancelFlag).run()
            }
            context.emit(.output(path: r.output.path))
            context.emit(
                .result([
                    .init("clips", .integer(Int64(r.clips))), .init("video_frames", .integer(Int64(r.videoFrames))), .init("bytes", .integer(r.bytes)),
                    .init("rotation", .integer(Int64(r.rotation))), .init("own_parameter_sets", .integer(Int64(r.ownParameterSets)))
                ]))
            merged = r.sources
        } catch let e as ClipFlowError where e.kind == .interrupted && context.stopRequested && !context.cancellation.isCancelled {
            return
        }
        // The clips travel with the video, so that a later stage blames the clip a problem is in.
        var item = Item.file(output, type: .video)
        item.origins = merged
        context.push(item)
    }
}

/// Writes a JPEG cover of each video it receives: a representative (not black, blank or fading)
/// frame, upright, at display size or limited by `size`.
/// Belongs to its stage queue; a cancel reaches it through `cancelFlag` (thread-safe).
public final class ThumbnailStage: Stage {
    public let id: String
    public let output: String
    public let size: ThumbnailSize?
    /// An existing file at `output` is replaced (otherwise refused).
    public let overwrite: Bool
    private let cancelFlag = CancellationFlag()
    public var inputTypes: Set<PortType> { [.video] }
    public var outputType: PortType? { .image }

    public static let kind = StageKind(
        name: "thumbnail", summary: "write a JPEG cover of a representative frame, upright",
        inputs: [.video], minInputs: 1, maxInputs: 1, output: .image,
        params: [
            ParamSpec("output", .path, required: true, role: .writes, help: "the JPEG to write"),
            ParamSpec("size", .string, help: "limit: N pixels on the longer side, or WxH to fit within (default: display size)"),
            .overwrite
        ],
        check: { p, path in
            if let s = p.string("size"), ThumbnailSize(parsing: s) == nil {
                return [PipelineIssue("\(path).size", "expected N or WxH with positive numbers, got \"\(s)\"")]
            }
            return []
        },
        files: { p in StageFiles(writes: p.string("output").map { [FileField("output", $0)] } ?? []) },
        make: { id, p in
            ThumbnailStage(
                id: id, output: p.string("output")!, size: p.string("size").flatMap { ThumbnailSize(parsing: $0) }, overwrite: p.bool("overwrite") ?? false)
        })

    public init(id: String, output: String, size: ThumbnailSize? = nil, overwrite: Bool = false) {
        self.id = id
        self.output = output
        self.size = size
        self.overwrite = overwrite
    }

    public func prepare(_ context: StageContext) throws {
        context.onCancel { [cancelFlag] in cancelFlag.cancel() }
    }

    public func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        try checkPorts(inputs)
        return StreamParameters(port: .image, container: "jpeg")
    }

    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        guard let video = item.path else { return .ok }
        let dir = (output as NSString).deletingLastPathComponent
        if !dir.isEmpty { try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        let r = try Thumbnailer(path: video, sources: item.origins, cancel: cancelFlag).write(
            to: URL(fileURLWithPath: output), limit: size, replacing: overwrite)
        context.emit(.output(path: output))
        context.emit(.result([.init("width", .integer(Int64(r.width))), .init("height", .integer(Int64(r.height))), .init("time", .number(r.time))]))
        return context.push(.file(output, type: .image)) == .flushing ? .flushing : .ok
    }
}

/// Commands for a running record stage, from any thread (a terminal, a signal, a test). Applied
/// on the stage's queue before the next frame.
public final class RecordControl: Sendable {
    public enum Command: Sendable, Equatable { case pause, resume, split }
    private let pending = Mutex<[Command]>([])
    public init() {}
    public func send(_ c: Command) { pending.withLock { $0.append(c) } }
    func take() -> [Command] {
        pending.withLock { c in
            defer { c = [] }; return c
        }
    }
}

/// Encodes raw frames into clip fragments (see `FragmentRecorder`) and passes each fragment on
/// the moment it is closed. One input carries the pictures (and maybe their audio); a second
/// may carry audio alone (a microphone): pictures then wait for the audio of their instant, and
/// once the pictures end the stage ends as soon as their audio is in. On a graceful stop, a cancel or a failure upstream, the open fragment
/// is finalised: what was recorded is kept and playable.
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
            ParamSpec("preset", .choice(RecordOptions.presets), default: .string("veryfast"), help: "libx264 preset (ultrafast for 1080p30 on 2 cores)"),
            ParamSpec("crf", .integer(min: 0, max: 51), default: .number(23), help: "libx264 quality (lower: better, bigger)"),
            ParamSpec("keyframe-interval", .number(min: 0.04, max: 60), default: .number(2), help: "longest run between keyframes, seconds")
        ],
        // Raw pictures are large: at most 32 frames (about 1 s of video with its audio) or 128 MiB.
        queue: LinkLimits(maxItems: 64, maxBytes: 128 << 20),
        check: { p, path in
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
            o.preset = p.string("preset") ?? "veryfast"
            o.crf = p.int("crf") ?? 23
            o.keyframeSeconds = p.double("keyframe-interval") ?? 2
            return RecordStage(id: id, options: o)
        })

    public init(id: String, options: RecordOptions, control: RecordControl = RecordControl(), status: RecordStatus = RecordStatus()) {
        self.id = id
        self.options = options
        self.control = control
        self.status = status
    }

    public func prepare(_ context: StageContext) throws {
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
        }
        return StreamParameters(port: .clips, container: "mp4")
    }

    public func inputEnded(_ input: Int, _ context: StageContext) throws -> FlowResult {
        guard let r = recorder else { return .ok }
        if input == audioInput {
            r.audioInputOpen = false
            try r.releasePictures()
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
        for c in control.take() {
            switch c {
            case .pause: try r.pause(); context.emit(.notice("paused"))
            case .resume: r.resume(); context.emit(.notice("recording"))
            case .split: if !r.paused { try r.pause(); r.resume() }
            }
        }
        if !(try r.append(media)) {
            context.emit(.notice(String(format: "reached the maximum record time (%.1f s)", options.maxSeconds)))
            return .endOfStream
        }
        publish(r)
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

    public func drain(_ context: StageContext) throws {
        try recorder?.finish()
        if let r = recorder { publish(r) }
        reportMissing(context)
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
        // Failed or cancelled elsewhere: still finalise the open fragment (recorded data is kept).
        if outcome != .completed, let r = recorder {
            if (try? r.finish()) == nil { r.abandon() }
        }
    }

    private func reportMissing(_ context: StageContext) {
        if let r = recorder, r.missingPictures > 0 {
            context.emit(.notice("\(r.missingPictures) pictures were missing from the source (sequence gaps); timing kept from timestamps"))
        }
    }
}
