import ClipFlowCore
import Foundation

/// Writes an HLS ladder of every video it receives, joined in order: runs as `HLSLadder`'s
/// graph (one decode, a stage per rendition, this kind's ladder stage at the end). All or nothing:
/// a stop, a cancel or a failure leaves no folder.
public enum HLSStage {
    public static let kind = StageKind(
        name: "hls", summary: "write an HLS ladder (fMP4 renditions from one decode, playlists from measured segments, poster)",
        inputs: [.clips, .video], minInputs: 1, output: nil,
        params: [
            ParamSpec("output", .path, required: true, role: .writesFolder, help: "the folder to create (an existing one is refused unless overwrite)"),
            ParamSpec(
                "ladder", .string, default: .string("auto"),
                help: "auto (Apple's, never above the source), heights (1080,720,540,360), with copy to pass the source through: copy,auto; copy alone remuxes"),
            ParamSpec(
                "passthrough", .choice(["auto", "off"]), default: .string("auto"),
                help: "auto: a source that fits the top rung (Passthrough) is that rung, its packets as they are; off: every rung is encoded"),
            ParamSpec(
                "passthrough-rate", .number(min: 0.1, max: 100), default: .number(Passthrough.defaultMaxRate),
                help: "the highest average bit rate of a source passed through, as a multiple of its rung's cap"),
            ParamSpec(
                "codecs", .string, default: .string("h264"),
                help: "h264, or h264,av1: every rung up to 720 lines again in AV1 (SVT-AV1), for players that decode it"),
            ParamSpec("profile", .choice(["vod", "feed"]), default: .string("vod"), help: "vod: 6 s segments; feed: a 1 s first segment, then 2 s"),
            ParamSpec("segment", .number(min: 1, max: 30), help: "segment length in seconds (overrides the profile's)"),
            ParamSpec("encoder-preset", .choice(TranscodeSettings.encoderPresets), default: .string("veryfast"), help: "x264 speed preset"),
            ParamSpec("single-file", .boolean, default: .bool(false), help: "one file per rendition, segments addressed by byte ranges"),
            ParamSpec("reuse", .path, help: "a complete ladder of the same source (same file system) to take reuse-renditions from, as hard links"),
            ParamSpec(
                "reuse-renditions", .string,
                help: "what to take from reuse, comma-separated: renditions by their playlists' names (360p, audio, copy) and poster for the covers"),
            ParamSpec(
                "storyboard", .boolean, default: .bool(true),
                help: "make the seek preview (storyboard.jpg and .vtt: a picture decoded per segment of the smallest rendition)"),
            ParamSpec(
                "timeline-start", .number(min: 0, max: 366 * 86400), default: .number(0),
                help: "seconds the copy's timeline starts at (a recording's fragment after the ones before it); copy alone only"),
            .overwrite
        ],
        queue: DecodeStage.kind.queue,
        check: { p, path in
            var issues: [PipelineIssue] = []
            if let c = p.string("codecs"), VideoCodec.parse(c) == nil {
                issues.append(PipelineIssue("\(path).codecs", "expected \(VideoCodec.expected), got \"\(c)\""))
            }
            if let l = p.string("ladder"), LadderChoice.parse(l) == nil {
                issues.append(PipelineIssue("\(path).ladder", "expected \(LadderChoice.expected), got \"\(l)\""))
            }
            if (p.double("timeline-start") ?? 0) > 0, LadderChoice.parse(p.string("ladder") ?? "auto")?.rungs?.isEmpty != true {
                issues.append(PipelineIssue("\(path).timeline-start", "only a copy alone (ladder copy) starts its timeline elsewhere than 0"))
            }
            switch (p.string("reuse"), p.string("reuse-renditions")) {
            case (nil, nil): break
            case (.some, nil): issues.append(PipelineIssue("\(path).reuse-renditions", "reuse needs reuse-renditions: what to take from it"))
            case (nil, .some): issues.append(PipelineIssue("\(path).reuse", "reuse-renditions needs reuse: the ladder folder to take them from"))
            case (.some, .some(let names)):
                if LadderReuse.names(names) == nil {
                    issues.append(PipelineIssue("\(path).reuse-renditions", "expected \(LadderReuse.expected), got \"\(names)\""))
                }
            }
            return issues
        },
        files: { p in StageFiles(writes: p.string("output").map { [FileField("output", $0, commitMarker: "master.m3u8")] } ?? []) },
        graph: { id, p in
            HLSLadder(
                output: p.string("output")!, ladder: LadderChoice.parse(p.string("ladder") ?? "auto") ?? LadderChoice(rungs: nil),
                schedule: SegmentSchedule(profile: p.string("profile") ?? "vod", segment: p.double("segment")),
                encoderPreset: p.string("encoder-preset") ?? "veryfast", singleFile: p.bool("single-file") ?? false,
                reuse: p.string("reuse").map {
                    LadderReuse(folder: URL(fileURLWithPath: $0), named: LadderReuse.names(p.string("reuse-renditions") ?? "") ?? [])
                },
                overwrite: p.bool("overwrite") ?? false, storyboard: p.bool("storyboard") ?? true, timelineStart: p.double("timeline-start") ?? 0,
                passthrough: p.string("passthrough") == "off" ? nil : Passthrough(maxRate: p.double("passthrough-rate") ?? Passthrough.defaultMaxRate),
                codecs: VideoCodec.parse(p.string("codecs") ?? "h264") ?? [.h264]
            ).graph(id: id)
        })
}

