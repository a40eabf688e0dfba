import Foundation

/// A JSON value that remembers where it was in the text (for errors that name a line) and keeps
/// object keys in their written order (for duplicate-key errors and stable output).
public enum JSONValue: Sendable, Equatable {
    case null
    case bool(Bool)
    case number(Double)
    case string(String)
    case array([JSONNode])
    case object([(key: String, value: JSONNode)])

    public static func == (a: JSONValue, b: JSONValue) -> Bool {
        switch (a, b) {
        case (.null, .null): return true
        case let (.bool(x), .bool(y)): return x == y
        case let (.number(x), .number(y)): return x == y
        case let (.string(x), .string(y)): return x == y
        case let (.array(x), .array(y)): return x.map(\.value) == y.map(\.value)
        case let (.object(x), .object(y)):
            return x.count == y.count && zip(x, y).allSatisfy { $0.key == $1.key && $0.value.value == $1.value.value }
        default: return false
        }
    }

    /// The JSON type's name as an error message says it.
    public var typeName: String {
        switch self {
        case .null: return "null"
        case .bool: return "a boolean"
        case .number(let n): return n == n.rounded() ? "an integer" : "a number"
        case .string: return "a string"
        case .array: return "an array"
        case .object: return "an object"
        }
    }
}

public struct JSONNode: Sendable, Equatable {
    public var value: JSONValue
    public var line: Int
    public var column: Int
    public init(_ value: JSONValue, line: Int = 0, column: Int = 0) {
        self.value = value
        self.line = line
        self.column = column
    }

    public subscript(key: String) -> JSONNode? {
        if case .object(let members) = value { return members.last(where: { $0.key == key })?.value }
        return nil
    }
}

public struct JSONSyntaxError: Error, Equatable, CustomStringConvertible {
    public var line: Int
    public var column: Int
    public var message: String
    public var description: String { "line \(line), column \(column): \(message)" }
}

/// A strict RFC 8259 parser (no comments, no trailing commas) that reports line and column.
public struct JSONParser {
    private let bytes: [UInt8]
    private var i = 0
    private var line = 1
    private var lineStart = 0
    private var depth = 0

    public static func parse(_ text: String) throws -> JSONNode {
        var p = JSONParser(bytes: Array(text.utf8))
        p.skipSpace()
        let v = try p.value()
        p.skipSpace()
        if p.i < p.bytes.count { throw p.error("unexpected \(p.describeHere()) after the end of the document") }
        return v
    }

    private init(bytes: [UInt8]) { self.bytes = bytes }

    /// The column of the last position asked for, so that asking again further along the same
    /// line counts only the bytes in between (a one-line document stays linear).
    private var counted = (index: 0, column: 1)

    /// Column of the current position. Columns count characters, not bytes.
    private mutating func column() -> Int {
        if counted.index < lineStart || counted.index > i { counted = (lineStart, 1) }
        var (k, c) = counted
        while k < i { if bytes[k] & 0xC0 != 0x80 { c += 1 }; k += 1 }
        counted = (k, c)
        return c
    }

    private mutating func error(_ m: String) -> JSONSyntaxError { JSONSyntaxError(line: line, column: column(), message: m) }

    private func describeHere() -> String {
        guard i < bytes.count else { return "end of file" }
        let b = bytes[i]
        if b >= 0x20 && b < 0x7F { return "'\(Character(UnicodeScalar(b)))'" }
        return String(format: "byte 0x%02X", b)
    }

    private mutating func skipSpace() {
        while i < bytes.count {
            switch bytes[i] {
            case 0x20, 0x09, 0x0D: i += 1
            case 0x0A: i += 1; line += 1; lineStart = i
            default: return
            }
        }
    }

