import Foundation

/// Calls `body` every `interval` seconds on a dispatch queue, with no thread of its own, until
/// `body` returns false or `stop()` is called (then `body` is not called again once a call in
/// progress returns). For periodic upkeep beside other work: redrawing a status line, keeping a
/// process's priority, polling a caller's abort flag. Thread-safe.
public final class RepeatingTimer: @unchecked Sendable {
    /// The dispatch timer. Its handler holds the source (not this object), so the calls go on
    /// whether or not this object is kept, until the source is cancelled.
    private let source: DispatchSourceTimer

    /// Starts at once; the first call comes after `interval`.
    public init(every interval: Double, label: String, _ body: @escaping @Sendable () -> Bool) {
        let source = DispatchSource.makeTimerSource(queue: DispatchQueue(label: label))
        self.source = source
        source.schedule(deadline: .now() + interval, repeating: interval, leeway: .milliseconds(Int(interval * 100)))
        source.setEventHandler {
            if !body() { source.cancel() }
        }
        source.setCancelHandler { source.setEventHandler(handler: nil) }
        source.resume()
    }

    /// Ends the calls. Any thread, any number of times.
    public func stop() { source.cancel() }
}
