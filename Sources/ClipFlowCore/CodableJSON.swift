import Foundation

/// A JSON value of any shape, read with `JSONDecoder` and written with `JSONEncoder`: for JSON
/// whose layout is not ours (a credential helper's answer, ArgumentParser's description of the
/// commands), read whole and kept whole. Pipeline documents have their own `JSONValue`, which
/// keeps each value's line and the keys' order for their errors.
///
/// Decoding it checks the whole document (a broken string anywhere fails it, as
/// `JSONSerialization` did). An integer that fits in `Int` is `.integer` and is written back
/// without a fraction; any other number is `.double`. Of a key written twice in one object,
/// `JSONDecoder` keeps the first.
public enum CodableJSON: Sendable, Hashable, Codable {
    case null
    case bool(Bool)
    case integer(Int)
    case double(Double)
    case string(String)
    case array([CodableJSON])
    case object([String: CodableJSON])

    public init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() {
            self = .null
        } else if let b = try? c.decode(Bool.self) {
            self = .bool(b)
        } else if let i = try? c.decode(Int.self) {
            self = .integer(i)
        } else if let d = try? c.decode(Double.self) {
            self = .double(d)
        } else if let s = try? c.decode(String.self) {
            self = .string(s)
        } else if let a = try? c.decode([CodableJSON].self) {
            self = .array(a)
        } else {
            self = .object(try c.decode([String: CodableJSON].self))
        }
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.singleValueContainer()
        switch self {
        case .null: try c.encodeNil()
        case .bool(let b): try c.encode(b)
        case .integer(let i): try c.encode(i)
        case .double(let d): try c.encode(d)
        case .string(let s): try c.encode(s)
        case .array(let a): try c.encode(a)
        case .object(let o): try c.encode(o)
        }
    }

    /// The value when it is a string, else nil.
    public var string: String? { if case .string(let s) = self { return s } else { return nil } }
    /// The elements when it is an array, else nil.
    public var array: [CodableJSON]? { if case .array(let a) = self { return a } else { return nil } }
    /// The members when it is an object, else nil.
    public var object: [String: CodableJSON]? { if case .object(let o) = self { return o } else { return nil } }

    /// The member `key` (spelt exactly) when this is an object that has it, else nil.
    public subscript(key: String) -> CodableJSON? { object?[key] }
}
