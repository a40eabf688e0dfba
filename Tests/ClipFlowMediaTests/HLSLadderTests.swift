import XCTest
@testable import ClipFlowMedia
import ClipFlowCore
import ClipFlowTestSupport

/// A ladder from one decode, judged by ffprobe, PyPI m3u8 and chromium.
final class HLSLadderTests: XCTestCase {
    let fx = Fixtures.shared

    func testTwoRungLadderWithAlignedKeyframeSegmentsPlays() throws {
        let src = try fx.clip(
            "ladder-src.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "6", "-c:v", "libx264", "-preset",
                "ultrafast",
                "-c:a", "aac"
            ])
        let dir = fx.scratch("ladder").appendingPathComponent("hls")
        let rungs = [LadderRung(name: "720p", height: 720, maxRate: 3_500_000), LadderRung(name: "360p", height: 360, maxRate: 1_000_000)]
        let r = try HLSLadder(output: dir.path, ladder: LadderChoice(rungs: rungs), schedule: SegmentSchedule(length: 2), encoderPreset: "ultrafast").write(
            inputs: [src])
        XCTAssertEqual(r.segments, 3)
        for rung in ["720p", "360p"] {
            let folder = dir.appendingPathComponent(rung)
            let segs = (0..<3).map { folder.appendingPathComponent("seg-\($0).m4s").path }
            let all = fx.scratch("ladder-\(rung)").appendingPathComponent("all.mp4").path
            try Data((try ([folder.appendingPathComponent("init.mp4").path] + segs).map { try Data(contentsOf: URL(fileURLWithPath: $0)) }).joined())
                .write(to: URL(fileURLWithPath: all))
            XCTAssertEqual(try Probe.decodeErrors(all), "", rung)
            XCTAssertEqual(try Probe.videoFrames(all), 180, rung)
            for s in segs {
                let info = try XCTUnwrap(FragmentInfo([UInt8](try Data(contentsOf: URL(fileURLWithPath: s)))))
                XCTAssertTrue(info.startsWithSyncSample, s)
                XCTAssertEqual(info.sampleCount, 60, s)
            }
            // ffprobe: keyframes (IDR, the decoder's key flag) exactly at the shared boundaries and
            // nowhere else, in every rendition; each segment alone starts with one.
            let keys = try Run.run([
                "ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pts_time,flags", "-of", "csv=p=0", all
            ]).out.split(separator: "\n").filter { $0.contains("K") }.map { Double($0.split(separator: ",")[0])! }
            XCTAssertEqual(keys, [0, 2, 4], rung)
            for s in segs {
                let one = fx.scratch("ladder-seg").appendingPathComponent("one.mp4")
                try (try Data(contentsOf: folder.appendingPathComponent("init.mp4")) + Data(contentsOf: URL(fileURLWithPath: s))).write(to: one)
                let first = try Run.run([
                    "ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "frame=key_frame,pict_type", "-read_intervals", "%+#1", "-of",
                    "csv=p=0", one.path
                ]).out
                XCTAssertTrue(first.hasPrefix("1,I"), "\(rung) \(s): \(first)")
            }
        }
        // PyPI m3u8 reads every playlist of the ladder.
        let parsed = try Run.run([
            "python3", "-c",
            "import m3u8, sys, os; d = sys.argv[1]; m = m3u8.load(d + '/master.m3u8'); "
                + "ps = [p.uri for p in m.playlists] + [x.uri for x in m.media] + [i.uri for i in m.iframe_playlists]; "
                + "print(sum(len(m3u8.load(os.path.join(d, u)).segments) for u in ps), len(ps))",
            dir.path
        ]).out
        XCTAssertEqual(parsed.trimmingCharacters(in: .whitespacesAndNewlines), "15 5", "3 segments in each of 2 video, 1 audio, 2 I-frame playlists")
        let played = try XCTUnwrap(try Probe.browserPlayback([dir.appendingPathComponent("master.m3u8").path]).first)
        XCTAssertEqual(played["ended"] as? Bool, true, "\(played)")
        XCTAssertTrue(played["error"] is NSNull, "\(played)")
        // On a slow network the player takes the lower rendition (the segments it fetches say which).
        let slow = try XCTUnwrap(
            try Probe.browserPlayback([dir.appendingPathComponent("master.m3u8").path], options: ["--rate", "1", "--throttle", "2500"]).first)
        XCTAssertEqual(slow["ended"] as? Bool, true, "\(slow)")
        let fetched = (slow["segments"] as? [String] ?? []).filter { !$0.hasPrefix("audio/") }
        XCTAssertTrue(fetched.suffix(2).allSatisfy { $0.hasPrefix("360p/") }, "\(fetched)")
        XCTAssertEqual(try Probe.stream(dir.appendingPathComponent("poster.jpg").path, "v:0", "width,height"), "1280,720")
        let feed = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(contentsOf: dir.appendingPathComponent("feed.json"))) as? [String: Any])
        let video = try XCTUnwrap((feed["videos"] as? [[String: Any]])?.first)
        XCTAssertEqual(video["id"] as? String, "hls")
        XCTAssertEqual(video["master"] as? String, "master.m3u8")
        XCTAssertEqual((video["duration"] as? Double) ?? 0, 6, accuracy: 0.05)
        let prefetch = try XCTUnwrap(video["prefetch"] as? [[String: String]])
        XCTAssertEqual(prefetch.map { $0["segment"] ?? "" }, ["360p/seg-0.m4s", "audio/seg-0.m4s"])
        for p in prefetch { XCTAssertTrue(FileManager.default.fileExists(atPath: dir.appendingPathComponent(p["init"]!).path)) }
        // Every rendition, as the master playlist names it, with what a player needs to start it.
        let renditions = try XCTUnwrap(video["renditions"] as? [[String: Any]])
        XCTAssertEqual(renditions.map { $0["name"] as? String }, ["720p", "360p"])
        let master = try String(contentsOf: dir.appendingPathComponent("master.m3u8"), encoding: .utf8)
        for rendition in renditions + [try XCTUnwrap(video["audio"] as? [String: Any])] {
            let playlist = try XCTUnwrap(rendition["playlist"] as? String)
            XCTAssertTrue(master.contains(playlist), playlist)
            XCTAssertTrue(master.contains(try XCTUnwrap(rendition["codecs"] as? String)), "\(rendition)")
            for key in ["init", "segment"] {
                XCTAssertTrue(FileManager.default.fileExists(atPath: dir.appendingPathComponent(try XCTUnwrap(rendition[key] as? String)).path))
            }
            XCTAssertGreaterThan(rendition["bandwidth"] as? Double ?? 0, 0)
        }
        XCTAssertEqual(renditions.map { [$0["width"] as? Int, $0["height"] as? Int] }, [[1280, 720], [640, 360]])
        XCTAssertEqual(renditions.map { $0["frame_rate"] as? Double }, [30, 30], "the master's FRAME-RATE, for a player to step a frame")
        XCTAssertTrue(master.contains("FRAME-RATE=30.000"), master)
        XCTAssertTrue(master.contains("BANDWIDTH=\(Int(renditions[0]["bandwidth"] as? Double ?? 0))"), master)
        // Smaller covers of the same picture, fitted within their long side.
        XCTAssertEqual((video["covers"] as? [[String: Any]])?.map { $0["uri"] as? String }, ["poster-640.jpg", "poster-1280.jpg"])
        XCTAssertEqual(try Probe.stream(dir.appendingPathComponent("poster-640.jpg").path, "v:0", "width,height"), "640,360")
        XCTAssertEqual(video["storyboard"] as? String, "storyboard.vtt")
        try checkStoryboard(in: dir, source: src, duration: 6, tiles: 3)
        // Nothing is replaced.
        XCTAssertThrowsError(try HLSLadder(output: dir.path, ladder: LadderChoice(rungs: rungs), schedule: SegmentSchedule(length: 2)).write(inputs: [src])) {
            e in
            XCTAssertTrue("\(e)".contains("exists"), "\(e)")
        }
    }
}

