import Foundation
import Synchronization

/// A connection between two stages: `from`'s output feeds `to`. A stage's inputs are numbered in
/// the order of its edges.
public struct Edge: Sendable, Equatable {
    public var from: String
    public var to: String
    public var limits: LinkLimits
    public var policy: OverflowPolicy
    public init(from: String, to: String, limits: LinkLimits = LinkLimits(), policy: OverflowPolicy = .block) {
        self.from = from
        self.to = to
        self.limits = limits
        self.policy = policy
    }
}

/// A stage the runner creates when the graph runs, on the stage's own serial queue, so the stage
/// is made, prepared and driven by that queue alone. `id` is the stage's id in edges and events.
public struct StageNode: Sendable {
    public let id: String
    public let make: @Sendable () throws -> any Stage
    public init(_ id: String, make: @escaping @Sendable () throws -> any Stage) {
        self.id = id
        self.make = make
    }

    /// A stage made elsewhere and handed over: the caller does not touch it again until `run()`
    /// has returned (then it may read what the stage counted). Tests and the CLI's summaries use it.
    public init(handing stage: any Stage) {
        let handed = HandedStage(stage: stage)
        self.init(stage.id) { handed.stage }
    }
}

/// A stage passed from its maker's thread to the runner. `@unchecked Sendable`: after the hand-off
/// only the stage's queue touches it (see `StageNode.init(handing:)`).
private struct HandedStage: @unchecked Sendable {
    let stage: any Stage
}

/// A made stage and the queue that owns it. `@unchecked Sendable`: the stage is touched only by
/// blocks run on `queue`; the runner only carries the box between threads.
private struct OwnedStage: @unchecked Sendable {
    let stage: any Stage
    let queue: DispatchQueue
    var id: String { stage.id }
}

/// How a graph run ended.
public enum GraphOutcome: Sendable, Equatable {
    case completed
    /// Stopped by `stop()` or `cancel()` (SIGINT/SIGTERM).
    case interrupted
    /// A stage failed; the error message names the stage.
    case failed(stage: String, error: ClipFlowError)

    public var exitCode: Int32 {
        switch self {
        case .completed: return 0
        case .interrupted: return 130
        case .failed(_, let e): return e.exitCode
        }
    }
}

/// Runs a DAG of stages, each on its own serial Dispatch queue, linked by bounded `Link`s.
///
/// ```
///   files ──▶[link]──┐                      ┌─▶[link]──▶ thumbnail
///                    ├──▶ merge ──▶ (fan-out)┤
///   files ──▶[link]──┘                      └─▶[link]──▶ directory
/// ```
///
/// - Fan-in: a stage with several inputs takes items from whichever has one (`FanIn`): each
///   input's items in order, the inputs interleaved, so branches that join again stream freely.
/// - Fan-out: a stage's pushes go to every consumer; a full blocking link holds the producer.
/// - A failing stage stops the graph: every stage is told to stop, links are flushed so nobody
///   waits forever, and `finish` runs everywhere with the outcome.
/// - `stop()` (first SIGINT): sources stop, end of stream flows through, stages finalise or
///   discard what is in progress. `cancel()` (second signal, deadline): abandon everything.
///
/// Threading: `run()` blocks its caller until every stage has finished; `stop`, `cancel` may be
/// called from any thread (a signal source) and reach stages only through their contexts
/// (`StageContext.onStop`/`onCancel`). `failure`, `contexts` and `links` are guarded by `lock`;
/// the rest is immutable or atomic (hence `@unchecked`).
public final class GraphRunner: @unchecked Sendable {
    public let nodes: [StageNode]
    public let edges: [Edge]
    private let clock: Clock
    private let sink: EventSink
    private let cancelFlag = CancellationFlag()
    private let stopped = Atomic<Bool>(false)
    private let lock = NSLock()
    private var failure: (stage: String, error: ClipFlowError)?
    private var contexts: [String: StageContext] = [:]
    private var links: [Link] = []

    public init(nodes: [StageNode], edges: [Edge], clock: Clock = SystemClock(), sink: EventSink) throws {
        self.nodes = nodes
        self.edges = edges
        self.clock = clock
        self.sink = sink
        let ids = nodes.map(\.id)
        guard Set(ids).count == ids.count else { throw ClipFlowError.failure("internal: duplicate stage ids \(ids)") }
        for e in edges where !ids.contains(e.from) || !ids.contains(e.to) {
            throw ClipFlowError.failure("internal: edge \(e.from) -> \(e.to) names an unknown stage")
        }
    }

