import ArgumentParser
import ClipFlowCore
import Dispatch
import Foundation
import Synchronization
#if canImport(Glibc)
    import Glibc
#endif

/// Flags shared by commands that do long work.
struct OutputFlags: ParsableArguments {
    @Flag(name: .shortAndLong, help: "Print no progress (errors are still printed).")
    var quiet = false

    @Flag(name: .shortAndLong, help: "Also print each stage's outcome and its queue statistics.")
    var verbose = false

    @Option(help: "Progress format: text (stderr; a status line on a terminal) or json (one event per line on stdout).")
    var events: EventFormat = .text
}

/// `-y` / `--overwrite`, on every command that writes files: the one way to let an existing
/// output be replaced (as the ffmpeg CLI's `-y`). Without it an existing output is refused before
/// any work, naming it.
struct OverwriteFlag: ParsableArguments {
    @Flag(name: [.customShort("y"), .customLong("overwrite")], help: "Replace outputs that exist (without it, they are refused before any work).")
    var overwrite = false
}

extension OutputFlags {
    /// The renderer these flags ask for.
    func renderer(namesOutputs: Bool = false, tellsDrops: Bool = false) -> EventRenderer {
        events == .json
            ? JSONEventWriter() : TextRenderer(quiet: quiet, verbose: verbose, showsOutputs: !namesOutputs, showsDrops: !tellsDrops)
    }
}

/// The one way a long command runs (`merge`, `record`, `upload`, `run`): the command builds the
/// graph's nodes and edges; the front door runs them through `GraphRunner` with the one signal
/// handler and the one renderer, keeps what the stages reported for the command's summary, and
/// maps the outcome to an exit status (`ExitStatus`).
///
/// ```
///   command ──nodes, edges──▶ FrontDoor.run ──▶ GraphRunner ──events──▶ EventLog ──▶ renderer (text | json)
///                                  ▲
///                      SIGINT/SIGTERM (Signals)
/// ```
final class FrontDoor: Sendable {
    let renderer: EventRenderer
    let log = EventLog()
    /// A person reads the items' events as they happen (text, not quiet): an item's failure has
    /// been told, and the command's closing error need only sum up.
    let showsItems: Bool

    /// `namesOutputs`: the command's own summary names what it wrote, so the stages' "wrote
    /// PATH" lines are left to `--verbose`. `tellsDrops`: the summary tells every item dropped
    /// and why, so the stages' drop lines are left out (and a queue's drops to `--verbose`).
    init(_ flags: OutputFlags, namesOutputs: Bool = false, tellsDrops: Bool = false) {
        renderer = flags.renderer(namesOutputs: namesOutputs, tellsDrops: tellsDrops)
        showsItems = flags.events == .text && !flags.quiet
    }

    /// A front door whose events go to `renderer` alone (a worker's protocol, not a person).
    init(renderer: EventRenderer) {
        self.renderer = renderer
        showsItems = false
    }

    /// Runs the graph to its end. First SIGINT/SIGTERM: graceful stop with `grace` seconds to
    /// finish (0: cancel at once); a second, or the deadline: cancel (see `Signals`). `started` is called with the
    /// runner once it exists (an interactive command reads from it).
    func run(nodes: [StageNode], edges: [Edge], grace: Double, started: (GraphRunner) -> Void = { _ in }) throws -> (GraphOutcome, GraphRunner) {
        let runner = try GraphRunner(nodes: nodes, edges: edges, sink: Tee(log: log, renderer: renderer))
        Signals.install(runner: runner, grace: grace)
        started(runner)
        let outcome = runner.run()
        renderer.end()
        return (outcome, runner)
    }

    /// A line of the command's own on stderr (text mode, not quiet).
    func say(_ line: String) { renderer.say(line) }
}

/// Passes each event to the log, then to the renderer.
private struct Tee: EventSink {
    let log: EventLog
    let renderer: EventRenderer
    func emit(_ event: PipelineEvent) {
        log.emit(event)
        renderer.emit(event)
    }
}

/// What the stages reported that a command's summary or status line needs: each stage's
/// `result` fields and latest drop count of each cause. Thread-safe.
final class EventLog: EventSink, Sendable {
    private struct State {
        var results: [String: [EventField]] = [:]
        /// By stage, then by cause.
        var dropped: [String: [String: Int]] = [:]
    }
    private let state = Mutex(State())

    func emit(_ e: PipelineEvent) {
        state.withLock { s in
            switch e.kind {
            case .result(let r): s.results[e.stage, default: []] += r
            case .dropped(let n, let cause): s.dropped[e.stage, default: [:]][cause] = n
            default: break
            }
        }
    }

    /// What `stage` reported in its `result` events, as `type` (nil when it reported none).
    func result<R: StageResult>(_ type: R.Type, of stage: String) -> R? { state.withLock { $0.results[stage] }.map { R(fields: $0) } }

    /// Items dropped so far as the stage last reported, for every cause (or for `cause` alone): a
    /// source what it could not deliver in time, any other stage what its input queues shed.
    func dropped(_ stage: String, cause: String? = nil) -> Int {
        state.withLock { s in
            let counts = s.dropped[stage] ?? [:]
            return cause.map { counts[$0] ?? 0 } ?? counts.values.reduce(0, +)
        }
    }
}

/// SIGINT/SIGTERM for every long command. First signal: `runner.stop(deadline: grace)` (sources
/// stop, end of stream flows, outputs are finalised or removed, uploads pause). Second signal:
/// `runner.cancel()`; if the stages still have not returned 5 s later, temporary files are
/// removed, the terminal's mode is given back and the process exits 130.
enum Signals {
    nonisolated(unsafe) private static var sources: [DispatchSourceSignal] = []

    static func install(runner: GraphRunner, grace: Double) {
        install(stop: { runner.stop(deadline: grace) }, cancel: { runner.cancel() })
    }

    /// The same for work that is not one graph (a batch of them): `stop` on the first signal,
    /// `cancel` on the second, then the forced exit.
    static func install(stop: @escaping @Sendable () -> Void, cancel: @escaping @Sendable () -> Void) {
        let count = SignalCount()
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let src = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            src.setEventHandler {
                if count.next() == 1 {
                    stop()
                } else {
                    cancel()
                    DispatchQueue.global().asyncAfter(deadline: .now() + 5) {
                        TemporaryFiles.shared.removeAll()
                        TerminalKeys.restore()
                        _exit(ExitStatus.interrupted.rawValue)
                    }
                }
            }
            src.resume()
            sources.append(src)
        }
    }
}

/// Counts the signals received (the handler may run on any thread).
final class SignalCount: Sendable {
    private let n = Mutex(0)
    func next() -> Int {
        n.withLock {
            $0 += 1
            return $0
        }
    }
}