    private mutating func value() throws -> JSONNode {
        let l = line, c = column()
        guard i < bytes.count else { throw error("unexpected end of file, expected a value") }
        depth += 1
        defer { depth -= 1 }
        if depth > 512 { throw error("nesting deeper than 512 levels") }
        switch bytes[i] {
        case UInt8(ascii: "{"): return JSONNode(try object(), line: l, column: c)
        case UInt8(ascii: "["): return JSONNode(try array(), line: l, column: c)
        case UInt8(ascii: "\""): return JSONNode(.string(try string()), line: l, column: c)
        case UInt8(ascii: "t"): try literal("true"); return JSONNode(.bool(true), line: l, column: c)
        case UInt8(ascii: "f"): try literal("false"); return JSONNode(.bool(false), line: l, column: c)
        case UInt8(ascii: "n"): try literal("null"); return JSONNode(.null, line: l, column: c)
        case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return JSONNode(.number(try number()), line: l, column: c)
        default: throw error("unexpected \(describeHere()), expected a value")
        }
    }

    private mutating func literal(_ word: String) throws {
        for b in word.utf8 {
            guard i < bytes.count, bytes[i] == b else { throw error("unexpected \(describeHere()), expected '\(word)'") }
            i += 1
        }
    }

    private mutating func object() throws -> JSONValue {
        i += 1
        var members: [(key: String, value: JSONNode)] = []
        skipSpace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
        while true {
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: "\"") else {
                throw error("unexpected \(describeHere()), expected a key in double quotes")
            }
            let key = try string()
            skipSpace()
            guard i < bytes.count, bytes[i] == UInt8(ascii: ":") else { throw error("unexpected \(describeHere()), expected ':' after the key \"\(key)\"") }
            i += 1
            skipSpace()
            let v = try value()
            members.append((key, v))
            skipSpace()
            guard i < bytes.count else { throw error("unexpected end of file, expected ',' or '}'") }
            if bytes[i] == UInt8(ascii: ",") {
                i += 1
                skipSpace()
                if i < bytes.count, bytes[i] == UInt8(ascii: "}") { throw error("trailing ',' before '}'") }
                continue
            }
            if bytes[i] == UInt8(ascii: "}") { i += 1; return .object(members) }
            throw error("unexpected \(describeHere()), expected ',' or '}'")
        }
    }

    private mutating func array() throws -> JSONValue {
        i += 1
        var items: [JSONNode] = []
        skipSpace()
        if i < bytes.count, bytes[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
        while true {
            skipSpace()
            items.append(try value())
            skipSpace()
            guard i < bytes.count else { throw error("unexpected end of file, expected ',' or ']'") }
            if bytes[i] == UInt8(ascii: ",") {
                i += 1
                skipSpace()
                if i < bytes.count, bytes[i] == UInt8(ascii: "]") { throw error("trailing ',' before ']'") }
                continue
            }
            if bytes[i] == UInt8(ascii: "]") { i += 1; return .array(items) }
            throw error("unexpected \(describeHere()), expected ',' or ']'")
        }
    }

    private mutating func string() throws -> String {
        i += 1
        var out: [UInt8] = []
        while true {
            guard i < bytes.count else { throw error("unterminated string") }
            let b = bytes[i]
            if b == UInt8(ascii: "\"") { i += 1; break }
            if b < 0x20 { throw error("control character in a string (write it as an escape, e.g. \\n)") }
            if b == UInt8(ascii: "\\") {
                i += 1
                guard i < bytes.count else { throw error("unterminated string") }
                let e = bytes[i]
                i += 1
                switch e {
                case UInt8(ascii: "\""): out.append(0x22)
                case UInt8(ascii: "\\"): out.append(0x5C)
                case UInt8(ascii: "/"): out.append(0x2F)
                case UInt8(ascii: "b"): out.append(0x08)
                case UInt8(ascii: "f"): out.append(0x0C)
                case UInt8(ascii: "n"): out.append(0x0A)
                case UInt8(ascii: "r"): out.append(0x0D)
                case UInt8(ascii: "t"): out.append(0x09)
                case UInt8(ascii: "u"):
                    var code = try hex4()
                    if (0xD800..<0xDC00).contains(code) {
                        guard i + 1 < bytes.count, bytes[i] == UInt8(ascii: "\\"), bytes[i + 1] == UInt8(ascii: "u") else {
                            throw error("unpaired surrogate in \\u escape")
                        }
                        i += 2
                        let low = try hex4()
                        guard (0xDC00..<0xE000).contains(low) else { throw error("unpaired surrogate in \\u escape") }
                        code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00)
                    }
                    guard let scalar = Unicode.Scalar(code) else { throw error("invalid \\u escape") }
                    out.append(contentsOf: Array(String(Character(scalar)).utf8))
                default:
                    i -= 1
                    throw error("invalid escape '\\\(Character(UnicodeScalar(e)))'")
                }
                continue
            }
            out.append(b)
            i += 1
        }
        guard let s = String(validating: out, as: UTF8.self) else { throw error("string is not valid UTF-8") }
        return s
    }

    private mutating func hex4() throws -> UInt32 {
        var v: UInt32 = 0
        for _ in 0..<4 {
            guard i < bytes.count, let d = Self.hexDigit(bytes[i]) else { throw error("invalid \\u escape (four hex digits expected)") }
            v = v * 16 + d
            i += 1
        }
        return v
    }

    private static func hexDigit(_ b: UInt8) -> UInt32? {
        switch b {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return UInt32(b - UInt8(ascii: "0"))
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return UInt32(b - UInt8(ascii: "a") + 10)
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return UInt32(b - UInt8(ascii: "A") + 10)
        default: return nil
        }
    }

    private mutating func number() throws -> Double {
        let start = i
        if bytes[i] == UInt8(ascii: "-") { i += 1 }
        func digits() -> Int { var n = 0; while i < bytes.count, bytes[i] >= 0x30, bytes[i] <= 0x39 { i += 1; n += 1 }; return n }
        guard i < bytes.count else { throw error("unexpected end of file in a number") }
        if bytes[i] == UInt8(ascii: "0") { i += 1 } else if digits() == 0 { throw error("invalid number") }
        if i < bytes.count, bytes[i] == UInt8(ascii: ".") {
            i += 1
            if digits() == 0 { throw error("invalid number: digits expected after '.'") }
        }
        if i < bytes.count, bytes[i] == UInt8(ascii: "e") || bytes[i] == UInt8(ascii: "E") {
            i += 1
            if i < bytes.count, bytes[i] == UInt8(ascii: "+") || bytes[i] == UInt8(ascii: "-") { i += 1 }
            if digits() == 0 { throw error("invalid number: digits expected in the exponent") }
        }
        let text = String(decoding: bytes[start..<i], as: UTF8.self)
        guard let d = Double(text), d.isFinite else { throw error("number out of range") }
        return d
    }
}

extension JSONValue {
    /// Compact JSON text (keys in their order).
    public var serialized: String {
        switch self {
        case .null: return "null"
        case .bool(let b): return b ? "true" : "false"
        case .number(let n):
            if n == n.rounded(), abs(n) < 1e15 { return String(Int64(n)) }
            return String(n)
        case .string(let s): return JSONValue.quote(s)
        case .array(let a): return "[" + a.map(\.value.serialized).joined(separator: ",") + "]"
        case .object(let o): return "{" + o.map { JSONValue.quote($0.key) + ":" + $0.value.value.serialized }.joined(separator: ",") + "}"
        }
    }

    public static func quote(_ s: String) -> String {
        var out = "\""
        for u in s.unicodeScalars {
            switch u {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                // Control characters, DEL, and the line separators JavaScript reads as line ends.
                if u.value < 0x20 || u.value == 0x7F || u.value == 0x2028 || u.value == 0x2029 {
                    out += String(format: "\\u%04x", u.value)
                } else {
                    out.unicodeScalars.append(u)
                }
            }
        }
        return out + "\""
    }
}
