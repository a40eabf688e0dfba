import ClipFlowCore
import ClipFlowMedia
import Foundation
import Synchronization

/// The worker side of processing: one step of a job in a process of its own (`clipflow
/// serve-worker PIPELINE`, which `clipflow serve` starts and supervises through `WorkerProcess`),
/// so that whatever decoding a hostile upload does (crash, abort, exhaust memory) ends that
/// process only.
///
/// Protocol with the server: the request is a pipeline file (`StepPipeline`), which `clipflow
/// run` validates and runs the same; the answer is the event lines `clipflow run --events json`
/// writes (docs/events.md) on stdout, through `events`: `progress` of the stage the ladder
/// declares (`HLSLadder.progressStage`), `failed` with the failure's `kind`, and the `inspect`
/// stage's `result` (`InspectSummary`, stage `probeStage`), which the server reads with one
/// decoder (`WorkerEventLine`). The exit status says coarsely how it ended (`WorkerExit`), with
/// the reason on stderr. The worker ends by itself when its stdin reaches end of file: the server
/// that started it is gone.
public enum ServeWorker {
    /// The ids of a step's stages (`StepPipeline`): the upload (`files`), its probe (`inspect`)
    /// and its ladder (`hls`).
    public static let uploadStage = "upload"
    public static let probeStage = "probe"
    public static let ladderStage = "ladder"
    public static let mergeStage = "merge"

    /// Runs a graph to its end, its events to the worker's `events`: the caller's front door
    /// (`clipflow serve-worker` passes the one every command runs through; a signal cancels the
    /// graph).
    public typealias GraphRunning = @Sendable (_ nodes: [StageNode], _ edges: [Edge]) throws -> GraphOutcome

    /// Runs a step's pipeline (`StepPipeline`: the file the server wrote, which `clipflow run`
    /// runs the same), its graph made by `graph` (the pipeline validated as `clipflow run`
    /// validates it) and run through `runGraph`; returns the process's exit status. `memoryLimit`
    /// bytes (0: none) bound the process's data (RLIMIT_DATA: heap and private mappings), set
    /// before any work; a `nice` above 0 puts every thread of the worker at that CPU priority
    /// (`keepNice`). A pipeline refused before it runs fails as the stage `pipeline`; a stage's
    /// failure is reported in its words (its stage id is the server's, not the viewer's).
    public static func run(
        pipeline graph: () throws -> (nodes: [StageNode], edges: [Edge]), memoryLimit: Int64, nice: Int32 = 0, events: any EventSink,
        runGraph: GraphRunning
    ) -> Int32 {
        if let refused = start(memoryLimit: memoryLimit, nice: nice) { return fail(refused, stage: "pipeline", events: events) }
        let made: (nodes: [StageNode], edges: [Edge])
        do { made = try graph() } catch { return fail(error as? ClipFlowError ?? .failure("\(error)"), stage: "pipeline", events: events) }
        do {
            switch try runGraph(made.nodes, made.edges) {
            case .completed: return WorkerExit.finished.rawValue
            case .interrupted: return fail(.interrupted, stage: nil, events: events)
            case .failed(_, let e): return fail(e, stage: nil, events: events)
            }
        } catch {
            return fail(error as? ClipFlowError ?? .failure("\(error)"), stage: "pipeline", events: events)
        }
    }

    /// What every worker does first: it ends when the server goes, takes its CPU priority and its
    /// memory bound; returns why it cannot, or nil.
    private static func start(memoryLimit: Int64, nice: Int32) -> ClipFlowError? {
        endWhenServerGoes()
        if nice > 0 { keepNice(nice) }
        if memoryLimit > 0 {
            var limit = rlimit(rlim_cur: rlim_t(memoryLimit), rlim_max: rlim_t(memoryLimit))
            guard setrlimit(__rlimit_resource_t(RLIMIT_DATA.rawValue), &limit) == 0 else {
                return .failure("cannot limit the worker's memory: \(String(cString: strerror(errno)))")
            }
        }
        return nil
    }

