import XCTest
import Foundation
import ClipFlowCore
import ClipFlowMedia
import ClipFlowCapture
import ClipFlowTestSupport

/// Decoded pictures of a file as grey (luma) pixels, by ffmpeg (display orientation applied).
struct GreyVideo {
    var width: Int, height: Int
    var frames: [[UInt8]]

    init(_ path: String) throws {
        let size = try Run.run([
            "ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
            "stream=width,height", "-of", "csv=p=0", path
        ]).out
            .trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ",").compactMap { Int($0) }
        width = size[0]; height = size[1]
        if let rot = try Probe.rotation(path), abs(rot) == 90 || abs(rot) == 270 { swap(&width, &height) }
        let raw = [UInt8](try Run.run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:v:0", "-f", "rawvideo", "-pix_fmt", "gray", "-"]).stdout)
        let n = width * height
        frames = stride(from: 0, to: raw.count - n + 1, by: n).map { Array(raw[$0..<($0 + n)]) }
    }
}

/// A/V offsets of a test-pattern recording: for each flash picture, the beep onset in the decoded
/// audio minus the picture's time (seconds).
func flashBeepOffsets(video: GreyVideo, audio: [Float], fps: Double, sampleRate: Int) -> [Double] {
    let layout = TestPatternLayout(width: video.width, height: video.height)
    var offsets: [Double] = []
    for (i, f) in video.frames.enumerated() where layout.flashLevel(grey: f) > 200 {
        let t = Double(i) / fps
        let from = max(0, Int((t - 0.05) * Double(sampleRate))), to = min(audio.count, Int((t + 0.1) * Double(sampleRate)))
        guard from < to, let onset = (from..<to).first(where: { abs(audio[$0]) > 0.5 }) else { continue }
        offsets.append(Double(onset) / Double(sampleRate) - t)
    }
    return offsets
}

final class TestPatternTests: XCTestCase {
    func testCounterFlashAndBeepAreWhereTheLayoutSays() throws {
        for (w, h) in [(320, 240), (640, 360), (1280, 720), (1920, 1080)] {
            let g = try TestPatternGenerator(TestPatternSettings(width: w, height: h, fps: 30))
            for n: Int64 in [0, 1, 29, 30, 31, 1000, 65_535, 999_999] {
                let f = g.video(frame: n)
                XCTAssertEqual(f.data.count, w * h * 3 / 2)
                let grey = [UInt8](f.data.prefix(w * h))
                XCTAssertEqual(g.layout.readCounter(grey: grey), Int(n) % (1 << TestPatternLayout.counterBits), "\(w)x\(h) frame \(n)")
                XCTAssertEqual(g.layout.flashLevel(grey: grey) > 200, n % 30 == 0, "flash on frame \(n)")
                XCTAssertEqual(Probe.brightestCorner(w: w, h: h, px: grey), "TL")
                XCTAssertEqual(f.time, Double(n) / 30, accuracy: 1e-12)
            }
        }
        let g = try TestPatternGenerator(TestPatternSettings(width: 320, height: 240, fps: 25))
        let a = g.audio(from: 47_000, count: 2000)  // 1000 samples before and after the beep at 1 s
        XCTAssertLessThanOrEqual(a.samples[..<1000].map(abs).max()!, 0.2 + 1e-6)
        XCTAssertGreaterThan(a.samples[1000..<1100].map(abs).max()!, 0.5)
        XCTAssertEqual(g.audioRange(forFrame: 0), 0..<1920)
        XCTAssertEqual(g.audioRange(forFrame: 24).upperBound, 48_000)
    }

    func testOtherPixelFormatsCarryTheSamePicture() throws {
        var s = TestPatternSettings(width: 320, height: 240)
        let planar = try TestPatternGenerator(s).video(frame: 77)
        s.format = .nv12
        let nv = try TestPatternGenerator(s).video(frame: 77)
        XCTAssertEqual(nv.format, .nv12)
        XCTAssertEqual(nv.data.prefix(320 * 240), planar.data.prefix(320 * 240))
        XCTAssertEqual(nv.data[320 * 240], planar.data[320 * 240], "first U")
        XCTAssertEqual(nv.data[320 * 240 + 1], planar.data[320 * 240 + 160 * 120], "first V")
        s.format = .yuyv422
        let yuyv = try TestPatternGenerator(s).video(frame: 77)
        XCTAssertEqual(yuyv.data.count, 320 * 240 * 2)
        let luma = stride(from: 0, to: yuyv.data.count, by: 2).map { yuyv.data[$0] }
        XCTAssertEqual(TestPatternLayout(width: 320, height: 240).readCounter(grey: luma), 77)
    }

