import ClipFlowCore
import Foundation

/// One row of a batch: its place (0-based, the index `--index` and the engines' array indexes
/// name), the pipeline variables it sets, and where it came from, for messages. A row that could
/// not be read (a CSV line with too many fields, a JSON line that is not an object) carries its
/// `problem` and fails alone when its turn comes.
public struct BatchRow: Sendable, Equatable {
    public var index: Int
    public var values: [String: String]
    /// "rows.csv:12", "clips/set-007".
    public var origin: String
    public var problem: String?

    public init(index: Int, values: [String: String], origin: String, problem: String? = nil) {
        self.index = index
        self.values = values
        self.origin = origin
        self.problem = problem
    }
}

/// Reads the rows of a batch: a CSV file with a header, JSON lines, or one row per sub-folder.
public enum BatchRows {
    /// A variable name as pipelines write it (`${NAME}`).
    static let variableName = "^[A-Za-z_][A-Za-z0-9_]*$"

    /// Rows from `file`: JSON lines when its name ends in `.jsonl`/`.ndjson` or its first
    /// non-blank character is `{`, else CSV with a header line. Blank lines are no rows. A file
    /// that cannot be read, or a CSV header that is not variable names, is an error for the
    /// whole batch; a bad line is a bad row.
    public static func read(_ file: String) throws -> [BatchRow] {
        let data: Data
        do { data = try Data(contentsOf: URL(fileURLWithPath: file)) } catch {
            var isDir: ObjCBool = false
            if !FileManager.default.fileExists(atPath: file, isDirectory: &isDir) { throw ClipFlowError.badInput("rows '\(file)': no such file") }
            if isDir.boolValue { throw ClipFlowError.badInput("rows '\(file)' is a directory; give a CSV or JSON-lines file (or --each-dir)") }
            throw ClipFlowError.badInput("rows '\(file)': cannot read it (\(error.localizedDescription))")
        }
        guard let text = String(data: data, encoding: .utf8) else { throw ClipFlowError.badInput("rows '\(file)' is not UTF-8 text") }
        let lower = file.lowercased()
        let firstChar = text.first { !$0.isWhitespace }
        if lower.hasSuffix(".jsonl") || lower.hasSuffix(".ndjson") || firstChar == "{" { return try jsonLines(text, file: file) }
        return try csv(text, file: file)
    }

    /// JSON lines: each non-blank line an object whose keys are variable names and whose values
    /// are strings, numbers or booleans (taken as their text).
    public static func jsonLines(_ text: String, file: String) throws -> [BatchRow] {
        var rows: [BatchRow] = []
        for (n, raw) in text.split(separator: "\n", omittingEmptySubsequences: false).enumerated() {
            let line = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            if line.isEmpty { continue }
            let origin = "\(file):\(n + 1)"
            var row = BatchRow(index: rows.count, values: [:], origin: origin)
            do {
                let node = try JSONParser.parse(line)
                guard case .object(let members) = node.value else {
                    row.problem = "expected a JSON object of variables, got \(node.value.typeName)"
                    rows.append(row)
                    continue
                }
                for (k, v) in members {
                    guard k.range(of: variableName, options: .regularExpression) != nil else {
                        row.problem = "\"\(k)\" is not a variable name (letters, digits, '_')"
                        break
                    }
                    switch v.value {
                    case .string(let s): row.values[k] = s
                    case .number, .bool: row.values[k] = v.value.serialized
                    default:
                        row.problem = "\"\(k)\": expected a string, number or boolean, got \(v.value.typeName)"
                    }
                    if row.problem != nil { break }
                }
            } catch let e as JSONSyntaxError {
                row.problem = "JSON syntax error at column \(e.column): \(e.message)"
            } catch {
                row.problem = "\(error)"
            }
            rows.append(row)
        }
        return rows
    }

