import XCTest
import ClipFlowCore
@testable import ClipFlowMedia
import ClipFlowTestSupport

/// Transcodes judged by ffprobe/ffmpeg (decoding, frame counts, durations, SSIM, rotation) on
/// fixtures made by the ffmpeg CLI.
final class TranscodeTests: XCTestCase {
    let fx = Fixtures.shared

    func transcode(_ inputs: [String], _ choices: TranscodeChoices = TranscodeChoices(), name: String = #function) throws -> (String, TranscodeResult) {
        let out = fx.scratch(name).appendingPathComponent("out.mp4")
        let settings = try choices.resolve().get()
        let r = try Transcoder(inputs: inputs, output: out, settings: settings).run()
        return (out.path, r)
    }

    /// Camera-like pictures: moving detail with sensor noise; a tone.
    func cameraClip(
        _ name: String, size: String = "640x360", fps: String = "30", seconds: Double = 2, video: [String] = Fixtures.x264,
        audio: [String]? = ["-c:a", "aac"], rate: Int = 48000, channels: Int = 2, container: String = "mp4", extra: [String] = []
    ) throws -> String {
        var args = ["-f", "lavfi", "-i", "testsrc2=size=\(size):rate=\(fps),noise=alls=6:allf=t"]
        if audio != nil { args += ["-f", "lavfi", "-i", "sine=f=440:r=\(rate),aformat=channel_layouts=\(channels == 1 ? "mono" : "stereo")"] }
        args += ["-t", String(seconds)] + video + (audio ?? ["-an"]) + extra
        return try fx.clip("\(name).\(container)", args)
    }

    func ssim(_ distorted: String, _ reference: String, extra: [String] = []) throws -> Double {
        try Probe.ssim(distorted, reference, distortedOptions: extra)
    }

    func duration(_ p: String, _ stream: String) throws -> Double { Double(try Probe.stream(p, stream, "duration")) ?? -1 }

    // MARK: pictures

    func testScalesToAHeightWithEveryFrameAndHighSSIM() throws {
        let src = try cameraClip("cam1080", size: "1920x1080", seconds: 2)
        var c = TranscodeChoices()
        c.height = 720
        c.encoderPreset = "veryfast"
        let (out, r) = try transcode([src], c)
        XCTAssertEqual(try Probe.decodeErrors(out), "")
        XCTAssertEqual(try Probe.stream(out, "v:0", "width,height"), "1280,720")
        XCTAssertEqual(try Probe.stream(out, "v:0", "codec_name,profile"), "h264,High")
        XCTAssertEqual(try Probe.videoFrames(out), 60)
        XCTAssertEqual(r.videoFrames, 60)
        XCTAssertEqual(try duration(out, "v:0"), 2, accuracy: 0.001)
        XCTAssertEqual(try duration(out, "a:0"), 2, accuracy: 0.03)
        XCTAssertEqual(try Probe.topLevelBoxes(out).prefix(3).contains("moov"), true, "fast start: moov before mdat")
        let s = try ssim(out, src)
        XCTAssertGreaterThanOrEqual(s, 0.95, "SSIM of the re-encoded picture")
    }

    func testNeverEnlargesUnlessAskedAndPresetsCapAtTheSource() throws {
        let src = try cameraClip("cam360", seconds: 1)
        var c = TranscodeChoices()
        c.preset = "web-1080p"
        let (out, _) = try transcode([src], c)
        XCTAssertEqual(try Probe.stream(out, "v:0", "width,height"), "640,360", "a 1080p preset keeps a 360p source at 360p")
        c.preset = nil
        c.height = 720
        let (same, _) = try transcode([src], c, name: "height")
        XCTAssertEqual(try Probe.stream(same, "v:0", "width,height"), "640,360")
        c.upscale = true
        let (up, _) = try transcode([src], c, name: "upscale")
        XCTAssertEqual(try Probe.stream(up, "v:0", "width,height"), "1280,720")
    }

