import XCTest
import Foundation
@testable import ClipFlowCore

/// A test stage: records what it receives (in order) and forwards it; fails on item `failAt`.
final class Recorder: Stage, @unchecked Sendable {
    let id: String
    let failAt: Int?
    let lock = NSLock()
    var seen: [String] = []
    var drained = false
    var outcome: StageOutcome?
    var inputTypes: Set<PortType> { Set(PortType.allCases) }
    var outputType: PortType? { .clips }
    init(_ id: String, failAt: Int? = nil) { self.id = id; self.failAt = failAt }
    func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        lock.lock(); seen.append("\(input):\(item.path ?? "buffer")"); let n = seen.count; lock.unlock()
        if let failAt, n == failAt { throw ClipFlowError.badInput("item \(n) is bad") }
        return context.push(item)
    }
    func drain(_ context: StageContext) throws { drained = true }
    func finish(_ context: StageContext, outcome: StageOutcome) { self.outcome = outcome }
}

final class GraphTests: XCTestCase {
    func run(_ stages: [any Stage], _ edges: [Edge], timeout: Double = 20, during: ((GraphRunner) -> Void)? = nil)
        throws -> (GraphOutcome, GraphRunner, EventRecorder)
    {
        let rec = EventRecorder()
        let runner = try GraphRunner(nodes: stages.map { s in StageNode(handing: s) }, edges: edges, sink: rec)
        let done = DispatchSemaphore(value: 0)
        final class Box: @unchecked Sendable { var o: GraphOutcome? }
        let box = Box()
        DispatchQueue.global().async {
            box.o = runner.run(); done.signal()
        }
        during?(runner)
        XCTAssertEqual(done.wait(timeout: .now() + timeout), .success, "the graph hung")
        return (box.o ?? .interrupted, runner, rec)
    }

    /// Backpressure: a fast source into a slow sink through a blocking link of 4 never queues
    /// more than 4, and loses nothing.
    func testBlockingLinkHoldsAFastSourceAtItsLimit() throws {
        let src = SyntheticSource(id: "fast", count: 300, size: 65536, rate: 0)
        let sink = NullSink(id: "slow", delay: 0.0005)
        let (outcome, runner, _) = try run([src, sink], [Edge(from: "fast", to: "slow", limits: LinkLimits(maxItems: 4, maxBytes: 1 << 30), policy: .block)])
        XCTAssertEqual(outcome, .completed)
        XCTAssertEqual(sink.received, 300)
        XCTAssertEqual(sink.missing, 0)
        let st = try XCTUnwrap(runner.linkStats.first).stats
        XCTAssertLessThanOrEqual(st.peakItems, 4)
        XCTAssertGreaterThanOrEqual(st.peakItems, 3, "the slow sink let the queue fill")
        XCTAssertEqual(st.dropped, 0)
    }

    /// A live source with drop-oldest: the drops the link reports are exactly the sequence numbers
    /// the sink never saw, and every gap reaches the sink as a discontinuity.
    func testDropOldestReportsExactlyWhatTheSinkMissed() throws {
        let src = SyntheticSource(id: "live", count: 400, size: 1024, rate: 0)
        let sink = NullSink(id: "preview", delay: 0.0005)
        let (outcome, runner, rec) = try run(
            [src, sink], [Edge(from: "live", to: "preview", limits: LinkLimits(maxItems: 2, maxBytes: 1 << 30), policy: .dropOldest)])
        XCTAssertEqual(outcome, .completed)
        let st = try XCTUnwrap(runner.linkStats.first).stats
        XCTAssertGreaterThan(st.dropped, 0, "a slow sink must cause drops")
        XCTAssertEqual(sink.received + st.dropped, 400)
        XCTAssertEqual(Int(sink.missing), st.dropped, "drop-oldest loses only items before ones delivered")
        XCTAssertGreaterThan(sink.discontinuities, 0)
        let lastReported = rec.events.compactMap { e -> Int? in
            if case .dropped(let n, let cause) = e.kind, cause == Link.dropCause { return n }; return nil
        }.last
        XCTAssertEqual(lastReported, st.dropped, "the dropped event reports the exact count, and that the queue was full")
    }