    /// Ends with `error`: its `failed` event (unless a graph's stage emitted it: `stage` nil), its
    /// message on stderr, and the exit status of its kind.
    private static func fail(_ error: ClipFlowError, stage: String?, events: any EventSink) -> Int32 {
        if let stage, error.kind != .interrupted {
            events.emit(PipelineEvent(stage: stage, kind: .failed(error.message, kind: error.failureKind), time: SystemClock().now()))
        }
        let status: WorkerExit = error.kind == .interrupted ? .stopped : error.isDiskFull ? .diskFull : .failed
        let message = error.kind == .interrupted ? "stopped before the work was done" : error.message
        FileHandle.standardError.write(Data((message + "\n").utf8))
        return status.rawValue
    }

    /// The CPU priority of a worker whose video plays already (a ladder step): it gives way to
    /// the server and to the steps that make videos playable. Its threads also run under Linux's
    /// idle scheduling policy (`SCHED_IDLE`): they take a core only when nothing else wants it,
    /// and give it up the moment something does, so an upload, a copy or a viewer's request is
    /// never kept waiting by a ladder (which uses every idle moment of the machine instead).
    public static let backgroundNice: Int32 = 10

    /// Linux's `SCHED_IDLE` (sched.h; not exported to Swift).
    static let idlePolicy: Int32 = 5

    /// Keeps every thread of this process at nice `value` or lower priority, under the idle
    /// scheduling policy, now and every 0.25 s. Linux keeps the nice value and the policy per
    /// thread, and libdispatch gives each worker thread it starts the nice value of its queue's
    /// QoS, so a value set once (or inherited from the parent) would not hold for them; a thread
    /// started in between runs at most 0.25 s at its own.
    private static func keepNice(_ value: Int32) {
        let which = __priority_which_t(PRIO_PROCESS.rawValue)
        @Sendable func apply() {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
                guard let tid = id_t(name) else { continue }
                errno = 0
                let current = getpriority(which, tid)
                if errno == 0, current < value { _ = setpriority(which, tid, value) }
                if sched_getscheduler(pid_t(tid)) != idlePolicy {
                    var none = sched_param(sched_priority: 0)
                    _ = sched_setscheduler(pid_t(tid), idlePolicy, &none)
                }
            }
        }
        apply()
        _ = RepeatingTimer(every: 0.25, label: "clipflow.worker.nice") {
            apply()
            return true
        }
    }

    /// A spare's wait for its step (`clipflow serve-worker --spare`): the pipeline's path, the
    /// first line on stdin; nil at its end (the server is gone, or needs no more spares). While it
    /// waits, the process is named `clipflow-spare` (`ps`, `top`, /proc/PID/comm).
    public static func awaitStep() -> String? {
        let comm = URL(fileURLWithPath: "/proc/self/comm")
        let name = (try? Data(contentsOf: comm)) ?? Data("clipflow\n".utf8)
        try? Data(spareName.utf8).write(to: comm)
        defer { try? name.write(to: comm) }
        var line: [UInt8] = []
        var byte: UInt8 = 0
        while true {
            let n = read(0, &byte, 1)
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return nil }
            if byte == UInt8(ascii: "\n") { break }
            line.append(byte)
        }
        let path = String(decoding: line, as: UTF8.self)
        return path.isEmpty ? nil : path
    }

    /// How a spare waiting for its step is named.
    public static let spareName = "clipflow-spare"

    /// Ends the process as soon as its stdin reaches end of file (the server closed its end, or
    /// died), so a worker never outlives the server that supervises it.
    private static func endWhenServerGoes() {
        HelperThreads().start("server watch") {
            var byte: UInt8 = 0
            while true {
                let n = read(0, &byte, 1)
                if n == 0 || (n < 0 && errno != EINTR) { _exit(WorkerExit.orphaned.rawValue) }
            }
        }
    }
}

