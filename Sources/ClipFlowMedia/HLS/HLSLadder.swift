import ClipFlowCore
import Foundation
import Synchronization

/// The video codecs a ladder's rungs are encoded in.
public enum VideoCodec: String, Sendable, Equatable, CaseIterable {
    /// x264 High: every player decodes it; every rung has it.
    case h264
    /// SVT-AV1: the same picture in fewer bytes, for players that decode it.
    case av1
}

extension VideoCodec {
    /// The codecs `list` names (`h264` or `h264,av1`, each once; H.264 always, every player's
    /// fallback), or nil when it is not that.
    public static func parse(_ list: String) -> Set<VideoCodec>? {
        let names = list.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        let codecs = names.compactMap(VideoCodec.init(rawValue:))
        guard codecs.count == names.count, Set(codecs).count == codecs.count, codecs.contains(.h264) else { return nil }
        return Set(codecs)
    }

    public static let expected = "h264, or h264,av1 (H.264 is every player's fallback)"
}

/// One rung of a ladder: its picture height (width follows the source's shape), codec and
/// encoder settings (`crf` in the codec's own scale).
public struct LadderRung: Sendable, Equatable {
    public var name: String
    public var height: Int
    public var crf: Int
    public var maxRate: Int
    public var codec: VideoCodec
    public init(name: String, height: Int, crf: Int = 21, maxRate: Int, codec: VideoCodec = .h264) {
        self.name = name
        self.height = height
        self.crf = crf
        self.maxRate = maxRate
        self.codec = codec
    }

    /// The tallest rung a ladder adds in AV1 beside H.264 (`--codecs h264,av1`): AV1 saves the
    /// most where bytes are scarce (phones on mobile networks, the lower rungs), and an AV1
    /// encode of the top rung would cost more than the rest of the ladder on a small machine.
    public static let av1MaxHeight = 720

    /// The tallest AV1 rung when the top rung is encoded rather than passed through: the AV1
    /// rungs above it are made only with the time the top rung's encode saves, which keeps an AV1
    /// ladder within 1.5x an H.264 one's time (benchmarks/README.md).
    public static let av1MaxHeightTopEncoded = 540

    /// Whether this rung is made only when the source's packets stand in for the top rung.
    var needsTopPassedThrough: Bool { codec == .av1 && height > Self.av1MaxHeightTopEncoded }

    /// SVT-AV1's CRF for the AV1 rungs: the H.264 rung's SSIM within 0.005, at about half its
    /// bytes (benchmarks/README.md).
    public static let av1CRF = 33

    /// SVT-AV1's speed preset (0 slowest to 13): the fastest whose pictures keep within the SSIM
    /// above.
    public static let av1Preset = 11

    /// This rung in AV1 (`720p-av1`).
    public var inAV1: LadderRung {
        LadderRung(name: "\(height)p-av1", height: height, crf: Self.av1CRF, maxRate: maxRate, codec: .av1)
    }

    /// Apple's HLS authoring ladder, from the top (`auto`: a ladder leaves out the rungs above the
    /// source, but never its smallest).
    public static let standard = [
        LadderRung(name: "1080p", height: 1080, maxRate: 6_000_000), LadderRung(name: "720p", height: 720, maxRate: 3_500_000),
        LadderRung(name: "540p", height: 540, maxRate: 2_000_000), LadderRung(name: "360p", height: 360, maxRate: 1_000_000)
    ]

    /// Rendition names in the ladder's order, from the top: `copy` (the source itself), then the
    /// H.264 rungs by height as numbers (`1080p` before `720p`, not as text), then the AV1 ones,
    /// then any other name.
    public static func ordered(_ names: some Sequence<String>) -> [String] {
        func key(_ name: String) -> (Int, Int, String) {
            if name == "copy" { return (0, 0, name) }
            if let height = height(named: name) { return (name.hasSuffix("-av1") ? 2 : 1, -height, name) }
            return (3, 0, name)
        }
        return names.sorted { key($0) < key($1) }
    }

    /// The height a rung's name gives (`720p`, `720p-av1`: 720); nil for any other rendition
    /// (`copy`).
    public static func height(named name: String) -> Int? {
        let h264 = name.hasSuffix("-av1") ? String(name.dropLast(4)) : name
        return h264.hasSuffix("p") ? Int(h264.dropLast()) : nil
    }
}