    func testDropNewestCountsEveryRefusedItem() throws {
        let src = SyntheticSource(id: "live", count: 400, size: 1024, rate: 0)
        let sink = NullSink(id: "preview", delay: 0.0005)
        let (outcome, runner, _) = try run(
            [src, sink], [Edge(from: "live", to: "preview", limits: LinkLimits(maxItems: 2, maxBytes: 1 << 30), policy: .dropNewest)])
        XCTAssertEqual(outcome, .completed)
        let st = try XCTUnwrap(runner.linkStats.first).stats
        XCTAssertGreaterThan(st.dropped, 0)
        XCTAssertEqual(sink.received + st.dropped, 400)
    }

    /// Fan-in gives each input's items in order (the inputs interleave as items come); fan-out
    /// gives every consumer everything.
    func testFanInKeepsEachInputsOrderAndFanOutReachesEveryConsumer() throws {
        let a = FilesStage(id: "a", paths: ["/dev/null", "/etc/hostname"].filter { FileManager.default.fileExists(atPath: $0) }, glob: nil)
        let b = FilesStage(id: "b", paths: ["/etc/passwd"], glob: nil)
        let mid = Recorder("mid"), left = Recorder("left"), right = Recorder("right")
        let (outcome, _, _) = try run(
            [a, b, mid, left, right],
            [
                Edge(from: "a", to: "mid"), Edge(from: "b", to: "mid"),
                Edge(from: "mid", to: "left"), Edge(from: "mid", to: "right")
            ])
        XCTAssertEqual(outcome, .completed)
        let expected = a.paths.map { "0:\($0)" } + ["1:/etc/passwd"]
        XCTAssertEqual(mid.seen.filter { $0.hasPrefix("0:") }, a.paths.map { "0:\($0)" })
        XCTAssertEqual(mid.seen.filter { $0.hasPrefix("1:") }, ["1:/etc/passwd"])
        XCTAssertEqual(left.seen.map { $0.dropFirst(2) }, right.seen.map { $0.dropFirst(2) })
        XCTAssertEqual(left.seen.count, expected.count)
        XCTAssertTrue(mid.drained && left.drained && right.drained)
        XCTAssertEqual(left.outcome, .completed)
    }

    /// A stage that fails stops everything, even an endless source; the error names the stage.
    func testAFailingStageStopsTheWholeGraph() throws {
        let src = SyntheticSource(id: "endless", count: 0, size: 16, rate: 0)
        let bad = Recorder("checker", failAt: 5)
        let sink = NullSink(id: "out", delay: 0)
        let (outcome, _, rec) = try run([src, bad, sink], [Edge(from: "endless", to: "checker"), Edge(from: "checker", to: "out")], timeout: 10)
        XCTAssertEqual(outcome, .failed(stage: "checker", error: .badInput("item 5 is bad")))
        XCTAssertEqual(outcome.exitCode, 65)
        XCTAssertEqual(bad.outcome, .failed)
        XCTAssertTrue(rec.events.contains { $0.stage == "out" && $0.kind == .failed("stopped because stage 'checker' failed") })
    }

    /// Graceful stop: the source stops, end of stream flows, downstream drains; interrupted.
    func testStopEndsSourcesAndEndOfStreamFlows() throws {
        let src = SyntheticSource(id: "camera", count: 0, size: 16, rate: 2000)
        let rec = Recorder("encoder")
        let (outcome, _, events) = try run([src, rec], [Edge(from: "camera", to: "encoder")], timeout: 10) { runner in
            usleep(100_000)
            runner.stop()
        }
        XCTAssertEqual(outcome, .interrupted)
        XCTAssertEqual(outcome.exitCode, 130)
        XCTAssertTrue(rec.drained, "end of stream reached the consumer")
        XCTAssertEqual(rec.outcome, .stopped)
        XCTAssertGreaterThan(rec.seen.count, 10)
        XCTAssertTrue(events.events.contains { $0.stage == "camera" && $0.kind == .interrupted })
    }

    /// A graceful stop that does not finish in time is escalated to cancel by its deadline.
    func testStopDeadlineEscalatesToCancel() throws {
        let src = SyntheticSource(id: "src", count: 0, size: 16, rate: 0)
        let sink = NullSink(id: "busy", delay: 30)
        let start = Date()
        let (outcome, _, _) = try run([src, sink], [Edge(from: "src", to: "busy")], timeout: 10) { runner in
            usleep(100_000)
            runner.stop(deadline: 0.3)
        }
        XCTAssertEqual(outcome, .interrupted)
        XCTAssertLessThan(Date().timeIntervalSince(start), 5, "the 30 s item was abandoned at the deadline")
    }