extension HLSLadderTests {
    /// The storyboard as a player reads it: a WebVTT track whose cues follow each other from 0 to
    /// the end, each naming a box inside the sprite (its size by ffprobe); and each box's picture
    /// is the source's at the cue's start (ffmpeg's SSIM against that frame, scaled alike, is
    /// high, and higher than against a frame from elsewhere).
    func checkStoryboard(in dir: URL, source: String, duration: Double, tiles: Int) throws {
        let sprite = dir.appendingPathComponent("storyboard.jpg").path
        let size = try Probe.stream(sprite, "v:0", "width,height").split(separator: ",").compactMap { Int($0) }
        XCTAssertEqual(size.count, 2)
        let text = try String(contentsOf: dir.appendingPathComponent("storyboard.vtt"), encoding: .utf8)
        XCTAssertTrue(text.hasPrefix("WEBVTT\n"), text)
        func seconds(_ s: Substring) -> Double {
            s.split(separator: ":").reduce(0.0) { $0 * 60 + (Double($1) ?? .nan) }
        }
        var cues: [(start: Double, end: Double, box: [Int])] = []
        for block in text.components(separatedBy: "\n\n").dropFirst() where !block.isEmpty {
            let lines = block.split(separator: "\n")
            XCTAssertEqual(lines.count, 2, block)
            let times = lines[0].components(separatedBy: " --> ")
            let target = lines[1].split(separator: "#")
            XCTAssertEqual(target.first, "storyboard.jpg", block)
            let box = (target.last ?? "").replacingOccurrences(of: "xywh=", with: "").split(separator: ",").compactMap { Int($0) }
            cues.append((seconds(Substring(times[0])), seconds(Substring(times.last ?? "")), box))
        }
        XCTAssertEqual(cues.count, tiles, text)
        XCTAssertEqual(cues.first?.start, 0)
        XCTAssertEqual(cues.last?.end ?? 0, duration, accuracy: 0.05)
        for (a, b) in zip(cues, cues.dropFirst()) { XCTAssertEqual(a.end, b.start, "cues follow each other: \(text)") }
        for cue in cues {
            XCTAssertEqual(cue.box.count, 4, "\(cue)")
            let (x, y, w, h) = (cue.box[0], cue.box[1], cue.box[2], cue.box[3])
            XCTAssertTrue(x >= 0 && y >= 0 && w > 0 && h > 0 && x + w <= size[0] && y + h <= size[1], "\(cue) inside \(size)")
        }
        func ssim(_ cue: (start: Double, end: Double, box: [Int]), at t: Double) throws -> Double {
            let (x, y, w, h) = (cue.box[0], cue.box[1], cue.box[2], cue.box[3])
            let r = try Run.run([
                "ffmpeg", "-v", "info", "-nostats", "-i", sprite, "-ss", String(t), "-i", source, "-filter_complex",
                "[0:v]crop=\(w):\(h):\(x):\(y),format=yuv420p[a];[1:v]scale=\(w):\(h),format=yuv420p[b];[a][b]ssim", "-frames:v", "1", "-f", "null", "-"
            ])
            let all = r.stderr.components(separatedBy: "All:").last?.split(separator: " ").first
            return Double(all ?? "") ?? 0
        }
        let middle = cues[cues.count / 2]
        let right = try ssim(middle, at: middle.start), wrong = try ssim(middle, at: (middle.start + duration / 2).truncatingRemainder(dividingBy: duration))
        XCTAssertGreaterThan(right, 0.8, "the picture at \(middle.start) s")
        XCTAssertGreaterThan(right, wrong, "the picture is the one at the cue's start")
    }

