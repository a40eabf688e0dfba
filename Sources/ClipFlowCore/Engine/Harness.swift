import Foundation
import Synchronization

/// Records events in order; thread-safe (the list is behind a mutex). Used by tests, harnesses
/// and the CLI's summary.
public final class EventRecorder: EventSink {
    private let list = Mutex<[PipelineEvent]>([])
    private let forward: EventSink?
    public init(forward: EventSink? = nil) { self.forward = forward }
    public func emit(_ event: PipelineEvent) {
        list.withLock { $0.append(event) }
        forward?.emit(event)
    }
    public var events: [PipelineEvent] { list.withLock { $0 } }
}

/// Runs one stage alone, synchronously on the caller's thread, as GStreamer's `GstHarness` and
/// NIO's `EmbeddedChannel` do: push items in, pull what it produced, read its events, drive a
/// manual clock, and get the leftovers (produced but never pulled) at finish.
///
/// The output link is unbounded-ish (`outputLimit` items, block policy never reached in normal
/// use) so a stage under test never blocks on its own output. Owned by one test thread, which
/// stands in for the stage's queue (hence `@unchecked`); only `stop`, `cancel` and `output` may
/// be used from other threads.
public final class StageHarness: @unchecked Sendable {
    public let stage: any Stage
    public let clock: ManualClock
    public let recorder = EventRecorder()
    public let output: Link
    public let context: StageContext
    private var finished = false

    public init(_ stage: any Stage, clock: ManualClock = ManualClock(), outputLimit: Int = 1 << 20) {
        self.stage = stage
        self.clock = clock
        output = Link(from: stage.id, to: "harness", limits: LinkLimits(maxItems: outputLimit, maxBytes: .max), policy: .block)
        context = StageContext(
            stageID: stage.id, clock: clock, outputs: stage.outputType == nil ? [] : [output],
            sink: recorder, cancel: CancellationFlag())
    }

    public func prepare() throws { try stage.prepare(context) }
    /// Offers the stage what its inputs carry; returns what it announces (see `Stage.negotiate`).
    public func negotiate(_ inputs: [StreamParameters] = []) throws -> StreamParameters? { try stage.negotiate(inputs, context) }
    /// Runs a source's `produce` to its end (or until `stop()` is seen).
    public func produce() throws { try stage.produce(context) }
    public func push(_ item: Item, input: Int = 0) throws -> FlowResult { try stage.receive(item, input: input, context) }
    /// Input `input` ended while others are still open (see `Stage.inputEnded`).
    public func inputEnded(_ input: Int) throws -> FlowResult { try stage.inputEnded(input, context) }
    /// All inputs ended: runs `drain`.
    public func endOfStream() throws { try stage.drain(context) }
    /// Asks the stage to stop as SIGINT would (runs its `onStop` handlers).
    public func stop() { context.requestStop() }
    /// Cancels as a second SIGINT or a failure elsewhere would (runs its `onCancel` handlers).
    public func cancel() { context.requestCancel() }
    /// Next produced item, if any.
    public func pull() -> Item? { output.tryPull() }
    public var events: [PipelineEvent] { recorder.events }

    /// Runs `finish` and returns the items produced but never pulled.
    @discardableResult
    public func finish(_ outcome: StageOutcome = .completed) -> [Item] {
        precondition(!finished, "finish called twice")
        finished = true
        stage.finish(context, outcome: outcome)
        var left: [Item] = []
        while let i = output.tryPull() { left.append(i) }
        return left
    }
}
