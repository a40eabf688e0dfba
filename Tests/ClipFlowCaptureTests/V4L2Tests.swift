import XCTest
import Foundation
import ClipFlowCore
import ClipFlowMedia
@testable import ClipFlowCapture
import ClipFlowCaptureEmulation
import CClipFlowV4L2

// The V4L2 driver client and source stage against the emulated vivid camera (no camera in CI).
// Frames are paced by a ManualClock, so counts, sequences and drops are exact.

final class V4L2Tests: XCTestCase {
    private func vivid(_ configure: (inout EmulatedVivid.Configuration) -> Void = { _ in }) -> (EmulatedVivid, ManualClock) {
        var c = EmulatedVivid.Configuration()
        configure(&c)
        let clock = ManualClock(start: 100)
        return (EmulatedVivid(c, clock: clock), clock)
    }

    private func frames(_ d: V4L2Device, _ n: Int) throws -> [VideoFrame] {
        var out: [VideoFrame] = []
        while out.count < n {
            switch try d.read(timeoutMs: 1000) {
            case .frame(let f): out.append(f)
            case .timeout: XCTFail("timeout after \(out.count) frames"); return out
            case .deviceLost: return out
            }
        }
        return out
    }

    private func message(_ body: () throws -> Void) -> String {
        do { try body() } catch { return "\(error)" }
        XCTFail("expected an error")
        return ""
    }

    // MARK: capabilities and negotiation

    func testQueriesCapabilitiesFormatsSizesAndRates() throws {
        let (emu, _) = vivid()
        let d = try V4L2Device(path: "/dev/video0", syscalls: emu)
        XCTAssertEqual(d.driver, "vivid")
        XCTAssertEqual(d.card, "vivid")
        XCTAssertTrue(d.isCaptureDevice)
        let f = try d.formats()
        XCTAssertEqual(f.map(\.fourcc), ["YUYV", "NV12", "YU12", "MJPG"])
        XCTAssertEqual(f.map(\.format), [.yuyv, .nv12, .yuv420, .mjpeg])
        XCTAssertEqual(f.map(\.compressed), [false, false, false, true])
        XCTAssertEqual(f[0].sizes.map { "\($0.width)x\($0.height)" }, ["320x240", "640x480", "1280x720", "1920x1080"])
        XCTAssertEqual(f[0].sizes[2].frameRates, [60, 30, 15])
        XCTAssertEqual(f[0].sizes[3].frameRates, [30, 15])
    }

    func testNegotiationAdjustsSizeAndReadsBackRate() throws {
        let (emu, _) = vivid()
        let d = try V4L2Device(path: "/dev/video0", syscalls: emu)
        let n = try d.configure(CaptureRequest(width: 1000, height: 700, fps: 25, format: .nv12))
        XCTAssertEqual(n.format, .nv12)
        XCTAssertEqual([n.width, n.height], [1280, 720])
        XCTAssertTrue(n.sizeAdjusted)
        XCTAssertEqual(n.fps, 30)  // nearest offered interval to 1/25
        XCTAssertTrue(n.summary.contains("asked for 1000x700"), n.summary)
        let fast = try d.configure(CaptureRequest(width: 640, height: 480, fps: 60, format: .yuyv))
        XCTAssertEqual([fast.width, fast.height], [640, 480])
        XCTAssertEqual(fast.fps, 60)
        XCTAssertFalse(fast.sizeAdjusted)
    }

    func testAutoPicksRawFormatWithTheSizeElseMJPEG() throws {
        let (emu, _) = vivid()
        XCTAssertEqual(try V4L2Device(path: "/dev/video0", syscalls: emu).configure(CaptureRequest(width: 640, height: 480)).format, .yuv420)
        let (yuyvOnly, _) = vivid { $0.formats = [.mjpeg, .yuyv] }
        XCTAssertEqual(try V4L2Device(path: "/dev/video0", syscalls: yuyvOnly).configure(CaptureRequest(width: 640, height: 480)).format, .yuyv)
        let (mjpegOnly, _) = vivid { $0.formats = [.mjpeg] }
        XCTAssertEqual(try V4L2Device(path: "/dev/video0", syscalls: mjpegOnly).configure(CaptureRequest()).format, .mjpeg)
    }

