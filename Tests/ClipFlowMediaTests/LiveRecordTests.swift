import ClipFlowCore
import ClipFlowTestSupport
import XCTest

@testable import ClipFlowMedia

/// A camera and a microphone recorded into fragments, fed to the recorder in the order they
/// arrive (the microphone's audio later than the pictures of the same instant, its clock 300 ppm
/// off, its capture times jittered): ten minutes of recording made in seconds, judged by ffprobe
/// and ffmpeg. The same path with the real devices (emulated V4L2 camera, ALSA through
/// PulseAudio) runs in real time in the record tests.
final class LiveRecordTests: XCTestCase {
    let fx = Fixtures.shared

    /// Pictures on the capture clock's 30 fps grid, white on every whole second (the flash the
    /// device's beep goes with), dark otherwise.
    struct Camera {
        let width = 96, height = 64
        let start: Double
        var n: Int64 = 0
        let dark: Data
        let white: Data

        init(start: Double) {
            self.start = start
            let chroma = [UInt8](repeating: 128, count: 2 * (width / 2) * (height / 2))
            dark = Data([UInt8](repeating: 16, count: width * height) + chroma)
            white = Data([UInt8](repeating: 235, count: width * height) + chroma)
        }

        /// Frame `n` is captured at (k + n) / 30 s on the clock, k the first grid slot after `start`.
        func clockTime(_ n: Int64) -> Double { ((start * 30).rounded(.up) + Double(n)) / 30 }

        mutating func next() -> VideoFrame {
            let t = clockTime(n)
            let flash = abs(t - t.rounded()) < 0.001
            let first = clockTime(0)
            let f = VideoFrame(
                width: width, height: height, format: .yuv420p, data: flash ? white : dark, time: t - first, sequence: n, nominalRate: 30,
                clockTime: t)
            n += 1
            return f
        }
    }

    /// Records `seconds` into fragments of `segment` seconds; returns the fragments and the
    /// recorder. The microphone starts at `micStart` on the clock, the camera at 1000.4;
    /// `separate`: its audio comes from a source of its own (the recording starts with its sound).
    func record(
        seconds: Double, segment: Double, ppm: Double, lose: Range<Double>? = nil, micStart: Double = 1000.2, separate: Bool = false,
        name: String
    ) throws -> ([String], FragmentRecorder) {
        var o = RecordOptions(directory: fx.scratch(name).path)
        o.preset = "ultrafast"
        o.segmentSeconds = segment
        let r = try FragmentRecorder(options: o)
        r.expectAudio(sampleRate: 48_000, channels: 2)
        r.audioInputOpen = true
        r.separateAudio = separate
        var mic = LiveAudioAlignerTests.Device(ppm: ppm, start: micStart, lose: lose)
        var cam = Camera(start: 1000.4)
        // Arrival: a picture 5 ms after its capture, audio 15 ms after its last sample.
        var chunk = mic.next()
        let frames = Int64(seconds * 30)
        while cam.n < frames {
            let pictureArrives = cam.clockTime(cam.n) + 0.005
            if chunk.end + 0.015 < pictureArrives {
                try r.append(.audio(chunk.chunk))
                chunk = mic.next()
            } else {
                try r.append(.video(cam.next()))
            }
        }
        // The pictures end; audio goes on until the recorder has what it waits for.
        while r.picturesWaiting > 0 {
            try r.append(.audio(chunk.chunk))
            chunk = mic.next()
        }
        try r.finish()
        return (r.clips.map(\.path), r)
    }

