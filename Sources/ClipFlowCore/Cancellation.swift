import Foundation
import Synchronization

/// A one-way cancellation flag shared between a signal handler (or a controlling thread) and
/// long-running work. Work polls `isCancelled` at safe points (per packet) and throws
/// `ClipFlowError.interrupted`. Thread-safe; owned by whoever starts the work.
public final class CancellationFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    public init() {}
    public var isCancelled: Bool { flag.load(ordering: .acquiring) }
    public func cancel() { flag.store(true, ordering: .releasing) }
    /// Throws `ClipFlowError.interrupted` if cancelled.
    public func check() throws {
        if isCancelled { throw ClipFlowError.interrupted }
    }
}