    func testBadSettingsAreRefusedWithTheReason() {
        XCTAssertThrowsError(try TestPatternGenerator(TestPatternSettings(width: 321, height: 240))) { e in
            XCTAssertTrue("\(e)".contains("even"), "\(e)")
        }
        XCTAssertThrowsError(try TestPatternGenerator(TestPatternSettings(width: 320, height: 240, fps: 0))) { e in
            XCTAssertTrue("\(e)".contains("frame rate"), "\(e)")
        }
        var narrow = TestPatternSettings(width: 256, height: 240)
        narrow.clock = true
        XCTAssertThrowsError(try TestPatternGenerator(narrow)) { e in
            XCTAssertTrue("\(e)".contains("size 256x240: the clock needs a picture at least 272 pixels wide"), "\(e)")
        }
    }

    /// The clock row carries the wall-clock milliseconds it was given (modulo 2^32) at every size,
    /// beside the counter; a picture without the row reads as none, and a delay read across the
    /// clock's wrap comes out right.
    func testTheClockRowReadsBackTheTimeItWasGiven() throws {
        let times: [Double] = [0, 1_764_000_000.123, 1_764_000_000.9999, Double(UInt32.max) / 1000 + 0.0004, 4_294_967.295 + 0.001]
        for (w, h) in [(320, 240), (640, 360), (1280, 720), (720, 1280), (1920, 1080)] {
            var settings = TestPatternSettings(width: w, height: h)
            settings.clock = true
            let g = try TestPatternGenerator(settings)
            for (k, t) in times.enumerated() {
                let n = Int64(k * 31)
                let grey = [UInt8](g.video(frame: n, wallClock: t).data.prefix(w * h))
                XCTAssertEqual(g.layout.readClock(grey: grey), TestPatternLayout.clockValue(t), "\(w)x\(h) at \(t)")
                XCTAssertEqual(g.layout.readCounter(grey: grey), Int(n), "\(w)x\(h): the counter beside the clock")
            }
            XCTAssertNil(g.layout.readClock(grey: [UInt8](g.video(frame: 1).data.prefix(w * h))), "no time given: no row")
            let plain = try TestPatternGenerator(TestPatternSettings(width: w, height: h))
            XCTAssertNil(plain.layout.readClock(grey: [UInt8](plain.video(frame: 1, wallClock: 5).data.prefix(w * h))), "\(w)x\(h) without the clock")
        }
        XCTAssertEqual(TestPatternLayout.clockValue(4_294_967.2955), UInt32.max)
        XCTAssertEqual(TestPatternLayout.milliseconds(since: UInt32.max - 4, now: 4_294_967.3115), 20, "across the wrap")
        XCTAssertEqual(TestPatternLayout.milliseconds(since: 1000, now: 0.9), -100, "a clock ahead of now")
    }

    /// Real time under a manual clock: pictures are stamped n/fps and, when the consumer is late by
    /// more than a frame, skipped as a camera drops them (the counter shows the gap).
    func testRealTimeSourceSkipsPicturesWhenTheConsumerIsLate() throws {
        let clock = ManualClock()
        final class LateSink: Stage, @unchecked Sendable {
            let id = "late"
            let clock: ManualClock
            var sequences: [Int64] = []
            var audioSamples = 0
            init(_ c: ManualClock) { clock = c }
            var inputTypes: Set<PortType> { [.frames] }
            var outputType: PortType? { nil }
            func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
                switch item.media {
                case .video(let v)?:
                    sequences.append(v.sequence)
                    if v.sequence == 10 { clock.advance(by: 0.2) }  // stalls for 6 frame times
                case .audio(let a)?: audioSamples += a.frameCount
                case nil: break
                }
                return .ok
            }
        }
        let sink = LateSink(clock)
        let src = TestPatternSource(id: "cam", settings: TestPatternSettings(width: 320, height: 240, fps: 30), realtime: true, frames: 30)
        let runner = try GraphRunner(
            nodes: [StageNode(handing: src), StageNode(handing: sink)],
            edges: [Edge(from: "cam", to: "late", limits: LinkLimits(maxItems: 1, maxBytes: 1 << 30))],
            clock: clock, sink: EventRecorder())
        XCTAssertEqual(runner.run(), .completed)
        XCTAssertEqual(sink.sequences.first, 0)
        XCTAssertEqual(sink.sequences.last, 29)
        XCTAssertGreaterThan(src.skipped, 0)
        XCTAssertEqual(Int64(sink.sequences.count) + src.skipped, 30)
        XCTAssertEqual(sink.audioSamples, 48_000, "audio is never skipped: one second for 30 pictures")
    }
}

