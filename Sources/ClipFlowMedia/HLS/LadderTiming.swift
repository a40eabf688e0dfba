import ClipFlowCore
import Foundation
import Synchronization

/// Where a ladder's encoded renditions start their segments when the ladder may hold the source's
/// own packets (a copy or a passthrough top rung): decided once, by the copy stage, from the
/// source's keyframes; awaited by each encoded rendition before its first picture. Any thread:
/// the decision is behind a mutex, and the engine's `Doorbell` rings when it is made.
final class LadderTiming: Sendable {
    enum Decision: Equatable, Sendable {
        /// The regular schedule: no rendition is the source's packets.
        case schedule
        /// Segments start at these keyframes of the source; `replacing` names the rung a
        /// passthrough stands in for (nil: none, the copy is a rendition of its own).
        case keyframes([Double], replacing: String?)
    }

    private let decision = Mutex<Decision?>(nil)
    private let decided = Doorbell()

    /// Sets the decision; only the first one counts.
    func decide(_ d: Decision) {
        decision.withLock { if $0 == nil { $0 = d } }
        decided.ring()
    }

    /// Waits for the decision; nil when `stopped()` turned true first.
    func await(until stopped: () -> Bool) -> Decision? {
        while true {
            let seen = decided.count
            if let d = decision.withLock({ $0 }) { return d }
            if stopped() { return nil }
            decided.wait(after: seen, atMost: 0.2)
        }
    }
}
