import Foundation

/// The one bounded hand-off between threads: links between stages and the internal hand-offs of
/// the merge and the upload all use it. One producer pushes, one consumer pulls; either side, or
/// a third thread, may end it (`endOfStream`, `consumerDone`, `flush`).
///
/// Limits are in items, bytes and time (`LinkLimits`), whichever is reached first; what happens
/// when full is the `OverflowPolicy` (block until the low watermark, or drop the oldest or the
/// arriving element, marking the discontinuity and counting the drop). Every decision is made by
/// `LinkState`; this class adds the lock, the waiting and the elements themselves. Each push
/// states the element's size and time, so the queue knows nothing of what it carries.
///
/// Ownership: a pushed element belongs to the queue until it is pulled, and then to the puller.
/// An element the queue drops, or discards on `flush`/`consumerDone`, is released at once.
/// `@unchecked Sendable`: every mutable field is guarded by `cond`; elements cross threads only
/// through it (the caller's `Element` is handed over, never shared).
public final class BoundedQueue<Element>: @unchecked Sendable {
    /// A pulled element and whether elements were dropped just before it.
    public struct Pulled {
        public var element: Element
        public var discontinuity: Bool
    }

    public let limits: LinkLimits
    public let policy: OverflowPolicy
    private let cond = NSCondition()
    private var state: LinkState
    /// Queued elements from `head`; slots before `head` are empty (nil) until compaction.
    private var slots: [Element?] = []
    private var head = 0
    /// Rung whenever the consumer may find something new (an element, the end, a flush), for a
    /// consumer that waits on several queues at once (`FanIn`).
    private var doorbell: Doorbell?

    public init(limits: LinkLimits, policy: OverflowPolicy = .block) {
        self.limits = limits
        self.policy = policy
        state = LinkState(limits: limits, policy: policy)
        // Room for the elements (and, in `LinkState`, their entries) up front, allocated by the
        // creating thread: a producer on another thread then never allocates the queue's storage
        // in its own malloc arena, where it would sit in the hole of a buffer just freed and make
        // the next one grow the arena.
        slots.reserveCapacity(min(limits.maxItems, 64))
    }

    /// A blocking queue of at most `capacity` elements; a blocked producer resumes at half of it.
    public convenience init(capacity: Int) {
        self.init(limits: LinkLimits(maxItems: max(1, capacity), maxBytes: .max), policy: .block)
    }