    /// CSV (RFC 4180: fields in double quotes may hold commas, quotes written twice and line
    /// breaks; CRLF or LF). The header names the variables.
    public static func csv(_ text: String, file: String) throws -> [BatchRow] {
        let records = CSVReader.records(text)
        guard let header = records.first(where: { !$0.fields.allSatisfy(\.isEmpty) }) else {
            throw ClipFlowError.badInput("rows '\(file)': empty; expected a header line naming the variables (e.g. CLIPS,OUT)")
        }
        let names = header.fields.map { $0.trimmingCharacters(in: .whitespaces) }
        for (i, name) in names.enumerated() where name.range(of: variableName, options: .regularExpression) == nil {
            throw ClipFlowError.badInput(
                "rows '\(file)':\(header.line): column \(i + 1) header \"\(name)\" is not a variable name (letters, digits, '_'); the first line names the variables"
            )
        }
        var seen = Set<String>()
        for name in names where !seen.insert(name).inserted {
            throw ClipFlowError.badInput("rows '\(file)':\(header.line): column \"\(name)\" appears twice in the header")
        }
        var rows: [BatchRow] = []
        for r in records where r.line > header.line && !(r.fields.count == 1 && r.fields[0].isEmpty) {
            let origin = "\(file):\(r.line)"
            var row = BatchRow(index: rows.count, values: [:], origin: origin)
            if let p = r.problem {
                row.problem = p
            } else if r.fields.count != names.count {
                row.problem = "\(r.fields.count) field(s), the header has \(names.count) (\(names.joined(separator: ",")))"
            } else {
                for (k, v) in zip(names, r.fields) { row.values[k] = v }
            }
            rows.append(row)
        }
        return rows
    }

    /// One row per sub-folder of `dir` (hidden ones skipped), in name order: `DIR` is the
    /// sub-folder's path, `NAME` its name.
    public static func eachDirectory(_ dir: String) throws -> [BatchRow] {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dir, isDirectory: &isDir) else { throw ClipFlowError.badInput("--each-dir '\(dir)': no such folder") }
        guard isDir.boolValue else { throw ClipFlowError.badInput("--each-dir '\(dir)' is a file, expected a folder of folders") }
        let names: [String]
        do { names = try FileManager.default.contentsOfDirectory(atPath: dir) } catch {
            throw ClipFlowError.badInput("--each-dir '\(dir)': cannot list it (\(error.localizedDescription))")
        }
        let base = dir.hasSuffix("/") ? String(dir.dropLast()) : dir
        let folders = names.filter { name in
            var d: ObjCBool = false
            return !name.hasPrefix(".") && FileManager.default.fileExists(atPath: base + "/" + name, isDirectory: &d) && d.boolValue
        }.sorted()
        return folders.enumerated().map { i, name in
            BatchRow(index: i, values: ["DIR": base + "/" + name, "NAME": name], origin: base + "/" + name)
        }
    }

    /// Rows for the sub-folder names `names` under `base` (an object-storage prefix), as
    /// `eachDirectory` makes them.
    public static func eachFolder(named names: [String], under base: String) -> [BatchRow] {
        let b = base.hasSuffix("/") ? String(base.dropLast()) : base
        return names.sorted().enumerated().map { i, name in BatchRow(index: i, values: ["DIR": b + "/" + name, "NAME": name], origin: b + "/" + name) }
    }
}

/// RFC 4180 records with the line each starts on (1-based) and, for a record that cannot be
/// read (a quote left open), the problem.
enum CSVReader {
    struct Record {
        var fields: [String]
        var line: Int
        var problem: String?
    }

    static func records(_ text: String) -> [Record] {
        var out: [Record] = []
        var fields: [String] = [], field = "", quoted = false, afterQuote = false
        var line = 1, startLine = 1, problem: String?
        var it = text.unicodeScalars.makeIterator()
        var pending: Unicode.Scalar? = nil
        func endRecord() {
            fields.append(field)
            out.append(Record(fields: fields, line: startLine, problem: problem))
            fields = []
            field = ""
            problem = nil
            afterQuote = false
        }
        while let c = pending ?? it.next() {
            pending = nil
            if quoted {
                if c == "\"" {
                    if let n = it.next() {
                        if n == "\"" { field.unicodeScalars.append("\"") } else { quoted = false; afterQuote = true; pending = n }
                    } else {
                        quoted = false
                    }
                } else {
                    if c == "\n" { line += 1 }
                    field.unicodeScalars.append(c)
                }
                continue
            }
            switch c {
            case ",":
                fields.append(field)
                field = ""
                afterQuote = false
            case "\r":
                continue
            case "\n":
                endRecord()
                line += 1
                startLine = line
            case "\"" where field.isEmpty && !afterQuote:
                quoted = true
            default:
                if afterQuote && problem == nil { problem = "text after a closing quote in a field" }
                field.unicodeScalars.append(c)
            }
        }
        if quoted { problem = "a quoted field is not closed before the end of the file" }
        if !field.isEmpty || !fields.isEmpty || quoted { endRecord() }
        return out
    }
}