final class RecordTests: XCTestCase {
    let fx = Fixtures.shared

    /// Records `frames` test-pattern pictures through the graph (source -> record), unpaced.
    func record(
        _ dir: String, frames: Int64, size: (Int, Int) = (640, 360), fps: Double = 30, segment: Double,
        configure: (inout RecordOptions) -> Void = { _ in }
    ) throws -> (RecordStage, EventRecorder) {
        var o = RecordOptions(directory: dir)
        o.segmentSeconds = segment
        configure(&o)
        let rec = RecordStage(id: "rec", options: o)
        let src = TestPatternSource(id: "cam", settings: TestPatternSettings(width: size.0, height: size.1, fps: fps), realtime: false, frames: frames)
        let events = EventRecorder()
        let runner = try GraphRunner(
            nodes: [StageNode(handing: src), StageNode(handing: rec)],
            edges: [Edge(from: "cam", to: "rec", limits: LinkLimits(maxItems: 16, maxBytes: 64 << 20))], sink: events)
        XCTAssertEqual(runner.run(), .completed)
        return (rec, events)
    }

    /// Recorded in real time, every picture of the encoded fragment (decoded by ffmpeg) shows when
    /// it was captured: within the recording's wall-clock span, a frame interval apart.
    func testARecordedClockShowsWhenEachPictureWasCaptured() throws {
        let dir = fx.scratch("record-clock").path
        var settings = TestPatternSettings(width: 320, height: 240, fps: 30)
        settings.clock = true
        let src = TestPatternSource(id: "cam", settings: settings, realtime: true, frames: 30)
        let rec = RecordStage(id: "rec", options: RecordOptions(directory: dir))
        let before = Date().timeIntervalSince1970
        let runner = try GraphRunner(
            nodes: [StageNode(handing: src), StageNode(handing: rec)],
            edges: [Edge(from: "cam", to: "rec", limits: LinkLimits(maxItems: 16, maxBytes: 64 << 20))], sink: EventRecorder())
        XCTAssertEqual(runner.run(), .completed)
        let after = Date().timeIntervalSince1970
        let clip = try XCTUnwrap(rec.recorder?.clips.first).path
        let video = try GreyVideo(clip)
        XCTAssertEqual(video.frames.count, Int(src.produced), "every picture made is in the fragment")
        let layout = TestPatternLayout(width: 320, height: 240)
        let clocks = video.frames.map { layout.readClock(grey: $0) }, counters = video.frames.map { layout.readCounter(grey: $0) }
        XCTAssertFalse(clocks.contains(where: { $0 == nil }) || counters.contains(where: { $0 == nil }), "every picture shows its clock: \(clocks)")
        let ms = clocks.compactMap { $0 }.map { TestPatternLayout.milliseconds(since: $0, now: after) }, n = counters.compactMap { $0 }
        XCTAssertLessThanOrEqual(ms.first!, Int64((after - before) * 1000) + 1, "the first picture's clock is not before the recording began")
        XCTAssertGreaterThanOrEqual(ms.last!, 0, "the last picture's clock is not after the recording ended")
        // A picture skipped under load leaves a gap of its frame interval in both.
        for i in 1..<ms.count {
            XCTAssertEqual(
                Double(ms[0] - ms[i]), Double(n[i] - n[0]) * 1000 / 30, accuracy: 1.01, "picture \(n[i]) is its frame intervals after picture \(n[0])")
        }
    }