/// Where segments start, in seconds: 0, then `first`, then every `length` (the `feed` profile
/// starts with a short segment so a feed's first picture comes fast); or, when a rendition is the
/// source's own packets, at the instants of `cuts` (its keyframes, `SourceKeyframes.cuts`).
public struct SegmentSchedule: Sendable, Equatable {
    public var length: Double
    public var first: Double
    /// Seconds, ascending: where segments start instead of the regular instants (nil: those).
    var cuts: [Double]?
    public init(length: Double, first: Double? = nil) {
        self.length = length
        self.first = first ?? length
    }
    public static let vod = SegmentSchedule(length: 6)
    public static let feed = SegmentSchedule(length: 2, first: 1)

    /// This schedule's lengths, starting segments at `cuts` instead.
    func cutting(at cuts: [Double]) -> SegmentSchedule {
        var s = self
        s.cuts = cuts
        return s
    }

    /// The first boundary strictly after `t` seconds (infinity: none, past the last cut).
    func boundary(after t: Double) -> Double {
        if let cuts { return cuts.first { $0 > t + 1e-9 } ?? .infinity }
        if t < first - 1e-9 { return first }
        return first + (((t - first) / length + 1e-9).rounded(.down) + 1) * length
    }

    /// `boundary(after: t)` in ticks of `rate` per second (Int64.max: none).
    func boundary(after t: Double, ticksPerSecond rate: Double) -> Int64 {
        let b = boundary(after: t) * rate
        return b.isFinite && b < Double(Int64.max / 2) ? Int64(b.rounded()) : Int64.max
    }
}

/// An HLS ladder of fMP4 renditions from one decode, as a graph of stages:
///
///     (inputs) ──▶ NAME.decode ──┬──▶ NAME.1080p ──┐
///                                ├──▶ NAME.720p  ──┤
///                                ├──▶ ...        ──┼──▶ NAME (playlists, feed.json, poster)
///                                └──▶ NAME.audio ──┘
///
/// The inputs are decoded once (joined in order, pictures upright, scaled to the top rung) and
/// every picture goes, without a copy, to every rendition through its own bounded link: the
/// slowest encoder sets the pace and memory stays bounded whatever the length. Each rendition
/// encodes and segments on its own stage queue, keyframes forced at the same instants
/// (`SegmentSchedule`); the ladder stage writes the playlists from what the segments measure
/// (`HLSPlaylists`). Everything is written into a temporary folder next to `output`, renamed
/// into place when complete; a failure or an interruption leaves nothing.
public struct HLSLadder: Sendable {
    public var output: String
    /// Encoded rungs (nil: `LadderRung.standard`, those above the source left out) and a copy.
    public var ladder: LadderChoice
    public var schedule: SegmentSchedule
    public var encoderPreset: String
    /// One file per rendition, segments addressed by byte ranges.
    public var singleFile: Bool
    /// Renditions (and the poster) of an earlier ladder of the same source, linked into this one
    /// instead of being made again (nil: everything is made). When they include the audio, this
    /// ladder encodes none.
    public var reuse: LadderReuse?
    /// An existing folder at `output` is replaced when the ladder is complete (otherwise refused).
    public var overwrite: Bool
    /// The seek preview (`Storyboard`) is made: one picture decoded per segment of the smallest
    /// rendition, after every rendition is complete.
    public var storyboard: Bool
    /// Seconds a copy-only ladder's timeline starts at (its first picture's time in the segments):
    /// a recording's fragment placed after the ones before it (`LiveLadder`).
    public var timelineStart: Double
    /// When the source fits (`Passthrough`), its own pictures stand in for the top encoded rung
    /// (H.264), or are a rendition beside it (HEVC); nil: every rung is encoded. A `copy` among the
    /// reused renditions is then taken only if it stands in for the rung (it is that copy). Not
    /// with a copy asked for, nor when rungs are reused.
    public var passthrough: Passthrough?
    /// The codecs of the encoded rungs: H.264 always; with AV1, every rung up to
    /// `LadderRung.av1MaxHeight` again in AV1 (the reused ones' too), those above
    /// `LadderRung.av1MaxHeightTopEncoded` only when the source's packets stand in for the top rung.
    public var codecs: Set<VideoCodec>

