import ClipFlowCore
import Foundation

/// Where a ladder's encoded renditions start their segments when the ladder may hold the source's
/// own packets (a copy or a passthrough top rung): decided once, by the copy stage, from the
/// source's keyframes; awaited by each encoded rendition before its first picture. Any thread:
/// `condition` guards `decision` (hence `@unchecked Sendable`), set once by the copy stage.
final class LadderTiming: @unchecked Sendable {
    enum Decision: Equatable {
        /// The regular schedule: no rendition is the source's packets.
        case schedule
        /// Segments start at these keyframes of the source; `replacing` names the rung a
        /// passthrough stands in for (nil: none, the copy is a rendition of its own).
        case keyframes([Double], replacing: String?)
    }

    private let condition = NSCondition()
    private var decision: Decision?

    /// Sets the decision; only the first one counts.
    func decide(_ d: Decision) {
        condition.lock()
        if decision == nil { decision = d }
        condition.broadcast()
        condition.unlock()
    }

    /// Waits for the decision; nil when `stopped()` turned true first.
    func await(until stopped: () -> Bool) -> Decision? {
        condition.lock()
        defer { condition.unlock() }
        while decision == nil {
            if stopped() { return nil }
            _ = condition.wait(until: Date().addingTimeInterval(0.2))
        }
        return decision
    }
}
