import Foundation

/// Calls `body` every `interval` seconds on a dispatch queue, with no thread of its own, until
/// `body` returns false or `stop()` is called (then `body` is not called again once a call in
/// progress returns). For periodic upkeep beside other work: redrawing a status line, keeping a
/// process's priority, polling a caller's abort flag. Thread-safe.
public final class RepeatingTimer: Sendable {
    /// Set by `stop()`; the timer's next tick sees it and ends the timer instead of calling `body`.
    private let stopped = CancellationFlag()

    /// Starts at once; the first call comes after `interval`. The dispatch timer's handler holds
    /// the timer (not this object), so the calls go on whether or not this object is kept.
    public init(every interval: Double, label: String, _ body: @escaping @Sendable () -> Bool) {
        let source = DispatchSource.makeTimerSource(queue: DispatchQueue(label: label))
        let stopped = self.stopped
        source.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(Int(interval * 100)))
        source.setEventHandler {
            if stopped.isCancelled || !body() {
                source.setEventHandler(handler: nil)
                source.cancel()
            }
        }
        source.resume()
    }

    /// Ends the calls. Any thread, any number of times.
    public func stop() { stopped.cancel() }
}