    func testFitsPicturesOfAnotherShapeByContainCoverAndStretch() throws {
        let src = try cameraClip("cam360", seconds: 1)
        for (fit, bright) in [("contain", false), ("cover", true), ("stretch", true)] {
            var c = TranscodeChoices()
            c.size = "360x360"
            c.fit = fit
            let (out, _) = try transcode([src], c, name: "fit-\(fit)")
            XCTAssertEqual(try Probe.stream(out, "v:0", "width,height"), "360,360", fit)
            XCTAssertEqual(try Probe.decodeErrors(out), "")
            // Contain pads above and below: the top rows are black; cover and stretch fill them.
            let pic = try Probe.greyPicture(out, at: 0.5)
            let top = pic.px[0..<(pic.w * 20)].reduce(0) { $0 + Int($1) } / (pic.w * 20)
            XCTAssertEqual(top > 30, bright, "\(fit): mean of the top rows is \(top)")
        }
    }

    func testTurnsRotatedPicturesUprightOrKeepsTheDisplayMatrix() throws {
        let plain = try cameraClip("cam360-rot-src", seconds: 1)
        for turn in [90, 180, 270] {
            let rotated = fx.scratch("rot\(turn)").appendingPathComponent("rotated.mp4")
            _ = try Merger(inputs: [plain], options: MergeOptions(output: rotated, rotate: turn)).run()
            var c = TranscodeChoices()
            c.upright = true
            let (out, r) = try transcode([rotated.path], c, name: "upright\(turn)")
            XCTAssertEqual(r.rotation, 0)
            XCTAssertNil(try Probe.rotation(out), "no display matrix after --upright")
            XCTAssertEqual(try Probe.stream(out, "v:0", "width,height"), turn == 180 ? "640,360" : "360,640")
            // ffmpeg turns the rotated source as it decodes it: the pixels must match that.
            XCTAssertGreaterThanOrEqual(try ssim(out, rotated.path), 0.95, "turned \(turn)")
            let (kept, k) = try transcode([rotated.path], name: "kept\(turn)")
            XCTAssertEqual(k.rotation, turn)
            XCTAssertEqual(try Probe.rotation(kept), try Probe.rotation(rotated.path), "the display matrix is carried over")
        }
    }

    // MARK: timing

    func testFixedFrameRateRepeatsOrDropsByTimestamp() throws {
        let fast = try cameraClip("cam60fps", fps: "60", seconds: 2)
        var c = TranscodeChoices()
        c.fps = "30"
        let (down, _) = try transcode([fast], c, name: "down")
        XCTAssertEqual(try Probe.videoFrames(down), 60)
        XCTAssertEqual(try Probe.stream(down, "v:0", "r_frame_rate"), "30/1")
        XCTAssertEqual(try duration(down, "v:0"), 2, accuracy: 0.001)
        XCTAssertGreaterThanOrEqual(try ssim(down, fast, extra: []), 0.5)  // same content (a coarse check: frames are dropped)
        let slow = try cameraClip("cam25fps", fps: "25", seconds: 2)
        let (up, _) = try transcode([slow], c, name: "up")
        XCTAssertEqual(try Probe.videoFrames(up), 60)
        XCTAssertEqual(try duration(up, "v:0"), 2, accuracy: 0.001)
        let pts = try Probe.videoPTS(up)
        for (i, t) in pts.enumerated() { XCTAssertEqual(t, Double(i) / 30, accuracy: 0.0005, "frame \(i)") }
    }