/// The end of a ladder's graph: takes every rendition's description (port `rendition`), writes
/// the master playlist (BANDWIDTH measured, CODECS from the streams), `feed.json`, the covers
/// (made by a copy from its source, or of the picture the smallest rendition chose,
/// `LadderPoster`) and, unless left out, the storyboard (from the smallest rendition), then renames the ladder's
/// folder into place. It creates the folder when prepared (refusing an existing output) and
/// removes it unless the run completed. Belongs to its stage queue.
final class LadderStage: Stage {
    let id: String
    private let folder: LadderFolder
    private let reuse: LadderReuse?
    private var video: [HLSTrack] = []
    private var audio: HLSTrack?
    /// The cover the smallest rendition chose (`LadderPoster`), once its description came.
    private var poster: LadderPoster?
    private let storyboard: Bool
    private var committed = false
    var inputTypes: Set<PortType> { [.rendition] }
    var outputType: PortType? { nil }

    init(id: String, folder: LadderFolder, reuse: LadderReuse? = nil, storyboard: Bool = true) {
        self.id = id
        self.folder = folder
        self.reuse = reuse
        self.storyboard = storyboard
    }

    func prepare(_ context: StageContext) throws { try folder.create() }

    func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        guard case .value(let v) = item.payload else { return .ok }
        // A rung the source's packets stand in for hands on only the cover it chose.
        if let p = v as? LadderPoster { poster = p }
        guard let t = v as? HLSTrack else { return .ok }
        if let p = item.facts[LadderPoster.self] { poster = p }
        if t.width > 0 { video.append(t) } else { audio = t }
        return .ok
    }

    func drain(_ context: StageContext) throws {
        if context.stopRequested { return }
        let work = try folder.work
        if let reuse {
            for t in try reuse.link(into: work) {
                if t.width > 0 { video.append(t) } else { audio = t }
            }
        }
        guard !video.isEmpty else { throw ClipFlowError.badInput("no picture reached the ladder") }
        video = HLSPlaylists.ordered(video)
        try folder.write(HLSPlaylists.master(video: video, audio: audio), to: "master.m3u8")
        try folder.write(LadderTracks(video: video, audio: audio).serialized(), to: LadderTracks.file)
        if reuse?.poster != true {
            if let poster {
                try LadderCovers.write(poster, into: work)
            } else if try !folder.awaitPoster() {
                throw ClipFlowError.failure("internal: no rendition of the ladder '\(folder.output.path)' made its poster")
            }
        }
        if storyboard, let smallest = HLSPlaylists.smallest(of: video) { try Storyboard.write(from: smallest, in: work) }
        let entry = FeedEntry(id: folder.output.lastPathComponent, video: video, audio: audio, covers: work)
        try folder.write(FeedManifest(videos: [entry]).serialized, to: "feed.json")
        try folder.commit()
        committed = true
        let master = folder.output.appendingPathComponent("master.m3u8")
        context.emit(.output(path: master.path))
        context.emit(
            HLSSummary(renditions: video.count, playlists: video.map(\.playlistURI), segments: video[0].segments.count, master: master.path))
    }

    func finish(_ context: StageContext, outcome: StageOutcome) {
        if !committed { folder.discard() }
    }
}

