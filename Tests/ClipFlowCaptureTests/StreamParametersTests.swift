import XCTest
import Foundation
import ClipFlowCore
import ClipFlowMedia
import ClipFlowCapture
import ClipFlowTestSupport

/// Stream parameters travel with the stream: checked between stages before any data moves, and
/// followed in band when they change mid-stream.
final class StreamParametersTests: XCTestCase {
    let fx = Fixtures.shared

    /// A source that announces `announced`, then pushes `parts` in order: each a run of test-pattern
    /// pictures of one size, announced in band before it (after the first). Counts what it pushed.
    final class SizeChangingSource: Stage {
        let id = "cam"
        let announced: StreamParameters
        let parts: [(settings: TestPatternSettings, frames: Int64)]
        var pushed = 0
        var inputTypes: Set<PortType> { [] }
        var outputType: PortType? { .frames }
        init(announcing p: StreamParameters, parts: [(TestPatternSettings, Int64)]) {
            announced = p
            self.parts = parts.map { (settings: $0.0, frames: $0.1) }
        }
        func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? { announced }
        func produce(_ context: StageContext) throws {
            var n: Int64 = 0
            for (i, part) in parts.enumerated() {
                if i > 0 { context.push(.parameters(TestPatternSource.parameters(part.settings))) }
                let gen = try TestPatternGenerator(part.settings)
                for _ in 0..<part.frames {
                    context.push(.frame(.video(gen.video(frame: n))))
                    n += 1
                    pushed += 1
                }
            }
        }
    }

    func settings(_ w: Int, _ h: Int, format: PixelFormat = .yuv420p) -> TestPatternSettings {
        TestPatternSettings(width: w, height: h, fps: 30, format: format, sampleRate: 0)
    }

    func run(_ nodes: [StageNode], _ edges: [Edge]) throws -> GraphOutcome {
        try GraphRunner(nodes: nodes, edges: edges, sink: EventRecorder()).run()
    }

    /// A picture size change mid-stream, announced in band, closes the open fragment: two
    /// fragments, each of one size (ffprobe's word), every picture kept.
    func testRecordStartsANewFragmentWhenThePictureSizeChanges() throws {
        let dir = fx.scratch("caps-size-change").path
        let src = SizeChangingSource(
            announcing: TestPatternSource.parameters(settings(320, 240)), parts: [(settings(320, 240), 20), (settings(160, 128), 15)])
        let rec = RecordStage(id: "rec", options: RecordOptions(directory: dir))
        let events = EventRecorder()
        let runner = try GraphRunner(
            nodes: [StageNode(handing: src), StageNode(handing: rec)], edges: [Edge(from: "cam", to: "rec")], sink: events)
        XCTAssertEqual(runner.run(), .completed)
        let clips = try XCTUnwrap(rec.recorder?.clips)
        XCTAssertEqual(clips.count, 2)
        XCTAssertEqual(try clips.map { try Probe.stream($0.path, "v:0", "width") + "x" + Probe.stream($0.path, "v:0", "height") }, ["320x240", "160x128"])
        XCTAssertEqual(try clips.map { try Probe.videoFrames($0.path) }, [20, 15])
        for c in clips { XCTAssertEqual(try Probe.decodeErrors(c.path), "") }
        XCTAssertTrue(events.events.contains { $0.kind == .notice("pictures now 160x128 yuv420p; the next fragment starts with them") })
    }

    /// The record stage refuses MJPEG pictures when the graph is built: the run fails before any
    /// data moves, naming both stages and the parameter; nothing is written.
    func testRecordRefusesMJPEGBeforeAnyDataMoves() throws {
        let dir = fx.scratch("caps-mjpeg").path
        let mjpeg = StreamParameters(port: .frames, video: VideoParameters(codec: "mjpeg", width: 640, height: 480))
        let src = SizeChangingSource(announcing: mjpeg, parts: [(settings(320, 240), 5)])
        let outcome = try run(
            [StageNode(handing: src), StageNode("rec") { RecordStage(id: "rec", options: RecordOptions(directory: dir)) }],
            [Edge(from: "cam", to: "rec")])
        guard case .failed(let stage, let e) = outcome else { return XCTFail("expected a failure, got \(outcome)") }
        XCTAssertEqual(stage, "rec")
        XCTAssertEqual(e.kind, .badInput)
        XCTAssertTrue(e.message.contains("stage 'rec' cannot take what 'cam' produces"), e.message)
        XCTAssertTrue(e.message.contains("pixel format: mjpeg offered"), e.message)
        XCTAssertEqual(src.pushed, 0, "no data moved")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir), [])
    }

    /// A thumbnail stage fed raw frames (it takes video files) is refused the same way.
    func testThumbnailFedRawFramesIsRefusedNamingBothStages() throws {
        let dir = fx.scratch("caps-thumb").path
        let s = settings(320, 240)
        let outcome = try run(
            [
                StageNode("cam") { TestPatternSource(id: "cam", settings: s, realtime: false, frames: 10) },
                StageNode("thumb") { ThumbnailStage(id: "thumb", output: dir + "/c.jpg") }
            ],
            [Edge(from: "cam", to: "thumb")])
        guard case .failed(let stage, let e) = outcome else { return XCTFail("expected a failure, got \(outcome)") }
        XCTAssertEqual(stage, "thumb")
        XCTAssertTrue(e.message.contains("stage 'thumb' cannot take what 'cam' produces"), e.message)
        XCTAssertTrue(e.message.contains("port type: frames offered; it takes video"), e.message)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir + "/c.jpg"))
    }

    /// An in-band change to something the recorder cannot encode fails the run with the reason;
    /// the fragment recorded before it is kept.
    func testRecordRefusesAnInBandChangeToMJPEG() throws {
        let dir = fx.scratch("caps-inband-mjpeg").path
        final class Switcher: Stage {
            let id = "cam"
            var inputTypes: Set<PortType> { [] }
            var outputType: PortType? { .frames }
            func produce(_ context: StageContext) throws {
                let s = TestPatternSettings(width: 160, height: 128, fps: 30, sampleRate: 0)
                let gen = try TestPatternGenerator(s)
                for n in 0..<10 { context.push(.frame(.video(gen.video(frame: Int64(n))))) }
                context.push(.parameters(StreamParameters(port: .frames, video: VideoParameters(width: 160, height: 128, pixelFormat: .mjpeg))))
            }
        }
        let rec = RecordStage(id: "rec", options: RecordOptions(directory: dir))
        let outcome = try run([StageNode("cam") { Switcher() }, StageNode(handing: rec)], [Edge(from: "cam", to: "rec")])
        guard case .failed(let stage, let e) = outcome else { return XCTFail("expected a failure, got \(outcome)") }
        XCTAssertEqual(stage, "rec")
        XCTAssertTrue(e.message.contains("pixel format: mjpeg offered"), e.message)
        XCTAssertEqual(rec.recorder?.clips.count, 1, "what was recorded is kept")
    }
}
