import ClipFlowCore
import Foundation

/// The JSON written at the end of a batch: counts, and each row's status with each failure's
/// reason and whether a retry may fix it. Written under a temporary name, renamed when complete.
public struct BatchSummary: Sendable {
    public var pipeline: String
    public var rows: String
    public var selection: String
    public var total: Int
    public var results: [RowResult]

    public init(pipeline: String, rows: String, selection: String, total: Int, results: [RowResult]) {
        self.pipeline = pipeline
        self.rows = rows
        self.selection = selection
        self.total = total
        self.results = results
    }

    public var json: JSONValue {
        func count(_ s: RowResult.Status) -> JSONValue { .number(Double(results.filter { $0.status == s }.count)) }
        func node(_ v: JSONValue) -> JSONNode { JSONNode(v) }
        let rowsJSON: [JSONNode] = results.map { r in
            var f: [(key: String, value: JSONNode)] = [
                ("row", node(.number(Double(r.row)))), ("origin", node(.string(r.origin))), ("status", node(.string(r.status.rawValue))),
                ("seconds", node(.number((r.seconds * 1000).rounded() / 1000)))
            ]
            if r.status == .failed || r.status == .interrupted {
                f.append(("retryable", node(.bool(r.retryable))))
                f.append(("reason", node(.string(r.reason ?? ""))))
            }
            f.append(("outputs", node(.array(r.outputs.map { node(.string($0)) }))))
            return node(.object(f))
        }
        return .object([
            ("pipeline", node(.string(pipeline))), ("rows", node(.string(rows))), ("selection", node(.string(selection))),
            ("total", node(.number(Double(total)))), ("ok", node(count(.ok))), ("skipped", node(count(.skipped))),
            ("failed", node(count(.failed))), ("interrupted", node(count(.interrupted))),
            ("not_started", node(.number(Double(total - results.count)))), ("results", node(.array(rowsJSON)))
        ])
    }

    /// `json` with one key, and one row's result, per line (a summary of thousands of rows stays
    /// readable and greppable).
    public var text: String {
        guard case .object(let top) = json else { return json.serialized + "\n" }
        var lines: [String] = []
        for (k, v) in top {
            if k == "results", case .array(let rows) = v.value {
                let body = rows.map { "    " + $0.value.serialized }.joined(separator: ",\n")
                lines.append("  \(JSONValue.quote(k)): [" + (rows.isEmpty ? "]" : "\n" + body + "\n  ]"))
            } else {
                lines.append("  \(JSONValue.quote(k)): \(v.value.serialized)")
            }
        }
        return "{\n" + lines.joined(separator: ",\n") + "\n}\n"
    }

    public func write(to path: String) throws {
        // The summary is the batch's own report: each run of the batch writes it anew.
        let out = try AtomicOutput(target: URL(fileURLWithPath: path), label: "the batch summary", replacing: true)
        try out.write(Data(text.utf8))
        try out.commit()
    }
}
