import ClipFlowCore
import Foundation

/// Writes an HLS ladder (`HLSLadderWriter`) of every video it receives, joined in order, at end
/// of stream. All or nothing: a stop, a cancel or a failure leaves no folder.
/// Belongs to its stage queue; a stop or cancel reaches it through `cancelFlag`.
public final class HLSStage: Stage {
    public let id: String
    public let output: String
    public let rungs: [LadderRung]?
    public let schedule: SegmentSchedule
    public let encoderPreset: String
    private var files: [String] = []
    private let cancelFlag = CancellationFlag()
    public var inputTypes: Set<PortType> { [.clips, .video] }
    public var outputType: PortType? { nil }

    public static let kind = StageKind(
        name: "hls", summary: "write an HLS ladder (fMP4 renditions from one decode, playlists from measured segments, poster)",
        inputs: [.clips, .video], minInputs: 1, output: nil,
        params: [
            ParamSpec("output", .path, required: true, help: "the folder to create (it must not exist)"),
            ParamSpec("ladder", .string, default: .string("auto"), help: "auto (Apple's, never above the source) or heights: 1080,720,540,360"),
            ParamSpec("profile", .choice(["vod", "feed"]), default: .string("vod"), help: "vod: 6 s segments; feed: a 1 s first segment, then 2 s"),
            ParamSpec("segment", .number(min: 1, max: 30), help: "segment length in seconds (overrides the profile's)"),
            ParamSpec("encoder-preset", .choice(TranscodeSettings.encoderPresets), default: .string("veryfast"), help: "x264 speed preset")
        ],
        check: { p, path in
            if let l = p.string("ladder"), LadderRung.parse(l) == nil && l != "auto" {
                return [PipelineIssue("\(path).ladder", "expected auto or even heights such as 1080,720,360, got \"\(l)\"")]
            }
            return []
        },
        files: { p in StageFiles(writes: p.string("output").map { [FileField("output", $0)] } ?? []) },
        make: { id, p in
            HLSStage(
                id: id, output: p.string("output")!, rungs: p.string("ladder").flatMap { LadderRung.parse($0) },
                schedule: SegmentSchedule(profile: p.string("profile") ?? "vod", segment: p.double("segment")),
                encoderPreset: p.string("encoder-preset") ?? "veryfast")
        })

    public init(id: String, output: String, rungs: [LadderRung]?, schedule: SegmentSchedule, encoderPreset: String) {
        self.id = id
        self.output = output
        self.rungs = rungs
        self.schedule = schedule
        self.encoderPreset = encoderPreset
    }

    public func prepare(_ context: StageContext) throws {
        let flag = cancelFlag
        context.onStop { flag.cancel() }
        context.onCancel { flag.cancel() }
        try createFolder(of: output)
    }

    public func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        try checkPorts(inputs)
        return nil
    }

    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        if let p = item.path { files.append(p) }
        return .ok
    }

    public func drain(_ context: StageContext) throws {
        if context.stopRequested { return }
        guard !files.isEmpty else { throw ClipFlowError.badInput("no videos reached the hls stage") }
        let w = HLSLadderWriter(
            inputs: files, directory: URL(fileURLWithPath: output), rungs: rungs, schedule: schedule, encoderPreset: encoderPreset,
            progress: StageProgress(context: context), cancel: cancelFlag)
        let r = try w.run()
        context.emit(.output(path: r.master.path))
        context.emit(
            .result([
                .init("renditions", .integer(Int64(r.renditions.count))), .init("segments", .integer(Int64(r.segments))),
                .init("master", .string(r.master.path))
            ]))
    }
}

extension LadderRung {
    /// "1080,720,360": one rung per height with Apple's rates for it; nil when not that.
    public static func parse(_ s: String) -> [LadderRung]? {
        if s == "auto" { return nil }
        let heights = s.split(separator: ",").map { Int($0.trimmingCharacters(in: .whitespaces)) }
        guard !heights.isEmpty, heights.allSatisfy({ ($0 ?? 0) >= 144 && ($0 ?? 0) <= 4320 && ($0 ?? 1) % 2 == 0 }) else { return nil }
        return heights.map { h in
            let h = h!
            let rate = h >= 1080 ? 6_000_000 : h >= 720 ? 3_500_000 : h >= 540 ? 2_000_000 : h >= 360 ? 1_000_000 : 500_000
            return LadderRung(name: "\(h)p", height: h, maxRate: rate)
        }
    }
}

extension SegmentSchedule {
    public init(profile: String, segment: Double?) {
        let base: SegmentSchedule = profile == "feed" ? .feed : .vod
        self = segment.map { SegmentSchedule(length: $0, first: profile == "feed" ? min(1, $0) : $0) } ?? base
    }
}