    public init(
        output: String, ladder: LadderChoice = LadderChoice(rungs: nil), schedule: SegmentSchedule = .vod, encoderPreset: String = "veryfast",
        singleFile: Bool = false, reuse: LadderReuse? = nil, overwrite: Bool = false, storyboard: Bool = true, timelineStart: Double = 0,
        passthrough: Passthrough? = Passthrough(), codecs: Set<VideoCodec> = [.h264]
    ) {
        self.codecs = codecs
        self.timelineStart = timelineStart
        self.passthrough = passthrough
        self.overwrite = overwrite
        self.storyboard = storyboard
        self.output = output
        self.ladder = ladder
        self.schedule = schedule
        self.encoderPreset = encoderPreset
        self.singleFile = singleFile
        self.reuse = reuse
    }

    /// The link from the decode to each rendition: a few pictures (shared, not copied).
    static let pictureLink = LinkLimits(maxItems: 6, maxBytes: 48 << 20)

    /// What the copy stage does in this ladder (nil: the ladder has none): a copy asked for, the
    /// timing of a reused copy, or a passthrough that may stand in for the top rung (taking the
    /// reused copy, if there is one, when it does).
    func copyRole(rungs: [LadderRung]) -> CopyRenditionStage.Role? {
        if ladder.copy { return rungs.isEmpty ? .alone : .beside }
        if rungs.isEmpty { return nil }
        let reused = reuse?.tracks ?? []
        if let passthrough, let reuse, !reused.contains(where: { LadderRung.height(named: $0) != nil }) {
            let earlier = reused.contains("copy") ? LadderReuse(folder: reuse.folder, tracks: ["copy"], poster: false) : nil
            return .passthrough(passthrough, rungs: rungs, earlier: earlier)
        }
        if let passthrough, reuse == nil { return .passthrough(passthrough, rungs: rungs, earlier: nil) }
        return reused.contains("copy") ? .timing : nil
    }

    /// The stages (`StageGraph`): the ladder stage has the id `id`; the others `id.decode`,
    /// `id.<rung>`, `id.audio`, `id.copy`. Inputs (clips or videos) enter at the decode and the
    /// copy; a copy-only ladder decodes nothing.
    public func graph(id: String) -> StageGraph {
        let folder = LadderFolder(output: URL(fileURLWithPath: output), replacing: overwrite)
        let (schedule, preset, single) = (self.schedule, encoderPreset, singleFile)
        let rungs = ladder.rungs ?? LadderRung.standard
        let role = copyRole(rungs: rungs)
        // A reused copy a passthrough takes only if it fits: the copy stage's to link.
        var linked = reuse
        if case .passthrough(_, _, .some) = role { linked?.tracks.removeAll { $0 == "copy" } }
        let reuse = linked
        // The encoded rungs' segments start where the copy's do, once it has decided.
        let timing = role.map { _ in LadderTiming() }
        // The covers: a copy makes them from its source (at the source's size); otherwise the
        // smallest rung chooses them from the decoded pictures (`LadderPoster`).
        let storyboard = self.storyboard
        var nodes = [StageNode(id) { LadderStage(id: id, folder: folder, reuse: reuse, storyboard: storyboard) }]
        var edges: [Edge] = []
        var entries: [String] = []
        if !rungs.isEmpty {
            let smallest = rungs.map(\.height).min() ?? 0
            var encoded = rungs
            if codecs.contains(.av1) {
                let reused = (reuse?.tracks ?? []).compactMap { name in LadderRung.standard.first { $0.name == name } }
                var heights = Set<Int>()
                let tallest = timing == nil ? LadderRung.av1MaxHeightTopEncoded : LadderRung.av1MaxHeight
                encoded += (rungs + reused).filter { $0.height <= tallest && heights.insert($0.height).inserted }.map(\.inAV1)
            }
            var decoding = TranscodeSettings()
            decoding.limit = PictureSize(width: 1 << 14, height: rungs.map(\.height).max() ?? 1080)
            decoding.upright = true
            let decode = decoding
            let decodeID = "\(id).decode", audioID = "\(id).audio"
            let limited = timing.map { Self.decodeSettings(decode, timing: $0, rungs: encoded) }
            nodes.append(StageNode(decodeID) { DecodeStage(id: decodeID, settings: decode, finalSettings: limited) })
            entries.append(decodeID)
            for r in encoded {
                let rid = "\(id).\(r.name)"
                nodes.append(
                    StageNode(rid) {
                        try VideoRenditionStage(
                            id: rid, rung: r, always: r.height == smallest && r.codec == .h264, asked: ladder.rungs != nil, ladder: folder, schedule: schedule,
                            preset: preset, singleFile: single,
                            makesPoster: r.height == smallest && r.codec == .h264 && !ladder.copy && reuse?.poster != true, timing: timing)
                    })
                edges += [Edge(from: decodeID, to: rid, limits: Self.pictureLink), Edge(from: rid, to: id)]
            }
            if reuse?.tracks.contains(LadderReuse.audio) != true {
                nodes.append(StageNode(audioID) { AudioRenditionStage(id: audioID, ladder: folder, schedule: schedule, singleFile: single) })
                edges += [Edge(from: decodeID, to: audioID, limits: Self.pictureLink), Edge(from: audioID, to: id)]
            }
        }
        if let role, let timing {
            let copyID = "\(id).copy"
            // A copy asked for makes the covers from its source; a passthrough leaves them to the
            // smallest rung, which chooses them from the passing pictures even when left out.
            let poster = reuse?.poster != true && ladder.copy
            let start = timelineStart
            nodes.append(
                StageNode(copyID) {
                    CopyRenditionStage(
                        id: copyID, role: role, ladder: folder, timing: timing, schedule: schedule, singleFile: single, makesPoster: poster,
                        timelineStart: start)
                })
            edges.append(Edge(from: copyID, to: id))
            entries.append(copyID)
        }
        return StageGraph(nodes: nodes, edges: edges, entries: entries)
    }