    func testPortraitSourcesGetPortraitRenditions() throws {
        let plain = try fx.clip(
            "ladder-portrait-src.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "2", "-c:v", "libx264", "-preset",
                "ultrafast",
                "-c:a", "aac"
            ])
        let turned = fx.scratch("ladder-portrait").appendingPathComponent("turned.mp4")
        _ = try Merger(inputs: [plain], options: MergeOptions(output: turned, rotate: 90)).run()  // displayed 720x1280, as a phone's
        let dir = fx.scratch("ladder-portrait-out").appendingPathComponent("hls")
        try HLSLadder(output: dir.path, schedule: SegmentSchedule(length: 2), encoderPreset: "ultrafast").write(inputs: [turned.path])
        let master = try String(contentsOf: dir.appendingPathComponent("master.m3u8"), encoding: .utf8)
        XCTAssertTrue(master.contains("RESOLUTION=720x1280"), master)
        XCTAssertTrue(master.contains("RESOLUTION=540x960"), master)
        XCTAssertTrue(master.contains("RESOLUTION=360x640"), master)
        XCTAssertFalse(master.contains("1080"), "never above the source: \(master)")
        XCTAssertEqual(try HLSLint.lint(directory: dir), [])
    }

    /// A phone-style MOV written by the ffmpeg CLI (stored 640x360, a display matrix turning it
    /// 90 degrees), published as a copy with its matrix: the covers and the storyboard show it
    /// upright (portrait), as a player shows the copy.
    func testACopiedPhoneMOVGetsUprightCoversAndStoryboard() throws {
        let folder = fx.scratch("ladder-phone-mov")
        let encoded = folder.appendingPathComponent("encoded.mp4"), mov = folder.appendingPathComponent("phone.mov")
        _ = try Run.run([
            "ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "4",
            "-c:v", "libx264", "-preset", "ultrafast", "-g", "30", "-c:a", "aac", encoded.path
        ])
        // The matrix is written on a stream copy (an encode would apply the turn instead).
        _ = try Run.run(["ffmpeg", "-v", "error", "-i", encoded.path, "-c", "copy", "-metadata:s:v:0", "rotate=90", "-f", "mov", mov.path])
        XCTAssertEqual(
            try Run.run(["ffprobe", "-v", "error", "-show_entries", "stream_side_data=rotation", "-of", "csv=p=0", mov.path]).out.trimmingCharacters(
                in: .whitespacesAndNewlines), "90")
        XCTAssertTrue(try Probe.stream(mov.path, "v:0", "width,height").hasPrefix("640,360"), "stored landscape")
        let dir = fx.scratch("ladder-phone-out").appendingPathComponent("hls")
        try HLSLadder(output: dir.path, ladder: LadderChoice(rungs: [], copy: true), schedule: .feed).write(inputs: [mov.path])
        XCTAssertEqual(try Probe.stream(dir.appendingPathComponent("poster.jpg").path, "v:0", "width,height"), "360,640")
        XCTAssertEqual(try Probe.stream(dir.appendingPathComponent("poster-640.jpg").path, "v:0", "width,height"), "360,640")
        let vtt = try String(contentsOf: dir.appendingPathComponent("storyboard.vtt"), encoding: .utf8)
        XCTAssertTrue(vtt.contains("storyboard.jpg#xywh=0,0,90,160"), vtt)
        XCTAssertEqual(try Probe.stream(dir.appendingPathComponent("storyboard.jpg").path, "v:0", "height"), "160")
    }

    /// Renditions are listed by height as numbers, from the top, the copy first.
    func testRenditionNamesAreOrderedByHeight() {
        XCTAssertEqual(LadderRung.ordered(["1080p", "360p", "540p", "720p"]), ["1080p", "720p", "540p", "360p"])
        XCTAssertEqual(LadderRung.ordered(Set(["360p", "copy", "2160p", "720p"])), ["copy", "2160p", "720p", "360p"])
    }

    func testSegmentSchedules() {
        XCTAssertEqual(SegmentSchedule.vod.boundary(after: 0), 6)
        XCTAssertEqual(SegmentSchedule.vod.boundary(after: 6), 12)
        XCTAssertEqual(SegmentSchedule.feed.boundary(after: 0), 1)
        XCTAssertEqual(SegmentSchedule.feed.boundary(after: 1), 3)
        XCTAssertEqual(SegmentSchedule.feed.boundary(after: 2.5), 3)
        XCTAssertEqual(SegmentSchedule.feed.boundary(after: 3), 5)
    }

    func testFeedProfileStartsWithAOneSecondSegment() throws {
        let src = try fx.clip(
            "ladder-feed-src.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "5", "-c:v", "libx264", "-preset", "ultrafast",
                "-c:a", "aac"
            ])
        let dir = fx.scratch("ladder-feed").appendingPathComponent("hls")
        let r = try HLSLadder(
            output: dir.path, ladder: LadderChoice(rungs: [LadderRung(name: "360p", height: 360, maxRate: 1_000_000)]), schedule: .feed,
            encoderPreset: "ultrafast"
        ).write(inputs: [src])
        XCTAssertEqual(r.segments, 3)  // 0-1, 1-3, 3-5
        let counts = try (0..<3).map { i in
            try XCTUnwrap(FragmentInfo([UInt8](try Data(contentsOf: dir.appendingPathComponent("360p/seg-\(i).m4s"))))).sampleCount
        }
        XCTAssertEqual(counts, [30, 60, 60])
        let playlist = try String(contentsOf: dir.appendingPathComponent("360p.m3u8"), encoding: .utf8)
        XCTAssertTrue(playlist.contains("#EXT-X-TARGETDURATION:2"), playlist)
        XCTAssertTrue(playlist.contains("#EXTINF:1.000000,"), playlist)
    }
}