    /// Per link, after `run()`: its peak depth and drops.
    public private(set) var linkStats: [(from: String, to: String, stats: Link.Stats)] = []

    /// Graceful stop: sources stop; end of stream flows; after `deadline` seconds, cancel.
    public func stop(deadline: Double? = nil) {
        if stopped.exchange(true, ordering: .acquiringAndReleasing) { return }
        lock.lock(); let ctxs = Array(contexts.values); lock.unlock()
        for c in ctxs { c.requestStop() }
        if let d = deadline {
            DispatchQueue.global().asyncAfter(deadline: .now() + d) { [weak self] in self?.cancel() }
        }
    }

    /// Hard cancel: every stage abandons its work; links are flushed.
    public func cancel() {
        stopped.store(true, ordering: .releasing)
        cancelFlag.cancel()
        lock.lock(); let ls = links; let ctxs = Array(contexts.values); lock.unlock()
        for c in ctxs { c.requestStop() }
        for l in ls { l.flush() }
        for c in ctxs { c.requestCancel() }
    }

    private func fail(_ stage: String, _ error: Error) {
        let e = (error as? ClipFlowError) ?? ClipFlowError.failure(String(describing: error))
        lock.lock()
        let first = failure == nil && !(e.kind == .interrupted && (cancelFlag.isCancelled || stopped.load(ordering: .acquiring)))
        if first { failure = (stage, e) }
        let ls = links; let ctxs = contexts
        lock.unlock()
        guard first else { return }
        for c in ctxs.values { c.requestStop() }
        for l in ls { l.flush() }
        for (id, c) in ctxs where id != stage { c.requestCancel() }
    }

    private var isFailed: Bool { lock.lock(); defer { lock.unlock() }; return failure != nil }

    /// Runs the graph to the end. Call once.
    public func run() -> GraphOutcome {
        // Links, in edge order; each stage's inputs in the order of its edges.
        var inputs: [String: [Link]] = [:], outputs: [String: [Link]] = [:]
        var allLinks: [Link] = []
        for e in edges {
            let l = Link(from: e.from, to: e.to, limits: e.limits, policy: e.policy)
            allLinks.append(l)
            inputs[e.to, default: []].append(l)
            outputs[e.from, default: []].append(l)
        }
        // Each stage is made and prepared on its own queue, in node order, before any runs.
        let queues = Dictionary(uniqueKeysWithValues: nodes.map { ($0.id, DispatchQueue(label: "clipflow.stage.\($0.id)")) })
        lock.lock()
        links = allLinks
        for n in nodes {
            contexts[n.id] = StageContext(
                stageID: n.id, clock: clock, outputs: outputs[n.id] ?? [], sink: sink, cancel: cancelFlag, queue: queues[n.id])
        }
        let ctx = contexts
        lock.unlock()
        if stopped.load(ordering: .acquiring) { for c in ctx.values { c.requestStop() } }

        var stages: [OwnedStage] = []
        for n in nodes {
            let q = queues[n.id]!
            let made: Result<OwnedStage, Error> = q.sync {
                Result {
                    let s = try n.make()
                    guard s.id == n.id else { throw ClipFlowError.failure("internal: node '\(n.id)' made stage '\(s.id)'") }
                    return OwnedStage(stage: s, queue: q)
                }
            }
            switch made {
            case .success(let s):
                stages.append(s)
                let prepared = q.sync { Result { try s.stage.prepare(ctx[n.id]!) } }
                if case .failure(let error) = prepared { fail(n.id, error) }
            case .failure(let error):
                fail(n.id, error)
            }
            if isFailed { break }
        }
        if !isFailed { negotiate(stages, ctx) }
        if isFailed {
            for s in stages { s.queue.sync { finishStage(s.stage, ctx[s.id]!) } }
            return outcome(allLinks)
        }

        let group = DispatchGroup()
        for owned in stages {
            let c = ctx[owned.id]!
            let ins = inputs[owned.id] ?? []
            let outs = outputs[owned.id] ?? []
            // Every stage's `started` is told in the graph's order, before any of them runs, so
            // whatever lists the stages by their first event lists them as the graph does.
            c.emit(.started)
            owned.queue.async(group: group) { [self] in
                let s = owned.stage
                do {
                    if ins.isEmpty {
                        try s.produce(c)
                    } else {
                        // Drop counts are read only on links that can drop (a lock per item otherwise).
                        let dropping = ins.contains { $0.policy != .block }
                        var reportedDrops = 0
                        func reportDrops() {
                            guard dropping else { return }
                            let total = ins.reduce(0) { $0 + $1.stats.dropped }
                            if total != reportedDrops { reportedDrops = total; c.emit(.dropped(count: total, cause: Link.dropCause)) }
                        }
                        let fanIn = FanIn(ins)
                        inputLoop: while let next = fanIn.pull() {
                            reportDrops()
                            let result: FlowResult
                            switch next {
                            case .item(let n, let item): result = try s.receive(item, input: n, c)
                            case .ended(let n): result = try s.inputEnded(n, c)
                            }
                            switch result {
                            case .ok: continue
                            case .endOfStream: if case .item(let n, _) = next { fanIn.close(n) }
                            case .flushing: break inputLoop
                            case .error(let m): throw ClipFlowError.failure(m)
                            }
                        }
                        reportDrops()
                    }
                    if !cancelFlag.isCancelled && !isFailed { try s.drain(c) }
                } catch {
                    fail(s.id, error)
                }
                for l in outs { l.endOfStream() }
                // Inputs this stage no longer reads: release their producers.
                for l in ins { l.consumerDone() }
                finishStage(s, c)
            }
        }
        group.wait()
        return outcome(allLinks)
    }

