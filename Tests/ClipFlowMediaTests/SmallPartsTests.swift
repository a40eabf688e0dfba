import XCTest
@testable import ClipFlowMedia
import ClipFlowCore

final class ThumbnailSizeTests: XCTestCase {
    func testParsesAndFits() {
        XCTAssertEqual(ThumbnailSize(parsing: "160"), ThumbnailSize(maxWidth: 160, maxHeight: 160))
        XCTAssertEqual(ThumbnailSize(parsing: "320x180"), ThumbnailSize(maxWidth: 320, maxHeight: 180))
        XCTAssertNil(ThumbnailSize(parsing: "0"))
        XCTAssertNil(ThumbnailSize(parsing: "x10"))
        XCTAssertNil(ThumbnailSize(parsing: "big"))
        let s = ThumbnailSize(maxWidth: 160, maxHeight: 160)
        XCTAssertTrue(s.fit(width: 1920, height: 1080) == (160, 90))
        XCTAssertTrue(s.fit(width: 100, height: 50) == (100, 50))  // never scaled up
    }
}

final class MoovEstimateTests: XCTestCase {
    func testBoundGrowsWithSamples() {
        let small = MoovEstimate.bytes(tracks: [.init(samples: 100, keyframes: 10, durationRuns: 1, isVideo: true, extradataBytes: 40)])
        let big = MoovEstimate.bytes(tracks: [.init(samples: 10_000, keyframes: 1000, durationRuns: 1, isVideo: true, extradataBytes: 40)])
        XCTAssertGreaterThan(big, small)
        // Every video sample costs at most stsz+ctts+stsc+co64 = 32 bytes, plus a keyframe's 4.
        XCTAssertGreaterThanOrEqual(big - small, 9_900 * 32)
    }
}

final class MP4BoxesTests: XCTestCase {
    func testReadsTopLevelBoxesIncludingLargeSize() throws {
        var d = Data()
        func box(_ type: String, _ payload: Int) {
            var size = UInt32(8 + payload).bigEndian
            d.append(Data(bytes: &size, count: 4)); d.append(type.data(using: .ascii)!)
            d.append(Data(count: payload))
        }
        box("ftyp", 16); box("moov", 100)
        // 64-bit size mdat
        var one = UInt32(1).bigEndian; d.append(Data(bytes: &one, count: 4)); d.append("mdat".data(using: .ascii)!)
        var big = UInt64(16 + 10).bigEndian; d.append(Data(bytes: &big, count: 8)); d.append(Data(count: 10))
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("boxes-\(getpid()).mp4")
        try d.write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        let boxes = try MP4Boxes.topLevel(path: url.path)
        XCTAssertEqual(boxes.map(\.type), ["ftyp", "moov", "mdat"])
        XCTAssertEqual(boxes[2].size, 26)
        XCTAssertTrue(MP4Boxes.isFastStart(boxes))
        XCTAssertFalse(MP4Boxes.isFastStart([boxes[0], boxes[2], boxes[1]]))
    }

    func testRejectsGarbage() throws {
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("garbage-\(getpid()).mp4")
        try Data([0, 0, 0, 3, 0x61, 0x62, 0x63, 0x64, 1, 2, 3]).write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        XCTAssertThrowsError(try MP4Boxes.topLevel(path: url.path))
    }
}

final class RecordControlTests: XCTestCase {
    func testCommandsFromManyThreadsAreTakenOnceEach() {
        let control = RecordControl()
        XCTAssertEqual(control.take(), [])
        control.send(.pause)
        control.send(.resume)
        XCTAssertEqual(control.take(), [.pause, .resume], "in the order sent")
        XCTAssertEqual(control.take(), [], "taken once")
        DispatchQueue.concurrentPerform(iterations: 1000) { i in control.send(i % 2 == 0 ? .split : .pause) }
        let all = control.take()
        XCTAssertEqual(all.filter { $0 == .split }.count, 500)
        XCTAssertEqual(all.filter { $0 == .pause }.count, 500)
    }
}

/// `PicturePacker`'s pictures reach libswscale with `PicturePool.padding` readable bytes after
/// them, a 2x2 picture (6 bytes, which `Data` keeps as an inline copy) as much as a 64x4 one.
final class PicturePaddingTests: XCTestCase {
    func testSmallAndLargePicturesAreReadWithTheirPadding() throws {
        for (w, h) in [(2, 2), (4, 2), (64, 4)] {
            let packer = try PicturePacker(size: PictureSize(width: w, height: h))
            let source = try PicturePool(size: PictureSize(width: w, height: h)).picture()
            let bytes = PixelFormat.yuv420p.frameBytes(width: w, height: h)!
            for p in 0..<3 {
                let rows = p == 0 ? h : (h + 1) / 2
                for r in 0..<rows { memset(source.data(p)! + r * source.linesize(p), Int32(10 * (p + 1)), source.linesize(p)) }
            }
            let planes = try packer.planes(of: source).bytes
            XCTAssertEqual(planes.count, bytes)
            let read = try PicturePacker.withPaddedBytes(planes) { base in
                Array(UnsafeBufferPointer(start: base.assumingMemoryBound(to: UInt8.self), count: bytes + Int(PicturePool.padding)))
            }
            XCTAssertEqual(Array(read.prefix(bytes)), Array(planes), "\(w)x\(h)")
            XCTAssertEqual(read[0], 10)
            XCTAssertEqual(read[bytes - 1], 30)
        }
    }
}
