import Foundation

/// A bounded queue between two stages. Thread-safe: one producer stage pushes, one consumer stage
/// pulls, and the runner may `flush` from any thread. All policy lives in `LinkState`; this class
/// adds the lock, the waiting and the items themselves; every mutable field is guarded by that
/// lock (hence `@unchecked`). Items pushed are owned by the link until pulled.
public final class Link: @unchecked Sendable {
    public let from: String
    public let to: String
    public let policy: OverflowPolicy
    private let cond = NSCondition()
    private var state: LinkState
    private var items: [Item] = []
    private var head = 0

    public init(from: String, to: String, limits: LinkLimits, policy: OverflowPolicy) {
        self.from = from
        self.to = to
        self.policy = policy
        state = LinkState(limits: limits, policy: policy)
    }

    /// Pushes an item; under `block` waits while the link is full. Returns promptly with
    /// `.flushing` when the graph stops and `.endOfStream` when the consumer has ended.
    public func push(_ item: Item) -> FlowResult {
        cond.lock()
        defer { cond.unlock() }
        let entry = LinkState.Entry(bytes: item.bytes, time: item.time)
        while true {
            switch state.offer(entry) {
            case .accept(let dropped):
                if dropped > 0 {
                    for k in head..<(head + dropped) { items[k].release() }
                    head += dropped
                    compact()
                }
                state.append(entry)
                var it = item
                it.discontinuity = state.entries.last?.gap ?? false
                items.append(it)
                if dropped > 0, head < items.count { items[head].discontinuity = true }
                cond.broadcast()
                return .ok
            case .dropArriving:
                return .ok
            case .wait:
                cond.wait()
            case .refuse(let r):
                return r
            }
        }
    }

    /// Takes the next item, waiting for one. nil at end of stream or when flushing.
    public func pull() -> Item? {
        cond.lock()
        defer { cond.unlock() }
        while true {
            switch state.take() {
            case .item(_, let wake):
                let it = takeFront()
                if wake { cond.broadcast() }
                return it
            case .endOfStream, .flushing:
                return nil
            case .wait:
                cond.wait()
            }
        }
    }

    /// Takes the next item if one is queued; never waits (harnesses, tests).
    public func tryPull() -> Item? {
        cond.lock()
        defer { cond.unlock() }
        guard head < items.count else { return nil }
        guard case .item(_, let wake) = state.take() else { return nil }
        let it = takeFront()
        if wake { cond.broadcast() }
        return it
    }

    /// Removes the front item. Its slot stays until the next compaction, so the buffer it keeps
    /// alive is released now (a taken item must not hold memory the queue no longer accounts for).
    private func takeFront() -> Item {
        let it = items[head]
        items[head].release()
        head += 1
        compact()
        return it
    }

    private func compact() {
        if head > 64 && head * 2 > items.count {
            items.removeFirst(head)
            head = 0
        }
    }

    /// The producer has finished: the consumer gets end of stream after the queued items.
    public func endOfStream() {
        cond.lock(); state.endProducer(); cond.broadcast(); cond.unlock()
    }
    /// The consumer wants no more: the producer's next push returns `.endOfStream`.
    public func consumerDone() {
        cond.lock(); state.endConsumer(); items.removeAll(); head = 0; cond.broadcast(); cond.unlock()
    }
    /// Stop now: waiting pushes and pulls return; queued items are discarded.
    public func flush() {
        cond.lock(); state.flush(); items.removeAll(); head = 0; cond.broadcast(); cond.unlock()
    }

    public struct Stats: Sendable, Equatable {
        public var queued: Int
        public var peakItems: Int
        public var peakBytes: Int64
        public var dropped: Int
    }
    public var stats: Stats {
        cond.lock(); defer { cond.unlock() }
        return Stats(queued: state.count, peakItems: state.peakItems, peakBytes: state.peakBytes, dropped: state.dropped)
    }
}