    /// Producers before consumers, each on its queue: every stage gets what its producers
    /// announced and announces its own output. A refusal fails the consumer, naming both stages.
    private func negotiate(_ stages: [OwnedStage], _ ctx: [String: StageContext]) {
        var announced: [String: StreamParameters] = [:]
        for s in topologicalOrder(stages) {
            let ins = edges.filter { $0.to == s.id }
            let offered = ins.map { e in
                announced[e.from] ?? StreamParameters(port: stages.first { $0.id == e.from }?.stage.outputType ?? .buffers)
            }
            let result = s.queue.sync { Result { try s.stage.negotiate(offered, ctx[s.id]!) } }
            switch result {
            case .success(let out):
                if let out { announced[s.id] = out }
            case .failure(let m as StreamMismatch) where ins.indices.contains(m.input):
                let from = ins[m.input].from
                fail(
                    s.id,
                    ClipFlowError.badInput(
                        "stage '\(s.id)' cannot take what '\(from)' produces (\(offered[m.input])): \(m.parameter): \(m.reason)"))
                return
            case .failure(let error):
                fail(s.id, error)
                return
            }
        }
    }

    /// Stages with every producer before its consumers (node order among equals).
    private func topologicalOrder(_ stages: [OwnedStage]) -> [OwnedStage] {
        var pending = stages
        var done = Set<String>()
        var order: [OwnedStage] = []
        while !pending.isEmpty {
            let ready = pending.firstIndex { s in edges.allSatisfy { $0.to != s.id || done.contains($0.from) } } ?? 0
            let s = pending.remove(at: ready)
            done.insert(s.id)
            order.append(s)
        }
        return order
    }

    private func finishStage(_ s: any Stage, _ c: StageContext) {
        lock.lock(); let f = failure; lock.unlock()
        let result: StageOutcome
        if let f {
            result = f.stage == s.id ? .failed : .cancelled
        } else if cancelFlag.isCancelled {
            result = .cancelled
        } else if stopped.load(ordering: .acquiring) {
            result = .stopped
        } else {
            result = .completed
        }
        c.helpers.wait()
        s.finish(c, outcome: result)
        switch result {
        case .completed: c.emit(.finished)
        case .stopped, .cancelled: c.emit(f == nil ? .interrupted : .failed("stopped because stage '\(f!.stage)' failed"))
        case .failed: c.emit(.failed(f?.error.message ?? "failed", kind: f?.error.failureKind ?? .failure))
        }
    }

    private func outcome(_ made: [Link]) -> GraphOutcome {
        linkStats = made.map { ($0.from, $0.to, $0.stats) }
        for (from, to, st) in linkStats {
            sink.emit(
                PipelineEvent(stage: to, kind: .queue(from: from, peakItems: st.peakItems, peakBytes: st.peakBytes, dropped: st.dropped), time: clock.now()))
        }
        lock.lock(); let f = failure; lock.unlock()
        if let f { return .failed(stage: f.stage, error: f.error) }
        if stopped.load(ordering: .acquiring) || cancelFlag.isCancelled { return .interrupted }
        return .completed
    }
}