/// What a ladder is asked for (`--ladder`, the `hls` stage's `ladder`): `auto`, even heights
/// such as `1080,720,360` (each once), and `copy` for a rendition that passes the source through
/// untouched: `copy,auto`, `copy,720,360`, or `copy` alone (a remux, no encode).
public struct LadderChoice: Sendable, Equatable {
    /// Encoded rungs; nil: `auto`; empty: none (copy alone).
    public var rungs: [LadderRung]?
    public var copy: Bool

    public init(rungs: [LadderRung]?, copy: Bool = false) {
        self.rungs = rungs
        self.copy = copy
    }

    /// nil when `s` is not that.
    public static func parse(_ s: String) -> LadderChoice? {
        let items = s.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        guard Set(items).count == items.count else { return nil }
        let copy = items.contains("copy"), auto = items.contains("auto")
        let heights = items.filter { $0 != "copy" && $0 != "auto" }.map { Int($0) }
        guard heights.allSatisfy({ ($0 ?? 0) >= 144 && ($0 ?? 0) <= 4320 && ($0 ?? 1) % 2 == 0 }) else { return nil }
        if auto { return heights.isEmpty ? LadderChoice(rungs: nil, copy: copy) : nil }
        if heights.isEmpty { return copy ? LadderChoice(rungs: [], copy: true) : nil }
        return LadderChoice(
            rungs: heights.map { h in
                let h = h!
                let rate = h >= 1080 ? 6_000_000 : h >= 720 ? 3_500_000 : h >= 540 ? 2_000_000 : h >= 360 ? 1_000_000 : 500_000
                return LadderRung(name: "\(h)p", height: h, maxRate: rate)
            }, copy: copy)
    }

    public static let expected = "auto, copy, or even heights such as 1080,720,360 (each once), copy with either: copy,auto"
}

extension SegmentSchedule {
    public init(profile: String, segment: Double?) {
        let base: SegmentSchedule = profile == "feed" ? .feed : .vod
        self = segment.map { SegmentSchedule(length: $0, first: profile == "feed" ? min(1, $0) : $0) } ?? base
    }
}

/// What a ladder wrote: its `result` event.
public struct HLSSummary: StageResult, Equatable {
    public var renditions: Int
    /// The renditions' playlists, as the master names them.
    public var playlists: [String]
    /// Segments of the first rendition.
    public var segments: Int
    /// The master playlist's path.
    public var master: String

    public init(renditions: Int, playlists: [String], segments: Int, master: String) {
        self.renditions = renditions
        self.playlists = playlists
        self.segments = segments
        self.master = master
    }

    public var fields: [EventField] {
        [
            .init("renditions", .integer(Int64(renditions))), .init("playlists", .string(playlists.joined(separator: ","))),
            .init("segments", .integer(Int64(segments))), .init("master", .string(master))
        ]
    }

    public init(fields f: [EventField]) {
        self.init(
            renditions: f.int("renditions"), playlists: f.text("playlists").split(separator: ",").map(String.init), segments: f.int("segments"),
            master: f.text("master"))
    }
}
