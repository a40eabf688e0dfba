import Foundation

/// A progress report from long work: `completed` out of `total` units of `unit`
/// (for a merge: bytes of samples copied). `phase` names the step ("merge", "thumbnail").
public struct ProgressEvent: Sendable, Equatable {
    public var phase: String
    public var completed: Int64
    public var total: Int64
    public var unit: String
    /// Media seconds processed per wall-clock second so far (nil where the work is not media time).
    public var speed: Double?
    public init(phase: String, completed: Int64, total: Int64, unit: String = "bytes", speed: Double? = nil) {
        self.phase = phase
        self.completed = completed
        self.total = total
        self.unit = unit
        self.speed = speed
    }
    public var fraction: Double { total > 0 ? min(1, Double(completed) / Double(total)) : 0 }
}

/// Receives progress events. Called on the worker's thread; implementations must be cheap and
/// thread-safe (the CLI's renderer rate-limits itself).
public protocol ProgressReporter: Sendable {
    func report(_ event: ProgressEvent)
    /// A non-fatal notice for the user (e.g. a fallback was taken).
    func notice(_ message: String)
}

public struct SilentProgress: ProgressReporter {
    public init() {}
    public func report(_ event: ProgressEvent) {}
    public func notice(_ message: String) {}
}
