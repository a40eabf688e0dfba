import XCTest
import Foundation
import Synchronization
@testable import ClipFlowCore

/// A stop or cancel reaches a stage only through the `@Sendable` handlers it registered with its
/// context: each runs once, from the stopping thread, and one registered late runs at once.
final class StageContextTests: XCTestCase {
    /// Logs which handlers ran, in order (thread-safe: handlers run on other threads).
    final class Log: Sendable {
        let lines = Mutex<[String]>([])
        func add(_ s: String) { lines.withLock { $0.append(s) } }
        var all: [String] { lines.withLock { $0 } }
    }

    /// A sink that registers handlers in `prepare` and waits (polling `stopRequested`) in `receive`.
    final class Listener: Stage {
        let id = "sink"
        let log: Log
        var inputTypes: Set<PortType> { Set(PortType.allCases) }
        var outputType: PortType? { nil }
        init(_ log: Log) { self.log = log }
        func prepare(_ context: StageContext) throws {
            let log = log
            context.onStop { log.add("stop") }
            context.onCancel { log.add("cancel") }
        }
    }

    func testStopThenCancelRunEachHandlerOnceFromTheCallingThread() throws {
        let log = Log()
        let runner = try GraphRunner(
            nodes: [
                StageNode("src") { SyntheticSource(id: "src", count: 0, size: 8, rate: 200) },
                StageNode("sink") { Listener(log) }
            ],
            edges: [Edge(from: "src", to: "sink")], sink: EventRecorder())
        let done = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            _ = runner.run(); done.signal()
        }
        usleep(100_000)
        runner.stop()
        runner.stop()
        XCTAssertEqual(log.all, ["stop"], "stop handlers run at once, on the stopping thread, once")
        runner.cancel()
        runner.cancel()
        XCTAssertEqual(log.all, ["stop", "cancel"])
        XCTAssertEqual(done.wait(timeout: .now() + 10), .success)
    }

    func testAHandlerRegisteredAfterTheStopRunsAtOnce() throws {
        let log = Log()
        let h = StageHarness(Listener(log))
        h.stop()
        try h.prepare()
        XCTAssertEqual(log.all, ["stop"])
        h.cancel()
        XCTAssertEqual(log.all, ["stop", "cancel"])
    }

    /// Another stage's failure cancels the rest (not the failing stage itself).
    func testAFailureElsewhereCancelsTheOtherStages() throws {
        final class Failing: Stage {
            let id = "src"
            var inputTypes: Set<PortType> { [] }
            var outputType: PortType? { .buffers }
            func produce(_ context: StageContext) throws { throw ClipFlowError.badInput("broken source") }
        }
        let log = Log()
        let runner = try GraphRunner(
            nodes: [StageNode("src") { Failing() }, StageNode("sink") { Listener(log) }],
            edges: [Edge(from: "src", to: "sink")], sink: EventRecorder())
        guard case .failed(let stage, _) = runner.run() else { return XCTFail("expected a failure") }
        XCTAssertEqual(stage, "src")
        XCTAssertEqual(log.all, ["stop", "cancel"])
    }
}
