import ArgumentParser
import ClipFlowCore
import ClipFlowServe
import Foundation

/// `clipflow serve-worker`: one step of a processing job, in a process of its own, for `clipflow
/// serve` (which starts it with its own binary and reads its answer). Not for people: hidden from
/// help; its exit statuses are the server's (`WorkerExit`), not the command table's.
struct ServeWorkerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve-worker", abstract: "Internal: one processing step of clipflow serve.", shouldDisplay: false)

    /// The step's pipeline (`StepPipeline`), run as `clipflow run` runs it.
    @Argument var pipeline: String?
    @Option var step: String?
    @Option var input: String?
    @Option var output: String?
    /// `--step ladder`: its pipeline's rungs, as names (`360p,720p`) or `copy`, and what it
    /// takes over (`--reuse FOLDER --reuse-tracks 360p,audio,poster`).
    @Option var rungs: String?
    @Option var reuse: String?
    @Option(name: .customLong("reuse-tracks")) var reuseTracks: String?
    /// `--step ladder`: print the step's pipeline (for `clipflow run`) and run nothing.
    @Flag(name: .customLong("print-pipeline")) var printPipeline = false
    @Option(name: .customLong("memory-limit")) var memoryLimit: Int64 = 0
    /// The CPU priority of every thread of the worker (0: the server's).
    @Option var nice: Int32 = 0
    /// A probe's copy (with --output) is made within these limits (`ProcessingLimits`).
    @OptionGroup var limits: ServeProcessingOptions

    func run() throws {
        // Its answer: the event lines `clipflow run --events json` writes, on stdout.
        let events = JSONEventWriter()
        // The server stops a worker with SIGTERM: the graph is cancelled at once.
        let runGraph: ServeWorker.GraphRunning = { nodes, edges in try FrontDoor(renderer: events).run(nodes: nodes, edges: edges, grace: 0).0 }
        if let pipeline {
            throw ExitCode(
                ServeWorker.run(
                    pipeline: {
                        let registry = makeRegistry()
                        let graph = try loadPipeline(pipeline, variables: [:], registry: registry, overwrite: false).makeGraph(registry)
                        return (graph.nodes, graph.edges)
                    }, memoryLimit: memoryLimit, nice: nice, events: events, runGraph: runGraph))
        }
        if step == ServeWorker.Step.ladder.rawValue {
            // Shorthand for the ladder step's pipeline, validated and run as a file of it is.
            guard let input, let output, let choice = rungs.flatMap(StepPipeline.choice(rungs:)) else {
                throw ValidationError("--step ladder: expected --input, --output and --rungs (rendition names such as 360p,720p, or copy)")
            }
            let text = StepPipeline.text(
                input: input, output: output, ladder: choice, reuse: reuse.map { ($0, (reuseTracks ?? "").split(separator: ",").map(String.init)) })
            if printPipeline {
                print(text, terminator: "")
                return
            }
            throw ExitCode(
                ServeWorker.run(
                    pipeline: {
                        let registry = makeRegistry()
                        switch PipelineValidator(registry: registry, variables: [:], overwrite: false).validate(text: text) {
                        case .valid(let p):
                            let graph = try p.makeGraph(registry)
                            return (graph.nodes, graph.edges)
                        case .invalid(let issues):
                            throw ClipFlowError.badInput("the ladder's pipeline: " + issues.map(\.description).joined(separator: "; "))
                        }
                    }, memoryLimit: memoryLimit, nice: nice, events: events, runGraph: runGraph))
        }
        guard let step, let s = ServeWorker.Step(rawValue: step), let input else {
            throw ValidationError("expected PIPELINE, or --step \(ServeWorker.Step.allCases.map(\.rawValue).joined(separator: " or ")) and --input")
        }
        throw ExitCode(
            ServeWorker.run(
                step: s, input: input, output: output, copyWithin: limits.limits,
                memoryLimit: memoryLimit, nice: nice, events: events, runGraph: runGraph))
    }
}
