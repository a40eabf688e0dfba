import XCTest
import ClipFlowCore
@testable import ClipFlowMedia
import ClipFlowTestSupport

/// Merges judged by ffprobe/ffmpeg/mediainfo on fixtures made by the ffmpeg CLI.
final class MergeTests: XCTestCase {
    let fx = Fixtures.shared

    func merge(
        _ inputs: [String], rotate: Int = 0, name: String = #function,
        reserve: Int? = nil
    ) throws -> (URL, MergeResult) {
        let out = fx.scratch(name).appendingPathComponent("merged.mp4")
        var o = MergeOptions(output: out, rotate: rotate)
        o.moovReserveOverride = reserve
        let r = try Merger(inputs: inputs, options: o).run()
        return (out, r)
    }

    func toneClips(_ n: Int, seconds: Double = 4) throws -> [String] {
        try (0..<n).map { try fx.toneClip($0, seconds: seconds) }
    }

    // MARK: video

    func testJoinsClipsWithEveryFrameAndContinuousTimestamps() throws {
        let clips = try toneClips(5)
        let (out, r) = try merge(clips)
        XCTAssertEqual(try Probe.decodeErrors(out.path), "")
        let inFrames = try clips.map { try Probe.videoFrames($0) }.reduce(0, +)
        XCTAssertEqual(inFrames, 600)
        XCTAssertEqual(try Probe.videoFrames(out.path), inFrames)
        XCTAssertEqual(r.videoFrames, inFrames)
        // Continuous: presentation times are exactly n/30 s.
        let pts = try Probe.videoPTS(out.path)
        XCTAssertEqual(pts.count, 600)
        for (i, t) in pts.enumerated() { XCTAssertEqual(t, Double(i) / 30, accuracy: 0.0005, "frame \(i)") }
        XCTAssertEqual(Double(try Probe.stream(out.path, "v:0", "duration")) ?? 0, 20, accuracy: 0.001)
    }

    func testVideoPacketsAreCopiedBitForBitAndBFramesSurvive() throws {
        let clips = try toneClips(3)
        let (out, _) = try merge(clips)
        func hashes(_ p: String) throws -> [String] {
            try Run.run(["ffmpeg", "-v", "error", "-i", p, "-map", "0:v", "-c", "copy", "-f", "framemd5", "-"]).out
                .split(separator: "\n").filter { !$0.hasPrefix("#") }.map { String($0.split(separator: ",").last!) }
        }
        let inputHashes = try clips.flatMap { try hashes($0) }
        XCTAssertEqual(try hashes(out.path), inputHashes, "video packets must be copied unchanged")
        // B-frames: decode order differs from presentation order.
        let r = try Run.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts,dts", "-of", "csv=p=0", out.path]).out
        let pairs = r.split(separator: "\n").map { $0.split(separator: ",").compactMap { Int($0) } }
        XCTAssertTrue(pairs.contains { $0.count == 2 && $0[0] != $0[1] }, "composition offsets kept")
        XCTAssertEqual(try Probe.stream(out.path, "v:0", "has_b_frames"), "2")
    }

    func testAudioAndVideoStayInterleavedForStreaming() throws {
        // Packets are written in each clip's file order, with the re-encoded join audio placed
        // at its join: read front to back, the file must never run more than 1 s of media time
        // ahead on one track (a player streaming it would otherwise stall or buffer a lot).
        let clips = try toneClips(5)
        let (out, _) = try merge(clips)
        let csv = try Run.run([
            "ffprobe", "-v", "error", "-show_entries", "packet=codec_type,pts_time,pos",
            "-of", "csv=p=0", out.path
        ]).out
        var packets: [(pos: Int, video: Bool, t: Double)] = []
        for line in csv.split(separator: "\n") {
            let f = line.split(separator: ",").map(String.init)
            guard f.count == 3, let t = Double(f[1]), let pos = Int(f[2]) else { continue }
            packets.append((pos, f[0] == "video", t))
        }
        XCTAssertGreaterThan(packets.filter(\.video).count, 500)
        XCTAssertGreaterThan(packets.filter { !$0.video }.count, 800)
        packets.sort { $0.pos < $1.pos }
        var lastVideo = 0.0, lastAudio = 0.0, worst = 0.0
        for p in packets {
            if p.video { lastVideo = max(lastVideo, p.t) } else { lastAudio = max(lastAudio, p.t) }
            worst = max(worst, abs(lastVideo - lastAudio))
        }
        XCTAssertLessThan(worst, 1.0, "audio and video drift apart in file order by \(worst) s")
    }

