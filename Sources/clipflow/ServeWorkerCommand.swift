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

    @Option var step: String
    @Option var input: String
    @Option var output: String?
    @Option var rungs: String?
    @Option var reuse: String?
    @Option(name: .customLong("reuse-tracks")) var reuseTracks: String?
    @Option(name: .customLong("memory-limit")) var memoryLimit: Int64 = 0
    /// The CPU priority of every thread of the worker (0: the server's).
    @Option var nice: Int32 = 0
    /// A probe's copy (with --output) is made within these limits (`ProcessingLimits`).
    @OptionGroup var limits: ServeProcessingOptions

    func run() throws {
        guard let s = ServeWorker.Step(rawValue: step) else {
            throw ValidationError("--step: expected \(ServeWorker.Step.allCases.map(\.rawValue).joined(separator: " or "))")
        }
        throw ExitCode(
            ServeWorker.run(
                step: s, input: input, output: output, rungs: rungs, reuse: reuse.map { ($0, reuseTracks ?? "") }, copyWithin: limits.limits,
                memoryLimit: memoryLimit, nice: nice,
                runGraph: { nodes, edges, events in
                    // The server stops a worker with SIGTERM: the graph is cancelled at once.
                    try FrontDoor(renderer: SinkRenderer(sink: events)).run(nodes: nodes, edges: edges, grace: 0).0
                }))
    }
}
