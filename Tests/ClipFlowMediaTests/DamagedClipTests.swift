import XCTest
import ClipFlowCore
@testable import ClipFlowMedia
import ClipFlowTestSupport

/// Clips whose sample tables are damaged (one field of one box changed) are refused before
/// anything is written, naming the damaged file and the table, whichever side of the join it is
/// on; covers of merged videos name the clip a bad picture came from.
final class DamagedClipTests: XCTestCase {
    let fx = Fixtures.shared

    struct Damage: Sendable {
        var name: String
        var box: String
        var at: Int
        var value: @Sendable (UInt32) -> UInt32
        /// Expected in the message (after the file name).
        var says: @Sendable (UInt32) -> String
    }

    static let video = "moov/trak[0]/mdia"
    static let audio = "moov/trak[1]/mdia"
    static let damages: [Damage] = [
        Damage(
            name: "timescale-minus-one", box: "\(video)/mdhd", at: 12, value: { _ in 0xFFFF_FFFF },
            says: { _ in "video media header (mdhd) gives a timescale of 4294967295 units per second" }),
        Damage(
            name: "timescale-42x", box: "\(video)/mdhd", at: 12, value: { $0 * 42 },
            says: {
                "video media header (mdhd) gives a timescale of \($0 * 42) units per second, which makes the media 0.024 s long, but its track header (tkhd) says 1.000 s"
            }),
        Damage(
            name: "stsz-2GiB", box: "\(video)/minf/stbl/stsz", at: 20, value: { _ in 0x7FFF_FFFF },
            says: { _ in "video sample-size table (stsz) lists 2147483647 bytes for sample 3 at byte" }),
        Damage(
            name: "stsz-constant-2GiB", box: "\(video)/minf/stbl/stsz", at: 4, value: { _ in 0x7FFF_FFFF },
            says: { _ in "its sample-size table (stsz) lists 30 samples of 2147483647 bytes, more than the file holds" }),
        Damage(
            name: "stsz-count", box: "\(video)/minf/stbl/stsz", at: 8, value: { $0 - 1 },
            says: { "video time-to-sample table (stts) covers \($0) samples but the sample-size table (stsz) lists \($0 - 1)" }),
        Damage(
            name: "stsc-first-chunk", box: "\(video)/minf/stbl/stsc", at: 8, value: { _ in 2 },
            says: { _ in "video sample-to-chunk table (stsc) starts at chunk 2, not 1" }),
        Damage(
            name: "stsc-samples-per-chunk", box: "\(video)/minf/stbl/stsc", at: 12, value: { $0 + 1 },
            says: { _ in "video sample-to-chunk table (stsc) places" }),
        Damage(
            name: "ctts-count", box: "\(video)/minf/stbl/ctts", at: 8, value: { $0 + 1 },
            says: { _ in "video composition-offset table (ctts) covers" }),
        Damage(
            name: "stco-beyond", box: "\(video)/minf/stbl/stco", at: 8, value: { _ in 0x7FFF_FFF0 },
            says: { _ in "video chunk-offset table (stco) puts chunk 1 at byte 2147483632, beyond the end of the file" }),
        Damage(
            name: "audio-stts-half-frames", box: "\(audio)/minf/stbl/stts", at: 12, value: { $0 / 2 },
            says: { _ in "audio time-to-sample table (stts) gives AAC frame 1 a duration of 512 units" }),
        Damage(
            name: "audio-stsc-samples-per-chunk", box: "\(audio)/minf/stbl/stsc", at: 12, value: { $0 + 1 },
            says: { _ in "audio sample-to-chunk table (stsc) places" })
    ]