    /// Fragments are complete MP4s judged by ffprobe/ffmpeg: decodable, starting on a keyframe,
    /// their frame counts matching the counter burned into the pictures (read back from the decoded
    /// output), continuous from one fragment to the next, audio exactly as long as the video, the
    /// beep within one frame of the flash, and the orientation marker top-left.
    func testFragmentsMatchTheCounterAndKeepAVSync() throws {
        let dir = fx.scratch("record-frag").path
        let (rec, _) = try record(dir, frames: 150, segment: 2)
        let clips = try XCTUnwrap(rec.recorder?.clips)
        XCTAssertEqual(clips.map(\.videoFrames), [60, 60, 30])
        XCTAssertEqual(ClipStore(directory: dir).clipFiles().map(\.index), [1, 2, 3])
        var expected = 0
        for c in clips {
            XCTAssertEqual(try Probe.decodeErrors(c.path), "")
            XCTAssertEqual(try Probe.stream(c.path, "v:0", "codec_name"), "h264")
            XCTAssertEqual(try Probe.stream(c.path, "a:0", "codec_name"), "aac")
            let keyflags = try Run.run([
                "ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=flags",
                "-of", "csv=p=0", c.path
            ]).out.split(separator: "\n")
            XCTAssertTrue(keyflags.first?.hasPrefix("K") ?? false, "fragment starts on a keyframe")
            let video = try GreyVideo(c.path)
            XCTAssertEqual(video.frames.count, c.videoFrames)
            XCTAssertEqual(try Probe.videoFrames(c.path), c.videoFrames)
            let layout = TestPatternLayout(width: 640, height: 360)
            let counters = video.frames.map { layout.readCounter(grey: $0) }
            XCTAssertEqual(counters, (expected..<(expected + c.videoFrames)).map { Optional($0) }, "counter continuity in \(c.path)")
            expected += c.videoFrames
            XCTAssertEqual(Probe.brightestCorner(w: video.width, h: video.height, px: video.frames[5]), "TL")
            let audio = try Probe.audioSamples(c.path)
            // The container's audio (edit list) is exactly as long as the video; ffmpeg's decoder also
            // plays the padding of the last AAC frame, as it does for any AAC MP4 (under 1024 samples).
            XCTAssertEqual(try ClipProbe.probe(c.path).audioSamples, Int64(c.videoFrames * 1600), "audio = video length (48 kHz, 30 fps)")
            XCTAssertEqual(Double(audio.count), Double(c.videoFrames * 1600) + 512, accuracy: 512, "decoded audio")
            let offsets = flashBeepOffsets(video: video, audio: audio, fps: 30, sampleRate: 48_000)
            XCTAssertEqual(offsets.count, (c.videoFrames + 29) / 30, "one flash per second")
            for o in offsets { XCTAssertLessThan(abs(o), 1.0 / 30, "A/V offset \(o * 1000) ms") }
        }
    }

    /// The recorder's fragments join with `merge` (same encoder settings, so the compatibility
    /// check passes) into one video whose counter runs on without a gap, turned 90 degrees.
    func testFragmentsMergeIntoOneContinuousTurnedVideo() throws {
        let dir = fx.scratch("record-merge").path
        let (rec, _) = try record(dir, frames: 120, size: (320, 240), segment: 1)
        let clips = try XCTUnwrap(rec.recorder?.clips).map(\.path)
        XCTAssertEqual(clips.count, 4)
        let out = (dir as NSString).appendingPathComponent("merged.mp4")
        let r = try Merger(inputs: clips, options: MergeOptions(output: URL(fileURLWithPath: out), rotate: 90)).run()
        XCTAssertEqual(r.videoFrames, 120)
        XCTAssertEqual(try Probe.rotation(out), -90)
        XCTAssertEqual(try Probe.decodeErrors(out), "")
        let v = try GreyVideo(out)
        XCTAssertEqual(v.width, 240)
        XCTAssertEqual(Probe.brightestCorner(w: v.width, h: v.height, px: v.frames[3]), "TR", "marker top-left turned clockwise")
        // Read the counter on the upright-again picture (turn the displayed one back).
        let layout = TestPatternLayout(width: 320, height: 240)
        let counters = v.frames.map { f -> Int? in
            var up = [UInt8](repeating: 0, count: 320 * 240)
            for y in 0..<240 { for x in 0..<320 { up[y * 320 + x] = f[x * 240 + (239 - y)] } }
            return layout.readCounter(grey: up)
        }
        XCTAssertEqual(counters, (0..<120).map { Optional($0) })
        let audio = try Probe.audioSamples(out)
        XCTAssertEqual(Double(audio.count), 4 * 48_000, accuracy: 1024)
    }

