import ArgumentParser
import ClipFlowCore
import ClipFlowUpload
import Foundation
import Synchronization
#if canImport(Glibc)
    import Glibc
#endif

/// How a long command shows its events: `text` on stderr (a status bar on a terminal, plain
/// lines otherwise) or `json`, one event per line on stdout (docs/events.md, "Events").
enum EventFormat: String, ExpressibleByArgument, Sendable { case text, json }

/// The one place events become output. Every long command renders through one of these.
protocol EventRenderer: EventSink {
    /// A line of the command's own (a summary, "queued ID: FILE"): on stderr in text mode unless
    /// quiet; dropped in JSON mode, where stdout carries events only.
    func say(_ line: String)
    /// Ends a status line being redrawn, so what follows starts on a fresh line.
    func end()
    /// Shows `line()` as the one status line, instead of the stages' states, redrawn four times a
    /// second and under every line printed until `end()`, which erases it. `line` is called with
    /// the renderer's lock held: it must not call the renderer. True where a status line is drawn
    /// (text on a terminal, not quiet).
    func showStatusLine(_ line: @escaping @Sendable () -> String) -> Bool
}

/// `--events json`: one JSON object per line on stdout, flushed per event, secrets redacted.
/// Every line holds
/// `time` (seconds since the writer was made: the start of the command), `stage`, `event`, then
/// `item` for an item's event, then the event's fields.
final class JSONEventWriter: EventRenderer, Sendable {
    private let lock = Mutex(())
    private let start: Double

    init(start: Double = SystemClock().now()) { self.start = start }

    func say(_ line: String) {}
    func end() {}
    func showStatusLine(_ line: @escaping @Sendable () -> String) -> Bool { false }

    func emit(_ e: PipelineEvent) {
        let line = Secrets.shared.redact(Self.line(e, start: start)) + "\n"
        lock.withLock { _ in FileHandle.standardOutput.write(Data(line.utf8)) }
    }

    /// The event's JSON line (without the newline).
    static func line(_ e: PipelineEvent, start: Double) -> String {
        var fields: [(String, JSONValue)] = [
            ("time", .number(((e.time - start) * 1000).rounded() / 1000)), ("stage", .string(e.stage))
        ]
        if let row = e.row { fields.append(("row", .number(Double(row)))) }
        func event(_ name: String) { fields.append(("event", .string(name))) }
        switch e.kind {
        case .started: event("started")
        case .progress(let c, let t, let u, let speed):
            event("progress")
            fields += [("completed", .number(Double(c))), ("total", .number(Double(t))), ("unit", .string(u))]
            // The fraction done, to the percent, once the total is known.
            if t > 0 { fields.append(("progress", .number(Double(Int(min(1, max(0, Double(c) / Double(t))) * 100)) / 100))) }
            if let speed { fields.append(("speed", .number((speed * 1000).rounded() / 1000))) }
        case .output(let p): event("output"); fields.append(("path", .string(p)))
        case .dropped(let n, let cause): event("dropped"); fields += [("count", .number(Double(n))), ("cause", .string(cause))]
        case .notice(let m): event("notice"); fields.append(("message", .string(m)))
        case .queue(let from, let items, let bytes, let dropped):
            event("queue")
            fields += [
                ("from", .string(from)), ("peak_items", .number(Double(items))), ("peak_bytes", .number(Double(bytes))),
                ("dropped", .number(Double(dropped)))
            ]
        case .result(let r): event("result"); fields += r.map { ($0.key, json($0.value)) }
        case .item(let id, let name, let f, _):
            event(name)
            fields.append(("item", .string(id)))
            fields += f.map { ($0.key, json($0.value)) }
        case .helper(let name, let running):
            event("helper")
            fields += [("name", .string(name)), ("running", .bool(running))]
        case .finished: event("finished")
        case .failed(let m, let kind):
            event("failed")
            fields.append(("message", .string(m)))
            if let kind { fields.append(("kind", .string(kind.rawValue))) }
        case .interrupted: event("interrupted")
        }
        return JSONValue.object(fields.map { (key: $0.0, value: JSONNode($0.1)) }).serialized
    }

    static func json(_ v: EventValue) -> JSONValue {
        switch v {
        case .string(let s): return .string(s)
        case .integer(let n): return .number(Double(n))
        case .number(let n): return .number(n)
        case .bool(let b): return .bool(b)
        case .object(let o): return .object(o.map { (key: $0.key, value: JSONNode(json($0.value))) })
        }
    }
}