    func testVariableFrameRateTimingIsKept() throws {
        // Frames held for 1, 2 or 3 ticks: a variable frame rate input.
        let vfr =
            [
                "-f", "lavfi", "-i",
                "testsrc2=size=320x240:rate=30,setpts='N*1/30/TB+if(gt(N,20),(N-20)*1/30/TB,0)+if(gt(N,40),(N-40)*2/30/TB,0)',trim=end_frame=60",
                "-f", "lavfi", "-i", "sine=frequency=440:sample_rate=48000", "-fps_mode", "passthrough"
            ] + Fixtures.x264 + ["-c:a", "aac", "-shortest"]
        let a = try fx.clip("vfr.mp4", vfr)
        let (out, _) = try merge([a, a])
        let inPTS = try Probe.videoPTS(a)
        let outPTS = try Probe.videoPTS(out.path)
        // Where the clip's pictures end: the last frame's presentation time plus its duration (the
        // container's track duration is shorter here, which is why merge does not trust it).
        let packets = try Run.run([
            "ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
            "packet=pts_time,duration_time", "-of", "csv=p=0", a
        ]).out
        let dur = packets.split(separator: "\n").map { $0.split(separator: ",").compactMap { Double($0) }.reduce(0, +) }.max()!
        XCTAssertEqual(outPTS.count, 2 * inPTS.count)
        let expected = inPTS + inPTS.map { $0 + dur }
        for (x, y) in zip(outPTS, expected) { XCTAssertEqual(x, y, accuracy: 0.001) }
        XCTAssertNotEqual(inPTS[30] - inPTS[29], inPTS[5] - inPTS[4], "fixture is variable frame rate")
    }

    func testHEVCClipsJoin() throws {
        let args = { (i: Int) in
            [
                "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=25:duration=1", "-f", "lavfi", "-i", "sine=d=1",
                "-c:v", "libx265", "-preset", "ultrafast", "-x265-params", "log-level=error", "-tag:v", "hvc1",
                "-pix_fmt", "yuv420p", "-c:a", "aac", "-metadata", "title=\(i)"
            ]
        }
        let a = try fx.clip("hevc0.mp4", args(0)), b = try fx.clip("hevc1.mp4", args(1))
        let (out, _) = try merge([a, b])
        XCTAssertEqual(try Probe.stream(out.path, "v:0", "codec_name"), "hevc")
        XCTAssertEqual(try Probe.stream(out.path, "v:0", "codec_tag_string"), "hvc1")
        XCTAssertEqual(try Probe.videoFrames(out.path), 50)
        XCTAssertEqual(try Probe.decodeErrors(out.path), "")
    }

    // MARK: fast start

    func testMoovPrecedesMdatInOnePassWithRoomReservedFromTheSampleTables() throws {
        let clips = try toneClips(5)
        let (out, r) = try merge(clips)
        let boxes = try Probe.topLevelBoxes(out.path)
        XCTAssertEqual(boxes.first, "ftyp")
        let moov = try XCTUnwrap(boxes.firstIndex(of: "moov")), mdat = try XCTUnwrap(boxes.firstIndex(of: "mdat"))
        XCTAssertLessThan(moov, mdat, "fast start: \(boxes)")
        XCTAssertFalse(r.usedSecondPass)
        let reserved = try XCTUnwrap(r.moovReserved), used = try XCTUnwrap(r.moovUsed)
        XCTAssertLessThanOrEqual(used + 8, reserved)
        XCTAssertLessThan(reserved, used * 4 + 8192, "the reservation is a bound, not a guess: \(reserved) for \(used)")
        XCTAssertEqual(try Probe.mediainfo(out.path, "IsStreamable"), "Yes")
    }

    func testTooSmallReservationFallsBackToASecondPassNotACorruptFile() throws {
        let clips = try toneClips(3)
        let (out, r) = try merge(clips, reserve: 64)
        XCTAssertTrue(r.usedSecondPass)
        let boxes = try Probe.topLevelBoxes(out.path)
        XCTAssertLessThan(boxes.firstIndex(of: "moov")!, boxes.firstIndex(of: "mdat")!)
        XCTAssertEqual(try Probe.decodeErrors(out.path), "")
        XCTAssertEqual(try Probe.videoFrames(out.path), 360)
    }

    // MARK: audio