/// How a worker process ended, as its exit status.
public enum WorkerExit: Int32, Sendable {
    case finished = 0
    /// The input cannot be processed (the reason is on stderr); trying again would not help.
    case failed = 1
    /// The server went away (stdin closed) before the work was done.
    case orphaned = 3
    /// No space was left on the disk (EX_TEMPFAIL): worth trying again once there is.
    case diskFull = 75
    /// A signal (SIGTERM from the server that stops the job) cancelled the work; what it was
    /// writing is removed.
    case stopped = 130
}

extension InspectSummary {
    /// The probe as a job's row keeps it (`JobRow.probe`), made by the job's first step only.
    var json: String { String(decoding: (try? JSONEncoder().encode(self)) ?? Data("{}".utf8), as: UTF8.self) }

    /// The probe a job's row kept, or nil when `json` is not one.
    init?(json: String) {
        guard let p = try? JSONDecoder().decode(Self.self, from: Data(json.utf8)) else { return nil }
        self = p
    }
}

/// One line of a worker's stdout: an event as `--events json` writes it (docs/events.md), read
/// with one decoder. What the server takes from it: `progress` (`completed` of `total`), a
/// `failed` event's `message` and `kind`, the `inspect` stage's `result` (`probe`, stage
/// `ServeWorker.probeStage`).
struct WorkerEventLine: Decodable, Sendable, Equatable {
    var stage: String
    var event: String
    var completed: Double?
    var total: Double?
    var message: String?
    /// A `failed` event's kind (nil: none given, or one this server does not know).
    var kind: FailureKind?
    /// The `inspect` stage's `result`.
    var probe: InspectSummary?

    private enum CodingKeys: String, CodingKey { case stage, event, completed, total, message, kind }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        stage = try c.decode(String.self, forKey: .stage)
        event = try c.decode(String.self, forKey: .event)
        completed = try c.decodeIfPresent(Double.self, forKey: .completed)
        total = try c.decodeIfPresent(Double.self, forKey: .total)
        message = try c.decodeIfPresent(String.self, forKey: .message)
        kind = (try? c.decodeIfPresent(String.self, forKey: .kind)).flatMap { $0.flatMap(FailureKind.init(rawValue:)) }
        if event == "result", stage == ServeWorker.probeStage { probe = try InspectSummary(from: decoder) }
    }

    /// The line `text`, or nil when it is not an event.
    static func read(_ text: String) -> WorkerEventLine? { try? JSONDecoder().decode(Self.self, from: Data(text.utf8)) }

    /// A `progress` event's fraction done (0 to 1), nil for any other event or an unknown total.
    var fraction: Double? {
        guard event == "progress", let completed, let total, total > 0 else { return nil }
        return min(1, max(0, completed / total))
    }
}

/// A job's step as a pipeline: the JSON file `clipflow serve-worker PIPELINE` runs, in the format
/// `clipflow run` validates and runs (docs/pipelines.md), so any step can be run again by hand
/// (`clipflow run PIPELINE`): the upload (`files`, stage `ServeWorker.uploadStage`), checked first
/// by an `inspect` stage (`ServeWorker.probeStage`) when the job has no probe yet, into an `hls`
/// ladder (stage `ServeWorker.ladderStage`, profile `feed`), with the renditions it takes from a
/// complete ladder (`reuse`, `reuse-renditions`), and without a storyboard when a later step makes
/// one.
public enum StepPipeline {
    /// What the `inspect` stage checks: the server's limits, and (a `playable` step that copies)
    /// that the upload can be passed through to every browser.
    public struct Inspection: Sendable, Equatable {
        public var limits: MediaLimits
        public var copyable: Bool

        public init(limits: MediaLimits, copyable: Bool) {
            self.limits = limits
            self.copyable = copyable
        }
    }

