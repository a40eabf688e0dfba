import ClipFlowCore
import ClipFlowTestSupport
import Foundation
import XCTest

@testable import ClipFlowMedia

/// Facts carried in items: the merge's probe stage hands each clip on with its probe, in the
/// inputs' order, and the merge uses that probe instead of reading the clip again.
final class ProbeStageTests: XCTestCase {
    let fx = Fixtures.shared

    func testEachClipGoesOnWithItsProbeInTheInputsOrder() throws {
        let a = try fx.toneClip(0, seconds: 1), b = try fx.toneClip(1, seconds: 1)
        let broken = fx.scratch("probe-stage").appendingPathComponent("broken.mp4").path
        XCTAssertTrue(FileManager.default.createFile(atPath: broken, contents: Data("not a clip".utf8)))
        let h = StageHarness(ProbeStage(id: "p"))
        // Input 1's clip waits until input 0 has ended; input 0's go on at once.
        XCTAssertEqual(try h.push(.file(b, type: .clips), input: 1), .ok)
        XCTAssertNil(h.pull())
        XCTAssertEqual(try h.push(.file(a, type: .clips), input: 0), .ok)
        let first = try XCTUnwrap(h.pull())
        XCTAssertEqual(first.path, a)
        let info = try XCTUnwrap(first.facts[ProbedClip.self]).outcome.get()
        XCTAssertEqual(info.path, a)
        XCTAssertEqual(info.video.packets, 30)
        XCTAssertEqual(try h.push(.file(broken, type: .clips), input: 2), .ok)
        XCTAssertEqual(try h.inputEnded(0), .ok)
        XCTAssertEqual(h.pull()?.path, b)
        XCTAssertNil(h.pull(), "input 2 waits for input 1")
        try h.endOfStream()
        let last = try XCTUnwrap(h.pull())
        XCTAssertEqual(last.path, broken)
        // A clip that cannot be probed goes on with its failure: the merge decides what it means.
        guard case .failure(let e) = try XCTUnwrap(last.facts[ProbedClip.self]).outcome else { return XCTFail("probed a broken clip") }
        XCTAssertTrue("\(e)".contains(broken), "\(e)")
        XCTAssertTrue(h.events.contains { $0.kind == .result([.init("probed", .integer(3))]) })
        // After a stop, clips go on unprobed at once.
        let stopped = StageHarness(ProbeStage(id: "p"))
        stopped.stop()
        XCTAssertEqual(try stopped.push(.file(a, type: .clips)), .ok)
        XCTAssertNil(try XCTUnwrap(stopped.pull()).facts[ProbedClip.self])
    }

    /// The merge reads what the item carries: a probe failure it carries is the merge's error,
    /// though the clip itself is fine (it was not probed again).
    func testTheMergeUsesTheProbeTheClipCarries() throws {
        let dir = fx.scratch("merge-carried")
        let clip = try fx.toneClip(0, seconds: 1)
        let h = StageHarness(MergeStage(id: "m", output: dir.appendingPathComponent("m.mp4").path))
        var item = Item.file(clip, type: .clips)
        item.facts[ProbedClip.self] = ProbedClip(.failure(ClipFlowError.badInput("the probe this item carries")))
        _ = try h.push(item)
        XCTAssertThrowsError(try h.endOfStream()) { e in XCTAssertTrue("\(e)".contains("the probe this item carries"), "\(e)") }

        let out = dir.appendingPathComponent("n.mp4").path
        let g = StageHarness(MergeStage(id: "n", output: out))
        var probed = Item.file(clip, type: .clips)
        probed.facts[ProbedClip.self] = ProbedClip(Result { try ClipProbe.probe(clip) })
        _ = try g.push(probed)
        try g.endOfStream()
        let merged = try XCTUnwrap(g.pull())
        XCTAssertEqual(try Probe.videoFrames(out), 30)
        // The merged file carries where its pictures came from.
        XCTAssertEqual(merged.facts[FileOrigins.self]?.stretches.map(\.path), [clip])
    }

    /// The merge kind runs as probe -> merge through the runner.
    func testTheMergeKindRunsAsAProbeThenAMerge() throws {
        let g = MergeStage.graph(id: "m") { MergeStage(id: "m", output: "unused.mp4") }
        XCTAssertEqual(g.nodes.map(\.id), ["m.probe", "m"])
        XCTAssertEqual(g.entries, ["m.probe"])
        XCTAssertEqual(g.edges.map { "\($0.from)->\($0.to)" }, ["m.probe->m"])
    }
}