    /// The decode's settings once `timing` is decided (`DecodeStage`'s `finalSettings`): when the
    /// source's packets stand in for a rung, pictures decoded to the tallest of the other `rungs`,
    /// so those scale from fewer pixels; otherwise `settings` as they are (nil).
    static func decodeSettings(_ settings: TranscodeSettings, timing: LadderTiming, rungs: [LadderRung]) -> @Sendable (StageContext) -> TranscodeSettings? {
        let heights = rungs.map { (name: $0.name, height: $0.height) }
        return { context in
            guard case .keyframes(_, let replacing?) = timing.await(until: { context.stopRequested }),
                let tallest = heights.filter({ $0.name != replacing }).map(\.height).max()
            else { return nil }
            var s = settings
            s.limit = PictureSize(width: 1 << 14, height: tallest)
            return s
        }
    }

    /// The stage of `graph(id:)` whose progress is the ladder's: its decode, or its copy when it
    /// decodes nothing.
    public func progressStage(id: String) -> String { (ladder.rungs ?? LadderRung.standard).isEmpty ? "\(id).copy" : "\(id).decode" }

    /// The whole run as `clipflow hls` makes it: a `files` node with `inputs`, then the ladder's
    /// graph (ids as `graph(id: "hls")`).
    public func graph(of inputs: [String]) -> (nodes: [StageNode], edges: [Edge]) {
        let g = graph(id: "hls")
        return (
            [StageNode("files") { FilesStage(id: "files", paths: inputs, glob: nil) }] + g.nodes,
            g.entries.map { Edge(from: "files", to: $0, limits: HLSStage.kind.queue) } + g.edges
        )
    }
}

/// The ladder's folder while it is written: `work`, a temporary folder next to `output`
/// (`AtomicOutput(folder:)`: locked while this process lives, swept by the next run writing
/// there if this one is killed), renamed to `output` when complete. Shared by the ladder's stages:
/// the ladder stage creates and commits it, any stage may discard it; `lock` guards the
/// temporary (hence `@unchecked Sendable`), the file system orders the rest.
public final class LadderFolder: @unchecked Sendable {
    public let output: URL
    private let lock = NSLock()
    private var temporary: AtomicOutput?
    /// The poster being made from a source file while the renditions are written (`startPoster`).
    private var poster: PosterJob?

    /// An existing folder at `output` is replaced on commit.
    private let replacing: Bool

    init(output: URL, replacing: Bool) {
        self.output = output
        self.replacing = replacing
    }

    /// Refuses an existing `output` unless `replacing` (a ladder goes into a new folder), creates
    /// the temporary (and the folders above it, if missing).
    func create() throws {
        let parent = output.deletingLastPathComponent()
        do { try FileManager.default.createDirectory(at: parent, withIntermediateDirectories: true) } catch {
            throw ClipFlowError.output("cannot create the folder '\(parent.path)' for the ladder", writing: error)
        }
        let made = try AtomicOutput(folder: output, label: "a ladder", replacing: replacing)
        lock.withLock { temporary = made }
    }