    /// The output takes the shape that covers the most seconds over all inputs, as `merge
    /// --conform` picks its target: three short portrait fragments (4.5 s together) beside one
    /// longer landscape clip (2 s) stay portrait.
    func testManyShortFragmentsOutweighOneLongerClipOfAnotherShape() throws {
        let portrait = try (0..<3).map { try cameraClip("shape-portrait-\($0)", size: "180x320", seconds: 1.5, extra: ["-metadata", "comment=\($0)"]) }
        let landscape = try cameraClip("shape-landscape", size: "320x180", seconds: 2)
        let (out, _) = try transcode(portrait + [landscape])
        XCTAssertEqual(try Probe.stream(out, "v:0", "width,height"), "180,320")
        XCTAssertEqual(try Probe.decodeErrors(out, keepTimestamps: true), "")
        let reference = Transcoder.reference(
            [3.0, 1.5, 1.5].enumerated().map { i, d in
                SourceInfo(
                    path: "\(i)", container: "mp4", duration: d,
                    video: .init(
                        codec: "h264", width: i == 0 ? 320 : 180, height: i == 0 ? 180 : 320, pixelFormat: "yuv420p", rotation: 0, mirrored: false,
                        frameRate: 30))
            })
        XCTAssertEqual(reference.path, "0", "landscape covers 3 s, portrait 3 s: the first of equals")
    }

    func testJoinsMixedSourcesIntoOneVideoWithAudioOnEveryClip() throws {
        // A phone clip, a webcam clip in MKV (HEVC, 44.1 kHz mono), a WebM (VP9/Opus), an MPEG-TS
        // (H.264/MP3 at 60 fps) and an AVI (MJPEG, no audio).
        let phone = try cameraClip("mix-phone", size: "1280x720", seconds: 2)
        let webcam = try cameraClip(
            "mix-webcam", size: "640x480", fps: "25", seconds: 1.2, video: ["-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error"],
            rate: 44100, channels: 1, container: "mkv")
        let webm = try cameraClip(
            "mix-webm", size: "480x270", fps: "24", seconds: 1, video: ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8"],
            audio: ["-c:a", "libopus"], container: "webm")
        let ts = try cameraClip("mix-ts", size: "640x360", fps: "60", seconds: 1, audio: ["-c:a", "libmp3lame"], container: "ts")
        let avi = try cameraClip("mix-mjpeg", size: "320x240", fps: "15", seconds: 1, video: ["-c:v", "mjpeg", "-q:v", "3"], audio: nil, container: "avi")
        let inputs = [phone, webcam, webm, ts, avi]
        let (out, r) = try transcode(inputs)
        XCTAssertEqual(try Probe.decodeErrors(out, keepTimestamps: true), "")
        XCTAssertEqual(try Probe.stream(out, "v:0", "width,height"), "1280,720", "the longest input sets the frame")
        XCTAssertEqual(try Probe.stream(out, "a:0", "sample_rate,channels"), "48000,2")
        let frames = [60, 30, 24, 60, 15]
        XCTAssertEqual(try Probe.videoFrames(out), frames.reduce(0, +), "every picture kept (fps keep)")
        XCTAssertEqual(r.videoFrames, frames.reduce(0, +))
        let total = 2 + 1.2 + 1 + 1 + 1.0
        XCTAssertEqual(try duration(out, "v:0"), total, accuracy: 0.07, "sum within a frame per clip")
        XCTAssertEqual(try duration(out, "a:0"), try duration(out, "v:0"), accuracy: 0.03, "audio runs to the video's end (silence for the AVI)")
        // The MJPEG clip has no audio: its second is silent; the tone plays elsewhere.
        let pcm = try Probe.audioSamples(out)
        func rms(_ from: Double, _ to: Double) -> Double {
            let a = Int(from * 48000), b = min(pcm.count, Int(to * 48000))
            return (pcm[a..<b].reduce(0.0) { $0 + Double($1 * $1) } / Double(max(1, b - a))).squareRoot()
        }
        XCTAssertLessThan(rms(total - 0.9, total - 0.1), 0.001, "silence for the clip without audio")
        XCTAssertGreaterThan(rms(0.1, 1.9), 0.05, "the phone clip's tone")
        XCTAssertGreaterThan(rms(2.1, 3.1), 0.05, "the webcam clip's tone")
        // A viewer: chromium plays it to its end, every picture presented.
        let played = try XCTUnwrap(try Probe.browserPlayback([out]).first)
        XCTAssertEqual(played["ended"] as? Bool, true, "\(played)")
        XCTAssertTrue(played["error"] is NSNull, "\(played)")
        XCTAssertEqual((played["current_time"] as? Double) ?? 0, total, accuracy: 0.07)
        XCTAssertEqual(played["width"] as? Int, 1280)
        XCTAssertEqual(Double((played["frames"] as? Int) ?? 0), Double(frames.reduce(0, +)), accuracy: 3)
    }

