import ClipFlowCore
import ClipFlowMedia
import Foundation
import Synchronization

/// The worker side of processing: one step of a job in a process of its own (`clipflow
/// serve-worker`, which `clipflow serve` starts and supervises through `WorkerProcess`), so that
/// whatever decoding a hostile upload does (crash, abort, exhaust memory) ends that process only.
///
/// Protocol with the server: the request is the command line; the answer is JSON lines on
/// stdout (`{"progress": F}` while a ladder is made, the probe's `WorkerProbe` for a probe); the
/// exit status says how it ended (`WorkerExit`), with the reason on stderr. The worker ends by
/// itself when its stdin reaches end of file: the server that started it is gone.
public enum ServeWorker {
    public enum Step: String, Sendable, CaseIterable {
        /// Reads the input's container and stream headers: a `WorkerProbe` line.
        case probe
        /// Writes the input's ladder (`rungs`) into a new folder `output`.
        case ladder
    }

    /// Runs a graph to its end, its events to the sink: the caller's front door (`clipflow
    /// serve-worker` passes the one every command runs through; a signal cancels the graph).
    public typealias GraphRunning = @Sendable (_ nodes: [StageNode], _ edges: [Edge], _ events: any EventSink) throws -> GraphOutcome

    /// Runs `step`, its graphs through `runGraph`, and returns the process's exit status. `memoryLimit` bytes (0: none) bounds the
    /// process's data (RLIMIT_DATA: heap and private mappings), set before any work. `reuse`: a
    /// ladder takes these renditions (comma-separated names, `poster` for the poster) from the
    /// complete ladder in that folder (`LadderReuse`).
    ///
    /// A `nice` above 0 puts every thread of the worker at that CPU priority (`keepNice`).
    ///
    /// A probe with `output` and `copyWithin` goes on, when the upload can be copied
    /// (`PlayableFirst`) and is within those limits, to write its copy there (nothing decoded: no
    /// second process to start, no second open), then says `{"copied": true}`, or
    /// `{"copied": false}` when the copy refused it (the probe stands).
    public static func run(
        step: Step, input: String, output: String?, rungs: String?, reuse: (folder: String, tracks: String)? = nil,
        copyWithin: ProcessingLimits? = nil, memoryLimit: Int64, nice: Int32 = 0, runGraph: GraphRunning
    ) -> Int32 {
        endWhenServerGoes()
        if nice > 0 { keepNice(nice) }
        if memoryLimit > 0 {
            var limit = rlimit(rlim_cur: rlim_t(memoryLimit), rlim_max: rlim_t(memoryLimit))
            guard setrlimit(__rlimit_resource_t(RLIMIT_DATA.rawValue), &limit) == 0 else {
                return fail(.failed, "cannot limit the worker's memory: \(String(cString: strerror(errno)))")
            }
        }
        do {
            switch step {
            case .probe:
                let info = try Transcoder.probe(input)
                let probe = WorkerProbe(
                    duration: info.duration, width: info.video.displaySize.width, height: info.video.displaySize.height,
                    frameRate: info.video.frameRate, copyRefusal: try PlayableFirst.copyRefusal(info, spacing: KeyframeSpacing.measure(input)))
                try emit(probe)
                if let output, let limits = copyWithin, probe.copyRefusal == nil, limits.refusal(probe) == nil {
                    try copy(input, into: output, runGraph: runGraph)
                }
            case .ladder:
                guard let output, let rungs, let choice = WorkerLadder.choice(rungs) else {
                    return fail(.failed, "ladder: expected --output and --rungs (rendition names such as 360p,720p, or copy)")
                }
                let reused = reuse.map { LadderReuse(folder: URL(fileURLWithPath: $0.folder), named: $0.tracks.split(separator: ",").map(String.init)) }
                try write(HLSLadder(output: output, ladder: choice, schedule: .feed, reuse: reused), of: input, runGraph: runGraph)
            }
            return WorkerExit.finished.rawValue
        } catch let e as ClipFlowError where e.kind == .interrupted {
            return fail(.stopped, "stopped before the work was done")
        } catch {
            let message = (error as? ClipFlowError)?.message ?? "\(error)"
            return fail(diskFull.contains { message.contains($0) } ? .diskFull : .failed, message)
        }
    }

    /// The copy of a probe that goes on (`run`): a refusal of the copy's is an answer, not a failure.
    private static func copy(_ input: String, into output: String, runGraph: GraphRunning) throws {
        do {
            try write(HLSLadder(output: output, ladder: LadderChoice(rungs: [], copy: true), schedule: .feed), of: input, runGraph: runGraph)
            try emit(["copied": true])
        } catch let e as ClipFlowError where e.kind == .badInput {
            try emit(["copied": false])
        }
    }