    /// Cancel releases a producer blocked on a full link and a consumer waiting on an empty one.
    func testCancelReleasesBlockedStages() throws {
        let src = SyntheticSource(id: "fast", count: 0, size: 16, rate: 0)
        let sink = NullSink(id: "stuck", delay: 30)
        let (outcome, _, _) = try run([src, sink], [Edge(from: "fast", to: "stuck", limits: LinkLimits(maxItems: 2, maxBytes: 1 << 20))], timeout: 10) {
            runner in
            usleep(100_000)
            runner.cancel()
        }
        XCTAssertEqual(outcome, .interrupted)
    }
}

/// Each stage alone in the harness.
final class HarnessTests: XCTestCase {
    func testSyntheticSourceIsPacedByTheClock() throws {
        let clock = ManualClock()
        let h = StageHarness(SyntheticSource(id: "s", count: 5, size: 8, rate: 10), clock: clock)
        try h.prepare()
        try h.produce()
        var times: [Double] = []
        while let i = h.pull() { times.append(i.time ?? -1) }
        XCTAssertEqual(times, [0, 0.1, 0.2, 0.3, 0.4])
        XCTAssertEqual(clock.now(), 0.4, accuracy: 1e-9)
        XCTAssertEqual(h.finish().count, 0)
    }

    func testStopEndsAnEndlessSource() throws {
        let src = SyntheticSource(id: "s", count: 0, size: 8, rate: 0)
        let h = StageHarness(src, outputLimit: 1 << 20)
        // Stop from inside: after 100 items a watcher asks the stage to stop (it reads the
        // harness's link, not the stage, which belongs to the producing thread).
        DispatchQueue.global().async {
            while h.output.stats.queued < 100 { usleep(100) }; h.stop()
        }
        try h.produce()
        XCTAssertGreaterThanOrEqual(src.produced, 100)
        XCTAssertEqual(h.finish(.stopped).count, src.produced, "leftovers: everything produced and not pulled")
    }

    func testFilesStageListsGlobMatchesByName() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("cf-files-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        for n in ["b.mp4", "a.mp4", "c.mov"] { XCTAssertTrue(FileManager.default.createFile(atPath: dir.appendingPathComponent(n).path, contents: Data([1]))) }
        let h = StageHarness(FilesStage(id: "f", paths: [], glob: dir.path + "/*.mp4"))
        try h.produce()
        XCTAssertEqual([h.pull(), h.pull(), h.pull()].map { $0?.path.map { ($0 as NSString).lastPathComponent } }, ["a.mp4", "b.mp4", nil])
        XCTAssertEqual(h.events.last?.kind, .progress(completed: 2, total: 2, unit: "files"))
    }

    func testFilesStageRefusesAMissingFile() {
        let h = StageHarness(FilesStage(id: "f", paths: ["/nonexistent/clip.mp4"], glob: nil))
        XCTAssertThrowsError(try h.produce()) { e in
            XCTAssertEqual((e as? ClipFlowError)?.message, "input '/nonexistent/clip.mp4': no such file")
        }
    }

    func testDirectorySinkCopiesAtomically() throws {
        let base = FileManager.default.temporaryDirectory.appendingPathComponent("cf-dir-\(getpid())")
        defer { try? FileManager.default.removeItem(at: base) }
        try FileManager.default.createDirectory(at: base, withIntermediateDirectories: true)
        let src = base.appendingPathComponent("v.mp4").path
        let payload = Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 * 7) })
        try payload.write(to: URL(fileURLWithPath: src))
        let dest = base.appendingPathComponent("pub").path
        let h = StageHarness(DirectoryStage(id: "d", directory: dest))
        try h.prepare()
        XCTAssertEqual(try h.push(.file(src, type: .video)), .ok)
        try h.endOfStream()
        XCTAssertEqual(h.finish().count, 0, "a sink produces nothing")
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: dest + "/v.mp4")), payload)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dest), ["v.mp4"], "no temporary file left")
        XCTAssertTrue(h.events.contains { $0.kind == .output(path: dest + "/v.mp4") })
    }

    func testNullSinkCountsGapsAndDiscontinuities() throws {
        let sink = NullSink(id: "n", delay: 0)
        let h = StageHarness(sink)
        for s in [0, 1, 4, 5, 9] as [Int64] {
            var it = Item(.buffer(sequence: s, data: Data(), time: nil), type: .buffers)
            it.discontinuity = s == 4 || s == 9
            _ = try h.push(it)
        }
        XCTAssertEqual(sink.received, 5)
        XCTAssertEqual(sink.missing, 5)
        XCTAssertEqual(sink.discontinuities, 2)
    }
}