/// `HLSLint` on our ladders, on the ffmpeg CLI's, and on seeded defects.
final class HLSLintTests: XCTestCase {
    let fx = Fixtures.shared

    func ladder(_ name: String, schedule: SegmentSchedule = SegmentSchedule(length: 2)) throws -> URL {
        let src = try fx.clip(
            "lint-src.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "6", "-c:v", "libx264", "-preset",
                "ultrafast",
                "-c:a", "aac"
            ])
        let dir = fx.scratch(name).appendingPathComponent("hls")
        let rungs = [LadderRung(name: "720p", height: 720, maxRate: 3_500_000), LadderRung(name: "360p", height: 360, maxRate: 1_000_000)]
        try HLSLadder(output: dir.path, ladder: LadderChoice(rungs: rungs), schedule: schedule, encoderPreset: "ultrafast").write(inputs: [src])
        return dir
    }

    func codes(_ f: [LintFinding], _ s: LintFinding.Severity) -> Set<String> { Set(f.filter { $0.severity == s }.map(\.code)) }

    func testOurLadderIsClean() throws {
        XCTAssertEqual(try HLSLint.lint(directory: try ladder("lint-clean")), [])
    }

    func testFFmpegsOwnLadderIsFlagged() throws {
        let dir = fx.scratch("lint-ffmpeg")
        try Run.run(
            [
                "ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "6",
                "-filter_complex", "[0:v]split=2[a][b];[a]scale=-2:720[v0];[b]scale=-2:360[v1]", "-map", "[v0]", "-map", "[v1]", "-map", "1:a",
                "-c:v", "libx264", "-preset", "ultrafast", "-crf", "23", "-g", "60", "-sc_threshold", "0", "-c:a", "aac", "-f", "hls", "-hls_segment_type",
                "fmp4",
                "-var_stream_map", "v:0,agroup:aud v:1,agroup:aud a:0,agroup:aud", "-master_pl_name", "master.m3u8", "-hls_time", "2",
                "-hls_playlist_type", "vod", "-hls_segment_filename", dir.appendingPathComponent("out_%v_%03d.m4s").path,
                "-hls_fmp4_init_filename", "init_%v.mp4", dir.appendingPathComponent("out_%v.m3u8").path
            ])
        let f = try HLSLint.lint(directory: dir)
        XCTAssertTrue(codes(f, .error).contains("bandwidth-below-peak"), "\(f)")
        XCTAssertTrue(
            codes(f, .warning).isSuperset(of: ["missing-average-bandwidth", "missing-frame-rate", "no-iframe-playlists", "independent-segments"]), "\(f)")
    }

    func testSeededDefectsAreFound() throws {
        let dir = try ladder("lint-seeded")
        // A wrong CODECS.
        let master = dir.appendingPathComponent("master.m3u8")
        let text = try String(contentsOf: master, encoding: .utf8)
        try text.replacingOccurrences(of: "avc1.64001f", with: "avc1.640028").replacingOccurrences(of: "avc1.42c01f", with: "avc1.640028")
            .write(to: master, atomically: true, encoding: .utf8)
        // A segment longer than the target.
        let p720 = dir.appendingPathComponent("720p.m3u8")
        let media = try String(contentsOf: p720, encoding: .utf8)
        try media.replacingOccurrences(of: "#EXTINF:2.000000,\n720p/seg-1.m4s", with: "#EXTINF:3.600000,\n720p/seg-1.m4s").write(
            to: p720, atomically: true, encoding: .utf8)
        // A rendition cut elsewhere: 360p from a ladder with a 1 s first segment.
        let other = try ladder("lint-other", schedule: .feed)
        try FileManager.default.removeItem(at: dir.appendingPathComponent("360p"))
        try FileManager.default.copyItem(at: other.appendingPathComponent("360p"), to: dir.appendingPathComponent("360p"))
        try FileManager.default.removeItem(at: dir.appendingPathComponent("360p.m3u8"))
        try FileManager.default.copyItem(at: other.appendingPathComponent("360p.m3u8"), to: dir.appendingPathComponent("360p.m3u8"))
        let f = try HLSLint.lint(directory: dir)
        // The three seeded defects (the swapped rendition's rates also differ from what the master
        // declares, which the lint rightly reports too).
        XCTAssertTrue(codes(f, .error).isSuperset(of: ["codecs-mismatch", "segment-too-long", "misaligned"]), "\(f)")
        XCTAssertTrue(f.contains { $0.code == "misaligned" && $0.file == "360p.m3u8" })
    }
}

