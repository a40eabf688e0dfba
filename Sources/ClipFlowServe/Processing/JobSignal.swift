import Synchronization

/// Wakes the idle workers when a job is queued. `ring` resumes every waiter at once; a waiter
/// also returns after its timeout, the fallback for jobs nobody rang for (queued by a server that
/// could not tell this one, or requeued). A ring between a worker's look at the queue and its
/// wait is not lost: the worker waits for a ring later than the count it read before it looked.
/// Thread-safe; `Sendable`.
final class JobSignal: Sendable {
    private struct State {
        var rings: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextWaiter: UInt64 = 0
    }

    private let state = Mutex(State())

    /// How many times it has rung.
    var rings: UInt64 { state.withLock { $0.rings } }

    func ring() {
        let woken = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.rings &+= 1
            defer { s.waiters.removeAll() }
            return Array(s.waiters.values)
        }
        for waiter in woken { waiter.resume() }
    }

    /// Returns once it has rung more than `seen` times in all, after `seconds`, or when the task
    /// is cancelled, whichever comes first.
    func wait(after seen: UInt64, atMost seconds: Double) async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.waitForRing(after: seen) }
            group.addTask { try? await Task.sleep(for: .seconds(seconds)) }
            await group.next()
            group.cancelAll()
        }
    }

    private func waitForRing(after seen: UInt64) async {
        let id = state.withLock { s -> UInt64 in
            defer { s.nextWaiter &+= 1 }
            return s.nextWaiter
        }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let waits = state.withLock { s -> Bool in
                    guard s.rings == seen, !Task.isCancelled else { return false }
                    s.waiters[id] = continuation
                    return true
                }
                if !waits { continuation.resume() }
            }
        } onCancel: {
            state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
        }
    }
}
