import Foundation
import XCTest

@testable import ClipFlowCore

/// The bounded queue with real threads: waiting, waking, dropping, ending and releasing.
final class BoundedQueueTests: XCTestCase {
    /// An element whose release a weak reference can observe.
    final class Token: @unchecked Sendable {
        let n: Int
        init(_ n: Int) { self.n = n }
    }

    /// Counts what a producer thread has finished pushing, and what its pushes returned.
    final class Progress: @unchecked Sendable {
        private let lock = NSLock()
        private var results: [FlowResult] = []
        func record(_ r: FlowResult) { lock.lock(); results.append(r); lock.unlock() }
        var all: [FlowResult] { lock.lock(); defer { lock.unlock() }; return results }
        var count: Int { all.count }
    }

    /// Starts `body` on a new thread; the returned semaphore is signalled when it returns.
    private func spawn(_ body: @escaping @Sendable () -> Void) -> DispatchSemaphore {
        let done = DispatchSemaphore(value: 0)
        Thread {
            body()
            done.signal()
        }.start()
        return done
    }

    private func waitUntil(
        _ what: String, timeout: Double = 10, file: StaticString = #filePath, line: UInt = #line, _ condition: () -> Bool
    ) {
        let end = Date().addingTimeInterval(timeout)
        while !condition() {
            if Date() > end { return XCTFail("timed out waiting until \(what)", file: file, line: line) }
            usleep(1000)
        }
    }

    /// A producer blocked on a full queue resumes only when the consumer has brought the queue
    /// down to the low watermark, not after every take: it wakes once per batch.
    func testBlockedProducerResumesAtTheLowWatermarkOncePerBatch() {
        let q = BoundedQueue<Int>(limits: LinkLimits(maxItems: 4, maxBytes: .max, lowWatermark: 0.5))
        let pushed = Progress()
        let done = spawn {
            for i in 0..<10 { pushed.record(q.push(i)) }
        }
        waitUntil("the queue is full") { pushed.count == 4 }
        usleep(50_000)
        XCTAssertEqual(pushed.count, 4, "the producer waits at the item limit")

        XCTAssertEqual(q.tryPull()?.element, 0)
        usleep(50_000)
        XCTAssertEqual(pushed.count, 4, "one take (3 queued, above 2) does not wake the producer")
        XCTAssertEqual(q.tryPull()?.element, 1)
        waitUntil("the producer refills the queue") { pushed.count == 6 }
        usleep(50_000)
        XCTAssertEqual(pushed.count, 6, "the producer refills to the limit and waits again")
        XCTAssertEqual(q.stats.queued, 4)

        XCTAssertEqual(q.tryPull()?.element, 2)
        usleep(50_000)
        XCTAssertEqual(pushed.count, 6, "the second batch waits for the watermark too")
        XCTAssertEqual(q.tryPull()?.element, 3)
        waitUntil("the second batch") { pushed.count == 8 }

        for want in 4..<10 { XCTAssertEqual(q.pull()?.element, want) }
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual(pushed.all, Array(repeating: .ok, count: 10))
        XCTAssertEqual(q.stats.peakItems, 4)
        XCTAssertEqual(q.stats.dropped, 0)
    }