/// One file per rendition (byte ranges), the engine's fan-out, and the `copy` rendition.
final class HLSLadderFormsTests: XCTestCase {
    let fx = Fixtures.shared

    func source() throws -> String {
        try fx.clip(
            "ladder-forms-src.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "6", "-c:v", "libx264", "-preset",
                "ultrafast", "-c:a", "aac"
            ])
    }

    /// A source whose keyframes are every 2 s exactly (as clipflow's presets make them).
    func keyframedSource() throws -> String {
        try fx.clip(
            "ladder-copy-src.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "8", "-c:v", "libx264", "-preset",
                "ultrafast", "-g", "60", "-keyint_min", "60", "-sc_threshold", "0", "-c:a", "aac"
            ])
    }

    func testSingleFileRenditionsAreAddressedByByteRangesAndPlay() throws {
        let dir = fx.scratch("ladder-single").appendingPathComponent("hls")
        let rungs = [LadderRung(name: "720p", height: 720, maxRate: 3_500_000), LadderRung(name: "360p", height: 360, maxRate: 1_000_000)]
        let events = EventRecorder()
        let r = try HLSLadder(
            output: dir.path, ladder: LadderChoice(rungs: rungs), schedule: SegmentSchedule(length: 2), encoderPreset: "ultrafast", singleFile: true
        )
        .write(inputs: [try source()], events: events)
        XCTAssertEqual(r.segments, 3)
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
        XCTAssertEqual(
            names,
            [
                "360p-iframes.m3u8", "360p.m3u8", "360p.mp4", "720p-iframes.m3u8", "720p.m3u8", "720p.mp4", "audio.m3u8", "audio.mp4", "feed.json",
                "master.m3u8", "poster-1280.jpg", "poster-640.jpg", "poster.jpg", "storyboard.jpg", "storyboard.vtt", "tracks.json"
            ])
        // The engine carried it: one decode fanning out to every rendition through bounded links.
        let links = events.events.compactMap { e -> (String, String, Int)? in
            if case .queue(let from, let peak, _, _) = e.kind { return (from, e.stage, peak) }
            return nil
        }
        for to in ["hls.720p", "hls.360p", "hls.audio"] {
            let link = try XCTUnwrap(links.first { $0.0 == "hls.decode" && $0.1 == to }, "\(links)")
            XCTAssertLessThanOrEqual(link.2, HLSLadder.pictureLink.maxItems)
        }
        // PyPI m3u8: every segment is a byte range of the rendition's file, one after another
        // from the end of the init section.
        let script = """
            import json, m3u8, sys
            p = m3u8.load(sys.argv[1])
            print(json.dumps({'map': [p.segment_map[0].uri, p.segment_map[0].byterange], 'uris': [s.uri for s in p.segments],
              'ranges': [s.byterange for s in p.segments]}))
            """
        for rung in ["720p", "360p", "audio"] {
            let out = try Run.run(["python3", "-c", script, dir.appendingPathComponent("\(rung).m3u8").path]).out
            let j = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(out.utf8)) as? [String: Any])
            let map = try XCTUnwrap(j["map"] as? [String])
            XCTAssertEqual(map[0], "\(rung).mp4")
            var next = Int(map[1].split(separator: "@")[0])!
            XCTAssertTrue(map[1].hasSuffix("@0"), map[1])
            for range in try XCTUnwrap(j["ranges"] as? [String]) {
                let parts = range.split(separator: "@").map { Int($0)! }
                XCTAssertEqual(parts[1], next, "\(rung): \(j)")
                next += parts[0]
            }
            let file = dir.appendingPathComponent("\(rung).mp4").path
            XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int, next, "\(rung): the ranges cover the file")
            XCTAssertEqual(try Probe.decodeErrors(file), "", rung)
            if rung != "audio" { XCTAssertEqual(try Probe.videoFrames(file), 180, rung) }
        }
        XCTAssertEqual(try HLSLint.lint(directory: dir), [])
        let played = try XCTUnwrap(try Probe.browserPlayback([dir.appendingPathComponent("master.m3u8").path]).first)
        XCTAssertEqual(played["ended"] as? Bool, true, "\(played)")
        XCTAssertTrue(played["error"] is NSNull, "\(played)")
    }

    /// The packets of one stream of `path`, as the ffmpeg CLI copies them: their sizes and data
    /// MD5s, in order (framemd5's fifth and sixth columns; side data, such as the AAC priming's
    /// skip count, is not the packet's data).
    func packetHashes(_ path: String, _ stream: String) throws -> [String] {
        let out = try Run.run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:\(stream)", "-c", "copy", "-f", "framemd5", "-"]).out
        return out.split(separator: "\n").filter { !$0.hasPrefix("#") }.map { line in
            line.split(separator: ",").dropFirst(4).prefix(2).map { $0.trimmingCharacters(in: .whitespaces) }.joined(separator: " ")
        }
    }

    /// A rendition's init and segments end to end.
    func joined(_ dir: URL, _ name: String) throws -> String {
        let folder = dir.appendingPathComponent(name)
        let parts = try FileManager.default.contentsOfDirectory(atPath: folder.path).filter { $0.hasPrefix("seg-") }
            .sorted { Int($0.dropFirst(4).dropLast(4))! < Int($1.dropFirst(4).dropLast(4))! }
        let out = fx.scratch("joined-\(name)").appendingPathComponent("all.mp4")
        try Data(try (["init.mp4"] + parts).map { try Data(contentsOf: folder.appendingPathComponent($0)) }.joined()).write(to: out)
        return out.path
    }

    func testCopyRenditionPassesTheSourceThroughUntouched() throws {
        let src = try keyframedSource()
        // Copy alone: a remux, video and audio packets as they were.
        let alone = fx.scratch("ladder-copy").appendingPathComponent("hls")
        try HLSLadder(output: alone.path, ladder: try XCTUnwrap(LadderChoice.parse("copy")), schedule: .feed).write(inputs: [src])
        XCTAssertEqual(try packetHashes(try joined(alone, "copy"), "v:0"), try packetHashes(src, "v:0"))
        XCTAssertEqual(try packetHashes(try joined(alone, "audio"), "a:0"), try packetHashes(src, "a:0"))
        XCTAssertEqual(try HLSLint.lint(directory: alone), [])
        let master = try String(contentsOf: alone.appendingPathComponent("master.m3u8"), encoding: .utf8)
        XCTAssertTrue(master.contains("RESOLUTION=640x360"), master)
        XCTAssertFalse(FileManager.default.fileExists(atPath: alone.appendingPathComponent("360p").path))
        // The poster, made from the source while its packets were copied.
        XCTAssertEqual(try Probe.stream(alone.appendingPathComponent("poster.jpg").path, "v:0", "codec_name,width,height"), "mjpeg,640,360")
        let played = try XCTUnwrap(try Probe.browserPlayback([alone.appendingPathComponent("master.m3u8").path]).first)
        XCTAssertEqual(played["ended"] as? Bool, true, "\(played)")

        // Alongside an encoded rendition, cut at the same instants (keyframes every 2 s, 2 s segments).
        let mixed = fx.scratch("ladder-copy-mixed").appendingPathComponent("hls")
        try HLSLadder(
            output: mixed.path, ladder: try XCTUnwrap(LadderChoice.parse("copy,240")), schedule: SegmentSchedule(length: 2), encoderPreset: "ultrafast"
        )
        .write(inputs: [src])
        XCTAssertEqual(try HLSLint.lint(directory: mixed), [])
        XCTAssertEqual(try packetHashes(try joined(mixed, "copy"), "v:0"), try packetHashes(src, "v:0"))
        XCTAssertEqual(try Probe.stream(mixed.appendingPathComponent("poster.jpg").path, "v:0", "width,height"), "640,360", "the source's picture")

        // The feed profile asks for a 1 s first segment, and the source has no keyframe there: the
        // segments start at its keyframes (every 2 s), and so do the encoded rung's.
        let feed = fx.scratch("ladder-copy-feed").appendingPathComponent("hls")
        try HLSLadder(output: feed.path, ladder: try XCTUnwrap(LadderChoice.parse("copy,240")), schedule: .feed, encoderPreset: "ultrafast")
            .write(inputs: [src])
        XCTAssertEqual(try HLSLint.lint(directory: feed), [])
        for name in ["copy", "240p"] {
            let playlist = try String(contentsOf: feed.appendingPathComponent("\(name).m3u8"), encoding: .utf8)
            XCTAssertEqual(playlist.components(separatedBy: "#EXTINF:2.000000,").count - 1, 4, playlist)
        }

        // A codec HLS does not carry: refused, nothing left (the poster begun beside the copy is
        // stopped before the folder goes).
        let mpeg4 = try fx.clip("ladder-copy-mpeg4.mp4", ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30", "-t", "2", "-c:v", "mpeg4"])
        let refused = fx.scratch("ladder-copy-refused")
        XCTAssertThrowsError(
            try HLSLadder(output: refused.appendingPathComponent("hls").path, ladder: try XCTUnwrap(LadderChoice.parse("copy,240")), schedule: .feed)
                .write(inputs: [mpeg4])
        ) { e in XCTAssertTrue("\(e)".contains("copy needs H.264 or HEVC"), "\(e)") }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: refused.path), [])
    }

    func testLadderChoices() {
        XCTAssertEqual(LadderChoice.parse("auto"), LadderChoice(rungs: nil))
        XCTAssertEqual(LadderChoice.parse("copy,auto"), LadderChoice(rungs: nil, copy: true))
        XCTAssertEqual(LadderChoice.parse("copy"), LadderChoice(rungs: [], copy: true))
        XCTAssertEqual(LadderChoice.parse("720, 360")?.rungs?.map(\.name), ["720p", "360p"])
        XCTAssertEqual(LadderChoice.parse("copy,360")?.copy, true)
        for bad in ["", "720,720", "721", "auto,720", "copy,copy", "huge", "100"] { XCTAssertNil(LadderChoice.parse(bad), bad) }
    }
}

/// What a ladder written by a test made, as its `hls` stage reported it.
struct WrittenLadder {
    var renditions: [String]
    var segments: Int
}

extension HLSLadder {
    /// Runs the ladder's graph (`graph(of:)`) to its end, events also to `events`: a failed or
    /// interrupted run throws the stage's error.
    @discardableResult
    func write(inputs: [String], events: EventSink = EventRecorder()) throws -> WrittenLadder {
        let g = graph(of: inputs)
        let recorder = EventRecorder(forward: events)
        switch try GraphRunner(nodes: g.nodes, edges: g.edges, sink: recorder).run() {
        case .completed: break
        case .interrupted: throw ClipFlowError.interrupted
        case .failed(let stage, let e): throw ClipFlowError(e.kind, "\(stage): \(e.message)")
        }
        for case .result(let fields) in recorder.events.filter({ $0.stage == "hls" }).map(\.kind) {
            let f = Dictionary(fields.map { ($0.key, $0.value) }, uniquingKeysWith: { a, _ in a })
            return WrittenLadder(
                renditions: (f["playlists"]?.string ?? "").split(separator: ",").map(String.init), segments: Int(f["segments"]?.integer ?? 0))
        }
        throw ClipFlowError.failure("the ladder reported no result")
    }
}