    /// Flash and beep at the same instant in every clip, clips differing in rate, sample rate and
    /// how their audio lines up (late, short, long): in the output each beep must start within
    /// one frame of its flash.
    func testAudioStaysInSyncWithVideoAtEveryJoin() throws {
        func marked(_ name: String, fps: Int, rate: Int, videoSeconds: Double, audioSeconds: Double, mark: Double) throws -> String {
            let flashEnd = mark + 1.5 / Double(fps)
            return try fx.clip(
                "\(name).mp4",
                [
                    "-f", "lavfi", "-i",
                    "color=black:size=320x240:rate=\(fps):d=\(videoSeconds),drawbox=c=white:t=fill:enable='between(t,\(mark),\(flashEnd))'",
                    "-f", "lavfi", "-i", "aevalsrc='if(between(t,\(mark),\(mark + 0.05)),0.5*sin(2*PI*1000*t),0)':s=\(rate):d=\(audioSeconds)"
                ] + Fixtures.x264 + ["-c:a", "aac"])
        }
        // Audio as long as the video; shorter; longer; at another rate.
        let clips = [
            try marked("sync-a", fps: 30, rate: 48000, videoSeconds: 2, audioSeconds: 2, mark: 0.5),
            try marked("sync-b", fps: 25, rate: 44100, videoSeconds: 2, audioSeconds: 1.5, mark: 1.0),
            try marked("sync-c", fps: 30, rate: 48000, videoSeconds: 1.5, audioSeconds: 2.5, mark: 0.7),
            try marked("sync-d", fps: 24, rate: 48000, videoSeconds: 2, audioSeconds: 2, mark: 1.2)
        ]
        let (out, _) = try transcode(clips)
        XCTAssertEqual(try Probe.decodeErrors(out), "")
        // Flashes: pictures whose mean brightness is high, by time.
        let lum = try Run.run([
            "ffprobe", "-v", "error", "-f", "lavfi", "-i", "movie=\(out),signalstats", "-show_entries", "frame=pts_time:frame_tags=lavfi.signalstats.YAVG",
            "-of", "csv=p=0"
        ]).out
        var flashes: [Double] = []
        var wasBright = false
        for line in lum.split(separator: "\n") {
            let f = line.split(separator: ",").compactMap { Double($0) }
            guard f.count == 2 else { continue }
            let bright = f[1] > 100
            if bright && !wasBright { flashes.append(f[0]) }
            wasBright = bright
        }
        // Beeps: where the audio's envelope first rises, by 1 ms windows.
        let pcm = try Probe.audioSamples(out)
        var beeps: [Double] = []
        var lastBeep = -1.0
        var i = 0
        while i + 48 <= pcm.count {
            let peak = pcm[i..<(i + 48)].map { abs($0) }.max() ?? 0
            let t = Double(i) / 48000
            if peak > 0.1, t - lastBeep > 0.3 { beeps.append(t); lastBeep = t } else if peak > 0.1 { lastBeep = t }
            i += 48
        }
        let expected = [0.5, 2 + 1.0, 4 + 0.7, 5.5 + 1.2]
        XCTAssertEqual(flashes.count, 4, "flashes at \(flashes)")
        XCTAssertEqual(beeps.count, 4, "beeps at \(beeps)")
        for (k, e) in expected.enumerated() where k < flashes.count && k < beeps.count {
            XCTAssertEqual(flashes[k], e, accuracy: 0.045, "flash \(k)")
            XCTAssertEqual(beeps[k], flashes[k], accuracy: 1.0 / 24, "beep \(k) against its flash")
        }
    }