/// Text progress on stderr, for a person: only what they wait for or need to know.
///
/// - Progress: on a terminal, one status line redrawn with every stage's state (and every item in
///   progress), or the command's own (`showStatusLine`), cut to the terminal's width, drawn once
///   the command has run `patience` seconds and erased at `end()`; other lines print above it.
///   Otherwise a line per 10 % of a stage's or an item's progress, once that stage or item has
///   run `patience` seconds; no carriage returns.
/// - Always: notices, item events, and (unless the command's summary tells them) the first drop
///   of a stage for each cause, a queue that dropped items, and the files written.
/// - `verbose` adds each stage's failure or stop and every queue's statistics. A failure is
///   otherwise told once, by the command's `error:` line (`ErrorReport`).
///
/// Stages emit from their own threads: what it has drawn is kept under one `Mutex`.
final class TextRenderer: EventRenderer, Sendable {
    let quiet: Bool
    let verbose: Bool
    let showsOutputs: Bool
    let showsDrops: Bool
    let isTTY: Bool
    /// Seconds of work before progress is shown: shorter work is not waited for.
    static let patience = 1.0
    /// What the status line shows and what has been said.
    private struct Drawing {
        /// Stages, then items ("stage/item"), in the order first seen; their state for the status line.
        var order: [String] = []
        var state: [String: String] = [:]
        var lastDecile: [String: Int] = [:]
        /// When each stage or item first reported progress (by the events' clock), and the first
        /// event of all: a stage waiting for its inputs is not work a person waits for.
        var firstProgress: [String: Double] = [:]
        var start: Double?
        /// Stages and causes ("stage: cause") whose first drop was told.
        var warnedDrops: Set<String> = []
        /// The command's own status line, while it is shown.
        var statusLine: (@Sendable () -> String)?
        var drew = false
        var lastDraw = 0.0
        /// What to write, in one piece (`flush`): a terminal never shows a line half redrawn.
        var output = ""

        /// Ends a drawn status line before anything else is written.
        mutating func clear() { if drew { output += "\r\u{1B}[K"; drew = false } }

        /// Draws `text` as the status line, over the one drawn before.
        mutating func draw(_ text: String) {
            output += "\r\u{1B}[K" + String(text.prefix(max(1, TextRenderer.columns() - 1)))
            drew = true
        }

        mutating func print(_ line: String) { output += line + "\n" }

        /// Writes what was put out since the last flush.
        mutating func flush() {
            if !output.isEmpty { TextRenderer.write(output) }
            output = ""
        }

        /// Draws the command's own status line, if it has one; true if it has.
        mutating func drawOwnLine() -> Bool {
            guard let line = statusLine else { return false }
            draw(line())
            return true
        }
    }
    private let drawing = Mutex(Drawing())

    init(quiet: Bool, verbose: Bool = false, showsOutputs: Bool = true, showsDrops: Bool = true, isTTY: Bool = isatty(2) == 1) {
        self.quiet = quiet
        self.verbose = verbose
        self.showsOutputs = showsOutputs
        self.showsDrops = showsDrops
        self.isTTY = isTTY
    }

