/// What a link does when it is full.
///
/// - `block`: the producer waits until the consumer has taken enough to bring the link down to its
///   low watermark (files, recording: nothing may be lost).
/// - `dropOldest`: the oldest queued items are discarded to make room (live preview: the newest
///   picture matters most). The next item the consumer takes is marked as a discontinuity.
/// - `dropNewest`: the arriving item is discarded. The next item accepted is marked as a
///   discontinuity.
public enum OverflowPolicy: String, Sendable, CaseIterable, Codable {
    case block
    case dropOldest = "drop-oldest"
    case dropNewest = "drop-newest"
}

/// The result of pushing into a link, as GStreamer's pads report it: upstream stops promptly on
/// anything but `ok`.
public enum FlowResult: Sendable, Equatable {
    /// Accepted (or, under a drop policy, handled by dropping).
    case ok
    /// The consumer has ended its stream (it wants no more data).
    case endOfStream
    /// The graph is stopping (cancel); the item was not accepted.
    case flushing
    /// The consumer failed; the message says why.
    case error(String)
}

/// Limits of a bounded link: items, bytes and (for live media) the time span of what is queued.
/// The link is full when any limit is reached. Under `block`, a full link stays closed to the
/// producer until every measure is at or below `lowWatermark` (a fraction of its limit), so the
/// producer wakes once per batch, not once per item.
public struct LinkLimits: Sendable, Equatable, Codable {
    public var maxItems: Int
    public var maxBytes: Int64
    /// Seconds between the oldest and the newest queued item's timestamps; nil: no time limit.
    public var maxDuration: Double?
    /// Fraction of each limit at which a blocked producer resumes (0 ..< 1).
    public var lowWatermark: Double

    public init(maxItems: Int = 16, maxBytes: Int64 = 64 << 20, maxDuration: Double? = nil, lowWatermark: Double = 0.5) {
        self.maxItems = maxItems
        self.maxBytes = maxBytes
        self.maxDuration = maxDuration
        self.lowWatermark = lowWatermark
    }
}

/// The pure state of a link: counts, watermark state and policy decisions. No locks, no
/// threads, no clocks: `Link` drives it under its lock, and table tests drive it directly.
public struct LinkState: Sendable, Equatable {
    public struct Entry: Sendable, Equatable {
        public var bytes: Int64
        public var time: Double?
        /// Items were dropped just before this one.
        public var gap = false
        public init(bytes: Int64, time: Double? = nil) { self.bytes = bytes; self.time = time }
    }

    /// What `offer` decided.
    public enum Offer: Sendable, Equatable {
        /// Queue the item. `dropOldest` items were removed from the front first (drop-oldest).
        case accept(dropOldest: Int)
        /// Discard the arriving item (drop-newest).
        case dropArriving
        /// The producer must wait (block) and offer again when woken.
        case wait
        /// Refuse: the link is closed or flushing.
        case refuse(FlowResult)
    }

    public let limits: LinkLimits
    public let policy: OverflowPolicy
    public private(set) var entries: [Entry] = []
    public private(set) var bytes: Int64 = 0
    /// False from the moment the link fills until it drains to the low watermark (block only).
    public private(set) var writable = true
    /// Items dropped so far (either drop policy).
    public private(set) var dropped = 0
    /// The next item appended follows a gap.
    public private(set) var markNext = false
    /// The consumer ended the stream (no more items are wanted).
    public private(set) var consumerEnded = false
    /// The producer ended the stream (no more items will come).
    public private(set) var producerEnded = false
    /// The graph is stopping: pushes are refused, waiting stops.
    public private(set) var flushing = false
    /// Highest number of items ever queued at once.
    public private(set) var peakItems = 0
    public private(set) var peakBytes: Int64 = 0

    /// The entries' storage is reserved here, by the thread that creates the state (see
    /// `BoundedQueue.init`).
    public init(limits: LinkLimits, policy: OverflowPolicy) {
        self.limits = limits
        self.policy = policy
        entries.reserveCapacity(min(limits.maxItems, 64))
    }

    public var count: Int { entries.count }

    private var span: Double {
        guard let a = entries.first?.time, let b = entries.last?.time else { return 0 }
        return b - a
    }

    /// Would adding `e` exceed a limit? (A single item larger than the byte limit is admitted
    /// into an empty link, or nothing could ever pass.)
    private func exceeds(adding e: Entry) -> Bool {
        if entries.isEmpty { return false }
        if entries.count + 1 > limits.maxItems { return true }
        if bytes + e.bytes > limits.maxBytes { return true }
        if let d = limits.maxDuration, let t = e.time, let first = entries.first?.time, t - first > d { return true }
        return false
    }

    private var atOrBelowLowWatermark: Bool {
        let w = limits.lowWatermark
        if Double(entries.count) > Double(limits.maxItems) * w { return false }
        if Double(bytes) > Double(limits.maxBytes) * w { return false }
        if let d = limits.maxDuration, span > d * w { return false }
        return true
    }

    /// The producer offers an item. On `.accept`, the caller must call `append`.
    public mutating func offer(_ e: Entry) -> Offer {
        if flushing { return .refuse(.flushing) }
        if consumerEnded { return .refuse(.endOfStream) }
        if producerEnded { return .refuse(.error("push after end of stream")) }
        switch policy {
        case .block:
            if !writable { return .wait }
            if exceeds(adding: e) { writable = false; return .wait }
            return .accept(dropOldest: 0)
        case .dropNewest:
            if exceeds(adding: e) {
                dropped += 1
                markNext = true
                return .dropArriving
            }
            return .accept(dropOldest: 0)
        case .dropOldest:
            var n = 0
            var probe = self
            while probe.exceeds(adding: e) {
                probe.removeFirst()
                n += 1
            }
            if n > 0 {
                self = probe
                dropped += n
                if entries.isEmpty { markNext = true } else { entries[0].gap = true }
            }
            return .accept(dropOldest: n)
        }
    }

    public mutating func append(_ e: Entry) {
        var e = e
        if markNext { e.gap = true; markNext = false }
        entries.append(e)
        bytes += e.bytes
        peakItems = max(peakItems, entries.count)
        peakBytes = max(peakBytes, bytes)
    }

    private mutating func removeFirst() {
        let e = entries.removeFirst()
        bytes -= e.bytes
    }

    /// What `take` decided for the consumer.
    public enum Take: Sendable, Equatable {
        /// Take the front item; `discontinuity` if items were dropped before it.
        case item(discontinuity: Bool, wakeProducer: Bool)
        /// Nothing queued and the producer has ended, or the consumer has ended.
        case endOfStream
        /// Nothing queued yet: wait.
        case wait
        /// The graph is stopping.
        case flushing
    }

    public mutating func take() -> Take {
        if flushing { return .flushing }
        if consumerEnded { return .endOfStream }
        if entries.isEmpty { return producerEnded ? .endOfStream : .wait }
        let disc = entries[0].gap
        removeFirst()
        var wake = false
        if !writable && atOrBelowLowWatermark {
            writable = true
            wake = true
        }
        return .item(discontinuity: disc, wakeProducer: wake)
    }

    /// The producer will send no more.
    public mutating func endProducer() { producerEnded = true }
    /// The consumer wants no more: pending items are discarded, producers are released, and a
    /// take (a consumer still waiting) gets end of stream.
    public mutating func endConsumer() {
        consumerEnded = true
        entries.removeAll()
        bytes = 0
        writable = true
    }
    /// Stop: everyone waiting is released with `flushing`; queued items are discarded.
    public mutating func flush() {
        flushing = true
        entries.removeAll()
        bytes = 0
        writable = true
    }
}
