import ArgumentParser
import ClipFlowCore
import ClipFlowUpload
import ClipFlowCapture
import ClipFlowMedia
import Foundation
import Synchronization
#if canImport(Glibc)
    import Glibc
#endif

/// Every stage kind this build knows (core + media; later modules register here too).
func makeRegistry() -> StageRegistry {
    let r = StageRegistry()
    CoreStages.register(into: r)
    MediaStages.register(into: r)
    CaptureStages.register(into: r)
    UploadStages.register(into: r)
    return r
}

/// `--set KEY=VALUE` options shared by `run` and `validate`.
struct VariableFlags: ParsableArguments {
    @Option(name: .customLong("set"), help: ArgumentHelp("Set a pipeline variable: KEY=VALUE (repeatable). Overrides the environment.", valueName: "KEY=VALUE"))
    var assignments: [String] = []

    func variables() throws -> [String: String] {
        var v: [String: String] = [:]
        for a in assignments {
            guard let eq = a.firstIndex(of: "="), eq != a.startIndex else {
                throw ValidationError("--set expects KEY=VALUE (got '\(a)')")
            }
            let key = String(a[..<eq])
            guard key.range(of: "^[A-Za-z_][A-Za-z0-9_]*$", options: .regularExpression) != nil else {
                throw ValidationError("--set: '\(key)' is not a valid variable name (letters, digits, '_')")
            }
            v[key] = String(a[a.index(after: eq)...])
        }
        return v
    }
}

/// Reads and validates a pipeline file; prints every issue as FILE:LINE:COL: PATH: MESSAGE.
func loadPipeline(_ file: String, variables: [String: String], registry: StageRegistry) throws -> Pipeline {
    let text: String
    do {
        let data = try Data(contentsOf: URL(fileURLWithPath: file))
        guard let s = String(data: data, encoding: .utf8) else {
            throw ClipFlowError.badInput("pipeline '\(file)' is not UTF-8 text")
        }
        text = s
    } catch let e as ClipFlowError { throw e } catch {
        var isDir: ObjCBool = false
        if !FileManager.default.fileExists(atPath: file, isDirectory: &isDir) { throw ClipFlowError.badInput("pipeline '\(file)': no such file") }
        if isDir.boolValue { throw ClipFlowError.badInput("pipeline '\(file)' is a directory") }
        throw ClipFlowError.badInput("pipeline '\(file)': cannot read it (\(error.localizedDescription))")
    }
    switch PipelineValidator(registry: registry, variables: variables).validate(text: text) {
    case .valid(let p): return p
    case .invalid(let issues):
        for i in issues { FileHandle.standardError.write("\(file):\(i.description)\n".data(using: .utf8)!) }
        throw ClipFlowError.badInput("\(file): \(issues.count) problem\(issues.count == 1 ? "" : "s") found; nothing was run")
    }
}

struct Validate: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Check a pipeline file without running it.",
        discussion:
            "Reports every problem (JSON syntax, kinds, parameters, types and ranges, inputs, cycles, connections, unreadable inputs), each at its JSON path.")

    @Argument(help: "Pipeline JSON file.") var file: String
    @OptionGroup var vars: VariableFlags

    func run() throws {
        let registry = makeRegistry()
        do {
            let p = try loadPipeline(file, variables: try vars.variables(), registry: registry)
            print(
                "\(file): valid (\(p.stages.count) stage\(p.stages.count == 1 ? "" : "s"): \(p.stages.map { "\($0.id) (\($0.kind))" }.joined(separator: ", ")))"
            )
        } catch let e as ClipFlowError {
            FileHandle.standardError.write("error: \(e.description)\n".data(using: .utf8)!)
            throw ExitCode(e.exitCode)
        }
    }
}

struct Stages: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the stage kinds, their ports, parameters and defaults.")

    func run() throws {
        for k in makeRegistry().kinds {
            let ins = k.isSource ? "source" : "inputs: \(k.inputs.map(\.rawValue).sorted().joined(separator: "|"))"
            let out = k.output.map { "output: \($0.rawValue)" } ?? "sink"
            print("\(k.name) - \(k.summary)")
            print("    \(ins); \(out)" + (k.isSource ? "" : "; queue: \(k.queue.maxItems) items, \(k.queue.maxBytes) bytes, \(k.policy.rawValue)"))
            for p in k.params {
                var line = "    \(p.name): \(p.type.describe)"
                if p.required { line += " (required)" } else if let d = p.defaultValue { line += " (default \(d.serialized))" }
                print(line)
                print("        \(p.help)")
            }
            print("")
        }
    }
}

