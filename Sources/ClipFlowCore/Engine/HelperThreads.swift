import Foundation

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

    /// Returns once every thread started so far has ended.
    public func wait() { running.wait() }
}
