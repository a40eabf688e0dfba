import Foundation

/// Something a stage or the runner reports. Delivered in order per stage.
public struct PipelineEvent: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case started
        /// `completed` of `total` `unit` (total 0: unknown); `speed`: media seconds per wall-clock
        /// second, for work on media time.
        case progress(completed: Int64, total: Int64, unit: String, speed: Double? = nil)
        /// A file the stage wrote.
        case output(path: String)
        /// Items dropped so far for one cause: a stage's input links shed them (drop policies
        /// only), or a source could not deliver them (a camera's pictures lost while it was not
        /// read in time). `cause` says what is dropped and why, as a line after the stage's name
        /// reads (`dropping pictures: ...`); a stage may drop for more than one cause, each with
        /// its own count.
        case dropped(count: Int, cause: String)
        /// A non-fatal notice.
        case notice(String)
        /// At the end of a run, for each input link of the stage: the deepest it got and what it
        /// dropped.
        case queue(from: String, peakItems: Int, peakBytes: Int64, dropped: Int)
        /// What the stage made, for summaries (a merge: clips, frames, bytes; a cover: its size).
        case result([EventField])
        /// An event of one item among several the stage handles (one upload of a queue): `name`
        /// (started, progress, finished, failed, ...), its fields, and `text`, the line a person
        /// reads. Item progress carries the integer fields `acknowledged` and `total`. Fields and
        /// text are free of secrets.
        case item(id: String, name: String, fields: [EventField], text: String)
        /// A helper thread of the stage (`HelperThreads`) started (`running`) or ended.
        case helper(name: String, running: Bool)
        case finished
        /// The stage failed: its message, and what the failure was (nil for a stage stopped
        /// because another failed: that one's `failed` event names it).
        case failed(String, kind: FailureKind? = nil)
        case interrupted
    }
    public var stage: String
    public var kind: Kind
    public var time: Double
    /// The batch row whose run the event belongs to (`clipflow batch`); nil outside a batch.
    public var row: Int?
    public init(stage: String, kind: Kind, time: Double, row: Int? = nil) {
        self.stage = stage
        self.kind = kind
        self.time = time
        self.row = row
    }
}

/// Passes every event on to `sink` marked with `row` (one batch row's run).
public struct RowEventSink: EventSink {
    public let row: Int
    public let sink: EventSink
    public init(row: Int, sink: EventSink) {
        self.row = row
        self.sink = sink
    }
    public func emit(_ event: PipelineEvent) {
        var e = event
        e.row = row
        sink.emit(e)
    }
}

/// Receives events from every stage; must be thread-safe and cheap.
public protocol EventSink: Sendable {
    func emit(_ event: PipelineEvent)
}

/// One named value of an event (`--events json` writes it as a key of the event's line).
public struct EventField: Sendable, Equatable {
    public var key: String
    public var value: EventValue
    public init(_ key: String, _ value: EventValue) {
        self.key = key
        self.value = value
    }
}

/// A JSON-shaped value of an event field.
public enum EventValue: Sendable, Equatable {
    case string(String)
    case integer(Int64)
    case number(Double)
    case bool(Bool)
    case object([EventField])
}

extension Array where Element == EventField {
    /// The value of `key`, if present.
    public subscript(key: String) -> EventValue? { first { $0.key == key }?.value }
}

extension EventValue {
    public var integer: Int64? { if case .integer(let n) = self { return n } else { return nil } }
    public var number: Double? {
        switch self {
        case .number(let n): return n
        case .integer(let n): return Double(n)
        default: return nil
        }
    }
    public var string: String? { if case .string(let s) = self { return s } else { return nil } }
}
