import Foundation

/// Something a stage or the runner reports. Delivered in order per stage.
public struct PipelineEvent: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case started
        /// `completed` of `total` `unit` (total 0: unknown).
        case progress(completed: Int64, total: Int64, unit: String)
        /// A file the stage wrote.
        case output(path: String)
        /// Items dropped on the stage's input links so far (drop policies only).
        case dropped(count: Int)
        /// A non-fatal notice.
        case notice(String)
        /// At the end of a run, for each input link of the stage: the deepest it got and what it
        /// dropped.
        case queue(from: String, peakItems: Int, peakBytes: Int64, dropped: Int)
        case finished
        case failed(String)
        case interrupted
    }
    public var stage: String
    public var kind: Kind
    public var time: Double
    public init(stage: String, kind: Kind, time: Double) {
        self.stage = stage
        self.kind = kind
        self.time = time
    }
}

/// Receives events from every stage; must be thread-safe and cheap.
public protocol EventSink: Sendable {
    func emit(_ event: PipelineEvent)
}