    func testPauseResumeMakesOneFragmentPerTakeAndDropsThePause() throws {
        let dir = fx.scratch("record-pause").path
        let r = try FragmentRecorder(options: RecordOptions(directory: dir))
        let g = try TestPatternGenerator(TestPatternSettings(width: 320, height: 240))
        for n: Int64 in 0..<90 {
            if n == 30 { try r.pause() }
            if n == 60 { r.resume() }
            let a = g.audioRange(forFrame: n)
            try r.append(.audio(g.audio(from: a.lowerBound, count: a.count)))
            try r.append(.video(g.video(frame: n)))
        }
        try r.finish()
        XCTAssertEqual(r.clips.map(\.videoFrames), [30, 30])
        let second = try GreyVideo(r.clips[1].path)
        XCTAssertEqual(TestPatternLayout(width: 320, height: 240).readCounter(grey: second.frames[0]), 60, "the take resumes at picture 60")
        XCTAssertEqual(try ClipProbe.probe(r.clips[1].path).audioSamples, 48_000)
        let offsets = flashBeepOffsets(video: second, audio: try Probe.audioSamples(r.clips[1].path), fps: 30, sampleRate: 48_000)
        XCTAssertEqual(offsets.count, 1)
        XCTAssertLessThan(abs(offsets[0]), 1.0 / 30)
    }

    /// The phone app's "max record time" over all clips of the recording, and "delete last clip":
    /// deleting frees the time again, and numbering goes on after what is in the directory.
    func testMaxDurationCountsEarlierClipsAndDeleteLastFreesTime() throws {
        let dir = fx.scratch("record-max").path
        let (first, _) = try record(dir, frames: 90, size: (320, 240), segment: 0) { $0.maxSeconds = 5 }
        XCTAssertEqual(first.recorder?.clips.map(\.videoFrames), [90])
        let (second, events) = try record(dir, frames: 150, size: (320, 240), segment: 0) { $0.maxSeconds = 5 }
        XCTAssertEqual(second.recorder?.clips.map(\.videoFrames), [60], "3 s earlier + 2 s = the 5 s cap")
        XCTAssertEqual(second.recorder?.clips.first?.index, 2)
        XCTAssertTrue(events.events.contains { $0.kind == .notice("reached the maximum record time (5.0 s)") })
        let store = ClipStore(directory: dir)
        XCTAssertEqual(try store.deleteLast(), (dir as NSString).appendingPathComponent("clip-0002.mp4"))
        XCTAssertEqual(store.clipFiles().map(\.index), [1])
        let (third, _) = try record(dir, frames: 150, size: (320, 240), segment: 0) { $0.maxSeconds = 5 }
        XCTAssertEqual(third.recorder?.clips.map(\.videoFrames), [60])
        XCTAssertEqual(third.recorder?.clips.first?.index, 2)
    }

    func testRecordErrorsNameTheProblem() throws {
        var o = RecordOptions(directory: fx.scratch("record-bad").path)
        o.preset = "warp"
        XCTAssertThrowsError(try FragmentRecorder(options: o)) { XCTAssertTrue("\($0)".contains("unknown preset 'warp'"), "\($0)") }
        let file = fx.scratch("record-bad").appendingPathComponent("f").path
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data()))
        XCTAssertThrowsError(try FragmentRecorder(options: RecordOptions(directory: file))) {
            XCTAssertTrue("\($0)".contains("cannot create the recording directory '\(file)'"), "\($0)")
        }
        let r = try FragmentRecorder(options: RecordOptions(directory: fx.scratch("record-size").path))
        let g1 = try TestPatternGenerator(TestPatternSettings(width: 320, height: 240))
        let g2 = try TestPatternGenerator(TestPatternSettings(width: 640, height: 360))
        try r.append(.video(g1.video(frame: 0)))
        XCTAssertThrowsError(try r.append(.video(g2.video(frame: 1)))) {
            XCTAssertTrue("\($0)".contains("picture size changed from 320x240 to 640x360"), "\($0)")
        }
    }
}