    // MARK: codecs

    func testDecodesTenBitHEVCAndAV1Inputs() throws {
        let hevc10 = try cameraClip(
            "cam360-hevc10", seconds: 1, video: ["-c:v", "libx265", "-preset", "ultrafast", "-pix_fmt", "yuv420p10le", "-x265-params", "log-level=error"],
            container: "mkv")
        XCTAssertEqual(try Probe.stream(hevc10, "v:0", "pix_fmt"), "yuv420p10le")
        let av1 = try cameraClip("cam360-av1", seconds: 1, video: ["-c:v", "libsvtav1", "-preset", "12"], audio: ["-c:a", "libopus"], container: "webm")
        for src in [hevc10, av1] {
            var c = TranscodeChoices()
            c.encoderPreset = "veryfast"
            let (out, r) = try transcode([src], c, name: (src as NSString).lastPathComponent)
            XCTAssertEqual(try Probe.decodeErrors(out), "", src)
            XCTAssertEqual(try Probe.stream(out, "v:0", "codec_name,pix_fmt"), "h264,yuv420p", src)
            XCTAssertEqual(r.videoFrames, 30, src)
            XCTAssertGreaterThanOrEqual(try ssim(out, src), 0.95, src)
        }
    }

    func testEncodesHEVCTaggedHvc1() throws {
        let src = try cameraClip("cam360", seconds: 1)
        var c = TranscodeChoices()
        c.videoCodec = "hevc"
        c.encoderPreset = "ultrafast"
        let (out, _) = try transcode([src], c)
        XCTAssertEqual(try Probe.decodeErrors(out), "")
        XCTAssertEqual(try Probe.stream(out, "v:0", "codec_name,codec_tag_string"), "hevc,hvc1")
        XCTAssertEqual(try Probe.videoFrames(out), 30)
        XCTAssertGreaterThanOrEqual(try ssim(out, src), 0.95)
    }

    func testPresetsGiveClosedGOPsEveryTwoSeconds() throws {
        let src = try cameraClip("cam360-5s", seconds: 5)
        var c = TranscodeChoices()
        c.preset = "web-360p"
        c.encoderPreset = "veryfast"
        let (out, _) = try transcode([src], c)
        let keys = try Run.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts_time,flags", "-of", "csv=p=0", out]).out
            .split(separator: "\n").filter { $0.contains("K") }.compactMap { Double($0.split(separator: ",")[0]) }
        XCTAssertEqual(keys, [0, 2, 4], "keyframes exactly every 2 s")
    }

    // MARK: bad input

