import ClipFlowTestSupport
import Foundation
import Synchronization
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

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
    /// (seconds after the start, 250 ms) makes it deliver nothing for a while. With
    /// `ffmpegBeside`, the ffmpeg CLI records the same microphone (`-f alsa`, through the same
    /// pulse plugin) into that file at the same time, beside a real-time test source
    /// (`-re` lavfi testsrc2) of the same size and rate, with the same encoders.
    func record(_ name: String, seconds: Int, segment: Int, ppm: Double, gapAt: Double? = nil, ffmpegBeside: String? = nil) throws -> (
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
        let ffmpeg = try ffmpegBeside.map { out in
            try BackgroundRun(
                [
                    "/usr/bin/env", "ffmpeg", "-nostdin", "-v", "error", "-y", "-re", "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30", "-f",
                    "alsa", "-ac", "2", "-ar", "48000", "-i", PulseAudioServer.pipePCM, "-t", "\(seconds)", "-map", "0:v", "-map", "1:a", "-c:v",
                    "libx264", "-preset", "ultrafast", "-crf", "23", "-bf", "0", "-g", "60", "-pix_fmt", "yuv420p", "-c:a", "aac", "-b:a",
                    "128k", out
                ], env: server.environment)
        }
        let r = try Run.run(
            [
                binary, "record", "--source", "v4l2", "--audio", PulseAudioServer.pipePCM, "-o", dir, "--size", "320x240",
                "--duration", "\(seconds)", "--segment", "\(segment)", "--encoder-preset", "ultrafast"
            ], env: env, check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        if let ffmpeg {
            let status = ffmpeg.wait(until: Date().addingTimeInterval(60))
            if status == nil { ffmpeg.signal(SIGKILL) }
            XCTAssertEqual(status, 0, "ffmpeg: \(ffmpeg.stderr)")
        }
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
        // The source is what the feeder wrote, placed on the clock as written; a feeder that is
        // late on a loaded machine makes the sound server play its next samples that much later
        // (seen: 7 and 15 ms, the lags then measured on one side of a join), so the source
        // windows beside a join can miss a beep's edge the output has there, which raises the
        // second-difference ratio to about 2 with no click (the broadband energy stays far
        // under its limit). The ffmpeg CLI's concat of cut fragments, whose joins click,
        // measures 6x (benchmarks/README.md); the broadband check below stays at 6 dB.
        for j in joins {
            let at = j["at"] as? Double ?? -1
            XCTAssertLessThanOrEqual(j["d2_ratio"] as? Double ?? 99, 3, "join at \(at) s: a click (\(j))")
            XCTAssertLessThanOrEqual(j["hf_db"] as? Double ?? 99, 6, "join at \(at) s: a click (\(j))")
            XCTAssertLessThanOrEqual(abs(j["lag"] as? Int ?? 9999), 1024, "join at \(at) s: off what the microphone heard (\(j))")
        }
    }

    /// Ten minutes at 300 ppm drift by 180 ms; so do 30 s at 6000 ppm, recorded here: the flashes
    /// and beeps meet within a video frame in the first fragment and in the last.
    /// `CLIPFLOW_SYNC_SECONDS=600` records that long instead, in 60 s fragments (real time), the
    /// microphone `CLIPFLOW_SYNC_PPM` off (default 300), and checks it as `checkLongRecording`
    /// does; `CLIPFLOW_SYNC_FFMPEG=1` has the ffmpeg CLI record the same microphone beside it.
    func testTenMinutesOfDriftStayInSync() throws {
        let env = ProcessInfo.processInfo.environment
        if let long = env["CLIPFLOW_SYNC_SECONDS"].flatMap(Int.init), long >= 60 {
            let ppm = env["CLIPFLOW_SYNC_PPM"].flatMap(Double.init) ?? 300
            let ffmpeg = env["CLIPFLOW_SYNC_FFMPEG"] == "1" ? fx.scratch("mic-drift-ffmpeg").appendingPathComponent("ffmpeg.mp4").path : nil
            print(String(format: "drift: %d s in 60 s fragments, the microphone %+.0f ppm off", long, ppm))
            let run = try record("mic-drift-long", seconds: long, segment: 60, ppm: ppm, ffmpegBeside: ffmpeg)
            XCTAssertFalse(run.stderr.contains("audio lost"), run.stderr)
            let files = try clips(run.dir)
            try checkFragments(files, count: long / 60, segment: 60)
            try checkLongRecording(files)
            if let ffmpeg { try reportDrift(ffmpeg, "ffmpeg CLI (one file)") }
            return
        }
        let run = try record("mic-6000ppm", seconds: 30, segment: 10, ppm: 6000)
        XCTAssertFalse(run.stderr.contains("audio lost"), run.stderr)
        try checkFragments(try clips(run.dir), count: 3, segment: 10)
    }

    /// Records 5 s from `source` (testpattern, or v4l2: the emulated camera flashing at whole
    /// seconds) with the pipe microphone, in 2 s fragments; returns the first fragment. With
    /// `soundLate`, the microphone delivers nothing from before the recording opens it until
    /// 0.1 s before the first whole second at least half a second after the pictures started (a
    /// sound server or driver slow to start): its sound starts 0.4 to 1.4 s after the first
    /// picture, 0.1 s before a flash, and a notice says the pictures before it were left out.
    func recordFirstFragment(_ name: String, source: String, soundLate: Bool) throws -> String {
        let server = try PulseAudioServer.start()
        addTeardownBlock { server.stop() }
        let feeder = MicrophoneFeeder(server: server)
        try feeder.start()
        addTeardownBlock { feeder.stop() }
        // The feeder beeps from half a second after its start: every flash of the recording has one.
        Thread.sleep(forTimeInterval: 1)
        if soundLate { feeder.gap(at: MicrophoneFeeder.now(), milliseconds: 60_000) }
        let dir = fx.scratch(name).path
        var env = server.environment
        env["CLIPFLOW_V4L2_EMULATE"] = "flash"
        let rec = try BackgroundRun(
            [
                binary, "record", "--source", source, "--audio", PulseAudioServer.pipePCM, "-o", dir, "--size", "320x240",
                "--duration", "5", "--segment", "2", "--encoder-preset", "ultrafast"
            ], env: env)
        // Told when the camera is set up (v4l2: its first picture follows within tens of
        // milliseconds) or the test pattern's first picture is made.
        let marker = source == "v4l2" ? "camera /dev/video0" : "test pattern"
        XCTAssertTrue(rec.waitFor(marker, seconds: 20), rec.stderr)
        if soundLate { feeder.endGaps(at: (MicrophoneFeeder.now() + 0.5).rounded(.up) - 0.1) }
        let status = rec.wait(until: Date().addingTimeInterval(30))
        if status == nil { rec.signal(SIGKILL) }
        XCTAssertEqual(status, 0, rec.stderr)
        if soundLate { XCTAssertTrue(rec.stderr.contains("the recording starts with the first sound of its audio input"), rec.stderr) }
        let files = try clips(dir)
        XCTAssertGreaterThanOrEqual(files.count, 2, rec.stderr)
        let first = try XCTUnwrap(files.first, rec.stderr)
        XCTAssertEqual(try AVSync.streamDuration(first, "v:0"), 2, accuracy: 0.034, first)
        return first
    }

    /// The microphone's sound (the feeder's tone never stops) from the first decoded sample of
    /// `clip` on: no stretch of silence (1 ms below -54 dBFS) starts in its first 100 ms.
    func checkSoundFromTheStart(_ clip: String, _ what: String) throws {
        let samples = try Probe.audioSamples(clip)
        XCTAssertGreaterThan(samples.count, 4800, "\(what): \(clip)")
        let silence = Self.firstSilence(samples, rate: 48_000, longerThan: 0.001)
        let leading = samples.prefix { abs($0) < 0.002 }.count
        print(
            String(
                format: "%@: %.1f ms of silence at the start; the first stretch of silence at %@", what, Double(leading) / 48,
                silence.map { String(format: "%.3f s", $0) } ?? "none"))
        if let silence { XCTAssertGreaterThanOrEqual(silence, 0.1, "\(what): silence in the first 100 ms, from \(silence) s (\(clip))") }
    }

    /// `record --source v4l2 --audio PCM`, from a microphone on time and from one whose sound
    /// starts late: the first fragment has the microphone's sound from its first picture, and
    /// every flash in it, the first one too, has its beep within a frame. The late one's
    /// recording starts with its sound: its first flash is the one the sound started 0.1 s before.
    func testRecordingFromTheCameraHasSoundFromItsFirstPicture() throws {
        for late in [false, true] {
            let what = late ? "camera, sound late" : "camera"
            let clip = try recordFirstFragment("mic-from-start-v4l2\(late ? "-late" : "")", source: "v4l2", soundLate: late)
            try checkSoundFromTheStart(clip, what)
            let flashes = try AVSync.flashTimes(clip)
            let sync = try AVSync.offsets(clip)
            print("\(what): flashes at \(flashes) s, flash to beep \(sync.map { String(format: "%+.1f", $0.offset * 1000) }) ms")
            XCTAssertGreaterThanOrEqual(flashes.count, 1, "\(what): \(clip)")
            XCTAssertEqual(sync.map(\.flash), flashes, "\(what): a flash without its beep (\(clip))")
            XCTAssertLessThan(sync.map { abs($0.offset) }.max() ?? 1, 1.0 / 30, "\(what): \(sync) (\(clip))")
            if late { XCTAssertLessThan(flashes.first ?? 9, 0.1 + 1.5 / 30, "\(what): the recording starts with the sound (\(clip))") }
        }
    }

    /// `record --source testpattern --audio PCM`, from a microphone on time and from one whose
    /// sound starts late: the first fragment has the microphone's sound from its first picture.
    func testRecordingFromTheTestPatternHasSoundFromItsFirstPicture() throws {
        for late in [false, true] {
            let clip = try recordFirstFragment("mic-from-start-testpattern\(late ? "-late" : "")", source: "testpattern", soundLate: late)
            try checkSoundFromTheStart(clip, late ? "test pattern, sound late" : "test pattern")
        }
    }

    /// A long recording's fragments, printed on lines starting `drift:`: per fragment the flash to
    /// beep offsets at its start and end, the worst, and its audio's length against its pictures';
    /// merged (clipflow merge), the longest silence at every join and the offsets at the start
    /// and the end. Each fragment's audio is as long as its pictures within one AAC frame, the
    /// last flash's beep within one AAC frame of it, and no join has silence (the microphone's
    /// tone never stops).
    func checkLongRecording(_ files: [String]) throws {
        let aacFrame = 1024.0 / 48_000
        var joins: [Double] = []
        var at = 0.0
        var worst = 0.0
        for (i, c) in files.enumerated() {
            let v = try AVSync.streamDuration(c, "v:0")
            let a = try AVSync.streamDuration(c, "a:0")
            let sync = try AVSync.offsets(c)
            let w = sync.map { abs($0.offset) }.max() ?? .nan
            worst = max(worst, w)
            print(
                String(
                    format: "drift: fragment %2d: flash to beep %+5.1f ms at its start, %+5.1f ms at its end, worst %4.1f ms (%d flashes); "
                        + "audio - video %+5.1f ms", i + 1, (sync.first?.offset ?? .nan) * 1000, (sync.last?.offset ?? .nan) * 1000, w * 1000,
                    sync.count, (a - v) * 1000))
            XCTAssertEqual(a, v, accuracy: aacFrame, "\(c): audio as long as the pictures within one AAC frame")
            at += v
            if i < files.count - 1 { joins.append(at) }
        }
        let last = try XCTUnwrap(try AVSync.offsets(try XCTUnwrap(files.last)).last, "no flash with its beep in the last fragment")
        XCTAssertLessThan(abs(last.offset), aacFrame, "the offset at the end")
        let merged = fx.scratch("mic-drift-merged").appendingPathComponent("merged.mp4").path
        let m = try Run.run([binary, "merge", "-o", merged, "--quiet"] + files, check: false)
        XCTAssertEqual(m.status, 0, m.stderr)
        let samples = try Probe.audioSamples(merged)
        var longestAtJoins = 0.0
        for (i, j) in joins.enumerated() {
            let from = max(0, Int((j - 0.1) * 48_000)), to = min(samples.count, Int((j + 0.1) * 48_000))
            var run = 0, longest = 0
            for k in from..<max(from, to) {
                run = abs(samples[k]) < 0.002 ? run + 1 : 0
                longest = max(longest, run)
            }
            longestAtJoins = max(longestAtJoins, Double(longest) / 48)
            print(String(format: "drift: join %d at %.3f s: longest silence within 100 ms of it %.2f ms", i + 1, j, Double(longest) / 48))
            XCTAssertLessThan(longest, 48, "join \(i + 1) at \(j) s: silence")
        }
        let v = try AVSync.streamDuration(merged, "v:0")
        let a = try AVSync.streamDuration(merged, "a:0")
        let sync = try AVSync.offsets(merged)
        print(
            String(
                format:
                    "drift: merged: %.3f s, audio - video %+.1f ms; flash to beep %+.1f ms at the start, %+.1f ms at the end, worst %.1f ms (%d flashes); longest silence at a join %.2f ms",
                v, (a - v) * 1000, (sync.first?.offset ?? .nan) * 1000, (sync.last?.offset ?? .nan) * 1000,
                (sync.map { abs($0.offset) }.max() ?? .nan) * 1000, sync.count, longestAtJoins))
        print(String(format: "drift: worst flash to beep offset over every fragment %.1f ms", worst * 1000))
        try reportDrift(merged, "clipflow (merged)")
    }

    /// Prints how far the sound of `file` drifts against its pictures from its first beep to its
    /// last: beeps are due one clock second apart, and the pictures run on the clock, so any
    /// difference from that in the file is the sound moving against the pictures.
    func reportDrift(_ file: String, _ what: String) throws {
        let beeps = try AVSync.beepOnsets(file)
        guard let first = beeps.first, let last = beeps.last, beeps.count > 1 else { return XCTFail("\(what): no beeps in \(file)") }
        let spacings = zip(beeps, beeps.dropFirst()).map { $1 - $0 }
        // Clock seconds between the first beep and the last (a beep not found is a spacing of two).
        let drift = (last - first) - spacings.reduce(0) { $0 + $1.rounded() }
        print(
            String(
                format: "drift: %@: %d beeps over %.1f s, spaced %.4f to %.4f s: the sound moves %+.1f ms against the pictures from the first to the last",
                what, beeps.count, last - first, spacings.min() ?? .nan, spacings.max() ?? .nan, drift * 1000))
    }

    /// How a recording whose microphone broke ended: its exit status (nil: it still ran at the
    /// bound and was killed), what it printed, its folder, and the seconds from the recording's
    /// end (or the SIGTERM) to its exit.
    struct BrokenMicrophoneRun {
        var status: Int32?
        var stderr: String
        var dir: String
        var took: Double
    }

    /// How the microphone breaks mid-recording.
    enum Breakage {
        /// PulseAudio SIGKILLed under the pipe microphone (`PulseAudioServer.pipePCM`).
        case serverKilled
        /// `PulseAudioServer.stuckPCM`: its feeder stops, the FIFO stays open and empty, and the
        /// read in progress never returns.
        case readNeverReturns
    }

    /// Records `seconds` (0: until stopped) in 2 s fragments from a microphone that breaks
    /// `breakAt` seconds after it opened; with `sigtermAt`, sends SIGTERM that many seconds after
    /// it opened. Waits for the exit at most `bound` seconds after the recording's end (`seconds`)
    /// or the SIGTERM, then SIGKILLs it.
    func recordBreakingTheMicrophone(
        _ name: String, _ breakage: Breakage, seconds: Int, breakAt: Double, sigtermAt: Double? = nil, bound: Double
    ) throws -> BrokenMicrophoneRun {
        let server = try PulseAudioServer.start()
        addTeardownBlock { server.stop() }
        let pcm: String
        var feeder: MicrophoneFeeder?
        // The stuck microphone's FIFO is held open for writing until the end of the test, so that
        // its reads wait rather than find the end of the file.
        var holder: Int32 = -1
        switch breakage {
        case .serverKilled:
            pcm = PulseAudioServer.pipePCM
            let f = MicrophoneFeeder(server: server)
            try f.start()
            addTeardownBlock { f.stop() }
            feeder = f
        case .readNeverReturns:
            pcm = PulseAudioServer.stuckPCM
            holder = open(server.stuckFIFOPath, O_RDWR | O_CLOEXEC)
            XCTAssertGreaterThanOrEqual(holder, 0, "cannot open \(server.stuckFIFOPath)")
            let fd = holder
            addTeardownBlock { close(fd) }
        }
        let dir = fx.scratch(name).path
        var env = server.environment
        env["CLIPFLOW_V4L2_EMULATE"] = "flash"
        let rec = try BackgroundRun(
            [
                binary, "record", "--source", "v4l2", "--audio", pcm, "-o", dir, "--size", "320x240",
                "--duration", "\(seconds)", "--segment", "2", "--encoder-preset", "ultrafast"
            ], env: env)
        XCTAssertTrue(rec.waitFor("microphone \(pcm):", seconds: 20), "the microphone did not open: \(rec.stderr)")
        let opened = Date()
        if breakage == .readNeverReturns {
            let f = MicrophoneFeeder(fifo: server.stuckFIFOPath)
            try f.start()
            addTeardownBlock { f.stop() }
            feeder = f
        }
        Thread.sleep(until: opened.addingTimeInterval(breakAt))
        feeder?.stop()
        if breakage == .serverKilled { server.kill() }
        var from = opened.addingTimeInterval(Double(seconds))
        if let sigtermAt {
            Thread.sleep(until: opened.addingTimeInterval(sigtermAt))
            rec.signal(SIGTERM)
            from = Date()
        }
        let status = rec.wait(until: from.addingTimeInterval(bound))
        let took = Date().timeIntervalSince(from)
        if status == nil {
            rec.signal(SIGKILL)
            _ = rec.wait(until: Date().addingTimeInterval(10))
        }
        return BrokenMicrophoneRun(status: status, stderr: rec.stderr, dir: dir, took: took)
    }

    /// At least one fragment, each a complete MP4 that ffprobe reads and ffmpeg decodes without error.
    func checkKeptClips(_ dir: String, _ what: String) throws {
        let files = try clips(dir)
        XCTAssertFalse(files.isEmpty, "\(what): no clip kept")
        for c in files {
            XCTAssertEqual(try Probe.stream(c, "v:0", "codec_name"), "h264", "\(what): \(c)")
            XCTAssertEqual(try Probe.decodeErrors(c), "", "\(what): \(c)")
        }
    }

    /// PulseAudio SIGKILLed 3 s into an 8 s recording (alsa-lib's pulse plugin may then never
    /// return from a read): the recording still ends, within 15 s of its end, with 0, 1 or 130,
    /// and every clip it wrote is complete. Three trials: a read hangs in about half of them.
    func testRecordingEndsWhenTheSoundServerIsKilled() throws {
        for trial in 1...3 {
            let run = try recordBreakingTheMicrophone("mic-server-killed-\(trial)", .serverKilled, seconds: 8, breakAt: 3, bound: 15)
            let what = "trial \(trial)"
            XCTAssertNotNil(run.status, "\(what): still running 15 s after the recording's end:\n\(run.stderr.suffix(3000))")
            guard let status = run.status else { continue }
            print("\(what): exit \(status), \(String(format: "%.1f", run.took)) s after the recording's end")
            XCTAssertTrue([0, 1, 130].contains(status), "\(what): exit \(status):\n\(run.stderr.suffix(3000))")
            try checkKeptClips(run.dir, what)
        }
    }

    /// SIGTERM 1.5 s after PulseAudio was SIGKILLed mid-recording: the recorder stops within 8 s
    /// (exit 130), its clips complete. Two trials.
    func testSIGTERMEndsARecordingWhoseSoundServerWasKilled() throws {
        for trial in 1...2 {
            let run = try recordBreakingTheMicrophone(
                "mic-server-killed-term-\(trial)", .serverKilled, seconds: 0, breakAt: 3, sigtermAt: 4.5, bound: 8)
            let what = "trial \(trial)"
            XCTAssertNotNil(run.status, "\(what): still running 8 s after SIGTERM:\n\(run.stderr.suffix(3000))")
            guard let status = run.status else { continue }
            print("\(what): exit \(status), \(String(format: "%.1f", run.took)) s after SIGTERM")
            XCTAssertEqual(status, 130, "\(what):\n\(run.stderr.suffix(3000))")
            try checkKeptClips(run.dir, what)
        }
    }

    /// The microphone gone 3 s into an 8 s recording (its sound server SIGKILLed): the pictures
    /// go on, the clips are kept, and the recording exits 1, its summary naming the seconds
    /// without sound (about the 5 s after the loss).
    func testRecordingWhoseMicrophoneWentAwayExitsOneNamingTheSecondsWithoutSound() throws {
        let run = try recordBreakingTheMicrophone("mic-server-killed-mute", .serverKilled, seconds: 8, breakAt: 3, bound: 15)
        XCTAssertEqual(run.status, 1, run.stderr)
        let line = run.stderr.split(separator: "\n").first { $0.contains("without sound") }.map(String.init)
        let summary = try XCTUnwrap(line, "no summary naming the seconds without sound:\n\(run.stderr)")
        XCTAssertTrue(summary.hasPrefix("error: "), summary)
        XCTAssertTrue(summary.contains("recorded "), summary)
        XCTAssertTrue(summary.contains("microphone '\(PulseAudioServer.pipePCM)'"), summary)
        let match = try XCTUnwrap(summary.firstMatch(of: /([0-9]+\.[0-9]+) s without sound/), summary)
        let mute = try XCTUnwrap(Double(match.1))
        XCTAssertGreaterThan(mute, 3.5, summary)
        XCTAssertLessThan(mute, 6.5, summary)
        try checkKeptClips(run.dir, "mute recording")
    }

    /// A microphone read that never returns (the stuck PCM, 3 s into an 8 s recording), as the
    /// pulse plugin's may when its server dies: the recording still ends within 15 s of its end,
    /// with 0, 1 or 130, its clips complete.
    func testRecordingEndsWhenAMicrophoneReadNeverReturns() throws {
        let run = try recordBreakingTheMicrophone("mic-stuck", .readNeverReturns, seconds: 8, breakAt: 3, bound: 15)
        XCTAssertNotNil(run.status, "still running 15 s after the recording's end:\n\(run.stderr.suffix(3000))")
        guard let status = run.status else { return }
        print("exit \(status), \(String(format: "%.1f", run.took)) s after the recording's end")
        XCTAssertTrue([0, 1, 130].contains(status), "exit \(status):\n\(run.stderr.suffix(3000))")
        try checkKeptClips(run.dir, "stuck microphone")
    }

    /// SIGTERM 1.5 s after a microphone read stopped returning: the recorder stops within 8 s
    /// (exit 130), its clips complete.
    func testSIGTERMEndsARecordingWhoseMicrophoneReadNeverReturns() throws {
        let run = try recordBreakingTheMicrophone("mic-stuck-term", .readNeverReturns, seconds: 0, breakAt: 3, sigtermAt: 4.5, bound: 8)
        XCTAssertNotNil(run.status, "still running 8 s after SIGTERM:\n\(run.stderr.suffix(3000))")
        guard let status = run.status else { return }
        print("exit \(status), \(String(format: "%.1f", run.took)) s after SIGTERM")
        XCTAssertEqual(status, 130, run.stderr.suffix(3000).description)
        try checkKeptClips(run.dir, "stuck microphone, SIGTERM")
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

/// A program running in the background, its standard error collected as it comes (standard
/// output and input on /dev/null). `@unchecked Sendable`: `process` is used by the test's thread
/// only; the reading thread shares `text` (a mutex) and `drained`.
final class BackgroundRun: @unchecked Sendable {
    private let process = Process()
    private let text = Mutex(Data())
    private let drained = DispatchGroup()

    init(_ arguments: [String], env: [String: String]) throws {
        process.executableURL = URL(fileURLWithPath: arguments[0])
        process.arguments = Array(arguments.dropFirst())
        var e = ProcessInfo.processInfo.environment
        for (k, v) in env { e[k] = v }
        process.environment = e
        let pipe = Pipe()
        process.standardError = pipe
        process.standardOutput = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        try process.run()
        drained.enter()
        DispatchQueue.global().async { [self] in
            let h = pipe.fileHandleForReading
            while true {
                let d = h.availableData
                if d.isEmpty { break }
                text.withLock { $0 += d }
            }
            drained.leave()
        }
    }

    /// What it printed on standard error so far.
    var stderr: String { String(decoding: text.withLock { $0 }, as: UTF8.self) }

    /// Waits until standard error holds `marker` (true), at most `seconds`.
    func waitFor(_ marker: String, seconds: Double) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if stderr.contains(marker) { return true }
            usleep(20_000)
        }
        return stderr.contains(marker)
    }

    /// Waits until it exits, at most until `deadline`: its exit status, or nil while it runs.
    func wait(until deadline: Date) -> Int32? {
        while process.isRunning {
            if Date() >= deadline { return nil }
            usleep(20_000)
        }
        _ = drained.wait(timeout: .now() + 5)
        return process.terminationStatus
    }

    func signal(_ sig: Int32) {
        _ = Glibc.kill(process.processIdentifier, sig)
    }
}