    /// Ten minutes at 300 ppm drift by 180 ms; so does one minute at 3000 ppm, made here (the
    /// aligner's own test runs the full ten minutes at 300 ppm).
    func testTenMinutesOfDriftStayInSync() throws {
        let (clips, r) = try record(seconds: 60, segment: 6, ppm: 3000, name: "live-record-drift")
        XCTAssertEqual(clips.count, 10)
        XCTAssertEqual(r.missingPictures, 0)
        XCTAssertEqual(r.audioOverruns, 0)
        for c in [clips.first!, clips.last!] {
            let v = try AVSync.streamDuration(c, "v:0")
            let a = try AVSync.streamDuration(c, "a:0")
            XCTAssertEqual(v, 6, accuracy: 0.001, c)
            XCTAssertEqual(a, v, accuracy: 1024.0 / 48_000, "\(c): audio as long as the pictures, within one AAC frame")
            XCTAssertEqual(try Probe.decodeErrors(c), "", c)
            let sync = try AVSync.offsets(c)
            XCTAssertGreaterThanOrEqual(sync.count, 5, c)
            // Within one video frame, at the start and at the end of the ten minutes.
            XCTAssertLessThan(sync.map { abs($0.offset) }.max()!, 1.0 / 30, "\(c): \(sync.prefix(3)) ... \(sync.suffix(3))")
            // In fact within a few milliseconds (the first seconds, before the fit has its slope, the most).
            XCTAssertLessThan(sync.map { abs($0.offset) }.max()!, 0.006, "\(c): \(sync)")
        }
        // Joined, the fragments play the microphone's sound continuously: judged against what the
        // device heard from the first picture's instant on.
        let out = fx.scratch("live-record-drift-merged").appendingPathComponent("merged.mp4")
        _ = try Merger(inputs: clips, options: MergeOptions(output: out)).run()
        let source = try heard(from: Camera(start: 1000.4).clockTime(0), seconds: 60, name: "live-record-drift-heard")
        let m = try JoinRepairTests.metrics(out.path, source: source, offset: 0, durations: Array(repeating: 6.0, count: 10))
        XCTAssertEqual(m.joins.count, 9)
        XCTAssertLessThanOrEqual(abs(m.length), 1024, "total length off by \(m.length) samples")
        for j in m.joins {
            XCTAssertLessThanOrEqual(j.d2_ratio, 2, "join at \(j.at) s: second difference \(j.d2_ratio)x the source's (a click)")
            XCTAssertLessThanOrEqual(j.hf_db, 6, "join at \(j.at) s: \(j.hf_db) dB more energy above 3 kHz than the source (a click)")
        }
    }

    /// A microphone whose sound starts half a second after the camera's first picture: the
    /// recording starts with it, the pictures before it left out, so the first fragment has sound
    /// from its first picture (judged by ffmpeg's decode) and its first flash, 0.1 s after the
    /// sound started, has its beep.
    func testRecordingStartsWithTheMicrophonesFirstSound() throws {
        let (clips, r) = try record(seconds: 6, segment: 2, ppm: 300, micStart: 1000.9, separate: true, name: "live-record-late-sound")
        // Pictures at 1000.4 + n / 30: 0 to 14 begin before the sound, 15 with it (or just before,
        // as the capture time measures are late by up to a millisecond).
        XCTAssertTrue((15...16).contains(r.picturesBeforeSound), "\(r.picturesBeforeSound) pictures left out")
        XCTAssertEqual(clips.count, 3)
        let first = try XCTUnwrap(clips.first)
        let samples = try Probe.audioSamples(first)
        let leading = samples.prefix { abs($0) < 0.002 }.count
        XCTAssertLessThan(leading, 48, "\(first): \(leading) silent samples at the start")
        let sync = try AVSync.offsets(first)
        XCTAssertEqual(try AVSync.flashTimes(first).first ?? -1, 0.1, accuracy: 1.5 / 30, first)
        XCTAssertEqual(sync.first?.flash ?? -1, try AVSync.flashTimes(first).first ?? -2, "\(first): the first flash has its beep")
        XCTAssertLessThan(sync.map { abs($0.offset) }.max() ?? 1, 0.003, "\(first): \(sync)")
    }

    /// What the simulated microphone heard from clock time `start` on, as a WAV file.
    func heard(from start: Double, seconds: Double, name: String) throws -> String {
        let n = Int(seconds * 48_000)
        let samples = (0..<n).map { LiveAudioAlignerTests.Device.signal(start + Double($0) / 48_000) }
        return try AVSync.wav(samples, in: fx.scratch(name))
    }

    func testLostAudioIsFilledWithSilenceAndSyncHolds() throws {
        let (clips, r) = try record(seconds: 12, segment: 4, ppm: -300, lose: 1005.3..<1005.55, name: "live-record-lost")
        XCTAssertEqual(clips.count, 3)
        XCTAssertEqual(r.audioOverruns, 1)
        XCTAssertEqual(r.audioLostSeconds, 0.25, accuracy: 0.011)
        for c in clips {
            let v = try AVSync.streamDuration(c, "v:0")
            XCTAssertEqual(try AVSync.streamDuration(c, "a:0"), v, accuracy: 1024.0 / 48_000, c)
            let sync = try AVSync.offsets(c)
            XCTAssertGreaterThanOrEqual(sync.count, 3, c)
            XCTAssertLessThan(sync.map { abs($0.offset) }.max()!, 0.003, "\(c): \(sync)")
        }
    }
}