struct Schema: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "Print the JSON Schema of the pipeline format (kept in the repo as schema/pipeline.schema.json).")
    func run() throws { print(PipelineSchema.generate(makeRegistry()), terminator: "") }
}

struct Run: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Validate a pipeline file, then run it.",
        discussion: """
            Stages run concurrently, linked by bounded queues. SIGINT/SIGTERM stops the sources and lets \
            the rest finish or discard what is in progress (exit status 130); a second signal, or the \
            --grace deadline, cancels at once. Outputs are complete or absent, never partial.
            """)

    enum EventFormat: String, ExpressibleByArgument { case text, json }

    @Argument(help: "Pipeline JSON file.") var file: String
    @OptionGroup var vars: VariableFlags
    @Option(help: "Progress format: text (stderr; a status line on a terminal) or json (one event per line on stdout).")
    var events: EventFormat = .text
    @Option(help: "Seconds to let stages finish after the first signal before cancelling.")
    var grace: Double = 30
    @OptionGroup var flags: OutputFlags

    func run() throws {
        MediaProcess.tuneAllocator()
        let registry = makeRegistry()
        let sink: EventSink & Sendable = events == .json ? JSONEventWriter() : TextEventWriter(quiet: flags.quiet)
        do {
            let pipeline = try loadPipeline(file, variables: try vars.variables(), registry: registry)
            let runner = try GraphRunner(nodes: try pipeline.makeNodes(registry), edges: pipeline.edges, sink: sink)
            PipelineSignals.install(runner: runner, grace: grace)
            let outcome = runner.run()
            (sink as? TextEventWriter)?.end()
            switch outcome {
            case .completed:
                if !flags.quiet && events == .text { FileHandle.standardError.write("done: \(file)\n".data(using: .utf8)!) }
            case .interrupted:
                FileHandle.standardError.write("interrupted: complete outputs were kept, unfinished ones removed\n".data(using: .utf8)!)
                throw ExitCode(130)
            case .failed(let stage, let e):
                FileHandle.standardError.write("error: stage '\(stage)': \(e.description)\n".data(using: .utf8)!)
                throw ExitCode(e.exitCode)
            }
        } catch let e as ClipFlowError {
            FileHandle.standardError.write("error: \(e.description)\n".data(using: .utf8)!)
            throw ExitCode(e.exitCode)
        }
    }
}

/// First signal: graceful stop with a deadline; second: cancel, and if the stages still have not
/// returned 5 s later, remove temporary files and exit.
enum PipelineSignals {
    nonisolated(unsafe) private static var sources: [DispatchSourceSignal] = []

    static func install(runner: GraphRunner, grace: Double) {
        let count = SignalCount()
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let src = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            src.setEventHandler {
                if count.next() == 1 {
                    runner.stop(deadline: grace)
                } else {
                    runner.cancel()
                    DispatchQueue.global().asyncAfter(deadline: .now() + 5) {
                        TemporaryFiles.shared.removeAll()
                        _exit(130)
                    }
                }
            }
            src.resume()
            sources.append(src)
        }
    }
}

/// Counts the signals received (the handler may run on any thread).
final class SignalCount: Sendable {
    private let n = Mutex(0)
    func next() -> Int {
        n.withLock {
            $0 += 1
            return $0
        }
    }
}

