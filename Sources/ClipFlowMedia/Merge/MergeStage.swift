import ClipFlowCore
import Foundation

/// Joins every clip it receives (inputs in order, clips in arrival order) into one fast-start
/// MP4 at end of stream, then passes the file on, carrying where each stretch came from
/// (`FileOrigins`). The `merge` kind runs as `ID.probe -> ID` (`graph`): the clips arrive
/// probed (`ProbedClip`) and are not probed again; a clip without a probe is probed here. On a
/// graceful stop (first SIGINT) it writes nothing when `onStop` is `.discard` (a merge is all
/// or nothing), or joins the clips that arrived when it is `.finish` (a recording pipeline:
/// stopping the recording still yields the video). The output never exists half-written.
/// Belongs to its stage queue; a stop or cancel reaches it through `cancelFlag` (thread-safe).
public final class MergeStage: Stage {
    public let id: String
    public let output: String
    public let rotate: Int
    /// The output's display turn, whatever the clips carry (nil: theirs plus `rotate`).
    public let setRotation: Int?
    /// An existing file at `output` is replaced (otherwise refused).
    public let overwrite: Bool
    /// What a graceful stop does (see above).
    public let onStop: OnStop

    /// What a graceful stop (first SIGINT) does to a merge.
    public enum OnStop: String, CaseIterable, Sendable {
        /// Write nothing: a merge is all or nothing.
        case discard
        /// Join the clips that arrived (after a recorder: stopping the recording still yields the video).
        case finish
    }
    /// Bytes reserved up front for the index (`MergeOptions.moovReserveOverride`); nil: estimated.
    public var moovReserveOverride: Int?
    /// Clips that differ are joined too (`ConformingMerger`): re-encoded where needed.
    public let conform: Bool
    /// With `conform`: the re-encodes' settings and the target (`ConformPlan.make(_:preset:)`).
    public let preset: TranscodePreset?
    /// How its refusals name its settings: as the command line spells them, or (a pipeline's
    /// stage, made from `kind`) as the stage's fields.
    public let spelling: SettingSpelling
    private var clips = InputOrdered<(path: String, probe: Result<ClipInfo, Error>?)>()
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
                "on-stop", .choice(OnStop.allCases.map(\.rawValue)), default: .string(OnStop.discard.rawValue),
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
        graph: { id, p in
            graph(id: id) {
                MergeStage(
                    id: id, output: p.string("output")!, rotate: p.int("rotate") ?? 0, setRotation: p.int("set-rotation"),
                    overwrite: p.bool("overwrite") ?? false, onStop: p.string("on-stop").flatMap(OnStop.init) ?? .discard,
                    conform: p.bool("conform") ?? false, preset: p.string("preset").flatMap { TranscodePreset.named($0) }, spelling: .pipelineField)
            }
        })

    /// `ID.probe -> ID`, entered at the probe; `make` makes the merge, whose id is `id`.
    public static func graph(id: String, _ make: @escaping @Sendable () -> MergeStage) -> StageGraph {
        let probeID = "\(id).probe"
        return StageGraph(
            nodes: [StageNode(probeID) { ProbeStage(id: probeID) }, StageNode(id) { make() }],
            edges: [Edge(from: probeID, to: id, limits: kind.queue)], entries: [probeID])
    }

    public init(
        id: String, output: String, rotate: Int = 0, setRotation: Int? = nil, overwrite: Bool = false, onStop: OnStop = .discard, conform: Bool = false,
        preset: TranscodePreset? = nil, spelling: SettingSpelling = .commandLine
    ) {
        self.id = id
        self.output = output
        self.rotate = rotate
        self.setRotation = setRotation
        self.overwrite = overwrite
        self.onStop = onStop
        self.conform = conform
        self.preset = preset
        self.spelling = spelling
    }

    public func prepare(_ context: StageContext) throws {
        let flag = cancelFlag
        if onStop == .discard { context.onStop { flag.cancel() } }
        context.onCancel { flag.cancel() }
        try createFolder(of: output)
    }

    public func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        try checkPorts(inputs)
        return StreamParameters(port: .video, container: "mp4")
    }

    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        if let p = item.path { clips.append((p, item.facts[ProbedClip.self]?.outcome), input: input) }
        return .ok
    }

    public func drain(_ context: StageContext) throws {
        // A stop before or during the work writes nothing; the command says so once.
        if context.stopRequested && onStop == .discard { return }
        guard !clips.isEmpty else { throw ClipFlowError.badInput("no clips reached the merge") }
        var options = MergeOptions(output: URL(fileURLWithPath: output), rotate: rotate)
        options.setRotation = setRotation
        options.overwrite = overwrite
        options.moovReserveOverride = moovReserveOverride
        options.spelling = spelling
        var merged: [FileOrigin] = []
        do {
            let r: MergeResult
            var conformed: (reencoded: Int, harmonised: Int)?
            if conform {
                let (merged, plan) = try ConformingMerger(
                    inputs: clips.all.map(\.path), options: options, preset: preset, progress: StageProgress(context: context), cancel: cancelFlag,
                    threads: context.helpers, probed: clips.all.map(\.probe)
                ).run()
                r = merged
                conformed = (plan.reencoded.count, plan.harmonised.count)
            } else {
                r = try Merger(
                    inputs: clips.all.map(\.path), options: options, progress: StageProgress(context: context), cancel: cancelFlag,
                    threads: context.helpers, probed: clips.all.map(\.probe)
                ).run()
            }
            context.emit(.output(path: r.output.path))
            context.emit(
                MergeSummary(
                    clips: r.clips, videoFrames: r.videoFrames, bytes: r.bytes, rotation: r.rotation, ownParameterSets: r.ownParameterSets,
                    reencodedClips: conformed?.reencoded, harmonisedClips: conformed?.harmonised))
            merged = r.sources
        } catch let e as ClipFlowError where e.kind == .interrupted && context.stopRequested && !context.cancellation.isCancelled {
            return
        }
        // The clips travel with the video, so that a later stage blames the clip a problem is in.
        var item = Item.file(output, type: .video)
        item.facts[FileOrigins.self] = FileOrigins(merged)
        context.push(item)
    }
}

