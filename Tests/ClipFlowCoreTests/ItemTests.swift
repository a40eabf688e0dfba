import XCTest
import Foundation
@testable import ClipFlowCore

/// What travels is a typed payload, and a link accounts for what it stands for.
final class ItemTests: XCTestCase {
    func testEachPayloadCountsWhatItHolds() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("cf-item-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let clip = dir.appendingPathComponent("a-clip-with-a-long-name.mp4").path
        try Data(count: 123_456).write(to: URL(fileURLWithPath: clip))

        let file = Item.file(clip, type: .clips)
        XCTAssertEqual(file.bytes, 123_456, "a file counts its size on disk, not its path")
        XCTAssertNil(file.time)
        XCTAssertEqual(file.path, clip)
        XCTAssertEqual(Item.file(dir.path + "/missing.mp4", type: .clips).bytes, 0)

        let picture = VideoFrame(width: 64, height: 48, format: .yuv420p, data: Data(count: 64 * 48 * 3 / 2), time: 2.5, sequence: 75)
        let v = Item.frame(.video(picture))
        XCTAssertEqual(v.bytes, 4608, "a raw picture counts its pixels")
        XCTAssertEqual(v.time, 2.5)
        XCTAssertEqual(v.type, .frames)

        let a = Item.frame(.audio(AudioChunk(sampleRate: 48_000, channels: 2, samples: [Float](repeating: 0, count: 960), firstSample: 96_000)))
        XCTAssertEqual(a.bytes, 3840, "audio counts its samples (4 bytes each)")
        XCTAssertEqual(a.time, 2.0)

        let b = Item(.buffer(sequence: 3, data: Data(count: 1000), time: 0.1), type: .buffers)
        XCTAssertEqual(b.bytes, 1000)
        XCTAssertEqual(b.time, 0.1)

        let p = Item(
            .packet(EncodedPacket(data: Data(count: 777), pts: 180_000, dts: 177_000, duration: 3000, keyframe: true, timeBase: Rational(1, 90_000))),
            type: .frames)
        XCTAssertEqual(p.bytes, 777)
        XCTAssertEqual(p.time, 2.0)

        let caps = Item.parameters(StreamParameters(port: .frames, video: VideoParameters(width: 64, height: 48, pixelFormat: .nv12)))
        XCTAssertEqual(caps.bytes, 0)
        XCTAssertNil(caps.time)
        XCTAssertEqual(caps.parameters?.video?.pixelFormat, .nv12)
        XCTAssertNil(caps.media)
    }

    /// A link's byte limit now bounds the data a file queue stands for: 3 files of 1 MiB through a
    /// link of 1.5 MiB never have more than one waiting (an empty link always admits one).
    func testAByteLimitBoundsTheFilesWaitingOnALink() throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("cf-item-link-\(getpid())")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let files = try (0..<3).map { i -> String in
            let f = dir.appendingPathComponent("c\(i).mp4").path
            try Data(count: 1 << 20).write(to: URL(fileURLWithPath: f))
            return f
        }
        let link = Link(from: "files", to: "sink", limits: LinkLimits(maxItems: 16, maxBytes: 3 << 19), policy: .dropNewest)
        for f in files { XCTAssertEqual(link.push(.file(f, type: .clips)), .ok) }
        XCTAssertEqual(link.stats.queued, 1)
        XCTAssertEqual(link.stats.peakBytes, 1 << 20)
        XCTAssertEqual(link.stats.dropped, 2)
    }

    /// The default negotiation checks port types: a source of frames into a sink of files fails
    /// before the source runs, naming both stages.
    func testAPortTypeMismatchFailsTheRunBeforeAnyDataMoves() throws {
        final class FrameSource: Stage {
            let id = "cam"
            var ran = false
            var inputTypes: Set<PortType> { [] }
            var outputType: PortType? { .frames }
            func produce(_ context: StageContext) throws { ran = true }
        }
        let src = FrameSource()
        let dest = FileManager.default.temporaryDirectory.appendingPathComponent("cf-item-neg-\(getpid())").path
        defer { try? FileManager.default.removeItem(atPath: dest) }
        let outcome = try GraphRunner(
            nodes: [StageNode(handing: src), StageNode("copy") { DirectoryStage(id: "copy", directory: dest) }],
            edges: [Edge(from: "cam", to: "copy")], sink: EventRecorder()
        ).run()
        guard case .failed(let stage, let e) = outcome else { return XCTFail("expected a failure, got \(outcome)") }
        XCTAssertEqual(stage, "copy")
        XCTAssertEqual(e.message, "stage 'copy' cannot take what 'cam' produces (frames): port type: frames offered; it takes clips, image, video")
        XCTAssertFalse(src.ran)
    }

    func testFactsAreLookedUpByTypeAndTravelWithTheItem() throws {
        struct Size: ItemFact { var pixels: Int }
        struct Note: ItemFact { var text: String }
        var item = Item.file("/nonexistent/a.mp4", type: .clips)
        XCTAssertTrue(item.facts.isEmpty)
        item.facts[Size.self] = Size(pixels: 4)
        item.facts[Note.self] = Note(text: "probed")
        item.facts[Size.self] = Size(pixels: 9)  // one of each type: replaced
        XCTAssertEqual(item.facts[Size.self]?.pixels, 9)
        XCTAssertEqual(item.facts[Note.self]?.text, "probed")
        // Over a link, facts arrive with the item.
        let link = Link(from: "a", to: "b", limits: LinkLimits(maxItems: 2, maxBytes: .max), policy: .block)
        XCTAssertEqual(link.push(item), .ok)
        let arrived = try XCTUnwrap(link.tryPull())
        XCTAssertEqual(arrived.facts[Size.self]?.pixels, 9)
        item.facts[Note.self] = nil
        XCTAssertNil(item.facts[Note.self])
        XCTAssertEqual(arrived.facts[Note.self]?.text, "probed", "a value: the copy that travelled keeps its own")
    }
}
