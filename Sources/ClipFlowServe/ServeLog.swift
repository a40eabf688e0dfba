import ClipFlowCore
import Foundation
import Synchronization

/// How `clipflow serve` writes its log lines.
public enum ServeLogFormat: String, Sendable, CaseIterable {
    /// `KEY=VALUE` pairs after the time (logfmt): for people, and for `grep`.
    case text
    /// One JSON object per line, with the same keys on every line of one event.
    case json
}

/// What the server tells its operator, one line per event on stderr: that it listens, each
/// request answered, each change in a processing job's life. Lines carry no secret: a request
/// line names the route (an upload's URL, which is its capability, is never written), never the
/// query string or a header. Thread-safe: each line is one `write` under a lock.
final class ServeLog: Sendable {
    let format: ServeLogFormat
    private let sink: @Sendable (String) -> Void
    private let lock = Mutex(())

    /// `sink` receives each line, newline included (stderr when not given).
    init(format: ServeLogFormat, sink: @escaping @Sendable (String) -> Void = ServeLog.standardError) {
        self.format = format
        self.sink = sink
    }

    /// Writes to file descriptor 2, all of it (a short write goes on; an error drops the rest).
    static let standardError: @Sendable (String) -> Void = { line in
        var bytes = Array(line.utf8)
        bytes.withUnsafeMutableBytes { buffer in
            guard let start = buffer.baseAddress else { return }
            var done = 0
            while done < buffer.count {
                let n = write(2, start + done, buffer.count - done)
                if n < 0, errno == EINTR { continue }
                if n <= 0 { return }
                done += n
            }
        }
    }

    /// The server accepts connections.
    func listening(url: String, data: String, storage: String?, database: String, role: ServeRole, workers: Int) {
        switch format {
        case .text:
            let noun = workers == 1 ? "worker" : "workers"
            let what = role == .all ? "" : " (role \(role.rawValue))"
            let bytes = storage.map { ", storage \($0)" } ?? ""
            emit("clipflow serve\(what): listening on \(url), data \(data)\(bytes), database \(database), \(workers) \(noun)\n")
        case .json:
            line([
                ("event", .string("listening")), ("url", .string(url)), ("role", .string(role.rawValue)), ("data", .string(data)),
                ("storage", .string(storage ?? "data")), ("database", .string(database)), ("workers", .int(workers))
            ])
        }
    }

    /// Something the operator should put right, though the server runs (never a secret).
    func warning(_ message: String) {
        switch format {
        case .text: emit("clipflow serve: warning: \(message)\n")
        case .json: line([("event", .string("warning")), ("message", .string(message))])
        }
    }

    /// One request, once its answer was sent (or the connection broke while sending it).
    func request(_ r: RequestRecord) {
        line([
            ("event", .string("request")), ("method", .string(r.method)), ("path", .string(r.path)), ("status", .int(r.status)),
            ("received", .int(r.received)), ("sent", .int(r.sent)), ("ms", .milliseconds(r.seconds))
        ])
    }

    /// One change in a processing job's life.
    func job(_ e: JobEvent) {
        line([
            ("event", .string("job")), ("kind", .string(e.kind.rawValue)), ("video", .int(Int(e.video))), ("job", .int(Int(e.job))),
            ("phase", .string(e.phase)), ("renditions", e.kind == .published ? .strings(e.renditions) : .null),
            ("status", e.status.map { .string($0.rawValue) } ?? .null), ("reason", e.reason.map { .string($0) } ?? .null),
            ("seconds", e.seconds.map { .seconds($0) } ?? .null),
            ("timeline", e.timeline.isEmpty ? .null : .strings(e.timeline.map { "\($0.name.rawValue):\(Self.decimal($0.seconds))" }))
        ])
    }

    enum Value {
        case string(String), int(Int), strings([String]), milliseconds(Double), seconds(Double), null
    }

    /// `fields` after the time, in the log's format. Text leaves out null fields and quotes a
    /// value that is empty or holds a space, `=`, a quote or a control character.
    func line(_ fields: [(String, Value)], now: Date = Date()) {
        let time = Self.timestamp(now)
        switch format {
        case .text:
            var parts = ["time=\(time)"]
            for (key, value) in fields {
                switch value {
                case .null: continue
                case .string(let s): parts.append("\(key)=\(Self.textValue(s))")
                case .int(let n): parts.append("\(key)=\(n)")
                case .strings(let list): parts.append("\(key)=\(Self.textValue(list.joined(separator: ",")))")
                case .milliseconds(let s): parts.append("\(key)=\(Self.decimal(s * 1000))")
                case .seconds(let s): parts.append("\(key)=\(Self.decimal(s))")
                }
            }
            emit(parts.joined(separator: " ") + "\n")
        case .json:
            var parts = ["\"time\":\(JSONValue.quote(time))"]
            for (key, value) in fields {
                let v: String
                switch value {
                case .null: v = "null"
                case .string(let s): v = JSONValue.quote(s)
                case .int(let n): v = String(n)
                case .strings(let list): v = "[" + list.map(JSONValue.quote).joined(separator: ",") + "]"
                case .milliseconds(let s): v = Self.decimal(s * 1000)
                case .seconds(let s): v = Self.decimal(s)
                }
                parts.append("\(JSONValue.quote(key)):\(v)")
            }
            emit("{" + parts.joined(separator: ",") + "}\n")
        }
    }

    private func emit(_ text: String) { lock.withLock { _ in sink(text) } }

    /// UTC, milliseconds: `2026-01-31T12:00:00.123Z`.
    static func timestamp(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: TimeZone(identifier: "UTC") ?? .current))
    }

    /// Three decimals at most, no exponent (finite values; others are 0).
    static func decimal(_ x: Double) -> String {
        guard x.isFinite else { return "0" }
        let s = String(format: "%.3f", x)
        var t = Substring(s)
        while t.hasSuffix("0") { t = t.dropLast() }
        if t.hasSuffix(".") { t = t.dropLast() }
        return String(t)
    }

    static func textValue(_ s: String) -> String {
        let plain = !s.isEmpty && s.unicodeScalars.allSatisfy { c in c.value > 0x20 && c.value != 0x7F && c != "\"" && c != "=" && c != "\\" }
        return plain ? s : JSONValue.quote(s)
    }
}

/// One answered request, as its log line shows it.
struct RequestRecord: Sendable, Equatable {
    var method: String
    /// The route (`/files/{id}`), or the path without its query when no route matched.
    var path: String
    var status: Int
    /// Body bytes read from the request, and written in the answer.
    var received: Int
    var sent: Int
    var seconds: Double

    /// What a request line shows of the path: the matched route, else the path (never the query),
    /// cut to 200 characters, with anything under an upload prefix hidden.
    static func loggedPath(route: String?, path: String, uploadPrefixes: [String]) -> String {
        if let route, route != "NotFound" { return route.hasPrefix("/") ? route : "/" + route }
        let bare = String(path.prefix { $0 != "?" }.prefix(200))
        for prefix in uploadPrefixes where bare.hasPrefix(prefix + "/") && bare.count > prefix.count + 1 {
            return prefix + "/…"
        }
        return bare.isEmpty ? "/" : bare
    }
}