/// What a merge made: its `result` event.
public struct MergeSummary: StageResult, Equatable {
    public var clips: Int
    public var videoFrames: Int
    public var bytes: Int64
    /// Clockwise degrees written into the display matrix.
    public var rotation: Int
    /// Clips whose pictures carry parameter sets of their own (in band).
    public var ownParameterSets: Int
    /// With `conform`: the clips re-encoded to match, and those whose audio alone was made to.
    public var reencodedClips: Int?
    public var harmonisedClips: Int?

    public init(
        clips: Int, videoFrames: Int, bytes: Int64, rotation: Int, ownParameterSets: Int, reencodedClips: Int? = nil, harmonisedClips: Int? = nil
    ) {
        self.clips = clips
        self.videoFrames = videoFrames
        self.bytes = bytes
        self.rotation = rotation
        self.ownParameterSets = ownParameterSets
        self.reencodedClips = reencodedClips
        self.harmonisedClips = harmonisedClips
    }

    public var fields: [EventField] {
        var f: [EventField] = []
        if let reencodedClips, let harmonisedClips {
            f += [.init("reencoded_clips", .integer(Int64(reencodedClips))), .init("harmonised_clips", .integer(Int64(harmonisedClips)))]
        }
        return f + [
            .init("clips", .integer(Int64(clips))), .init("video_frames", .integer(Int64(videoFrames))), .init("bytes", .integer(bytes)),
            .init("rotation", .integer(Int64(rotation))), .init("own_parameter_sets", .integer(Int64(ownParameterSets)))
        ]
    }

    public init(fields f: [EventField]) {
        self.init(
            clips: f.int("clips"), videoFrames: f.int("video_frames"), bytes: f.int64("bytes"), rotation: f.int("rotation"),
            ownParameterSets: f.int("own_parameter_sets"), reencodedClips: f["reencoded_clips"]?.integer.map(Int.init),
            harmonisedClips: f["harmonised_clips"]?.integer.map(Int.init))
    }
}