    /// AAC durations that are timestamps (jitter around 1024, as the ffmpeg CLI writes them) are
    /// accepted; a table whose times drift more than half a frame from the frames' is refused,
    /// naming the frame where the drift left the jitter's range (1/16 frame) for good.
    func testAACDurationJitterIsAcceptedAndDriftRefused() throws {
        func tables(_ durations: [UInt32], timescale: UInt32) -> SampleTables {
            var t = SampleTables()
            t.timescale = timescale
            t.timeToSample = durations.map { SampleTables.TimeRun(count: 1, delta: $0) }
            t.sampleSizes = Array(repeating: 300, count: durations.count)
            return t
        }
        let jittered48 = (0..<120).map { [1016, 1024, 1032][$0 % 3] as UInt32 }
        // Milliseconds: frame k at round(k x 1024 / 44.1) ms.
        func millisecond(_ k: Int) -> Double { (Double(k) * 1024 / 44.1).rounded() }
        let jittered44 = (0..<120).map { UInt32(millisecond($0 + 1) - millisecond($0)) }
        XCTAssertNoThrow(try tables(jittered48, timescale: 48000).checkAACFrames(sampleRate: 48000, path: "a.mp4"))
        XCTAssertNoThrow(try tables(jittered44, timescale: 1000).checkAACFrames(sampleRate: 44100, path: "a.mp4"), "millisecond timestamps")
        XCTAssertNoThrow(try tables([1024, 1024, 1024, 300], timescale: 48000).checkAACFrames(sampleRate: 48000, path: "a.mp4"), "a short last frame")
        let refused: [(String, [UInt32], String)] = [
            (
                "every frame 1040", Array(repeating: 1040, count: 100),
                "gives AAC frame 5 a duration of 1040 units at timescale 48000 (1040.0 samples); by frame 34 its times are 528 samples away"
            ),
            ("one frame twice as long", [1024, 1024, 2048, 1024, 1024], "gives AAC frame 3 a duration of 2048 units"),
            ("jitter, then half frames", jittered48 + Array(repeating: 512, count: 4), "gives AAC frame 121 a duration of 512 units")
        ]
        for (what, durations, says) in refused {
            XCTAssertThrowsError(try tables(durations, timescale: 48000).checkAACFrames(sampleRate: 48000, path: "a.mp4"), what) { e in
                XCTAssertTrue("\(e)".contains("input 'a.mp4': audio time-to-sample table (stts) \(says)"), "\(what): \(e)")
            }
        }
    }

    func testDamagedSampleTablesAreRefusedNamingTheFileAndTheTableInEitherOrder() throws {
        let good = try fx.toneClip(1, seconds: 1)
        let source = try fx.toneClip(0, seconds: 1)
        let dir = fx.scratch("damaged")
        XCTAssertEqual(try MP4Patch.uint32(source, box: "\(Self.video)/mdhd", at: 12), 15360, "fixture layout: trak 0 is the video")
        for d in Self.damages {
            let bad = dir.appendingPathComponent("\(d.name).mp4").path
            let old = try MP4Patch.uint32(source, box: d.box, at: d.at)
            try MP4Patch.write(source, to: bad, box: d.box, at: d.at, d.value(old))
            for inputs in [[bad, good], [good, bad]] {
                let out = dir.appendingPathComponent("out-\(d.name).mp4")
                XCTAssertThrowsError(try Merger(inputs: inputs, options: MergeOptions(output: out)).run(), d.name) { e in
                    let m = (e as? ClipFlowError)?.message ?? "\(e)"
                    XCTAssertEqual((e as? ClipFlowError)?.kind, .badInput, "\(d.name): \(m)")
                    XCTAssertTrue(m.hasPrefix("input '\(bad)': \(d.says(old))"), "\(d.name) \(inputs == [bad, good] ? "first" : "second"): \(m)")
                    XCTAssertFalse(m.contains(good), "\(d.name): the good clip is blamed: \(m)")
                }
                XCTAssertFalse(FileManager.default.fileExists(atPath: out.path), d.name)
            }
        }
    }

