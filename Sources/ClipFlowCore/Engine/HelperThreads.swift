import Foundation
import Synchronization

/// Threads a stage's work starts beside the stage's queue (a merge's clip opener, its join
/// audio's renderer and preparer), and the threads of work that must block outside any graph
/// (a batch's row workers, an upload queue's transfers, readers of standard input): the one way
/// code here starts a thread (periodic upkeep uses `RepeatingTimer` instead). Through a stage's
/// context (`StageContext.helpers`) the runner sees each one (a `helper` event when it starts
/// and when it ends) and, once the stage's hooks have returned, waits for every one before the
/// stage finishes, so none outlives its stage; a stop or cancel reaches them through the flags
/// the stage hands them (its `onStop`/`onCancel`). Work outside a graph (a merge run directly)
/// uses a set of its own, `HelperThreads()`, and waits with `wait()`. Thread-safe.
public final class HelperThreads: Sendable {
    private let running = DispatchGroup()
    private let announce: (@Sendable (_ name: String, _ running: Bool) -> Void)?

    /// A set no runner watches.
    public init() { announce = nil }

    init(announce: @escaping @Sendable (_ name: String, _ running: Bool) -> Void) { self.announce = announce }

    /// Runs `body` on a thread of its own named `name`, with a stack of `stackSize` bytes (nil:
    /// the system's default).
    public func start(_ name: String, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) {
        running.enter()
        announce?(name, true)
        let thread = Thread { [running, announce] in
            body()
            announce?(name, false)
            running.leave()
        }
        thread.name = name
        if let stackSize { thread.stackSize = stackSize }
        thread.start()
    }

    /// Runs `body` on a thread of its own, as `start`, for work blocked in calls that may never
    /// return (a device read whose driver or sound server hung). Until its owner calls
    /// `AbandonableHelper.abandon()`, it counts as any other helper; once abandoned it no longer
    /// does: `wait()` does not wait for it, its end is announced at the abandonment and not
    /// again, and what it owns stays with it (leaked if it never returns).
    public func startAbandonable(_ name: String, stackSize: Int? = nil, _ body: @escaping @Sendable () -> Void) -> AbandonableHelper {
        running.enter()
        announce?(name, true)
        let helper = AbandonableHelper { [running, announce] in
            announce?(name, false)
            running.leave()
        }
        let thread = Thread {
            body()
            helper.ended()
        }
        thread.name = name
        if let stackSize { thread.stackSize = stackSize }
        thread.start()
        return helper
    }

    /// Returns once every thread started so far has ended (or was abandoned).
    public func wait() { running.wait() }
}

/// A thread started by `HelperThreads.startAbandonable`: its owner may wait for it a bounded
/// time, then abandon it. Thread-safe.
public final class AbandonableHelper: Sendable {
    private struct State {
        var ended = false
        var abandoned = false
    }
    private let state = Mutex(State())
    private let done = DispatchGroup()
    /// Counts the thread out of its set: runs once, at its end or at its abandonment.
    private let release: @Sendable () -> Void

    init(release: @escaping @Sendable () -> Void) {
        self.release = release
        done.enter()
    }

    func ended() {
        let counted = state.withLock { s -> Bool in
            s.ended = true
            return !s.abandoned
        }
        if counted { release() }
        done.leave()
    }

    /// Waits at most `seconds` for the thread to end: true once it has.
    public func wait(seconds: Double) -> Bool {
        done.wait(timeout: .now() + max(0, seconds)) == .success
    }

    /// Stops counting the thread among its set's: true if it was still running (it is left
    /// behind), false if it had ended already.
    @discardableResult
    public func abandon() -> Bool {
        let left = state.withLock { s -> Bool in
            if s.ended || s.abandoned { return false }
            s.abandoned = true
            return true
        }
        if left { release() }
        return left
    }
}