    /// Residual of the pure-tone recurrence x[n+1] - 2cos(w)x[n] + x[n-1]: ~0 for a clean tone,
    /// large at a click, gap or jump.
    func toneResidual(_ x: [Float], freq: Double = 440, rate: Double = 48000) -> [Double] {
        let c = 2 * cos(2 * Double.pi * freq / rate)
        return (1..<(x.count - 1)).map { abs(Double(x[$0 + 1]) - c * Double(x[$0]) + Double(x[$0 - 1])) }
    }

    /// Largest click and largest loudness dip within `window` samples of each join.
    func joinDamage(_ x: [Float], joins: [Int], window: Int = 3000) -> (click: Double, dip: Double) {
        let r = toneResidual(x)
        var click = 0.0, dip = 0.0
        for j in joins {
            let lo = max(1, j - window), hi = min(r.count, j + window)
            click = max(click, r[lo..<hi].max() ?? 0)
            // RMS over 256-sample windows vs the tone's RMS (0.25/sqrt(2)).
            var k = lo
            while k + 256 < hi {
                let rms = (x[k..<(k + 256)].reduce(0.0) { $0 + Double($1 * $1) } / 256).squareRoot()
                dip = max(dip, abs(rms / (0.25 / 2.0.squareRoot()) - 1))
                k += 128
            }
        }
        return (click, dip)
    }

    func testClipsCutFromOneToneJoinWithoutDiscontinuity() throws {
        let clips = try toneClips(5)
        let (out, _) = try merge(clips)
        let x = try Probe.audioSamples(out.path)
        let joins = (1...4).map { $0 * 192_000 }
        let ours = joinDamage(x, joins: joins)
        // Reference: the clips' own audible audio decoded by ffmpeg and laid end to end, exactly
        // trimmed. Its joins carry the clips' own coding noise at their edges; ours may not add to it.
        var ref: [Float] = []
        for c in clips {
            let n = Int(try Probe.stream(c, "a:0", "duration_ts"))!
            ref += Array(try Probe.audioSamples(c).prefix(n))
        }
        let inherent = joinDamage(ref, joins: joins)
        XCTAssertLessThan(
            ours.click, max(1.5 * inherent.click, 0.002),
            "click at a join beyond the clips' own edges (\(inherent.click))")
        XCTAssertLessThan(ours.dip, 0.08, "loudness dip at a join")

        // The oracle can fail: ffmpeg's concat copy-join of the same clips clicks and dips.
        let list = fx.scratch("concat").appendingPathComponent("list.txt")
        try clips.map { "file '\($0)'" }.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let naive = list.deletingLastPathComponent().appendingPathComponent("naive.mp4").path
        try Run.run(["ffmpeg", "-v", "error", "-f", "concat", "-safe", "0", "-i", list.path, "-c", "copy", naive])
        let y = try Probe.audioSamples(naive)
        // In the naive file each join sits 1536 samples later than the one before.
        let naiveJoins = (1...4).map { $0 * 192_000 + ($0 - 1) * 1536 + 512 }
        let theirs = joinDamage(y, joins: naiveJoins)
        XCTAssertGreaterThan(theirs.dip, 0.3, "naive concat should show a gap in loudness")
    }

    func testDecodedAudioEqualsTheClipsAudioWithinOneFrameWhateverTheJoins() throws {
        // 40 clips of 1.1 s (52800 samples: not a multiple of 1024).
        let one = try fx.toneClip(0, seconds: 1.1, fps: 30)
        let inputs = Array(repeating: one, count: 40)
        let (out, r) = try merge(inputs)
        let clipSamples = Int(try Probe.stream(one, "a:0", "duration_ts"))!
        XCTAssertEqual(clipSamples, 52_800)
        let decoded = try Probe.audioSamples(out.path).count
        XCTAssertLessThan(abs(decoded - 40 * clipSamples), 1024, "decoded \(decoded) vs \(40 * clipSamples)")
        // And the container agrees (edit list / last frame duration).
        let containerSamples = Int(try Probe.stream(out.path, "a:0", "duration_ts"))!
        XCTAssertLessThan(abs(containerSamples - 40 * clipSamples), 1024)
        // Only a few frames around each join were re-encoded.
        XCTAssertLessThan(Double(r.reencodedAudioFrames) / Double(r.audioFrames), 0.5)
        XCTAssertEqual(try Probe.decodeErrors(out.path), "")
    }