    func testBadInputsFailNamingTheFileAndLeaveNoOutput() throws {
        let dir = fx.scratch("bad")
        let garbage = dir.appendingPathComponent("garbage.mp4").path
        XCTAssertTrue(FileManager.default.createFile(atPath: garbage, contents: Data((0..<4096).map { UInt8(truncatingIfNeeded: $0 * 7919) })))
        let audioOnly = try fx.clip("audio-only.m4a", ["-f", "lavfi", "-i", "sine", "-t", "1", "-c:a", "aac"])
        let good = try cameraClip("cam360", seconds: 1)
        let whole = try Data(contentsOf: URL(fileURLWithPath: try cameraClip("cam360-5s", seconds: 5)))
        let truncated = dir.appendingPathComponent("truncated.mp4").path
        XCTAssertTrue(FileManager.default.createFile(atPath: truncated, contents: whole.prefix(whole.count / 2)))
        // Fast start: the index survives the cut, the pictures it lists do not.
        let fastStart = try Data(contentsOf: URL(fileURLWithPath: try cameraClip("cam360-5s-faststart", seconds: 5, extra: ["-movflags", "+faststart"])))
        let cut = dir.appendingPathComponent("cut.mp4").path
        XCTAssertTrue(FileManager.default.createFile(atPath: cut, contents: fastStart.prefix(fastStart.count * 6 / 10)))
        let cases: [(String, String)] = [
            (garbage, "garbage.mp4"), (audioOnly, "has no video"), (truncated, "truncated.mp4"), (cut, "cut.mp4' is truncated"),
            (dir.appendingPathComponent("missing.mp4").path, "no such file")
        ]
        for (bad, expected) in cases {
            let out = dir.appendingPathComponent("out.mp4")
            XCTAssertThrowsError(try Transcoder(inputs: [good, bad], output: out, settings: TranscodeSettings()).run(), bad) { e in
                XCTAssertTrue("\(e)".contains(expected), "\(e)")
            }
            let left = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains("out") }
            XCTAssertEqual(left, [], "nothing left behind for \(bad)")
        }
    }

    func testOptionsAreCheckedNamingTheFlag() {
        func problem(_ f: (inout TranscodeChoices) -> Void) -> String? {
            var c = TranscodeChoices()
            f(&c)
            if case .failure(let p) = c.resolve() { return p.description }
            return nil
        }
        XCTAssertEqual(problem { $0.preset = "web-4k" }?.hasPrefix("--preset: unknown preset 'web-4k'"), true)
        XCTAssertEqual(problem { $0.size = "1281x720" }, "--size: 1281x720: width and height must be even (4:2:0 video halves them for colour)")
        XCTAssertEqual(problem { $0.fit = "zoom" }, "--fit: 'zoom' is not one of contain, cover, stretch")
        XCTAssertEqual(problem { $0.crf = 60 }, "--crf: 60 is out of range (0 to 51)")
        XCTAssertEqual(problem { $0.fps = "0" }?.hasPrefix("--fps:"), true)
        XCTAssertEqual(problem { $0.height = 721 }, "--height: 721 must be an even number from 16 to 8192")
        XCTAssertNil(
            problem {
                $0.preset = "hevc-1080p"; $0.crf = 30
            })
    }
}

/// The frame and placement rules, as tables.
final class TranscodeGeometryTests: XCTestCase {
    func size(_ w: Int, _ h: Int) -> PictureSize { PictureSize(width: w, height: h) }

    func testOutputFrame() {
        var s = TranscodeSettings()
        XCTAssertEqual(TranscodeGeometry.frame(for: size(1920, 1080), s), size(1920, 1080))
        s.height = 720
        XCTAssertEqual(TranscodeGeometry.frame(for: size(1920, 1080), s), size(1280, 720))
        XCTAssertEqual(TranscodeGeometry.frame(for: size(1440, 1080), s), size(960, 720))
        XCTAssertEqual(TranscodeGeometry.frame(for: size(640, 360), s), size(640, 360), "not enlarged")
        s = TranscodePreset.named("web-720p")!.settings
        XCTAssertEqual(TranscodeGeometry.frame(for: size(1080, 1920), s), size(720, 1280), "portrait turns the limit")
        XCTAssertEqual(TranscodeGeometry.frame(for: size(1440, 1080), s), size(960, 720), "shape kept")
        s = TranscodePreset.named("vertical-1080x1920")!.settings
        XCTAssertEqual(TranscodeGeometry.frame(for: size(1920, 1080), s), size(1080, 1920))
        XCTAssertEqual(TranscodeGeometry.frame(for: size(640, 360), s), size(640, 1138), "a small source shrinks the frame (same shape) until it fills a side")
        s.fit = .cover
        XCTAssertEqual(TranscodeGeometry.frame(for: size(1280, 720), s), size(406, 720), "cover: no picture pixel enlarged")
    }