    func testUnsupportedFormatListsWhatIsSupported() throws {
        let (emu, _) = vivid { $0.formats = [.yuyv, .mjpeg] }
        let d = try V4L2Device(path: "/dev/video0", syscalls: emu)
        let m = message { try d.configure(CaptureRequest(format: .nv12)) }
        XCTAssertTrue(m.hasPrefix("camera '/dev/video0' (vivid) does not support nv12; it supports:"), m)
        XCTAssertTrue(m.contains("YUYV [yuyv]: 320x240 (60, 30, 15 fps)"), m)
        XCTAssertTrue(m.contains("MJPG [mjpeg]:"), m)
    }

    // MARK: streaming

    func testStreamsContinuousSequencesWithIncreasingTimestamps() throws {
        let (emu, _) = vivid()
        let d = try V4L2Device(path: "/dev/video0", syscalls: emu)
        try d.configure(CaptureRequest(width: 320, height: 240, fps: 30, format: .yuyv))
        try d.start()
        XCTAssertEqual(emu.liveMappings, V4L2Device.defaultBufferCount)
        let got = try frames(d, 12)
        XCTAssertEqual(got.map(\.sequence), Array(0..<12))
        XCTAssertEqual(got.map { EmulatedVivid.sequenceCode(in: $0) }, (0..<12).map { UInt32($0) })
        XCTAssertEqual(got[0].time, 0)
        for (k, f) in got.enumerated() { XCTAssertEqual(f.time, Double(k) / 30, accuracy: 2e-6) }
        XCTAssertTrue(got.allSatisfy { $0.format == .yuyv422 && $0.width == 320 && $0.height == 240 && $0.data.count == 320 * 240 * 2 })
        XCTAssertEqual(d.droppedFrames, 0)
        // Planar formats deliver their own layout, read back the same way.
        d.stop()
        try d.configure(CaptureRequest(width: 640, height: 480, format: .nv12))
        try d.start()
        let nv12 = try frames(d, 3)
        XCTAssertEqual(nv12.map { EmulatedVivid.sequenceCode(in: $0) }, [0, 1, 2])
        XCTAssertEqual(nv12[0].data.count, 640 * 480 * 3 / 2)
    }

    func testSlowConsumerSeesExactDropsFromSequenceGaps() throws {
        let (emu, clock) = vivid()
        let d = try V4L2Device(path: "/dev/video0", syscalls: emu)
        try d.configure(CaptureRequest(width: 320, height: 240, fps: 30, format: .yuv420))
        try d.start(bufferCount: 4)
        // Ten frames fall due while nobody dequeues: four fill the buffers, six are dropped.
        clock.advance(by: 10.5 / 30)
        let got = try frames(d, 5)
        XCTAssertEqual(got.map(\.sequence), [0, 1, 2, 3, 10])
        XCTAssertEqual(d.droppedFrames, 6)
        XCTAssertEqual(got[4].time, 10.0 / 30, accuracy: 2e-6)
    }

    func testMJPEGFramesDecodeToYUV420pOfTheNegotiatedSize() throws {
        let (emu, _) = vivid { $0.formats = [.mjpeg] }
        let d = try V4L2Device(path: "/dev/video0", syscalls: emu)
        let n = try d.configure(CaptureRequest(width: 640, height: 480, fps: 30))
        XCTAssertEqual(n.format, .mjpeg)
        try d.start()
        let got = try frames(d, 3)
        for (k, f) in got.enumerated() {
            XCTAssertEqual(f.format, .yuv420p)
            XCTAssertEqual([f.width, f.height], [640, 480])
            XCTAssertEqual(f.data.count, 640 * 480 * 3 / 2)
            XCTAssertEqual(EmulatedVivid.sequenceCode(in: f), UInt32(k))
        }
    }

