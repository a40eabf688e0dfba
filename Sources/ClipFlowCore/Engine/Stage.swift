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

public struct SystemClock: Clock {
    public init() {}
    public func now() -> Double { Double(DispatchTime.now().uptimeNanoseconds) / 1e9 }
    public func sleep(until deadline: Double, stop: () -> Bool) {
        while !stop() {
            let left = deadline - now()
            if left <= 0 { return }
            usleep(UInt32(min(left, 0.01) * 1e6))
        }
    }
}

/// A clock that moves only when told: `sleep` returns at once and advances time to the deadline.
/// `t` is guarded by `lock` (hence `@unchecked`).
public final class ManualClock: Clock, @unchecked Sendable {
    private let lock = NSLock()
    private var t: Double
    public init(start: Double = 0) { t = start }
    public func now() -> Double { lock.lock(); defer { lock.unlock() }; return t }
    public func advance(by s: Double) { lock.lock(); t += s; lock.unlock() }
    public func sleep(until deadline: Double, stop: () -> Bool) {
        lock.lock(); if deadline > t { t = deadline }; lock.unlock()
    }
}

/// What a stage sees while it runs: its outputs, its events, the clock, and whether the graph
/// is stopping. One context per stage; used only from that stage's queue (the confinement the
/// compiler cannot see: hence `@unchecked`).
public final class StageContext: @unchecked Sendable {
    public let stageID: String
    public let clock: Clock
    let outputs: [Link]
    let sink: EventSink
    private let stopFlag: Atomic<Bool>
    let cancel: CancellationFlag
    /// Per-output results: an output whose consumer ended is skipped from then on.
    private var outputOpen: [Bool]

    init(stageID: String, clock: Clock, outputs: [Link], sink: EventSink, cancel: CancellationFlag) {
        self.stageID = stageID
        self.clock = clock
        self.outputs = outputs
        self.sink = sink
        self.cancel = cancel
        stopFlag = Atomic(false)
        outputOpen = Array(repeating: true, count: outputs.count)
    }

    /// Sources: stop producing when true (SIGINT, or the graph failed). End of stream still flows.
    public var stopRequested: Bool { stopFlag.load(ordering: .acquiring) || cancel.isCancelled }
    func requestStop() { stopFlag.store(true, ordering: .releasing) }
    /// Hard cancellation (second signal, deadline): abandon work, leave no partial output.
    public var cancellation: CancellationFlag { cancel }

    /// Sends an item to every output (fan-out). Returns `.ok` while at least one consumer still
    /// wants data; `.flushing` when stopping; `.endOfStream` when every consumer has ended; the
    /// first error otherwise. A stage with no outputs gets `.ok`.
    @discardableResult
    public func push(_ item: Item) -> FlowResult {
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
    public func progress(_ completed: Int64, of total: Int64, unit: String = "bytes") {
        emit(.progress(completed: completed, total: total, unit: unit))
    }
}

/// A unit of work in a pipeline graph.
///
/// Lifecycle, driven by the runner on the stage's own serial queue:
/// 1. `prepare` (all stages, before any runs: open devices, check outputs);
/// 2. sources: `produce` until done or `context.stopRequested`;
///    others: `receive` for every item of every input, inputs taken in order (input 0 to its end,
///    then input 1, ...; that is the order a merge joins clips in);
/// 3. `drain` once every input has ended: emit what is buffered (a merge runs here);
/// 4. `finish` always, last, with the outcome: release resources; on failure or cancel discard
///    partial outputs.
/// `cancel` may be called from any thread at any time to abandon blocking work promptly.
///
/// Errors thrown from any hook fail the graph; the runner tags them with the stage id.
public protocol Stage: AnyObject, Sendable {
    var id: String { get }
    /// Port types accepted on inputs (empty: a source).
    var inputTypes: Set<PortType> { get }
    /// Port type produced (nil: a sink).
    var outputType: PortType? { get }

    func prepare(_ context: StageContext) throws
    func produce(_ context: StageContext) throws
    func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult
    func drain(_ context: StageContext) throws
    func finish(_ context: StageContext, outcome: StageOutcome)
    func cancel()
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
    public func produce(_ context: StageContext) throws {}
    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult { .ok }
    public func drain(_ context: StageContext) throws {}
    public func finish(_ context: StageContext, outcome: StageOutcome) {}
    public func cancel() {}
}