    func testPlacement() {
        let contain = TranscodeGeometry.place(size(1920, 1080), in: size(1080, 1920), fit: .contain, upscale: false)
        XCTAssertEqual(contain.dest, PixelRect(x: 0, y: 656, width: 1080, height: 608))
        XCTAssertTrue(contain.pads)
        let cover = TranscodeGeometry.place(size(1920, 1080), in: size(1080, 1920), fit: .cover, upscale: true)
        XCTAssertEqual(cover.crop, PixelRect(x: 656, y: 0, width: 608, height: 1080))
        XCTAssertEqual(cover.dest, PixelRect(x: 0, y: 0, width: 1080, height: 1920))
        let small = TranscodeGeometry.place(size(320, 240), in: size(1280, 720), fit: .contain, upscale: false)
        XCTAssertEqual(small.dest, PixelRect(x: 480, y: 240, width: 320, height: 240), "not enlarged: centred")
        let stretch = TranscodeGeometry.place(size(320, 240), in: size(1280, 720), fit: .stretch, upscale: false)
        XCTAssertEqual(stretch.dest, PixelRect(x: 0, y: 0, width: 1280, height: 720))
    }

    func testStoredRectOfATurnedPicture() {
        // A 40x20 stored picture shown turned 90 degrees is 20x40; its top-left 10x4 corner is
        // stored at the bottom-left, 4 wide and 10 tall.
        let stored = size(40, 20)
        XCTAssertEqual(
            TranscodeGeometry.storedRect(PixelRect(x: 0, y: 0, width: 10, height: 4), turned: 90, stored: stored), PixelRect(x: 0, y: 10, width: 4, height: 10))
        XCTAssertEqual(
            TranscodeGeometry.storedRect(PixelRect(x: 0, y: 0, width: 10, height: 4), turned: 180, stored: stored),
            PixelRect(x: 30, y: 16, width: 10, height: 4))
        XCTAssertEqual(
            TranscodeGeometry.storedRect(PixelRect(x: 0, y: 0, width: 10, height: 4), turned: 270, stored: stored), PixelRect(x: 36, y: 0, width: 4, height: 10)
        )
    }
}

/// How each clip's audio is placed against its video.
final class AudioTimelineTests: XCTestCase {
    func samples(_ values: [Float]) -> PlanarSamples { PlanarSamples(channels: [values]) }

    func run(_ body: (inout AudioTimeline, (PlanarSamples) -> Void) -> Void) -> [Float] {
        var out: [Float] = []
        var t = AudioTimeline(channels: 1, rate: 100)  // tolerance: 2 samples
        body(&t) { out += $0.channels[0] }
        return out
    }

    func testLateAudioStartsWithSilenceAndLongAudioIsCut() {
        let out = run { t, emit in
            t.add(samples([1, 1, 1, 1, 1, 1, 1, 1]), at: 3)
            t.endClip(at: 6, emit)
            t.add(samples([2, 2]), at: 0)
            t.endClip(at: 9, emit)
        }
        XCTAssertEqual(out, [0, 0, 0, 1, 1, 1, 2, 2, 0])
    }

    func testEarlyAudioIsDroppedAndJitterIsIgnored() {
        let out = run { t, emit in
            t.add(samples([9, 9, 1, 1]), at: -2)
            t.add(samples([1, 1]), at: 3)  // expected at 2: within tolerance, taken as continuous
            t.endClip(at: 4, emit)
        }
        XCTAssertEqual(out, [1, 1, 1, 1])
    }

    func testReleaseFollowsTheVideoAndGapsBecomeSilence() {
        var released: [Float] = []
        var t = AudioTimeline(channels: 1, rate: 100)
        t.add(samples([1, 1]), at: 0)
        t.add(samples([3, 3]), at: 6)  // a gap of 4
        t.release(upTo: 3) { released += $0.channels[0] }
        XCTAssertEqual(released, [1, 1, 0])
        t.endClip(at: 9) { released += $0.channels[0] }
        XCTAssertEqual(released, [1, 1, 0, 0, 0, 0, 3, 3, 0])
        XCTAssertEqual(t.emitted, 9)
    }
}