    func testStopUnmapsEveryBufferAndCloseReleasesTheDevice() throws {
        let (emu, _) = vivid()
        let d = try V4L2Device(path: "/dev/video0", syscalls: emu)
        try d.configure(CaptureRequest(width: 320, height: 240, format: .yuyv))
        try d.start()
        _ = try frames(d, 2)
        XCTAssertTrue(emu.isStreaming)
        d.stop()
        XCTAssertFalse(emu.isStreaming)
        XCTAssertEqual(emu.liveMappings, 0)
        // The queue was freed (REQBUFS 0): another open may take the camera now.
        let other = try V4L2Device(path: "/dev/video0", syscalls: emu)
        try other.configure(CaptureRequest(width: 320, height: 240, format: .yuyv))
        other.close()
        d.close()
        XCTAssertEqual(emu.openDescriptors, 0)
    }

    func testDeinitStopsAndUnmaps() throws {
        let (emu, _) = vivid()
        do {
            let d = try V4L2Device(path: "/dev/video0", syscalls: emu)
            try d.configure(CaptureRequest(width: 320, height: 240, format: .yuyv))
            try d.start()
            _ = try frames(d, 1)
            XCTAssertEqual(emu.liveMappings, V4L2Device.defaultBufferCount)
        }
        XCTAssertEqual(emu.liveMappings, 0)
        XCTAssertEqual(emu.openDescriptors, 0)
        XCTAssertFalse(emu.isStreaming)
    }

    // MARK: errors

    func testMissingDeviceSaysSo() {
        let (emu, _) = vivid { $0.missing = true }
        XCTAssertEqual(
            message { _ = try V4L2Device(path: "/dev/video0", syscalls: emu) },
            "camera '/dev/video0': no such device; is the camera plugged in? (no video devices found)")
        let (present, _) = vivid()
        XCTAssertTrue(message { _ = try V4L2Device(path: "/dev/video3", syscalls: present) }.contains("(video devices found: /dev/video0;"))
    }

    func testPermissionDeniedHintsAtTheVideoGroup() {
        let (emu, _) = vivid { $0.permissionDenied = true }
        let m = message { _ = try V4L2Device(path: "/dev/video0", syscalls: emu) }
        XCTAssertTrue(m.hasPrefix("camera '/dev/video0': permission denied;"), m)
        XCTAssertTrue(m.contains("'video' group"), m)
    }

    func testBusyCameraNamesAnotherProgram() throws {
        let (emu, _) = vivid { $0.busy = true }
        let d = try V4L2Device(path: "/dev/video0", syscalls: emu)
        let m = message { try d.configure(CaptureRequest(format: .yuyv)) }
        XCTAssertTrue(m.hasPrefix("camera '/dev/video0' is busy: another program is using it"), m)
        // Without the fault: a second descriptor while the first streams gets EBUSY too.
        let (free, _) = vivid()
        let first = try V4L2Device(path: "/dev/video0", syscalls: free)
        try first.configure(CaptureRequest(width: 320, height: 240, format: .yuyv))
        try first.start()
        let second = try V4L2Device(path: "/dev/video0", syscalls: free)
        XCTAssertTrue(message { try second.configure(CaptureRequest(width: 320, height: 240, format: .yuyv)) }.contains("is busy"))
    }

    func testNonCaptureNodeIsRefused() {
        let (emu, _) = vivid { $0.captureDevice = false }
        let m = message { _ = try V4L2Device(path: "/dev/video0", syscalls: emu) }
        XCTAssertEqual(m, "'/dev/video0' (vivid, driver vivid) is not a video capture device; run 'clipflow devices' to see the cameras")
    }

    func testUnplugMidStreamEndsWithTheFramesSoFar() throws {
        let (emu, _) = vivid { $0.unplugAfterFrames = 5 }
        let d = try V4L2Device(path: "/dev/video0", syscalls: emu)
        try d.configure(CaptureRequest(width: 320, height: 240, format: .yuyv))
        try d.start()
        let got = try frames(d, 100)
        XCTAssertEqual(got.map(\.sequence), [0, 1, 2, 3, 4])
        XCTAssertTrue(d.deviceLost)
        d.close()  // STREAMOFF/REQBUFS fail with ENODEV; the buffers are still unmapped
        XCTAssertEqual(emu.liveMappings, 0)
        XCTAssertEqual(emu.openDescriptors, 0)
    }