    /// Onset (seconds) of the first sample louder than `level` after `from` seconds.
    func onset(_ x: [Float], from: Double, level: Float = 0.05) -> Double? {
        let start = Int(from * 48000)
        guard start < x.count else { return nil }
        return x[start...].firstIndex { abs($0) > level }.map { Double($0) / 48000 }
    }

    func testAClipWhoseAudioIsShorterOrLongerThanItsVideoDoesNotShiftLaterClips() throws {
        // Clip A: 2 s of video with 1.5 s (or 2.5 s) of silence; clip B: 2 s video, tone from its first sample.
        for audioLen in [1.5, 2.5] {
            let a = try fx.clip(
                "silent-\(audioLen).mp4",
                [
                    "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=2",
                    "-f", "lavfi", "-i", "anullsrc=r=48000:cl=mono:d=\(audioLen)"
                ] + Fixtures.x264 + ["-c:a", "aac"])
            let b = try fx.toneClip(0, seconds: 2)
            let (out, _) = try merge([a, b], name: "sync-\(audioLen)")
            let x = try Probe.audioSamples(out.path)
            let t = try XCTUnwrap(onset(x, from: 0))
            XCTAssertEqual(t, 2.0, accuracy: 0.025, "clip B's sound must start with its picture (audio \(audioLen) s)")
        }
    }

    // MARK: orientation

    func markerClip(rotateMetadata: Int? = nil) throws -> String {
        let plain = try fx.clip(
            "marker.mp4",
            [
                "-f", "lavfi", "-i", "color=c=black:size=320x240:rate=30:duration=1,drawbox=x=0:y=0:w=80:h=60:color=white:t=fill",
                "-f", "lavfi", "-i", "sine=d=1"
            ] + Fixtures.x264 + ["-c:a", "aac"])
        guard let r = rotateMetadata else { return plain }
        // ffmpeg 5.1 writes the rotate tag as a display matrix when stream-copying.
        return try fx.clip("marker-\(r).mp4", ["-i", plain, "-c", "copy", "-metadata:s:v", "rotate=\(r)"])
    }

    func testRotateTurnsThePictureClockwiseAsIOSPreferredTransformDoes() throws {
        let m = try markerClip()
        // The marker sits top-left; turning clockwise moves it TL -> TR -> BR -> BL.
        let expected = [0: "TL", 90: "TR", 180: "BR", 270: "BL"]
        for (deg, corner) in expected {
            let (out, r) = try merge([m, m], rotate: deg, name: "rot\(deg)")
            XCTAssertEqual(r.rotation, deg)
            let pic = try Probe.greyPicture(out.path)
            XCTAssertEqual(pic.w, deg % 180 == 0 ? 320 : 240)
            XCTAssertEqual(Probe.brightestCorner(w: pic.w, h: pic.h, px: pic.px), corner, "--rotate \(deg)")
            // No pixels touched: video packets identical whatever the rotation.
            XCTAssertEqual(try Probe.videoFrames(out.path), 60)
        }
        // 90 is the iPhone-portrait matrix: ffprobe reports it as -90.
        let (out90, _) = try merge([m], rotate: 90, name: "rot90probe")
        XCTAssertEqual(try Probe.rotation(out90.path), -90)
    }

    func testRotationComposesWithTheClipsOwnOrientation() throws {
        // The ffmpeg CLI's rotate=90 metadata writes a matrix that turns the picture counter-clockwise
        // (ffprobe: rotation=90), i.e. 270 clockwise; adding 180 gives 90 clockwise.
        let m = try markerClip(rotateMetadata: 90)
        let own = try ClipProbe.probe(m).video.rotation
        XCTAssertEqual(own, 270)
        let (out, r) = try merge([m, m], rotate: 180)
        XCTAssertEqual(r.rotation, 90)
        let pic = try Probe.greyPicture(out.path)
        XCTAssertEqual(Probe.brightestCorner(w: pic.w, h: pic.h, px: pic.px), "TR")
    }

    // MARK: compatibility

