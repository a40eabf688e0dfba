import Foundation
import Synchronization
import XCTest

@testable import ClipFlowCore

/// A stage's helper threads (`StageContext.helpers`): the runner reports each as it starts and
/// ends, and no stage finishes while one of its helpers still runs.
final class HelperThreadsTests: XCTestCase {
    /// Starts a helper that outlives `drain` by `linger` seconds and records when it ended and
    /// when `finish` came.
    final class Stamp: Sendable {
        let at = Mutex<Date?>(nil)
    }

    final class Lingering: Stage {
        let id = "sink"
        let linger: Double
        let ended = Stamp()
        var finishedAt: Date?
        var inputTypes: Set<PortType> { Set(PortType.allCases) }
        var outputType: PortType? { nil }
        init(linger: Double) { self.linger = linger }
        func drain(_ context: StageContext) throws {
            let ended = ended, linger = linger
            context.helpers.start("lingerer") {
                usleep(UInt32(linger * 1e6))
                ended.at.withLock { $0 = Date() }
            }
        }
        func finish(_ context: StageContext, outcome: StageOutcome) { finishedAt = Date() }
    }

    func testTheRunnerReportsHelpersAndFinishesAStageOnlyOnceTheyEnded() throws {
        let stage = Lingering(linger: 0.3)
        let events = EventRecorder()
        let runner = try GraphRunner(
            nodes: [StageNode("src") { SyntheticSource(id: "src", count: 3, size: 8, rate: 0) }, StageNode(handing: stage)],
            edges: [Edge(from: "src", to: "sink")], sink: events)
        XCTAssertEqual(runner.run(), .completed)
        let ended = try XCTUnwrap(stage.ended.at.withLock { $0 }, "the helper ran to its end")
        let finished = try XCTUnwrap(stage.finishedAt)
        XCTAssertGreaterThanOrEqual(finished, ended, "finish came after the helper ended")
        let helper = events.events.filter { $0.stage == "sink" }.compactMap { e -> Bool? in
            if case .helper(let name, let running) = e.kind, name == "lingerer" { return running }
            return nil
        }
        XCTAssertEqual(helper, [true, false], "started, then ended")
        let kinds = events.events.filter { $0.stage == "sink" }.map(\.kind)
        let endedAt = try XCTUnwrap(kinds.firstIndex(of: .helper(name: "lingerer", running: false)))
        XCTAssertLessThan(endedAt, try XCTUnwrap(kinds.firstIndex(of: .finished)), "the stage is reported finished after its helper")
    }

    func testASetOfItsOwnWaitsForWhatItStarted() {
        final class Count: Sendable { let n = Mutex(0) }
        let threads = HelperThreads()
        let count = Count()
        for _ in 0..<4 {
            threads.start("counter") {
                usleep(50_000)
                count.n.withLock { $0 += 1 }
            }
        }
        threads.wait()
        XCTAssertEqual(count.n.withLock { $0 }, 4)
    }

    func testARepeatingTimerCallsUntilItsBodySaysNoOrItIsStopped() {
        final class Count: Sendable { let n = Mutex(0) }
        let three = Count(), done = DispatchSemaphore(value: 0)
        _ = RepeatingTimer(every: 0.01, label: "test.timer") {
            let n = three.n.withLock { n -> Int in
                n += 1
                return n
            }
            if n == 3 { done.signal() }
            return n < 3
        }
        XCTAssertEqual(done.wait(timeout: .now() + 5), .success)
        usleep(100_000)
        XCTAssertEqual(three.n.withLock { $0 }, 3, "no call after the body said no")

        let stopped = Count()
        let timer = RepeatingTimer(every: 0.01, label: "test.timer") {
            stopped.n.withLock { $0 += 1 }
            return true
        }
        while stopped.n.withLock({ $0 }) < 2 { usleep(5_000) }
        timer.stop()
        usleep(50_000)
        let after = stopped.n.withLock { $0 }
        usleep(100_000)
        XCTAssertEqual(stopped.n.withLock { $0 }, after, "no call after stop")
    }
}
