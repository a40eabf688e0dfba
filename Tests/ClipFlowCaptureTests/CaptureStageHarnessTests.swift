import XCTest
import Foundation
import ClipFlowCore
import ClipFlowMedia
@testable import ClipFlowCapture
import ClipFlowCaptureEmulation

/// The capture stage kinds alone in the harness: what they announce, what they push, their
/// events, and nothing left behind at finish.
final class CaptureStageHarnessTests: XCTestCase {
    func testTestPatternAnnouncesItsRealParametersAndPushesWhatItAnnounced() throws {
        let s = TestPatternSettings(width: 320, height: 240, fps: 25, format: .nv12, sampleRate: 44_100)
        let h = StageHarness(TestPatternSource(id: "tp", settings: s, realtime: false, frames: 5))
        try h.prepare()
        let caps = try XCTUnwrap(h.negotiate())
        XCTAssertEqual(caps.port, .frames)
        XCTAssertEqual(caps.video, VideoParameters(width: 320, height: 240, pixelFormat: .nv12, frameRate: 25))
        XCTAssertEqual(caps.audio, AudioParameters(sampleRate: 44_100, channels: 1))
        try h.produce()
        var pictures = 0, samples = 0
        while let item = h.pull() {
            switch item.media {
            case .video(let v)?:
                XCTAssertEqual([v.width, v.height], [caps.video?.width, caps.video?.height])
                XCTAssertEqual(v.format, caps.video?.pixelFormat)
                XCTAssertEqual(item.bytes, Int64(PixelFormat.nv12.frameBytes(width: 320, height: 240)!))
                pictures += 1
            case .audio(let a)?:
                XCTAssertEqual(a.sampleRate, 44_100)
                samples += a.frameCount
            case nil: XCTFail("unexpected payload \(item.payload)")
            }
        }
        XCTAssertEqual(pictures, 5)
        XCTAssertEqual(samples, 44_100 * 5 / 25)
        XCTAssertTrue(h.events.contains { $0.kind == .notice("test pattern 320x240 nv12 at 25.0 fps, audio 44100 Hz, as fast as possible") }, "\(h.events)")
        XCTAssertTrue(h.events.contains { $0.kind == .progress(completed: 5, total: 5, unit: "frames") })
        XCTAssertEqual(h.finish().count, 0)
    }

    /// After negotiating with the (emulated) camera, the v4l2 source announces what it agreed:
    /// the adjusted size, and MJPEG as the decoded yuv420p pictures it delivers.
    func testV4L2SourceAnnouncesTheNegotiatedFormat() throws {
        var c = EmulatedVivid.Configuration()
        c.formats = [.mjpeg]
        let clock = ManualClock(start: 10)
        let emu = EmulatedVivid(c, clock: clock)
        let stage = V4L2Source(id: "cam", request: CaptureRequest(width: 1000, height: 700, fps: 30), frames: 3, syscalls: emu)
        let h = StageHarness(stage, clock: clock)
        try h.prepare()
        let caps = try XCTUnwrap(h.negotiate())
        XCTAssertEqual(caps.video, VideoParameters(width: 1280, height: 720, pixelFormat: .yuv420p, frameRate: 30))
        XCTAssertNil(caps.audio)
        try h.produce()
        var n = 0
        while let item = h.pull() {
            guard case .video(let f)? = item.media else { return XCTFail("not a picture") }
            XCTAssertEqual([f.width, f.height], [1280, 720])
            XCTAssertEqual(f.format, .yuv420p)
            n += 1
        }
        XCTAssertEqual(n, 3)
        XCTAssertTrue(h.finish().isEmpty)
        XCTAssertEqual(emu.openDescriptors, 0)
    }
}
