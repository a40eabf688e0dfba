/// A bounded queue of `Item`s between two stages: a `BoundedQueue` that takes each item's size
/// and time from the item and sets its `discontinuity` when it is pulled. One producer stage
/// pushes, one consumer stage pulls, and the runner may `flush` from any thread. Items pushed are
/// owned by the link until pulled; a dropped or discarded item is released at once.
public final class Link: Sendable {
    public typealias Stats = QueueStats
    public let from: String
    public let to: String
    public let policy: OverflowPolicy
    private let queue: BoundedQueue<Item>
    /// Why a consumer's links drop items, as its `dropped` events say it.
    public static let dropCause = "dropping items: its input queue is full"

    public init(from: String, to: String, limits: LinkLimits, policy: OverflowPolicy) {
        self.from = from
        self.to = to
        self.policy = policy
        queue = BoundedQueue(limits: limits, policy: policy)
    }

    /// Pushes an item; under `block` waits while the link is full. Returns promptly with
    /// `.flushing` when the graph stops and `.endOfStream` when the consumer has ended.
    public func push(_ item: Item) -> FlowResult {
        queue.push(item, bytes: item.bytes, time: item.time)
    }

    /// Takes the next item, waiting for one. nil at end of stream or when flushing.
    public func pull() -> Item? {
        queue.pull().map(Self.marked)
    }

    /// What the consumer finds now: an item, the end (or a flush), or nothing yet; never waits.
    /// With `ring`, how a consumer reads several links as their items come (`FanIn`).
    public func poll() -> BoundedQueue<Item>.Polled {
        switch queue.poll() {
        case .element(let p): return .element(BoundedQueue<Item>.Pulled(element: Self.marked(p), discontinuity: p.discontinuity))
        case .ended: return .ended
        case .empty: return .empty
        }
    }

    /// Rings `bell` whenever `poll` may find something new.
    public func ring(_ bell: Doorbell) { queue.ring(bell) }

    /// Takes the next item if one is queued; never waits (harnesses, tests).
    public func tryPull() -> Item? {
        queue.tryPull().map(Self.marked)
    }

    /// The item as the consumer sees it: `discontinuity` says whether items were dropped just
    /// before it on this link.
    private static func marked(_ p: BoundedQueue<Item>.Pulled) -> Item {
        var item = p.element
        item.discontinuity = p.discontinuity
        return item
    }

    /// The producer has finished: the consumer gets end of stream after the queued items.
    public func endOfStream() { queue.endOfStream() }
    /// The consumer wants no more: the producer's next push returns `.endOfStream`.
    public func consumerDone() { queue.consumerDone() }
    /// Stop now: waiting pushes and pulls return; queued items are discarded.
    public func flush() { queue.flush() }

    public var stats: Stats { queue.stats }
}