    // MARK: listing and the stage

    func testListsTheEmulatedCamera() {
        let (emu, _) = vivid { $0.formats = [.yuyv] }
        let list = V4L2Devices.list(syscalls: emu)
        XCTAssertEqual(list.map(\.path), ["/dev/video0"])
        XCTAssertEqual(list[0].card, "vivid")
        XCTAssertEqual(list[0].formats.map(\.fourcc), ["YUYV"])
        XCTAssertTrue(list[0].description.hasPrefix("/dev/video0: vivid (driver vivid, platform:vivid-000)\n  YUYV [yuyv]: 320x240"), list[0].description)
        let (denied, _) = vivid { $0.permissionDenied = true }
        XCTAssertEqual(V4L2Devices.list(syscalls: denied).first?.problem?.contains("permission denied"), true)
    }

    func testSourceStageStreamsFramesThroughTheHarness() throws {
        let clock = ManualClock(start: 50)
        let emu = EmulatedVivid(clock: clock)
        let stage = V4L2Source(id: "cam", request: CaptureRequest(width: 640, height: 480, fps: 30), frames: 10, syscalls: emu)
        let h = StageHarness(stage, clock: clock)
        try h.prepare()
        XCTAssertTrue(h.events.contains { $0.kind == .notice("camera /dev/video0 (vivid): yuv420 640x480 at 30 fps") }, "\(h.events)")
        try h.produce()
        var seqs: [Int64] = []
        while let item = h.pull() {
            guard case .video(let f)? = item.media else { return XCTFail("not a video frame") }
            XCTAssertEqual(item.type, .frames)
            XCTAssertEqual([f.width, f.height], [640, 480])
            seqs.append(f.sequence)
        }
        XCTAssertEqual(seqs, Array(0..<10))
        XCTAssertTrue(h.finish().isEmpty)
        XCTAssertEqual(emu.liveMappings, 0)
        XCTAssertEqual(emu.openDescriptors, 0)
    }

    func testSourceStageStopsAtDurationAndOnStop() throws {
        let clock = ManualClock()
        let emu = EmulatedVivid(clock: clock)
        let stage = V4L2Source(id: "cam", request: CaptureRequest(width: 320, height: 240, fps: 15), duration: 2, syscalls: emu)
        let h = StageHarness(stage, clock: clock)
        try h.prepare()
        try h.produce()
        XCTAssertEqual(stage.framesPushed, 30)  // times 0 ..< 2 s at 15 fps
        h.finish()

        let stopped = V4L2Source(id: "cam2", request: CaptureRequest(width: 320, height: 240), syscalls: emu)
        let h2 = StageHarness(stopped, clock: clock)
        try h2.prepare()
        h2.stop()
        try h2.produce()
        XCTAssertEqual(stopped.framesPushed, 0)
        h2.finish(.stopped)
        XCTAssertEqual(emu.openDescriptors, 0)
    }

    func testSourceStageEndsNormallyWhenUnplugged() throws {
        let clock = ManualClock()
        var c = EmulatedVivid.Configuration()
        c.unplugAfterFrames = 4
        c.formats = [.mjpeg]
        let emu = EmulatedVivid(c, clock: clock)
        let stage = V4L2Source(id: "cam", request: CaptureRequest(width: 320, height: 240), syscalls: emu)
        let h = StageHarness(stage, clock: clock)
        try h.prepare()
        try h.produce()
        XCTAssertTrue(stage.deviceLost)
        XCTAssertEqual(stage.framesPushed, 4)
        XCTAssertTrue(h.events.contains { $0.kind == .notice("camera /dev/video0 was unplugged after 4 frames; ending the recording there") })
        XCTAssertEqual(h.finish().count, 4)
        XCTAssertEqual(emu.liveMappings, 0)
    }

