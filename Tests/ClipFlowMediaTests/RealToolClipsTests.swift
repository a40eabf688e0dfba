import XCTest
import ClipFlowCore
@testable import ClipFlowMedia
import ClipFlowTestSupport

/// Clips as other tools write them, merged pair by pair and judged by ffprobe/ffmpeg: the ffmpeg
/// CLI cutting MKV (PCM) and WebM (Opus) recordings with `-ss`/`-t` (AAC durations that jitter
/// around 1024), `-c copy` cuts of an MP4 (edit lists that start between keyframes), GStreamer's
/// splitmuxsink with mp4mux, and a phone-style MOV (QuickTime brand, a timecode track,
/// B-frames, a display matrix). Every clip is 320x240 at 30 fps with stereo sound
/// so that any two can be joined by copy where their encoders agree.
final class RealToolClipsTests: XCTestCase {
    let fx = Fixtures.shared

    /// A sound whose joins can be told apart from the source's: a chord of three tones.
    static let chord = "aevalsrc=0.2*sin(2*PI*220*t)+0.15*sin(2*PI*277.18*t)+0.1*sin(2*PI*329.63*t):s=48000:c=stereo"

    /// Three `-ss`/`-t` cuts of a 12 s recording in `container` with `audio` (codec options),
    /// each re-encoded to H.264/AAC MP4 by the ffmpeg CLI, as a user cutting a screen recording
    /// or an OBS capture does.
    func cuts(of container: String, audio: [String], video: [String] = Fixtures.x264, rate: Int = 48000) throws -> [String] {
        let source = try fx.clip(
            "tool-master-\(rate).\(container)",
            [
                "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30", "-f", "lavfi", "-i", Self.chord.replacingOccurrences(of: "s=48000", with: "s=\(rate)"),
                "-t", "12"
            ] + video + audio)
        return try (0..<3).map { k in
            try fx.clip(
                "tool-cut-\(rate)-\(container)-\(k).mp4",
                ["-ss", String(format: "%.2f", 2.37 + 2.54 * Double(k)), "-i", source, "-t", "2.54"] + Fixtures.x264 + ["-c:a", "aac"])
        }
    }

    static let vp9 = ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-cpu-used", "8", "-b:v", "300k"]

    /// `-c copy` cuts of an MP4 (keyframes every second): two at keyframes, each with the edit
    /// list the ffmpeg CLI writes, and one between keyframes, which starts at the keyframe before
    /// its cut and whose edit list hides the pictures before the cut.
    func copyCuts() throws -> (atKeyframes: [String], betweenKeyframes: String) {
        let source = try fx.clip(
            "tool-master-copy.mp4",
            ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30", "-f", "lavfi", "-i", Self.chord, "-t", "12"] + Fixtures.x264 + ["-c:a", "aac"])
        let cuts = try [1.0, 4.0, 6.37].map { t in
            try fx.clip("tool-copycut-\(t).mp4", ["-ss", String(t), "-i", source, "-t", "2.5", "-c", "copy"])
        }
        return (Array(cuts[0..<2]), cuts[2])
    }

    /// GStreamer: a test picture and a tone, x264enc and avenc_aac, split into 1 s MP4
    /// fragments by splitmuxsink (mp4mux), as a GStreamer recorder on a kiosk writes them
    /// (committed under fixtures/gstreamer, which says how they were made).
    func gstreamerFragments() -> [String] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        return (0..<3).map { root.appendingPathComponent(String(format: "fixtures/gstreamer/splitmux%02d.mp4", $0)).path }
    }