/// `--events json`: one JSON object per line on stdout, flushed per event.
/// "time" is seconds since the writer was made (the start of the run).
final class JSONEventWriter: EventSink, Sendable {
    private let lock = NSLock()
    private let start = SystemClock().now()
    func emit(_ e: PipelineEvent) {
        var fields: [(String, JSONValue)] = [("time", .number(((e.time - start) * 1000).rounded() / 1000)), ("stage", .string(e.stage))]
        switch e.kind {
        case .started: fields.append(("event", .string("started")))
        case .progress(let c, let t, let u):
            fields += [("event", .string("progress")), ("completed", .number(Double(c))), ("total", .number(Double(t))), ("unit", .string(u))]
        case .output(let p): fields += [("event", .string("output")), ("path", .string(p))]
        case .dropped(let n): fields += [("event", .string("dropped")), ("count", .number(Double(n)))]
        case .notice(let m): fields += [("event", .string("notice")), ("message", .string(m))]
        case .queue(let from, let items, let bytes, let dropped):
            fields += [
                ("event", .string("queue")), ("from", .string(from)), ("peak_items", .number(Double(items))),
                ("peak_bytes", .number(Double(bytes))), ("dropped", .number(Double(dropped)))
            ]
        case .finished: fields.append(("event", .string("finished")))
        case .failed(let m): fields += [("event", .string("failed")), ("message", .string(m))]
        case .interrupted: fields.append(("event", .string("interrupted")))
        }
        let line = JSONValue.object(fields.map { (key: $0.0, value: JSONNode($0.1)) }).serialized + "\n"
        lock.lock()
        FileHandle.standardOutput.write(line.data(using: .utf8)!)
        lock.unlock()
    }
}

/// Text progress on stderr: on a terminal one status line redrawn with every stage's state;
/// otherwise a line per stage start/finish/output and per 10 % of progress. `@unchecked Sendable`:
/// stages emit from their own threads, and every mutable field is touched only under `lock`.
final class TextEventWriter: EventSink, @unchecked Sendable {
    let quiet: Bool
    let isTTY = isatty(2) == 1
    private let lock = NSLock()
    private var order: [String] = []
    private var state: [String: String] = [:]
    private var lastDecile: [String: Int] = [:]
    private var drew = false
    private var lastDraw = 0.0

    init(quiet: Bool) { self.quiet = quiet }

    func emit(_ e: PipelineEvent) {
        lock.lock(); defer { lock.unlock() }
        if !order.contains(e.stage) { order.append(e.stage) }
        var line: String?
        switch e.kind {
        case .started: state[e.stage] = "running"
        case .progress(let c, let t, let u):
            if t > 0 {
                let frac = min(1, Double(c) / Double(t))
                let pct = Int(frac * 100)
                let filled = Int(frac * 12)
                state[e.stage] = "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: 12 - filled) + "] \(pct)%"
                if pct / 10 != lastDecile[e.stage] ?? -1 { lastDecile[e.stage] = pct / 10; if !isTTY { line = "\(e.stage): \(pct)% (\(c) of \(t) \(u))" } }
            } else {
                state[e.stage] = "\(c) \(u)"
            }
        case .output(let p): line = "\(e.stage): wrote \(p)"
        case .dropped(let n):
            // The first drop is worth a line; totals come at the end. A source (a camera) drops
            // what it could not deliver in time, any other stage what its full input queue shed.
            state[e.stage] = "dropped \(n)"
            if n > 0 && (lastDecile["drop:" + e.stage] ?? 0) == 0 { lastDecile["drop:" + e.stage] = 1; line = "\(e.stage): dropping items (\(n) so far)" }
        case .notice(let m): line = "\(e.stage): \(m)"
        case .queue(let from, let items, _, let dropped):
            if dropped > 0 || isTTY == false { line = "\(e.stage): queue from \(from): at most \(items) queued, \(dropped) dropped" }
        case .finished: state[e.stage] = "done"
        case .failed(let m): state[e.stage] = "failed"; line = "\(e.stage): failed: \(m)"
        case .interrupted: state[e.stage] = "stopped"; line = "\(e.stage): stopped"
        }
        guard !quiet else { return }
        if isTTY {
            if let line { clear(); FileHandle.standardError.write("\(line)\n".data(using: .utf8)!) }
            if e.time - lastDraw > 0.1 || line != nil || e.kind == .finished {
                lastDraw = e.time
                let status = order.map { "\($0): \(state[$0] ?? "waiting")" }.joined(separator: " | ")
                FileHandle.standardError.write("\r\u{1B}[K\(status)".data(using: .utf8)!)
                drew = true
            }
        } else if let line {
            FileHandle.standardError.write("\(line)\n".data(using: .utf8)!)
        }
    }

    private func clear() { if drew { FileHandle.standardError.write("\r\u{1B}[K".data(using: .utf8)!); drew = false } }
    func end() { lock.lock(); if drew { FileHandle.standardError.write("\n".data(using: .utf8)!); drew = false }; lock.unlock() }
}