    /// The pipeline's text.
    public static func text(
        input: String, output: String, ladder choice: LadderChoice, inspect: Inspection? = nil, reuse: (folder: String, tracks: [String])? = nil,
        storyboard: Bool = true, timelineStart: Double? = nil, codecs: Set<VideoCodec> = [.h264]
    ) -> String {
        var stages = [Stage(id: ServeWorker.uploadStage, kind: FilesStage.kind.name, paths: [input])]
        if let inspect {
            let limits = inspect.limits
            stages.append(
                Stage(
                    id: ServeWorker.probeStage, kind: InspectStage.kind.name, inputs: [ServeWorker.uploadStage], maxPicture: limits.maxPicture.description,
                    maxDuration: limits.maxDuration, maxFrameRate: limits.maxFrameRate, copyable: inspect.copyable))
        }
        stages.append(
            Stage(
                id: ServeWorker.ladderStage, kind: HLSStage.kind.name, inputs: [stages[stages.count - 1].id], output: output, ladder: ladderField(choice),
                profile: "feed", reuse: reuse?.folder, reuseRenditions: reuse?.tracks.joined(separator: ","), storyboard: storyboard ? nil : false,
                timelineStart: timelineStart,
                codecs: codecs == [.h264] ? nil : VideoCodec.allCases.filter(codecs.contains).map(\.rawValue).joined(separator: ",")))
        return serialized(stages)
    }

    /// A recording's fragments (`inputs`, in order) merged losslessly into the MP4 `output`
    /// (`merge`, conforming a fragment that differs from the others).
    public static func mergeText(inputs: [String], output: String) -> String {
        serialized([
            Stage(id: ServeWorker.uploadStage, kind: FilesStage.kind.name, paths: inputs),
            Stage(id: ServeWorker.mergeStage, kind: MergeStage.kind.name, inputs: [ServeWorker.uploadStage], output: output, conform: true)
        ])
    }

    private static func serialized(_ stages: [Stage]) -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(File(version: 1, stages: stages))) ?? Data(), as: UTF8.self) + "\n"
    }

    /// The pipeline file: its version and stages (fields left out when nil).
    private struct File: Encodable {
        var version: Int
        var stages: [Stage]
    }

    private struct Stage: Encodable {
        var id: String
        var kind: String
        var paths: [String]? = nil
        var inputs: [String]? = nil
        var maxPicture: String? = nil
        var maxDuration: Double? = nil
        var maxFrameRate: Double? = nil
        var copyable: Bool? = nil
        var output: String? = nil
        var ladder: String? = nil
        var profile: String? = nil
        var reuse: String? = nil
        var reuseRenditions: String? = nil
        var storyboard: Bool? = nil
        var timelineStart: Double? = nil
        var conform: Bool? = nil
        var codecs: String? = nil

        enum CodingKeys: String, CodingKey {
            case id, kind, paths, inputs, copyable, output, ladder, profile, reuse, storyboard, conform, codecs
            case timelineStart = "timeline-start"
            case maxPicture = "max-picture"
            case maxDuration = "max-duration"
            case maxFrameRate = "max-frame-rate"
            case reuseRenditions = "reuse-renditions"
        }
    }

    /// The stage whose progress is the step's (`HLSLadder.progressStage`): `ladder.decode`, or
    /// `ladder.copy` for a remux.
    static func progressStage(_ choice: LadderChoice) -> String {
        HLSLadder(output: "", ladder: choice, schedule: .feed).progressStage(id: ServeWorker.ladderStage)
    }

    /// The `hls` stage's `ladder` for `choice`: its rungs' heights (`720,360`), with `copy`.
    static func ladderField(_ choice: LadderChoice) -> String {
        ((choice.copy ? ["copy"] : []) + (choice.rungs.map { $0.map { String($0.height) } } ?? ["auto"])).joined(separator: ",")
    }
}