    /// Writes `ladder` of `input` through `runGraph`, progress as `ProgressLines`; an
    /// interrupted run throws `ClipFlowError.interrupted`, a failed one the stage's error.
    private static func write(_ ladder: HLSLadder, of input: String, runGraph: GraphRunning) throws {
        let graph = ladder.graph(of: [input])
        switch try runGraph(graph.nodes, graph.edges, ProgressLines()) {
        case .completed: return
        case .interrupted: throw ClipFlowError.interrupted
        case .failed(let stage, let e): throw ClipFlowError(e.kind, "\(stage): \(e.message)")
        }
    }

    /// How a full disk reads in an error's message: the C library's words (FFmpeg and POSIX
    /// calls) and Foundation's (files written through FileManager and Data).
    private static let diskFull = [
        String(cString: strerror(ENOSPC)), String(cString: strerror(EDQUOT)), CocoaError(.fileWriteOutOfSpace).localizedDescription
    ]

    private static func fail(_ status: WorkerExit, _ message: String) -> Int32 {
        FileHandle.standardError.write(Data((message + "\n").utf8))
        return status.rawValue
    }

    private static func emit<T: Encodable>(_ value: T) throws {
        var line = try JSONEncoder().encode(value)
        line.append(UInt8(ascii: "\n"))
        FileHandle.standardOutput.write(line)
    }

    /// The CPU priority of a worker whose video plays already (a ladder step): it gives way to
    /// the server and to the steps that make videos playable.
    public static let backgroundNice: Int32 = 10

    /// Keeps every thread of this process at nice `value` or lower priority, now and every 0.25 s.
    /// Linux keeps the nice value per thread, and libdispatch gives each worker thread it starts
    /// the nice value of its queue's QoS, so a value set once (or inherited from the parent)
    /// would not hold for them; a thread started in between runs at most 0.25 s at its own.
    private static func keepNice(_ value: Int32) {
        let which = __priority_which_t(PRIO_PROCESS.rawValue)
        @Sendable func apply() {
            for name in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
                guard let tid = id_t(name) else { continue }
                errno = 0
                let current = getpriority(which, tid)
                if errno == 0, current < value { _ = setpriority(which, tid, value) }
            }
        }
        apply()
        _ = RepeatingTimer(every: 0.25, label: "clipflow.worker.nice") {
            apply()
            return true
        }
    }

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

/// What a probe tells the server: enough to check the job's limits before anything is decoded.
struct WorkerProbe: Codable, Sendable, Equatable {
    /// Seconds (0 when the container does not say).
    var duration: Double
    /// Size as displayed.
    var width: Int
    var height: Int
    var frameRate: Double?
    /// Why the upload cannot be published first as a copy of itself (nil: it can; `PlayableFirst`).
    var copyRefusal: String?
}

/// A ladder's rungs as the server names them on the worker's command line: names of
/// `LadderRung.standard` ("360p,720p"), or "copy" for a remux.
enum WorkerLadder {
    static func argument(_ choice: LadderChoice) -> String {
        choice.copy ? "copy" : (choice.rungs ?? []).map(\.name).joined(separator: ",")
    }

    static func choice(_ argument: String) -> LadderChoice? {
        if argument == "copy" { return LadderChoice(rungs: [], copy: true) }
        let names = argument.split(separator: ",").map(String.init)
        let rungs = names.compactMap { name in LadderRung.standard.first { $0.name == name } }
        return rungs.isEmpty || rungs.count != names.count ? nil : LadderChoice(rungs: rungs)
    }
}

/// Progress of a ladder (its decode, or its copy for a remux) as `{"progress": F}` lines on
/// stdout: at each new percent, and at least every second while work goes on (the server takes a
/// silent worker to hang). Thread-safe.
private final class ProgressLines: EventSink {
    private let last = Mutex((percent: -1, time: Date.distantPast))

    func emit(_ event: PipelineEvent) {
        guard case .progress(let done, let total, _, _) = event.kind, total > 0,
            event.stage.hasSuffix(".decode") || event.stage.hasSuffix(".copy")
        else { return }
        let percent = Int(min(1, Double(done) / Double(total)) * 100)
        let due = last.withLock { l -> Bool in
            guard percent != l.percent || Date().timeIntervalSince(l.time) >= 1 else { return false }
            l = (percent, Date())
            return true
        }
        if due { FileHandle.standardOutput.write(Data("{\"progress\":\(Double(percent) / 100)}\n".utf8)) }
    }
}