    /// FFmpeg adds a stream of its own for iTunes cover art: streams are matched to tracks by
    /// id, so such a clip is merged; a fragmented MP4 is refused plainly, naming the file.
    func testCoverArtClipsAreMergedAndFragmentedOnesRefusedPlainly() throws {
        let plain = try fx.toneClip(0, seconds: 1)
        let jpeg = try fx.clip("cover-art.jpg", ["-f", "lavfi", "-i", "testsrc2=size=64x64", "-frames:v", "1"])
        let withCover = try fx.clip(
            "with-cover-art.mp4", ["-i", plain, "-i", jpeg, "-map", "1", "-map", "0", "-c", "copy", "-disposition:v:0", "attached_pic"])
        let out = fx.scratch("cover-art").appendingPathComponent("out.mp4")
        let r = try Merger(inputs: [withCover, plain], options: MergeOptions(output: out)).run()
        XCTAssertEqual(r.videoFrames, 60)
        let frames = try Run.run([
            "ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", out.path
        ])
        XCTAssertEqual(frames.out.trimmingCharacters(in: .whitespacesAndNewlines), "60")

        let fragmented = try fx.clip("fragmented.mp4", ["-i", plain, "-c", "copy", "-movflags", "frag_keyframe+empty_moov+default_base_moof"])
        let out2 = fx.scratch("fragmented").appendingPathComponent("out.mp4")
        XCTAssertThrowsError(try Merger(inputs: [plain, fragmented], options: MergeOptions(output: out2)).run()) {
            XCTAssertTrue("\($0)".contains("input '\(fragmented)' is a fragmented MP4"), "\($0)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: out2.path))
    }

    func testOutputTimeBaseHoldsEveryClipsTimestampsExactly() throws {
        // A clip at timescale 25 followed by one at 15360: in 1/25 the second clip's 1/30 s frames
        // would round onto each other; the output time base must hold both exactly.
        var a = try ClipProbe.probe(try fx.toneClip(0, seconds: 1))
        let b = try ClipProbe.probe(try fx.toneClip(1, seconds: 1))
        a.video.timeBase = .init(num: 1, den: 25)
        a.video.start = 0
        a.video.duration = 25
        let layout = try Merger.Layout(clips: [a, b], rotate: 0)
        XCTAssertEqual(layout.videoTB.num, 1)
        XCTAssertEqual(layout.videoTB.den % 25, 0, "\(layout.videoTB)")
        XCTAssertEqual(layout.videoTB.den % 15360, 0, "\(layout.videoTB)")
        XCTAssertEqual(Double(layout.starts[1]) * layout.videoTB.double, 1.0, accuracy: 1e-9)
    }

    /// A sync-sample table that marks no keyframe early enough: FFmpeg's seek answers -1, which
    /// its error text calls "Operation not permitted". The cover comes from the first picture.
    func testCoverIsTakenEvenWhenNoKeyframeIsMarkedBeforeTheCandidates() throws {
        let source = try fx.toneClip(0, seconds: 1)
        let dir = fx.scratch("late-keyframes")
        let bad = dir.appendingPathComponent("late-keyframes.mp4").path
        XCTAssertEqual(try MP4Patch.uint32(source, box: "\(Self.video)/minf/stbl/stss", at: 4), 1, "one keyframe")
        try MP4Patch.write(source, to: bad, box: "\(Self.video)/minf/stbl/stss", at: 8, 29)
        let out = dir.appendingPathComponent("merged.mp4")
        let r = try Merger(inputs: [bad], options: MergeOptions(output: out)).run()
        let cover = dir.appendingPathComponent("cover.jpg")
        let t = try Thumbnailer(path: out.path, sources: r.sources).write(to: cover)
        XCTAssertEqual(t.width, 320)
        XCTAssertEqual(try Probe.stream(cover.path, "v:0", "width"), "320", "ffprobe reads the cover")
    }

    func testCoverErrorNamesTheClipThePictureCameFromAndTheReason() throws {
        let good = try fx.toneClip(0, seconds: 1)
        let dir = fx.scratch("cover-garbage")
        // Every picture's bytes replaced: the tables are fine, the pictures cannot be decoded.
        var data = [UInt8](try Data(contentsOf: URL(fileURLWithPath: good)))
        let mdat = try XCTUnwrap(MP4Patch.payload("mdat", in: data))
        for i in mdat { data[i] = 0xFF }
        let bad = dir.appendingPathComponent("garbage.mp4").path
        try Data(data).write(to: URL(fileURLWithPath: bad))
        let out = dir.appendingPathComponent("merged.mp4")
        let r = try Merger(inputs: [bad], options: MergeOptions(output: out)).run()
        XCTAssertEqual(r.sources.map(\.path), [bad])
        let cover = dir.appendingPathComponent("cover.jpg")
        XCTAssertThrowsError(try Thumbnailer(path: out.path, sources: r.sources).write(to: cover)) { e in
            let m = "\(e)"
            XCTAssertTrue(m.hasPrefix("no picture for a cover could be decoded from '\(bad)' (the clip at 0.00-1.00 s of '\(out.path)')"), m)
            XCTAssertTrue(m.contains("cannot be decoded (video decoder: decoding: Invalid data found"), m)
            XCTAssertFalse(m.contains("Operation not permitted"), m)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: cover.path))
    }
}
