import ArgumentParser
import ClipFlowCore
import ClipFlowServe
import Foundation

/// `clipflow serve-worker PIPELINE`: one step of a processing job, in a process of its own, for
/// `clipflow serve` (which writes the step's pipeline, `StepPipeline`, starts this with its own
/// binary and reads its answer). `clipflow serve-worker --spare` is started before its step and
/// reads the pipeline's path from stdin. The pipeline is validated and run as `clipflow run` runs it.
/// Not for people: hidden from help; its exit statuses are the server's (`WorkerExit`), not the
/// command table's.
struct ServeWorkerCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve-worker", abstract: "Internal: one processing step of clipflow serve.", shouldDisplay: false)

    /// The step's pipeline (`StepPipeline`); with `--spare`, none.
    @Argument var pipeline: String?
    /// Started before its step (`WorkerSpares`): the pipeline's path comes as a line on stdin.
    @Flag var spare = false
    @Option(name: .customLong("memory-limit")) var memoryLimit: Int64 = 0
    /// The CPU priority of every thread of the worker (0: the server's).
    @Option var nice: Int32 = 0

    func validate() throws {
        if spare == (pipeline != nil) { throw ValidationError("serve-worker takes a pipeline, or --spare (and the pipeline on stdin)") }
    }

    func run() throws {
        let pipeline: String
        if spare {
            // What every step needs, made before the wait.
            _ = makeRegistry()
            guard let path = ServeWorker.awaitStep() else { throw ExitCode(WorkerExit.orphaned.rawValue) }
            pipeline = path
        } else {
            pipeline = self.pipeline ?? ""
        }
        // Its answer: the event lines `clipflow run --events json` writes, on stdout.
        let events = JSONEventWriter()
        // The server stops a worker with SIGTERM: the graph is cancelled at once.
        let runGraph: ServeWorker.GraphRunning = { nodes, edges in try FrontDoor(renderer: events).run(nodes: nodes, edges: edges, grace: 0).0 }
        throw ExitCode(
            ServeWorker.run(
                pipeline: {
                    let registry = makeRegistry()
                    let graph = try loadPipeline(pipeline, variables: [:], registry: registry, overwrite: false).makeGraph(registry)
                    return (graph.nodes, graph.edges)
                }, memoryLimit: memoryLimit, nice: nice, events: events, runGraph: runGraph))
    }
}
