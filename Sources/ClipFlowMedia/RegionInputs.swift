import ClipFlowCore
import Foundation

/// PCM of the regions, handed in order from the preparing thread to the encoding thread (at most
/// `capacity` waiting). Ownership of each array passes with it.
/// `@unchecked Sendable`: every field is guarded by `cond`.
final class RegionInputs: @unchecked Sendable {
    private let cond = NSCondition()
    private var queue: [Result<[[Float]], Error>] = []
    private let capacity: Int
    private var cancelledFlag = false
    private var finished = false

    init(capacity: Int) { self.capacity = capacity }

    /// Set when the encoding side stops early: the preparer then does no more work.
    var cancelled: Bool { cond.lock(); defer { cond.unlock() }; return cancelledFlag }

    func put(_ r: Result<[[Float]], Error>) {
        cond.lock()
        while queue.count >= capacity && !cancelledFlag { cond.wait() }
        if !cancelledFlag { queue.append(r) }
        cond.broadcast()
        cond.unlock()
    }
    func take() -> Result<[[Float]], Error> {
        cond.lock()
        defer { cond.unlock() }
        while queue.isEmpty {
            if cancelledFlag || finished { return .failure(ClipFlowError.interrupted) }
            cond.wait()
        }
        let r = queue.removeFirst()
        cond.broadcast()
        return r
    }
    func cancel() {
        cond.lock(); cancelledFlag = true; queue.removeAll(); cond.broadcast(); cond.unlock()
    }
    func finish() {
        cond.lock(); finished = true; cond.broadcast(); cond.unlock()
    }
    func waitFinished() {
        cond.lock(); while !finished { cond.wait() }; cond.unlock()
    }
}
