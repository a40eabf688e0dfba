import Foundation
import Synchronization

/// A clock stages read time from. The runner uses `SystemClock`; harnesses use `ManualClock` so
/// paced sources run deterministically.
public protocol Clock: Sendable {
    /// Seconds since an arbitrary origin.
    func now() -> Double
    /// Waits until `now() >= deadline` or `stop()` returns true (checked at least every 10 ms).
    func sleep(until deadline: Double, stop: () -> Bool)
}

/// CLOCK_MONOTONIC: the clock V4L2 buffer timestamps and ALSA's monotonic timestamps are on.
public struct SystemClock: Clock {
    public init() {}
    public func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }
    public func sleep(until deadline: Double, stop: () -> Bool) {
        while !stop() {
            let left = deadline - now()
            if left <= 0 { return }
            usleep(UInt32(min(left, 0.01) * 1e6))
        }
    }
}

/// A clock that moves only when told: `sleep` returns at once and advances time to the deadline.
/// Thread-safe (the time is behind a mutex).
public final class ManualClock: Clock {
    private let t: Mutex<Double>
    public init(start: Double = 0) { t = Mutex(start) }
    public func now() -> Double { t.withLock { $0 } }
    public func advance(by s: Double) { t.withLock { $0 += s } }
    public func sleep(until deadline: Double, stop: () -> Bool) {
        t.withLock { if deadline > $0 { $0 = deadline } }
    }
}

/// What a stage sees while it runs: its outputs, its events, the clock, and whether the graph
/// is stopping. One context per stage. `push` is used only from that stage's queue (`outputOpen`
/// belongs to it: the confinement the compiler cannot see, hence `@unchecked`; debug builds check
/// it, `checkConfined`); `emit`, `requestStop`/`requestCancel` come from any thread and touch only
/// the sink, the atomic flags and the handlers under their mutex.
public final class StageContext: @unchecked Sendable {
    public let stageID: String
    public let clock: Clock
    let outputs: [Link]
    /// The stage's serial queue, where the runner calls it (nil: a harness calls it directly).
    let queue: DispatchQueue?
    let sink: EventSink
    private let stopFlag: Atomic<Bool>
    let cancel: CancellationFlag
    /// Per-output results: an output whose consumer ended is skipped from then on.
    private var outputOpen: [Bool]
    private let handlers = Mutex(Handlers())
    /// Threads the stage's work starts beside its queue; the runner waits for them before the
    /// stage's `finish`.
    public let helpers: HelperThreads

    /// Work registered by the stage for a stop or a cancel, and whether each has happened (a
    /// handler registered after the fact runs at once).
    private struct Handlers {
        var stopped = false
        var cancelled = false
        var onStop: [@Sendable () -> Void] = []
        var onCancel: [@Sendable () -> Void] = []
    }

    init(stageID: String, clock: Clock, outputs: [Link], sink: EventSink, cancel: CancellationFlag, queue: DispatchQueue? = nil) {
        self.stageID = stageID
        self.clock = clock
        self.outputs = outputs
        self.queue = queue
        self.sink = sink
        self.cancel = cancel
        stopFlag = Atomic(false)
        outputOpen = Array(repeating: true, count: outputs.count)
        helpers = HelperThreads { name, running in sink.emit(PipelineEvent(stage: stageID, kind: .helper(name: name, running: running), time: clock.now())) }
    }

    /// Sources: stop producing when true (SIGINT, or the graph failed). End of stream still flows.
    public var stopRequested: Bool { stopFlag.load(ordering: .acquiring) || cancel.isCancelled }

    /// Runs `body` when the graph stops gracefully (first SIGINT, or another stage failed), once,
    /// on the thread that stops it, while the stage may be busy on its own queue: `body` may touch
    /// only thread-safe state (a flag, a queue's own controls). Registered after the stop: runs now.
    public func onStop(_ body: @escaping @Sendable () -> Void) {
        let now = handlers.withLock { h -> Bool in
            if !h.stopped { h.onStop.append(body) }
            return h.stopped
        }
        if now { body() }
    }

    /// Runs `body` when the stage must abandon its work (second signal, deadline, or another
    /// stage failed), once, from any thread, as `onStop` does. Use it to interrupt blocking work
    /// promptly; what is in progress is discarded.
    public func onCancel(_ body: @escaping @Sendable () -> Void) {
        let now = handlers.withLock { h -> Bool in
            if !h.cancelled { h.onCancel.append(body) }
            return h.cancelled
        }
        if now { body() }
    }

    /// Sets `stopRequested` and runs the stop handlers (once). Any thread.
    func requestStop() {
        stopFlag.store(true, ordering: .releasing)
        let run = handlers.withLock { h -> [@Sendable () -> Void] in
            if h.stopped { return [] }
            h.stopped = true
            defer { h.onStop = [] }
            return h.onStop
        }
        for body in run { body() }
    }

