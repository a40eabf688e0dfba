/// What a stage made, as a typed value: the stage emits it as its `result` event (the fields
/// `--events json` writes) and a command's summary reads it back by its type
/// (`ResultFields.decode`), so each field's name and kind are written in one place, the type's.
public protocol StageResult: Sendable {
    /// The fields of its `result` event.
    var fields: [EventField] { get }
    /// The value a `result` event's fields say; a field that is missing or of another kind reads
    /// as its default.
    init(fields: [EventField])
}

extension StageContext {
    /// Emits `result` as the stage's `result` event.
    public func emit(_ result: some StageResult) { emit(.result(result.fields)) }
}

extension Array where Element == EventField {
    /// The integer field `key` as an `Int` (0 when missing).
    public func int(_ key: String) -> Int { Int(self[key]?.integer ?? 0) }
    /// The integer field `key` (0 when missing).
    public func int64(_ key: String) -> Int64 { self[key]?.integer ?? 0 }
    /// The number field `key` (0 when missing).
    public func double(_ key: String) -> Double { self[key]?.number ?? 0 }
    /// The string field `key` ("" when missing).
    public func text(_ key: String) -> String { self[key]?.string ?? "" }
}