    /// Pushes an element of `bytes` bytes presented at `time` seconds (for a time limit). Under
    /// `block`, waits while the queue is full. Returns `.ok` when queued (or dropped by policy),
    /// `.flushing` after `flush`, `.endOfStream` after `consumerDone`; a refused element is
    /// released by the caller.
    @discardableResult
    public func push(_ element: Element, bytes: Int64 = 0, time: Double? = nil) -> FlowResult {
        cond.lock()
        defer { cond.unlock() }
        let entry = LinkState.Entry(bytes: bytes, time: time)
        while true {
            switch state.offer(entry) {
            case .accept(let dropped):
                for k in head..<(head + dropped) { slots[k] = nil }
                head += dropped
                state.append(entry)
                slots.append(element)
                compact()
                cond.broadcast()
                doorbell?.ring()
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

    /// The next element, waiting for one; nil at end of stream or when flushing.
    public func pull() -> Pulled? {
        cond.lock()
        defer { cond.unlock() }
        while true {
            switch takeLocked() {
            case .element(let pulled): return pulled
            case .ended: return nil
            case .empty: cond.wait()
            }
        }
    }

    /// What a consumer waiting on several queues finds here now (`FanIn`); never waits.
    public enum Polled {
        case element(Pulled)
        /// End of stream, or flushed: nothing more will come.
        case ended
        /// Nothing queued yet.
        case empty
    }

    /// The next element if one is queued, or whether the queue has ended; never waits.
    public func poll() -> Polled {
        cond.lock()
        defer { cond.unlock() }
        return takeLocked()
    }

    /// The next element, waiting at most `seconds` for one (`.empty`: none came in time): for a
    /// consumer whose producer may hang in a call that never returns.
    public func pull(waitingAtMost seconds: Double) -> Polled {
        let deadline = Date(timeIntervalSinceNow: max(0, seconds))
        cond.lock()
        defer { cond.unlock() }
        while true {
            let polled = takeLocked()
            guard case .empty = polled, Date() < deadline else { return polled }
            _ = cond.wait(until: deadline)
        }
    }

    /// What the queue gives now, taking the front element if there is one; the caller holds
    /// `cond`'s lock.
    private func takeLocked() -> Polled {
        switch state.take() {
        case .item(let discontinuity, let wake):
            let e = takeFront()
            if wake { cond.broadcast() }
            return .element(Pulled(element: e, discontinuity: discontinuity))
        case .endOfStream, .flushing:
            return .ended
        case .wait:
            return .empty
        }
    }

    /// From now on, rings `bell` whenever `poll` may find something new. Set by the consumer
    /// before it polls.
    public func ring(_ bell: Doorbell) {
        cond.lock()
        doorbell = bell
        cond.unlock()
    }

    /// The next element if one is queued; never waits.
    public func tryPull() -> Pulled? {
        cond.lock()
        defer { cond.unlock() }
        guard case .item(let discontinuity, let wake) = state.take() else { return nil }
        let e = takeFront()
        if wake { cond.broadcast() }
        return Pulled(element: e, discontinuity: discontinuity)
    }

    /// Moves the front element out; its slot is emptied now, so the queue keeps nothing alive
    /// that it no longer accounts for.
    private func takeFront() -> Element {
        var taken: Element? = nil
        swap(&taken, &slots[head])
        head += 1
        compact()
        guard let taken else { preconditionFailure("BoundedQueue: LinkState and the slots disagree") }
        return taken
    }

    private func compact() {
        if head == slots.count {
            slots.removeAll(keepingCapacity: true)
            head = 0
        } else if head > 64 && head * 2 > slots.count {
            slots.removeFirst(head)
            head = 0
        }
    }

    private func discardAll() {
        slots.removeAll()
        head = 0
    }

    /// The producer has finished: the consumer gets end of stream after the queued elements.
    public func endOfStream() {
        cond.lock()
        state.endProducer()
        cond.broadcast()
        doorbell?.ring()
        cond.unlock()
    }

    /// The consumer wants no more: queued elements are released, a waiting producer returns, and
    /// every later push returns `.endOfStream`.
    public func consumerDone() {
        cond.lock()
        state.endConsumer()
        discardAll()
        cond.broadcast()
        cond.unlock()
    }

    /// Stop now: queued elements are released; every waiting and later push returns `.flushing`
    /// and every waiting and later pull returns nil.
    public func flush() {
        cond.lock()
        state.flush()
        discardAll()
        cond.broadcast()
        doorbell?.ring()
        cond.unlock()
    }

    /// False once the consumer is done or the queue is flushed: a producer may stop making
    /// elements nobody will take.
    public var wantsMore: Bool {
        cond.lock()
        defer { cond.unlock() }
        return !state.consumerEnded && !state.flushing
    }

    public var stats: QueueStats {
        cond.lock()
        defer { cond.unlock() }
        return QueueStats(queued: state.count, peakItems: state.peakItems, peakBytes: state.peakBytes, dropped: state.dropped)
    }
}

/// What a bounded queue holds now and has held at most, and how many elements it dropped.
public struct QueueStats: Sendable, Equatable {
    public var queued: Int
    public var peakItems: Int
    public var peakBytes: Int64
    public var dropped: Int
}

/// Wakes a consumer that waits on several queues at once: each queue rings it when it may have
/// something new, and the consumer waits for a ring later than the count it read before it last
/// looked (so a ring between its look and its wait is not lost). A queue rings while holding its
/// own lock; the doorbell's lock is never held while taking a queue's, so the two cannot
/// deadlock. `@unchecked Sendable`: `rings` is guarded by `cond`.
public final class Doorbell: @unchecked Sendable {
    private let cond = NSCondition()
    private var rings: UInt64 = 0

    public init() {}

    /// How many times it has rung.
    public var count: UInt64 {
        cond.lock()
        defer { cond.unlock() }
        return rings
    }

    public func ring() {
        cond.lock()
        rings &+= 1
        cond.broadcast()
        cond.unlock()
    }

    /// Waits until it has rung more than `seen` times in all.
    public func wait(after seen: UInt64) {
        cond.lock()
        while rings == seen { cond.wait() }
        cond.unlock()
    }

    /// Waits until it has rung more than `seen` times in all, or `seconds` have passed; true when
    /// it rang.
    @discardableResult
    public func wait(after seen: UInt64, atMost seconds: Double) -> Bool {
        let deadline = Date(timeIntervalSinceNow: seconds)
        cond.lock()
        defer { cond.unlock() }
        while rings == seen {
            if !cond.wait(until: deadline) { return rings != seen }
        }
        return true
    }
}