    /// A phone-style MOV: QuickTime brand, a timecode track beside the picture and the sound,
    /// B-frames, portrait by its display matrix, 44.1 kHz (encoded, then put in a MOV as a phone
    /// writes it).
    func phoneClips() throws -> [String] {
        try (0..<3).map { k in
            let encoded = try fx.clip(
                "tool-phone-\(k).mp4",
                [
                    "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30,trim=start_frame=\(75 * k):end_frame=\(75 * k + 75),setpts=PTS-STARTPTS",
                    "-f", "lavfi", "-i", Self.chord.replacingOccurrences(of: "s=48000", with: "s=44100") + ":d=2.5"
                ] + Fixtures.x264 + ["-c:a", "aac"])
            return try fx.clip(
                "tool-phone-\(k).mov",
                ["-i", encoded, "-map", "0:v", "-map", "0:a", "-c", "copy", "-metadata:s:v:0", "rotate=90", "-timecode", "01:00:00:00", "-f", "mov"])
        }
    }

    /// Every tool's clips, by name.
    func corpus() throws -> [(String, [String])] {
        [
            ("ffmpeg -ss/-t from MKV+PCM 48 kHz", try cuts(of: "mkv", audio: ["-c:a", "pcm_s16le"])),
            ("ffmpeg -ss/-t from MKV+PCM 44.1 kHz", try cuts(of: "mkv", audio: ["-c:a", "pcm_s16le"], rate: 44100)),
            ("ffmpeg -ss/-t from WebM+Opus", try cuts(of: "webm", audio: ["-c:a", "libopus"], video: Self.vp9)),
            ("GStreamer splitmuxsink", gstreamerFragments()),
            ("phone-style MOV", try phoneClips())
        ]
    }

    /// A stream's start and duration in seconds (ffprobe).
    func times(_ path: String, _ stream: String) throws -> (start: Double, duration: Double) {
        let r = try Run.run(["ffprobe", "-v", "error", "-select_streams", stream, "-show_entries", "stream=start_time,duration", "-of", "json", path])
        let json = try JSONSerialization.jsonObject(with: r.stdout) as? [String: Any]
        let s = (json?["streams"] as? [[String: Any]])?.first ?? [:]
        return (Double(s["start_time"] as? String ?? "") ?? .nan, Double(s["duration"] as? String ?? "") ?? .nan)
    }

