import XCTest
import Foundation
@testable import ClipFlowCore

/// A graph that branches and joins again (a diamond: one source feeding two stages that both feed
/// one) streams to its end through small blocking links: the joining stage reads whichever input
/// has an item, so neither branch waits forever on a full link.
final class DiamondGraphTests: XCTestCase {
    /// Passes every item on, one at a time.
    final class Relay: Stage {
        let id: String
        var inputTypes: Set<PortType> { [.buffers] }
        var outputType: PortType? { .buffers }
        init(_ id: String) { self.id = id }
        func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult { context.push(item) }
    }

    /// Counts what each input brought, and checks each input's items come in order.
    /// `@unchecked Sendable`: the runner's queue for this stage owns it while the graph runs; the
    /// test reads it only after `run()` returned.
    final class Join: Stage, @unchecked Sendable {
        let id = "join"
        var inputTypes: Set<PortType> { [.buffers] }
        var outputType: PortType? { nil }
        var counts = [0, 0]
        var inOrder = true
        private var last = [-1, -1]
        func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
            counts[input] += 1
            if case .buffer(let sequence, _, _) = item.payload {
                if Int(sequence) <= last[input] { inOrder = false }
                last[input] = Int(sequence)
            }
            return .ok
        }
    }

    func testDiamondOfStreamingBranchesRunsToItsEnd() throws {
        let source = SyntheticSource(id: "source", count: 2_000, size: 4096, rate: 0)
        let join = Join()
        let small = LinkLimits(maxItems: 4, maxBytes: 1 << 30)
        let runner = try GraphRunner(
            nodes: [StageNode(handing: source), StageNode("left") { Relay("left") }, StageNode("right") { Relay("right") }, StageNode(handing: join)],
            edges: [
                Edge(from: "source", to: "left", limits: small), Edge(from: "source", to: "right", limits: small),
                Edge(from: "left", to: "join", limits: small), Edge(from: "right", to: "join", limits: small)
            ], sink: EventRecorder())
        // `@unchecked Sendable`: written once by the runner's thread before `done` is signalled, read after.
        final class Box: @unchecked Sendable { var outcome: GraphOutcome? }
        let box = Box()
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            box.outcome = runner.run()
            done.signal()
        }
        if done.wait(timeout: .now() + 30) == .timedOut {
            runner.cancel()
            _ = done.wait(timeout: .now() + 10)
            XCTFail("the diamond deadlocked (join saw \(join.counts))")
            return
        }
        XCTAssertEqual(box.outcome, .completed)
        XCTAssertEqual(join.counts, [2_000, 2_000])
        XCTAssertTrue(join.inOrder, "each input's items in order")
    }

    /// What a merge collects from several inputs comes out in the inputs' order, whatever order
    /// the items arrived in.
    func testInputOrderedKeepsTheInputsOrder() {
        var clips = InputOrdered<String>()
        XCTAssertTrue(clips.isEmpty)
        for (path, input) in [("b1", 1), ("a1", 0), ("c1", 2), ("b2", 1), ("a2", 0)] { clips.append(path, input: input) }
        XCTAssertEqual(clips.all, ["a1", "a2", "b1", "b2", "c1"])
        XCTAssertFalse(clips.isEmpty)
    }
}
