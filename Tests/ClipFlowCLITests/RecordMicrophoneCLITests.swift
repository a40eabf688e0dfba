import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow record --source v4l2 --audio PCM`: the emulated camera (flashing on every whole
/// second of CLOCK_MONOTONIC) and a microphone through the real alsa-lib, ALSA's pulse plugin and
/// a private PulseAudio whose pipe source is fed by the test, beeping at the same whole seconds,
/// its clock off by a set number of ppm. Real time. Judged by ffprobe, ffmpeg and join-metrics.
final class RecordMicrophoneCLITests: XCTestCase {
    let fx = Fixtures.shared
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    /// Records `seconds` in fragments of `segment` seconds with a microphone `ppm` off; `gap`
    /// (seconds after the start, 250 ms) makes it deliver nothing for a while.
    func record(_ name: String, seconds: Int, segment: Int, ppm: Double, gapAt: Double? = nil) throws -> (
        dir: String, stderr: String, feeder: MicrophoneFeeder, gapStart: Double?
    ) {
        let server = try PulseAudioServer.start()
        addTeardownBlock { server.stop() }
        let feeder = MicrophoneFeeder(server: server, ppm: ppm)
        try feeder.start()
        addTeardownBlock { feeder.stop() }
        let gapStart = gapAt.map { MicrophoneFeeder.now() + $0 }
        if let gapStart { feeder.gap(at: gapStart, milliseconds: 250) }
        let dir = fx.scratch(name).path
        var env = server.environment
        env["CLIPFLOW_V4L2_EMULATE"] = "flash"
        let r = try Run.run(
            [
                binary, "record", "--source", "v4l2", "--audio", PulseAudioServer.pipePCM, "-o", dir, "--size", "320x240",
                "--duration", "\(seconds)", "--segment", "\(segment)", "--encoder-preset", "ultrafast"
            ], env: env, check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        return (dir, r.stderr, feeder, gapStart)
    }

    func clips(_ dir: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".mp4") }.sorted().map { "\(dir)/\($0)" }
    }

    /// Both streams in every fragment, as long as each other within one AAC frame; every flash
    /// with its beep within one video frame.
    func checkFragments(_ files: [String], count: Int, segment: Double) throws {
        XCTAssertEqual(files.count, count)
        for c in files {
            XCTAssertEqual(try Probe.stream(c, "a:0", "codec_name"), "aac", c)
            XCTAssertEqual(try Probe.decodeErrors(c), "", c)
            let v = try AVSync.streamDuration(c, "v:0")
            XCTAssertEqual(v, segment, accuracy: 0.034, c)
            XCTAssertEqual(try AVSync.streamDuration(c, "a:0"), v, accuracy: 1024.0 / 48_000, "\(c): audio as long as the pictures")
            let sync = try AVSync.offsets(c)
            XCTAssertGreaterThanOrEqual(sync.count, Int(segment) - 1, c)
            XCTAssertLessThan(sync.map { abs($0.offset) }.max() ?? 1, 1.0 / 30, "\(c): \(sync)")
            print(
                String(
                    format: "%@: flash to beep %@ ms", (c as NSString).lastPathComponent,
                    sync.map { String(format: "%+.1f", $0.offset * 1000) }.joined(separator: " ")))
        }
    }

    /// 20 s at 300 ppm in 5 s fragments, the microphone silent for 250 ms in the second fragment:
    /// reported, filled with silence of that length, sync kept; merged, the fragments' sound is
    /// continuous at the joins (join-metrics against what the microphone was fed).
    func testCameraAndMicrophoneStayInSyncThroughALossOfAudio() throws {
        let run = try record("mic-300ppm", seconds: 20, segment: 5, ppm: 300, gapAt: 8.5)
        XCTAssertTrue(run.stderr.contains("audio lost 1 time"), run.stderr)
        let files = try clips(run.dir)
        try checkFragments(files, count: 4, segment: 5)
        let merged = fx.scratch("mic-300ppm-merged").appendingPathComponent("merged.mp4").path
        let m = try Run.run([binary, "merge", "-o", merged, "--quiet"] + files, check: false)
        XCTAssertEqual(m.status, 0, m.stderr)
        // Where the recording started on the clock: the silence stands where the feeder wrote nothing.
        let samples = try Probe.audioSamples(merged)
        let silence = try XCTUnwrap(Self.firstSilence(samples, rate: 48_000, longerThan: 0.15), "the lost audio is silence in the file")
        let start = run.gapStart! - silence
        let fed = try heard(run.feeder, from: start, seconds: 20, gap: run.gapStart!..<(run.gapStart! + 0.25), name: "mic-300ppm-heard")
        let metrics = try Run.run([
            Self.root.appendingPathComponent("scripts/join-metrics").path, merged, fed, "--offset", "0", "--durations", "5,5,5,5"
        ])
        let json = try XCTUnwrap(JSONSerialization.jsonObject(with: metrics.stdout) as? [String: Any])
        let joins = try XCTUnwrap(json["joins"] as? [[String: Any]])
        XCTAssertEqual(joins.count, 3)
        for j in joins {
            let at = j["at"] as? Double ?? -1
            XCTAssertLessThanOrEqual(j["d2_ratio"] as? Double ?? 99, 2, "join at \(at) s: a click (\(j))")
            XCTAssertLessThanOrEqual(j["hf_db"] as? Double ?? 99, 6, "join at \(at) s: a click (\(j))")
            XCTAssertLessThanOrEqual(abs(j["lag"] as? Int ?? 9999), 1024, "join at \(at) s: off what the microphone heard (\(j))")
        }
    }

    /// Ten minutes at 300 ppm drift by 180 ms; so do 30 s at 6000 ppm, recorded here: the flashes
    /// and beeps meet within a video frame in the first fragment and in the last.
    /// `CLIPFLOW_SYNC_SECONDS=600` records that long at 300 ppm instead, in 60 s fragments (real time).
    func testTenMinutesOfDriftStayInSync() throws {
        if let long = ProcessInfo.processInfo.environment["CLIPFLOW_SYNC_SECONDS"].flatMap(Int.init), long >= 60 {
            let run = try record("mic-300ppm-long", seconds: long, segment: 60, ppm: 300)
            XCTAssertFalse(run.stderr.contains("audio lost"), run.stderr)
            try checkFragments(try clips(run.dir), count: long / 60, segment: 60)
            return
        }
        let run = try record("mic-6000ppm", seconds: 30, segment: 10, ppm: 6000)
        XCTAssertFalse(run.stderr.contains("audio lost"), run.stderr)
        try checkFragments(try clips(run.dir), count: 3, segment: 10)
    }

    /// Where the first stretch of silence longer than `longerThan` seconds starts (seconds).
    static func firstSilence(_ s: [Float], rate: Int, longerThan: Double) -> Double? {
        var run = 0
        for (i, v) in s.enumerated() {
            run = abs(v) < 0.002 ? run + 1 : 0
            if Double(run) > longerThan * Double(rate) { return Double(i + 1 - run) / Double(rate) }
        }
        return nil
    }

    /// What `feeder` wrote, as heard on the clock from `start` for `seconds`, as a WAV file.
    func heard(_ feeder: MicrophoneFeeder, from start: Double, seconds: Double, gap: Range<Double>, name: String) throws -> String {
        let beeps = feeder.beeps.map(\.frame)
        let n = Int(seconds * 48_000)
        var samples = [Float](repeating: 0, count: n)
        for i in 0..<n {
            let t = start + Double(i) / 48_000
            if gap.contains(t) { continue }
            let k = (t - feeder.startTime) * feeder.rate
            let inBeep = beeps.contains { k >= Double($0) && k < Double($0 + Int64(MicrophoneFeeder.beepFrames)) }
            let phase = k / Double(MicrophoneFeeder.labelledRate)
            // As the feeder writes it: 16-bit samples.
            let v = inBeep ? 0.5 * sin(2 * .pi * 1000 * phase) : 0.03 * sin(2 * .pi * 440 * phase)
            samples[i] = Float(Int16(v * 32767)) / 32767
        }
        return try AVSync.wav(samples, in: fx.scratch(name))
    }
}