    /// The byte limit: each push states its size; a producer waits once the bytes would pass it.
    func testBytesStatedByEachPushLimitTheQueue() {
        let q = BoundedQueue<String>(limits: LinkLimits(maxItems: 100, maxBytes: 10, lowWatermark: 0.5))
        XCTAssertEqual(q.push("a", bytes: 4), .ok)
        XCTAssertEqual(q.push("b", bytes: 4), .ok)
        let pushed = Progress()
        let done = spawn { pushed.record(q.push("c", bytes: 4)) }
        usleep(50_000)
        XCTAssertEqual(pushed.count, 0, "12 bytes would pass the limit of 10")
        XCTAssertEqual(q.pull()?.element, "a")
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success, "4 bytes queued is at the watermark (5)")
        XCTAssertEqual(q.stats.peakBytes, 8)
    }

    /// The time limit: a producer waits while the queued span would pass `maxDuration`.
    func testTimeLimitHoldsTheProducer() {
        let q = BoundedQueue<Int>(limits: LinkLimits(maxItems: 100, maxBytes: .max, maxDuration: 1.0, lowWatermark: 0.5))
        for (i, t) in [0.0, 0.5, 1.0].enumerated() { XCTAssertEqual(q.push(i, time: t), .ok) }
        let pushed = Progress()
        let done = spawn { pushed.record(q.push(3, time: 1.5)) }
        usleep(50_000)
        XCTAssertEqual(pushed.count, 0, "1.5 s after the oldest would span more than 1 s")
        XCTAssertEqual(q.pull()?.element, 0)
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
        XCTAssertEqual((1...3).map { _ in q.pull()?.element }, [1, 2, 3])
    }

    /// Drop-oldest discards the oldest to make room, counts each, and marks the element the
    /// consumer takes next.
    func testDropOldestMarksTheDiscontinuityAndCountsDrops() {
        let q = BoundedQueue<Int>(limits: LinkLimits(maxItems: 2, maxBytes: .max), policy: .dropOldest)
        for i in 1...5 { XCTAssertEqual(q.push(i), .ok) }
        XCTAssertEqual(q.stats.dropped, 3)
        let first = q.tryPull()
        XCTAssertEqual(first?.element, 4)
        XCTAssertEqual(first?.discontinuity, true)
        let second = q.tryPull()
        XCTAssertEqual(second?.element, 5)
        XCTAssertEqual(second?.discontinuity, false)
        XCTAssertNil(q.tryPull())
    }

    /// Drop-newest discards the arriving element, counts it, and marks the next one accepted.
    func testDropNewestMarksTheNextAcceptedElementAndCountsDrops() {
        let q = BoundedQueue<Int>(limits: LinkLimits(maxItems: 2, maxBytes: .max), policy: .dropNewest)
        for i in 1...4 { XCTAssertEqual(q.push(i), .ok, "a dropping queue never makes the producer wait") }
        XCTAssertEqual(q.stats.dropped, 2)
        XCTAssertEqual(q.tryPull().map { [$0.element, $0.discontinuity ? 1 : 0] }, [1, 0])
        XCTAssertEqual(q.tryPull().map { [$0.element, $0.discontinuity ? 1 : 0] }, [2, 0])
        XCTAssertEqual(q.push(5), .ok)
        XCTAssertEqual(q.tryPull().map { [$0.element, $0.discontinuity ? 1 : 0] }, [5, 1])
    }

    func testFlushReleasesABlockedProducerAndAWaitingConsumer() {
        let full = BoundedQueue<Int>(capacity: 1)
        XCTAssertEqual(full.push(0), .ok)
        let pushed = Progress()
        let producer = spawn { pushed.record(full.push(1)) }
        let empty = BoundedQueue<Int>(capacity: 1)
        let pulled = Progress()
        let consumer = spawn { pulled.record(empty.pull() == nil ? .flushing : .ok) }
        usleep(50_000)
        XCTAssertEqual(pushed.count + pulled.count, 0, "both wait")
        full.flush()
        empty.flush()
        XCTAssertEqual(producer.wait(timeout: .now() + 5), .success, "flush releases the producer")
        XCTAssertEqual(consumer.wait(timeout: .now() + 5), .success, "flush releases the consumer")
        XCTAssertEqual(pushed.all, [.flushing])
        XCTAssertEqual(pulled.all, [.flushing], "a flushed pull returns nil")
        XCTAssertNil(full.pull(), "the queued element was discarded")
        XCTAssertEqual(full.push(2), .flushing)
        XCTAssertFalse(full.wantsMore)
    }

    func testConsumerDoneReleasesABlockedProducerAndAWaitingConsumer() {
        let full = BoundedQueue<Int>(capacity: 1)
        XCTAssertEqual(full.push(0), .ok)
        let pushed = Progress()
        let producer = spawn { pushed.record(full.push(1)) }
        let empty = BoundedQueue<Int>(capacity: 1)
        let pulled = Progress()
        let consumer = spawn { pulled.record(empty.pull() == nil ? .endOfStream : .ok) }
        usleep(50_000)
        XCTAssertEqual(pushed.count + pulled.count, 0, "both wait")
        full.consumerDone()
        empty.consumerDone()
        XCTAssertEqual(producer.wait(timeout: .now() + 5), .success, "consumerDone releases the producer")
        XCTAssertEqual(consumer.wait(timeout: .now() + 5), .success, "consumerDone releases a waiting pull")
        XCTAssertEqual(pushed.all, [.endOfStream])
        XCTAssertEqual(pulled.all, [.endOfStream])
        XCTAssertEqual(full.push(2), .endOfStream)
        XCTAssertFalse(full.wantsMore)
        XCTAssertTrue(BoundedQueue<Int>(capacity: 1).wantsMore)
    }

    /// End of stream reaches the consumer after every queued element, including one a waiting
    /// consumer is woken for.
    func testEndOfStreamAfterTheQueuedElements() {
        let q = BoundedQueue<Int>(capacity: 4)
        q.push(1)
        q.push(2)
        q.endOfStream()
        XCTAssertEqual(q.pull()?.element, 1)
        XCTAssertEqual(q.pull()?.element, 2)
        XCTAssertNil(q.pull())
        XCTAssertEqual(q.push(3), .error("push after end of stream"))

        let waiting = BoundedQueue<Int>(capacity: 4)
        let pulled = Progress()
        let consumer = spawn {
            while let p = waiting.pull() { pulled.record(p.element == 7 ? .ok : .error("\(p.element)")) }
            pulled.record(.endOfStream)
        }
        usleep(20_000)
        waiting.push(7)
        waiting.endOfStream()
        XCTAssertEqual(consumer.wait(timeout: .now() + 5), .success)
        XCTAssertEqual(pulled.all, [.ok, .endOfStream])
    }

    /// Errors of the producer reach the consumer as elements (`Result`), in order.
    func testProducerErrorsTravelAsResults() {
        struct Broken: Error, Equatable {}
        let q = BoundedQueue<Result<Int, Broken>>(capacity: 2)
        let producer = spawn {
            q.push(.success(1))
            q.push(.failure(Broken()))
            q.endOfStream()
        }
        XCTAssertEqual(try q.pull()?.element.get(), 1)
        XCTAssertThrowsError(try q.pull()?.element.get()) { XCTAssertEqual($0 as? Broken, Broken()) }
        XCTAssertNil(q.pull())
        XCTAssertEqual(producer.wait(timeout: .now() + 5), .success)
    }

    /// The queue keeps no element alive that it no longer holds: dropped (either policy),
    /// flushed, discarded by `consumerDone`, or pulled and let go.
    func testElementsAreReleasedWhenDroppedFlushedOrTaken() {
        weak var droppedOldest: Token?
        weak var droppedNewest: Token?
        weak var flushed: Token?
        weak var discarded: Token?
        weak var taken: Token?

        let oldest = BoundedQueue<Token>(limits: LinkLimits(maxItems: 1, maxBytes: .max), policy: .dropOldest)
        do {
            let t = Token(1)
            droppedOldest = t
            oldest.push(t)
        }
        oldest.push(Token(2))
        XCTAssertNil(droppedOldest, "drop-oldest releases the dropped element at once")

        let newest = BoundedQueue<Token>(limits: LinkLimits(maxItems: 1, maxBytes: .max), policy: .dropNewest)
        newest.push(Token(1))
        do {
            let t = Token(2)
            droppedNewest = t
            newest.push(t)
        }
        XCTAssertNil(droppedNewest, "drop-newest keeps no reference to the arriving element")

        let f = BoundedQueue<Token>(capacity: 4)
        do {
            let t = Token(1)
            flushed = t
            f.push(t)
        }
        XCTAssertNotNil(flushed, "queued: the queue owns it")
        f.flush()
        XCTAssertNil(flushed, "flush releases queued elements")

        let c = BoundedQueue<Token>(capacity: 4)
        do {
            let t = Token(1)
            discarded = t
            c.push(t)
        }
        c.consumerDone()
        XCTAssertNil(discarded, "consumerDone releases queued elements")

        let p = BoundedQueue<Token>(capacity: 4)
        do {
            let t = Token(1)
            taken = t
            p.push(t)
            p.push(Token(2))
        }
        do {
            let got = p.pull()
            XCTAssertEqual(got?.element.n, 1)
        }
        XCTAssertNil(taken, "a pulled element belongs to the puller alone")
        XCTAssertEqual(p.stats.queued, 1)
    }

    /// One producer, one consumer, a small blocking queue: every element arrives once, in order.
    func testOrderIsKeptUnderAProducerConsumerPair() {
        let n = 100_000
        let q = BoundedQueue<Int>(limits: LinkLimits(maxItems: 16, maxBytes: 64, lowWatermark: 0.5))
        let producer = spawn {
            for i in 0..<n where q.push(i, bytes: Int64(i % 8)) != .ok { return }
            q.endOfStream()
        }
        var next = 0
        var outOfOrder = 0
        while let p = q.pull() {
            if p.element != next { outOfOrder += 1 }
            if p.discontinuity { outOfOrder += 1 }
            next = p.element + 1
        }
        XCTAssertEqual(producer.wait(timeout: .now() + 30), .success)
        XCTAssertEqual(outOfOrder, 0)
        XCTAssertEqual(next, n)
        let st = q.stats
        XCTAssertLessThanOrEqual(st.peakItems, 16)
        XCTAssertEqual(st.dropped, 0)
        XCTAssertEqual(st.queued, 0)
    }
}