    /// Pictures the driver flags broken are skipped, counted and reported as drops of their own
    /// cause (they used to be counted by the device and reported nowhere).
    func testSourceStageCountsAndReportsBrokenPictures() throws {
        let clock = ManualClock()
        var c = EmulatedVivid.Configuration()
        c.brokenEvery = 5  // sequences 4, 9, 14, ...
        let emu = EmulatedVivid(c, clock: clock)
        let stage = V4L2Source(id: "cam", request: CaptureRequest(width: 320, height: 240), frames: 16, syscalls: emu)
        let h = StageHarness(stage, clock: clock)
        try h.prepare()
        try h.produce()
        XCTAssertEqual(stage.framesPushed, 16)
        XCTAssertEqual(stage.brokenFrames, 3)
        XCTAssertEqual(stage.droppedFrames, 0)
        let broken = h.events.compactMap { e -> Int? in
            if case .dropped(let n, V4L2Source.brokenCause) = e.kind { return n }
            return nil
        }
        XCTAssertEqual(broken.last, 3, "\(h.events.map(\.kind))")
        XCTAssertEqual(h.finish().count, 16)
    }

    // MARK: the real kernel (no camera here: errors only)

    func testRealSyscallsReportMissingNodesAndNonV4L2Files() {
        let linux = LinuxV4L2Syscalls()
        XCTAssertTrue(
            message { _ = try V4L2Device(path: "/dev/video-clipflow-none", syscalls: linux) }
                .hasPrefix("camera '/dev/video-clipflow-none': no such device; is the camera plugged in?"))
        // /dev/null opens but does not answer VIDIOC_QUERYCAP (ENOTTY).
        XCTAssertEqual(
            message { _ = try V4L2Device(path: "/dev/null", syscalls: linux) },
            "'/dev/null' is not a Video4Linux device (it does not answer VIDIOC_QUERYCAP)")
    }

    func testSourceStageReportsDropsWhenItFallsBehind() throws {
        // The first wait oversleeps by forty frame intervals (a stalled consumer): frames 0-31
        // fill the 32 buffers, frames 32-40 find none queued and are dropped.
        let clock = OversleepingClock(lag: 40.0 / 30)
        let emu = EmulatedVivid(clock: clock)
        let stage = V4L2Source(id: "cam", request: CaptureRequest(width: 320, height: 240, fps: 30, format: .yuyv), frames: 33, syscalls: emu)
        let h = StageHarness(stage, clock: ManualClock())
        try h.prepare()
        try h.produce()
        let seqs = h.finish().compactMap { item -> Int64? in
            if case .video(let f)? = item.media { return f.sequence }; return nil
        }
        XCTAssertEqual(seqs, Array(0...31) + [41])
        XCTAssertEqual(stage.droppedFrames, 9)
        XCTAssertTrue(h.events.contains { $0.kind == .dropped(count: 9, cause: V4L2Source.lostCause) })
    }

    /// A reader descheduled for half a second (15 frames at 30 fps) under load loses nothing:
    /// the capture buffers hold the frames meanwhile. (With the 4 buffers once asked for, 11
    /// frames were dropped.)
    func testHalfSecondReaderStallLosesNoFrame() throws {
        let (emu, _) = vivid { $0.readerStall = (afterFrames: 5, seconds: 0.5) }
        let stage = V4L2Source(id: "cam", request: CaptureRequest(width: 320, height: 240, fps: 30, format: .yuyv), frames: 40, syscalls: emu)
        let h = StageHarness(stage, clock: ManualClock())
        try h.prepare()
        try h.produce()
        let seqs = h.finish().compactMap { item -> Int64? in
            if case .video(let f)? = item.media { return f.sequence }; return nil
        }
        XCTAssertEqual(seqs, Array(0..<40))
        XCTAssertEqual(stage.droppedFrames, 0)
        XCTAssertFalse(
            h.events.contains {
                if case .dropped = $0.kind { return true }; return false
            })
    }

