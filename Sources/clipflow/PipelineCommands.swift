import ArgumentParser
import ClipFlowBatch
import ClipFlowCore
import ClipFlowUpload
import ClipFlowCapture
import ClipFlowMedia
import ClipFlowMicrophone
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
    MicrophoneStages.register(into: r)
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
/// Object storage for a pipeline's `s3://` paths, when its text, a variable or the environment
/// names one: inputs fetched to a scratch folder, outputs uploaded by `publish` after the run.
func objectStaging(_ file: String, _ variables: [String: String], credentialsCommand: String?) throws -> ObjectStaging? {
    let text = try readPipelineText(file)
    let env = ProcessInfo.processInfo.environment
    guard text.contains("s3://") || variables.values.contains(where: { $0.contains("s3://") }) || env.values.contains(where: { $0.hasPrefix("s3://") })
    else { return nil }
    let store: S3Client
    do { store = S3Client(access: try S3Access.fromEnvironment(env, credentialsCommand: credentialsCommand)) } catch let e as UploadError {
        throw e.asClipFlowError
    }
    let parent = env["TMPDIR"].flatMap { $0.isEmpty ? nil : $0 } ?? "/tmp"
    return try ObjectStaging(store: store, scratchParent: parent, name: "clipflow-run-scratch", shouldAbort: { false })
}

/// `remote` serves its `s3://` paths (fetching inputs); nil: every path is local.
/// `overwrite`: `-y`, every stage may replace what it writes.
func loadPipeline(_ file: String, variables: [String: String], registry: StageRegistry, remote: RemotePaths? = nil, overwrite: Bool) throws -> Pipeline {
    let text = try readPipelineText(file)
    switch PipelineValidator(registry: registry, variables: variables, remote: remote, overwrite: overwrite).validate(text: text) {
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
    @Option(name: .customLong("credentials-command"), help: "Shell command printing S3 credentials JSON, for s3:// inputs (fetched to be checked).")
    var credentialsCommand: String?
    @OptionGroup var overwrite: OverwriteFlag

    func run() throws {
        let registry = makeRegistry()
        try ErrorReport.run {
            let variables = try vars.variables()
            let staging = try objectStaging(file, variables, credentialsCommand: credentialsCommand)
            defer { staging?.discard() }
            let p = try loadPipeline(file, variables: variables, registry: registry, remote: staging, overwrite: overwrite.overwrite)
            print(
                "\(file): valid (\(p.stages.count) stage\(p.stages.count == 1 ? "" : "s"): \(p.stages.map { "\($0.id) (\($0.kind))" }.joined(separator: ", ")))"
            )
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
            let bytes = k.queue.maxBytes >= LinkLimits.noByteLimit ? "no byte limit" : "\(k.queue.maxBytes) bytes"
            print("    \(ins); \(out)" + (k.isSource ? "" : "; queue: \(k.queue.maxItems) items, \(bytes), \(k.policy.rawValue)"))
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

    @Argument(help: "Pipeline JSON file.") var file: String
    @OptionGroup var vars: VariableFlags
    @Option(help: "Seconds to let stages finish after the first signal before cancelling.")
    var grace: Double = 30
    @Option(name: .customLong("credentials-command"), help: "Shell command printing S3 credentials JSON for s3:// paths; run at start and when they expire.")
    var credentialsCommand: String?
    @OptionGroup var overwrite: OverwriteFlag
    @OptionGroup var flags: OutputFlags

    func run() throws {
        MediaProcess.tuneAllocator()
        let registry = makeRegistry()
        let door = FrontDoor(flags)
        try ErrorReport.run {
            let variables = try vars.variables()
            let staging = try objectStaging(file, variables, credentialsCommand: credentialsCommand)
            defer { staging?.discard() }
            let pipeline = try loadPipeline(file, variables: variables, registry: registry, remote: staging, overwrite: overwrite.overwrite)
            let graph = try pipeline.makeGraph(registry)
            let (outcome, _) = try door.run(nodes: graph.nodes, edges: graph.edges, grace: grace)
            if outcome == .interrupted { throw ClipFlowError(.interrupted, "stopped: complete outputs were kept, unfinished ones removed") }
            // A pipeline has many stages: the error names the one that failed.
            if case .failed(let stage, let e) = outcome { throw ClipFlowError(e.kind, "stage '\(stage)': \(e.message)") }
            if let staging {
                try staging.publish(rowKey: BatchOutputs.rowKey(pipelineText: try readPipelineText(file), variables: variables))
                for o in staging.outputs { door.say("uploaded \(o.location)\(o.folder ? "/" : "")") }
            }
            door.say("done: \(file)")
        }
    }

}