    /// The temporary folder the ladder is written into (once `create` has made it).
    var work: URL {
        get throws {
            guard let t = lock.withLock({ temporary?.temporary }) else {
                throw ClipFlowError.failure("internal: the ladder's folder next to '\(output.path)' was not created")
            }
            return t
        }
    }

    func write(_ text: String, to uri: String) throws {
        let url = try work.appendingPathComponent(uri)
        try DurableFiles.write(Array(text.utf8), to: url.path)
    }

    /// Makes everything in the folder durable, then renames it into place.
    func commit() throws {
        try lock.withLock {
            guard let t = temporary else { throw ClipFlowError.failure("internal: no ladder to move into '\(output.path)'") }
            try DurableFiles.sync(folder: t.temporary)
            try t.commit()
        }
    }

    /// Starts making `poster.jpg` from `source` (a file this ladder passes through: the poster is
    /// then the source's own picture) on a helper thread (one of `threads`: the starting stage's),
    /// beside the renditions being written; `awaitPoster` waits for it. At most once.
    func startPoster(from source: String, threads: HelperThreads) throws {
        let work = try work
        let job = PosterJob()
        lock.withLock { poster = job }
        job.done.enter()
        threads.start("poster") {
            defer { job.done.leave() }
            do { try LadderCovers.write(Thumbnailer(path: source, cancel: job.cancel), into: work) } catch { job.failure.withLock { $0 = error } }
        }
    }

    /// Stops the poster `startPoster` began, if any (a cancel of the stage that began it); what it
    /// wrote is left to `discard`. Any thread.
    func cancelPoster() { lock.withLock { poster }?.cancel.cancel() }

    /// Waits for the poster `startPoster` began: true once it is written, false when none was
    /// begun; throws its failure.
    func awaitPoster() throws -> Bool {
        guard let job = lock.withLock({ poster }) else { return false }
        job.done.wait()
        if let e = job.failure.withLock({ $0 }) { throw e }
        return true
    }

    private final class PosterJob: Sendable {
        let done = DispatchGroup()
        let cancel = CancellationFlag()
        let failure = Mutex<Error?>(nil)
    }

    /// Removes the unfinished ladder (any stage may, any number of times; nothing once committed):
    /// each stage that ends unfinished calls it, so the last call comes after every rendition's
    /// last write and removes what an earlier one could not (a segment written while it ran). A
    /// poster being made is stopped first, so nothing is written into the folder as it goes.
    func discard() {
        if let job = lock.withLock({ poster }) {
            job.cancel.cancel()
            job.done.wait()
        }
        lock.withLock { temporary?.discard() }
    }
}

/// The picture a ladder's smallest rendition chose for the covers as the decoded pictures passed
/// (`PassingCoverChoice`), handed to the ladder stage with the rendition's description: upright,
/// at the decode's size; its bytes shared with the decode's picture.
struct LadderPoster: ItemFact {
    let picture: VideoFrame
    let time: Double
}

/// The covers a ladder writes: `poster.jpg` at the video's display size, and the same picture
/// fitted within each of `sizes` pixels (its long side) as `poster-N.jpg`, so a screen loads no
/// more than it shows.
enum LadderCovers {
    static let full = "poster.jpg"
    static let sizes = [640, 1280]
    static func name(_ size: Int) -> String { "poster-\(size).jpg" }
    static var all: [String] { [full] + sizes.map(name) }

    /// The covers of `poster` (upright already).
    static func write(_ poster: LadderPoster, into work: URL) throws {
        _ = try PicturePacker.withFrame(poster.picture, in: try Frame(), what: "the poster") { picture in
            try Thumbnailer.writeCovers(of: picture, turned: 0, to: work.appendingPathComponent(full), limit: nil, also: smaller(in: work), replacing: false)
        }
    }

    static func write(_ thumbnailer: Thumbnailer, into work: URL) throws {
        _ = try thumbnailer.write(to: work.appendingPathComponent(full), also: smaller(in: work))
    }

    /// The sized covers' files in `work` and the size each is fitted within.
    private static func smaller(in work: URL) -> [(URL, ThumbnailSize)] {
        sizes.map { (work.appendingPathComponent(name($0)), ThumbnailSize(maxWidth: $0, maxHeight: $0)) }
    }
}