    /// A fixed-length capture is exactly duration x fps pictures however the kernel's timestamps
    /// jitter: the first frame stamped late makes the 121st of a 4 s, 30 fps capture look as if
    /// it were at 3.9995 s; it must not be taken (it started a one-picture fragment).
    func testDurationIsExactlyDurationTimesFpsDespiteTimestampJitter() throws {
        for fps in [30.0, 15] {
            let (emu, clock) = vivid { $0.timestampJitter = 0.004 }
            let stage = V4L2Source(id: "cam", request: CaptureRequest(width: 320, height: 240, fps: fps), duration: 4, syscalls: emu)
            let h = StageHarness(stage, clock: clock)
            try h.prepare()
            try h.produce()
            let frames = h.finish().compactMap { item -> VideoFrame? in
                if case .video(let f)? = item.media { return f }; return nil
            }
            XCTAssertEqual(frames.count, Int(4 * fps), "at \(fps) fps")
            XCTAssertEqual(frames.map(\.sequence), Array(0..<Int64(4 * fps)))
            XCTAssertLessThan(frames.last?.time ?? 0, 4 - 0.5 / fps)
        }
    }
}

extension V4L2Tests {
    /// A consumer slower than the camera (30 ms per picture at 60 fps, through a blocking queue
    /// of one) in a real graph: once the 32 buffers are full (after about 70 frames) the camera
    /// drops, and every drop is counted and reported by the source, exactly as many as the
    /// sequence gaps the consumer sees.
    func testSlowConsumerForcesCameraDropsThatAreAllCounted() throws {
        let emu = EmulatedVivid(clock: SystemClock())
        let source = V4L2Source(id: "cam", request: CaptureRequest(width: 320, height: 240, fps: 60, format: .yuyv), frames: 90, syscalls: emu)
        let sink = SlowFrameSink(id: "slow", delay: 0.03)
        let events = EventRecorder()
        let runner = try GraphRunner(
            nodes: [StageNode(handing: source), StageNode(handing: sink)], edges: [Edge(from: "cam", to: "slow", limits: LinkLimits(maxItems: 1))],
            sink: events)
        XCTAssertEqual(runner.run(), .completed)
        XCTAssertEqual(sink.sequences.count, 90)
        let gaps = zip(sink.sequences, sink.sequences.dropFirst()).reduce(Int64(sink.sequences.first ?? 0)) { $0 + $1.1 - $1.0 - 1 }
        XCTAssertGreaterThan(source.droppedFrames, 0, "the camera had to drop: \(sink.sequences)")
        XCTAssertEqual(Int64(source.droppedFrames), gaps, "\(sink.sequences)")
        let reported = events.events.compactMap { e -> Int? in
            if e.stage == "cam", case .dropped(let n, _) = e.kind { return n }; return nil
        }.last
        XCTAssertEqual(reported, source.droppedFrames)
        XCTAssertEqual(runner.linkStats.map(\.stats.dropped), [0], "a blocking queue drops nothing itself")
    }
}

/// Takes video frames, waiting `delay` seconds on each (a consumer slower than the camera);
/// records their sequence numbers.
private final class SlowFrameSink: Stage, @unchecked Sendable {
    let id: String
    let delay: Double
    private(set) var sequences: [Int64] = []
    var inputTypes: Set<PortType> { [.frames] }
    var outputType: PortType? { nil }
    init(id: String, delay: Double) { self.id = id; self.delay = delay }
    func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        if case .video(let f)? = item.media { sequences.append(f.sequence) }
        usleep(UInt32(delay * 1e6))
        return .ok
    }
}

/// A manual clock whose first sleep overshoots its deadline by `lag` seconds.
private final class OversleepingClock: Clock, @unchecked Sendable {
    private let inner = ManualClock()
    private let lock = NSLock()
    private var lag: Double
    init(lag: Double) { self.lag = lag }
    func now() -> Double { inner.now() }
    func sleep(until deadline: Double, stop: () -> Bool) {
        lock.lock(); let extra = lag; lag = 0; lock.unlock()
        inner.sleep(until: deadline + extra, stop: stop)
    }
}