    /// Stops (as `requestStop`) and runs the cancel handlers (once). Any thread.
    func requestCancel() {
        requestStop()
        let run = handlers.withLock { h -> [@Sendable () -> Void] in
            if h.cancelled { return [] }
            h.cancelled = true
            defer { h.onCancel = [] }
            return h.onCancel
        }
        for body in run { body() }
    }
    /// Hard cancellation (second signal, deadline): abandon work, leave no partial output.
    public var cancellation: CancellationFlag { cancel }

    /// In debug builds, stops the process when called off the stage's queue: for the work a stage
    /// says belongs to its queue (its state, `push`), where a helper thread touching it would race.
    public func checkConfined() {
        #if DEBUG
            if let queue { dispatchPrecondition(condition: .onQueue(queue)) }
        #endif
    }

    /// Sends an item to every output (fan-out). Returns `.ok` while at least one consumer still
    /// wants data; `.flushing` when stopping; `.endOfStream` when every consumer has ended; the
    /// first error otherwise. A stage with no outputs gets `.ok`.
    @discardableResult
    public func push(_ item: Item) -> FlowResult {
        checkConfined()
        if outputs.isEmpty { return .ok }
        var anyOpen = false
        for (i, link) in outputs.enumerated() where outputOpen[i] {
            switch link.push(item) {
            case .ok: anyOpen = true
            case .endOfStream: outputOpen[i] = false
            case .flushing: return .flushing
            case .error(let m): return .error(m)
            }
        }
        return anyOpen ? .ok : .endOfStream
    }

    public func emit(_ kind: PipelineEvent.Kind) {
        sink.emit(PipelineEvent(stage: stageID, kind: kind, time: clock.now()))
    }
    public func progress(_ completed: Int64, of total: Int64, unit: String = "bytes", speed: Double? = nil) {
        emit(.progress(completed: completed, total: total, unit: unit, speed: speed))
    }
}

/// A unit of work in a pipeline graph.
///
/// Lifecycle, driven by the runner on the stage's own serial queue:
/// 1. `prepare` (all stages, before any runs: open devices, check outputs);
///    then `negotiate` (producers before consumers): each stage gets what its inputs carry and
///    announces what it will produce, or refuses an input (the run fails before data moves);
/// 2. sources: `produce` until done or `context.stopRequested`;
///    others: `receive` for every item of every input, each input's items in order, the inputs
///    interleaved as their items come (`FanIn`); a stage that joins its inputs one after another
///    (a merge's clips) keeps them in the inputs' order with `InputOrdered`;
/// 3. `drain` once every input has ended: emit what is buffered (a merge runs here);
/// 4. `finish` always, last, with the outcome: release resources; on failure or cancel discard
///    partial outputs.
///
/// A stage belongs to its queue: the runner makes it there (`StageNode`) and calls every hook
/// there, so a stage is not `Sendable` and its state needs no lock. What must reach it from
/// other threads (a stop, a cancel) it registers with `context.onStop`/`context.onCancel` as
/// `@Sendable` closures over thread-safe state, or it polls `context.stopRequested`.
///
/// Errors thrown from any hook fail the graph; the runner tags them with the stage id.
public protocol Stage: AnyObject {
    var id: String { get }
    /// Port types accepted on inputs (empty: a source).
    var inputTypes: Set<PortType> { get }
    /// Port type produced (nil: a sink).
    var outputType: PortType? { get }

    func prepare(_ context: StageContext) throws
    /// What this stage will produce, given what its inputs carry (`inputs[i]`: what input `i`'s
    /// producer announced). Throw `StreamMismatch` to refuse an input. Later changes arrive in
    /// band (`Item.parameters`), ordered with the data.
    func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters?
    func produce(_ context: StageContext) throws
    func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult
    /// Input `input` ended while others are still open (a stage with one input goes straight to
    /// `drain`). Return `.flushing` to take nothing more from any input (then `drain` runs).
    func inputEnded(_ input: Int, _ context: StageContext) throws -> FlowResult
    func drain(_ context: StageContext) throws
    func finish(_ context: StageContext, outcome: StageOutcome)
}

public enum StageOutcome: Sendable, Equatable {
    case completed
    /// Stopped early (SIGINT): outputs that are complete and playable are kept.
    case stopped
    case failed
    case cancelled
}

extension Stage {
    public func prepare(_ context: StageContext) throws {}
    /// Checks the inputs' port types (`checkPorts`) and announces `outputType` with no details.
    public func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        try checkPorts(inputs)
        return outputType.map { StreamParameters(port: $0) }
    }
    /// Refuses the first input whose port type is not in `inputTypes`.
    public func checkPorts(_ inputs: [StreamParameters]) throws {
        for (i, p) in inputs.enumerated() where !inputTypes.contains(p.port) {
            let takes = inputTypes.map(\.rawValue).sorted().joined(separator: ", ")
            throw StreamMismatch(input: i, parameter: "port type", reason: "\(p.port.rawValue) offered; it takes \(takes)")
        }
    }
    public func produce(_ context: StageContext) throws {}
    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult { .ok }
    public func inputEnded(_ input: Int, _ context: StageContext) throws -> FlowResult { .ok }
    public func drain(_ context: StageContext) throws {}
    public func finish(_ context: StageContext, outcome: StageOutcome) {}
}