    /// Where a clip's pictures end, in seconds after its first: the last decoded picture's time
    /// plus its duration (ffmpeg's decode), which a `-c copy` cut's last picture can place past
    /// the sum of the frame durations that ffprobe reads as the stream's duration.
    func picturesEnd(_ path: String) throws -> Double {
        let r = try Run.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "frame=pts_time,pkt_duration_time", "-of", "csv=p=0", path])
        let frames = r.out.split(separator: "\n").map { $0.split(separator: ",").compactMap { Double($0.trimmingCharacters(in: .whitespaces)) } }.filter {
            $0.count == 2
        }
        guard let first = frames.map({ $0[0] }).min(), let end = frames.map({ $0[0] + $0[1] }).max() else { return .nan }
        return end - first
    }

    /// Merges `inputs` as `clipflow merge` does (`files -> merge.probe -> merge`: each clip probed
    /// once, its probe carried to the merge) and judges the result: ffmpeg decodes it without an error; every picture
    /// of the clips is there; each clip's sound follows its own pictures, so the sound ends where
    /// the last clip's ends, placed after the pictures of the clips before it (to within one AAC
    /// frame), and decodes to as many samples as it spans.
    /// `timing: false` checks the decode and the pictures only.
    func checkJoin(_ inputs: [String], conform: Bool = false, timing: Bool = true, pictureSlack: Int = 0, label: String) throws {
        let out = fx.scratch("tool-pair").appendingPathComponent("merged.mp4")
        let merge = MergeStage.graph(id: "merge") { MergeStage(id: "merge", output: out.path, conform: conform) }
        let outcome = try GraphRunner(
            nodes: [StageNode("files") { FilesStage(id: "files", paths: inputs, glob: nil) }] + merge.nodes,
            edges: merge.entries.map { Edge(from: "files", to: $0) } + merge.edges, sink: EventRecorder()
        ).run()
        guard case .completed = outcome else { return XCTFail("\(label): \(outcome)") }
        XCTAssertEqual(try Probe.decodeErrors(out.path, keepTimestamps: true), "", label)
        let pictures = try inputs.reduce(0) { $0 + (try Probe.videoFrames($1)) }
        XCTAssertEqual(Double(try Probe.videoFrames(out.path)), Double(pictures), accuracy: Double(pictureSlack), "\(label): pictures")
        guard timing else { return }
        var expectedEnd = 0.0
        for (i, clip) in inputs.enumerated() {
            let v = try times(clip, "v:0")
            if i < inputs.count - 1 {
                expectedEnd += try picturesEnd(clip)
            } else {
                let a = try times(clip, "a:0")
                expectedEnd += a.start + a.duration - v.start
            }
        }
        let a = try times(out.path, "a:0")
        let rate = Double(try Probe.stream(out.path, "a:0", "sample_rate")) ?? 0
        XCTAssertEqual(a.start + a.duration, expectedEnd, accuracy: 1024 / rate, "\(label): where the sound ends")
        XCTAssertEqual(Double(try Probe.audioSamples(out.path).count), a.duration * rate, accuracy: 1024, "\(label): decoded samples")
    }

    /// Within each tool's set, every pair and the whole set in both orders join by copy.
    func testEveryToolsClipsJoinInEveryPair() throws {
        for (tool, clips) in try corpus() {
            var sets = [clips, clips.reversed()]
            for a in clips.indices { for b in clips.indices where a < b { sets.append([clips[a], clips[b]]) } }
            for inputs in sets {
                try checkJoin(inputs, label: "\(tool): \(inputs.map { ($0 as NSString).lastPathComponent }.joined(separator: " + "))")
            }
        }
    }

    /// `-c copy` cuts at keyframes join by copy with every picture, each clip lasting as its edit
    /// list and its last picture say (the cut drops the B-frames before that picture, so it ends
    /// two pictures' time after the sum of its frame durations). A cut between keyframes hides pictures by
    /// its edit list, which a join by copy would show: plain merge refuses it naming the clip and
    /// saying what to do, and `--conform` re-encodes that clip alone and copies the others.
    func testCopyCutsJoinAndThoseBetweenKeyframesAreReencodedByConform() throws {
        let (atKeyframes, between) = try copyCuts()
        try checkJoin(atKeyframes, label: "copy cuts at keyframes")
        try checkJoin(atKeyframes.reversed(), label: "copy cuts at keyframes, reversed")
        let out = fx.scratch("tool-copycut").appendingPathComponent("merged.mp4")
        XCTAssertThrowsError(try Merger(inputs: atKeyframes + [between], options: MergeOptions(output: out)).run()) { e in
            XCTAssertTrue("\(e)".hasPrefix("input '\(between)': its edit list hides its first"), "\(e)")
            XCTAssertTrue("\(e)".contains("; cut it on a keyframe, or re-encode it; --conform would re-encode clip 3 (\(between))"), "\(e)")
        }
        let plan = try ConformPlan.make(atKeyframes + [between])
        XCTAssertEqual(plan.clips.map(\.action), [.copy, .copy, .reencode])
        // The re-encode may make one picture more or fewer at the clip's end (its frame rate is
        // kept by timestamps).
        try checkJoin(atKeyframes + [between], conform: true, timing: false, pictureSlack: 1, label: "copy cuts with --conform")
    }

    /// The AAC durations of ffmpeg's cuts of MKV recordings jitter (the point of this corpus):
    /// checked here with ffprobe, so the corpus keeps testing what it is meant to.
    func testTheFfmpegCutsCarryJitteredAACDurations() throws {
        for rate in [44100, 48000] {
            let clip = try cuts(of: "mkv", audio: ["-c:a", "pcm_s16le"], rate: rate)[0]
            let r = try Run.run(["ffprobe", "-v", "error", "-select_streams", "a:0", "-show_entries", "packet=duration", "-of", "csv=p=0", clip])
            let durations = Set(r.out.split(separator: "\n").compactMap { Int($0.trimmingCharacters(in: .whitespaces).trimmingCharacters(in: [","])) })
            XCTAssertGreaterThan(durations.count, 2, "\(clip): \(durations.sorted())")
        }
    }
}
