import XCTest
import Foundation
import ClipFlowCore
import ClipFlowMedia
import ClipFlowTestSupport

/// The media stages alone in the harness: push clips in, pull what comes out, read events.
final class MediaStageTests: XCTestCase {
    let fx = Fixtures.shared

    func testMergeStageJoinsWhatItReceivedAtEndOfStream() throws {
        let clips = try (0..<2).map { try fx.toneClip($0, seconds: 1) }
        let out = fx.scratch("merge-stage").appendingPathComponent("sub/m.mp4").path
        let h = StageHarness(MergeStage(id: "m", output: out, rotate: 270))
        try h.prepare()
        for c in clips { XCTAssertEqual(try h.push(.file(c, type: .clips)), .ok) }
        XCTAssertNil(h.pull(), "nothing before end of stream")
        try h.endOfStream()
        let item = try XCTUnwrap(h.pull())
        XCTAssertEqual(item.path, out)
        XCTAssertEqual(item.type, .video)
        XCTAssertEqual(h.finish().count, 0)
        XCTAssertEqual(try Probe.videoFrames(out), 60)
        XCTAssertEqual(try Probe.rotation(out), 90)  // 270 clockwise == ffprobe's +90
        XCTAssertTrue(h.events.contains { $0.kind == .output(path: out) })
        XCTAssertTrue(
            h.events.contains {
                if case .progress = $0.kind { return true }; return false
            })
    }

    /// Stopped (SIGINT) before its inputs ended: a merge of part of the clips would be wrong, so
    /// it writes nothing and says so.
    func testMergeStageStoppedWritesNothing() throws {
        let dir = fx.scratch("merge-stop")
        let out = dir.appendingPathComponent("m.mp4").path
        let h = StageHarness(MergeStage(id: "m", output: out))
        try h.prepare()
        _ = try h.push(.file(try fx.toneClip(0, seconds: 1), type: .clips))
        h.stop()
        try h.endOfStream()
        XCTAssertNil(h.pull())
        XCTAssertFalse(FileManager.default.fileExists(atPath: out))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), [])
    }

    func testMergeStageRefusesBadInputNamingTheFile() throws {
        let dir = fx.scratch("merge-bad")
        let empty = dir.appendingPathComponent("empty.mp4").path
        XCTAssertTrue(FileManager.default.createFile(atPath: empty, contents: Data()))
        let h = StageHarness(MergeStage(id: "m", output: dir.appendingPathComponent("m.mp4").path))
        _ = try h.push(.file(empty, type: .clips))
        XCTAssertThrowsError(try h.endOfStream()) { e in
            XCTAssertTrue("\(e)".contains(empty), "\(e)")
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), ["empty.mp4"])
    }

    func testThumbnailStageWritesAnUprightCover() throws {
        let dir = fx.scratch("thumb-stage")
        let video = dir.appendingPathComponent("v.mp4").path
        _ = try Merger(inputs: [try fx.toneClip(0, seconds: 1)], options: MergeOptions(output: URL(fileURLWithPath: video), rotate: 90)).run()
        let jpg = dir.appendingPathComponent("c.jpg").path
        let h = StageHarness(ThumbnailStage(id: "t", output: jpg, size: ThumbnailSize(parsing: "160")))
        XCTAssertEqual(try h.push(.file(video, type: .video)), .ok)
        XCTAssertEqual(h.pull()?.path, jpg)
        XCTAssertEqual(try Probe.stream(jpg, "v:0", "width") + "x" + (try Probe.stream(jpg, "v:0", "height")), "120x160")
    }
}