    func testIncompatibleClipsAreRefusedNamingBothFilesAndTheParameter() throws {
        let a = try fx.toneClip(0, seconds: 1)
        let cases: [(String, [String], String)] = [
            (
                "size",
                ["-f", "lavfi", "-i", "testsrc2=size=640x480:rate=30:duration=1", "-f", "lavfi", "-i", "sine=sample_rate=48000:d=1"] + Fixtures.x264 + [
                    "-c:a", "aac"
                ], "video size differs (320x240 vs 640x480)"
            ),
            (
                "rate",
                ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=1", "-f", "lavfi", "-i", "sine=sample_rate=44100:d=1"] + Fixtures.x264 + [
                    "-c:a", "aac"
                ], "audio sample rate differs (48000 Hz vs 44100 Hz)"
            ),
            (
                "profile",
                [
                    "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=1", "-f", "lavfi", "-i", "sine=sample_rate=48000:d=1", "-c:v", "libx264",
                    "-preset", "ultrafast", "-profile:v", "baseline", "-pix_fmt", "yuv420p", "-c:a", "aac"
                ], "H.264 profile differs"
            ),
            (
                "channels",
                ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=1", "-f", "lavfi", "-i", "sine=sample_rate=48000:d=1", "-ac", "2"] + Fixtures.x264
                    + ["-c:a", "aac"], "audio channel count differs (1 vs 2)"
            ),
            ("noaudio", ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=1"] + Fixtures.x264, "the second has no audio track"),
            ("rotated", ["-i", a, "-c", "copy", "-metadata:s:v", "rotate=90"], "orientation differs")
        ]
        for (name, args, why) in cases {
            let b = try fx.clip("incompat-\(name).mp4", args)
            let out = fx.scratch("incompat").appendingPathComponent("o.mp4")
            XCTAssertThrowsError(try Merger(inputs: [a, b], options: MergeOptions(output: out)).run(), name) { e in
                let msg = "\(e)"
                XCTAssertTrue(msg.contains(a) && msg.contains(b), "names both files: \(msg)")
                XCTAssertTrue(msg.contains(why), "\(name): \(msg)")
                XCTAssertEqual((e as? ClipFlowError)?.kind, .incompatible)
            }
            XCTAssertFalse(FileManager.default.fileExists(atPath: out.path))
        }
    }

    // MARK: cover

    func testCoverIsARepresentativeUprightFrameAtDisplaySize() throws {
        // Fades in from black and out to black: the cover must be neither.
        let clip = try fx.clip(
            "fade.mp4",
            [
                "-f", "lavfi", "-i",
                "color=c=black:size=320x240:rate=30:duration=4,drawbox=x=0:y=0:w=80:h=60:color=white:t=fill,drawgrid=w=40:h=40:t=2:c=gray,fade=t=in:st=0:d=1,fade=t=out:st=3:d=1",
                "-f", "lavfi", "-i", "sine=d=4"
            ] + Fixtures.x264 + ["-c:a", "aac"])
        let (merged, _) = try merge([clip], rotate: 90)
        let jpg = merged.deletingLastPathComponent().appendingPathComponent("cover.jpg")
        let t = try Thumbnailer(path: merged.path).write(to: jpg)
        XCTAssertEqual(try Probe.stream(jpg.path, "v:0", "codec_name"), "mjpeg")
        XCTAssertEqual(t.width, 240); XCTAssertEqual(t.height, 320)
        let pic = try Probe.greyPicture(jpg.path)
        XCTAssertEqual(pic.w, 240); XCTAssertEqual(pic.h, 320)
        XCTAssertEqual(Probe.brightestCorner(w: pic.w, h: pic.h, px: pic.px), "TR", "cover is upright")
        let mean = Double(pic.px.reduce(0) { $0 + Int($1) }) / Double(pic.px.count)
        XCTAssertGreaterThan(mean, 20, "not a black frame (chosen at \(t.time) s)")
        XCTAssertTrue(t.time > 0.9 && t.time < 3.1, "not a fade frame: \(t.time)")

        let small = merged.deletingLastPathComponent().appendingPathComponent("small.jpg")
        let s = try Thumbnailer(path: merged.path).write(to: small, limit: ThumbnailSize(parsing: "160"))
        XCTAssertEqual(s.width, 120); XCTAssertEqual(s.height, 160)
        XCTAssertEqual(try Probe.stream(small.path, "v:0", "width"), "120")
    }

    func testCoverHonoursPixelAspectRatio() throws {
        let clip = try fx.clip(
            "anamorphic.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=1,setsar=2/1",
                "-f", "lavfi", "-i", "sine=d=1"
            ] + Fixtures.x264 + ["-c:a", "aac"])
        let jpg = fx.scratch("sar").appendingPathComponent("c.jpg")
        let t = try Thumbnailer(path: clip).write(to: jpg)
        XCTAssertEqual(t.width, 640); XCTAssertEqual(t.height, 240)
    }
}