    func emit(_ e: PipelineEvent) {
        drawing.withLock { d in
            if !d.order.contains(e.stage) { d.order.append(e.stage) }
            if d.start == nil { d.start = e.time }
            /// Whether `key` (a stage or "stage/item") has worked long enough for its progress to show.
            func waitedFor(_ key: String) -> Bool {
                if d.firstProgress[key] == nil { d.firstProgress[key] = e.time }
                return verbose || e.time - (d.firstProgress[key] ?? e.time) >= Self.patience
            }
            var line: String?
            switch e.kind {
            case .started: d.state[e.stage] = "running"
            case .progress(let c, let t, let u, let speed):
                let pace = speed.map { String(format: ", %.2fx", $0) } ?? ""
                if t > 0 {
                    let (bar, decile) = Self.bar(c, t)
                    d.state[e.stage] = bar + pace
                    if !isTTY && waitedFor(e.stage) && decile != d.lastDecile[e.stage] ?? -1 {
                        d.lastDecile[e.stage] = decile
                        line = "\(e.stage): \(Int(min(1, Double(c) / Double(t)) * 100))% (\(c) of \(t) \(u)\(pace))"
                    }
                } else {
                    d.state[e.stage] = "\(c) \(u)"
                }
            case .output(let p): if showsOutputs || verbose { line = "\(e.stage): wrote \(p)" }
            case .dropped(let n, let cause):
                // The first drop of each cause is worth a line, which says the cause; totals come
                // at the end. A source (a camera) drops what it could not deliver in time, any other
                // stage what its full input queue shed.
                d.state[e.stage] = "dropped \(n)"
                let key = "\(e.stage): \(cause)"
                if n > 0 && showsDrops && !d.warnedDrops.contains(key) {
                    d.warnedDrops.insert(key)
                    line = "\(key) (\(n) so far)"
                }
            case .notice(let m): line = "\(e.stage): \(m)"
            case .queue(let from, let items, _, let dropped):
                if (dropped > 0 && showsDrops) || verbose { line = "\(e.stage): queue from \(from): at most \(items) queued, \(dropped) dropped" }
            case .result: break
            case .item(let id, let name, let f, let text):
                let key = e.stage + "/" + id
                if !d.order.contains(key) { d.order.append(key) }
                if name == "progress", let a = f["acknowledged"]?.integer, let t = f["total"]?.integer, t > 0 {
                    d.state[key] = Self.bar(a, t).bar
                    let decile = Self.bar(a, t).decile
                    if !isTTY && waitedFor(key) && decile != d.lastDecile[key] ?? -1 {
                        d.lastDecile[key] = decile
                        line = "\(id): \(text)"
                    }
                } else {
                    if ["finished", "failed", "paused", "cancelled"].contains(name) { d.state[key] = nil; d.order.removeAll { $0 == key } }
                    line = "\(id): \(text)"
                }
            case .helper(let name, let running): if verbose { line = "\(e.stage): helper \(name) \(running ? "started" : "ended")" }
            case .finished: d.state[e.stage] = "done"
            case .failed(let m, _):
                d.state[e.stage] = "failed"
                if verbose { line = "\(e.stage): failed: \(m)" }
            case .interrupted:
                d.state[e.stage] = "stopped"
                if verbose { line = "\(e.stage): stopped" }
            }
            guard !quiet else { return }
            if isTTY {
                if let line { d.clear(); d.print(line) }
                if d.statusLine != nil {
                    if line != nil { _ = d.drawOwnLine() }
                } else if e.time - (d.start ?? e.time) >= Self.patience, e.time - d.lastDraw > 0.1 || line != nil || e.kind == .finished {
                    d.lastDraw = e.time
                    let status = d.order.compactMap { k in
                        k.contains("/") ? d.state[k].map { "\(k.split(separator: "/").last ?? ""): \($0)" } : "\(k): \(d.state[k] ?? "waiting")"
                    }
                    d.draw(status.joined(separator: " | "))
                }
            } else if let line {
                d.print(line)
            }
            d.flush()
        }
    }

    func say(_ s: String) {
        guard !quiet else { return }
        drawing.withLock { d in
            d.clear()
            d.print(s)
            _ = d.drawOwnLine()
            d.flush()
        }
    }

    /// Erases the status line: what the work came to is the command's summary (or its error).
    func end() {
        drawing.withLock { d in
            d.statusLine = nil
            d.clear()
            d.flush()
        }
    }

    func showStatusLine(_ line: @escaping @Sendable () -> String) -> Bool {
        guard isTTY && !quiet else { return false }
        let first = drawing.withLock { d -> Bool in
            let first = d.statusLine == nil
            d.statusLine = line
            _ = d.drawOwnLine()
            d.flush()
            return first
        }
        guard first else { return true }
        // Redraws until `end()` takes the line away.
        _ = RepeatingTimer(every: 0.25, label: "clipflow.status-line") { [self] in
            drawing.withLock { d in
                defer { d.flush() }
                return d.drawOwnLine()
            }
        }
        return true
    }

    /// Columns of the terminal on stderr (80 when it does not say).
    fileprivate static func columns() -> Int {
        var size = winsize()
        guard ioctl(STDERR_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 0 else { return 80 }
        return Int(size.ws_col)
    }

    /// A 12-cell bar with its percentage, and the tenth it is in.
    private static func bar(_ c: Int64, _ t: Int64) -> (bar: String, decile: Int) {
        let frac = min(1, Double(c) / Double(t))
        let pct = Int(frac * 100)
        let filled = Int(frac * 12)
        return ("[" + String(repeating: "#", count: filled) + String(repeating: "-", count: 12 - filled) + "] \(pct)%", pct / 10)
    }

    /// Everything the renderer prints passes here: secrets are redacted.
    fileprivate static func write(_ s: String) { FileHandle.standardError.write(Data(Secrets.shared.redact(s).utf8)) }
}
