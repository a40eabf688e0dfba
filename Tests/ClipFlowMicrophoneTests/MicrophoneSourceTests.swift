import ClipFlowCore
import ClipFlowMicrophone
import ClipFlowTestSupport
import Foundation
import Synchronization
import XCTest

/// The microphone source through the real alsa-lib and its `pulse` plugin, recording from a
/// private PulseAudio server whose pipe source is fed by `MicrophoneFeeder` (the test owns the
/// microphone's clock and knows when every beep was due on CLOCK_MONOTONIC).
final class MicrophoneSourceTests: XCTestCase {
    private var server: PulseAudioServer?

    override func setUpWithError() throws {
        let s = try PulseAudioServer.start()
        s.useInThisProcess()
        server = s
    }

    override func tearDown() {
        server?.stop()
        server = nil
    }

    private func feeder(ppm: Double = 0) throws -> MicrophoneFeeder {
        let f = MicrophoneFeeder(server: try XCTUnwrap(server), ppm: ppm)
        try f.start()
        addTeardownBlock { f.stop() }
        return f
    }

    /// Runs `source` to its end (its duration) and returns its chunks.
    private func record(_ source: MicrophoneSource) throws -> [AudioChunk] {
        let h = StageHarness(source)
        try h.prepare()
        _ = try h.negotiate()
        try h.produce()
        return h.finish().compactMap { if case .audio(let a)? = $0.media { return a } else { return nil } }
    }

    /// Frames (device count) where a beep starts: channel 0 above 0.25 after 0.1 s below it.
    private func beepOnsets(_ chunks: [AudioChunk]) -> [Int64] {
        var onsets: [Int64] = []
        var quiet = 0
        for c in chunks {
            for i in 0..<c.frameCount {
                if abs(c.samples[i * c.channels]) > 0.25 {
                    if quiet >= c.sampleRate / 10 { onsets.append(c.firstSample + Int64(i)) }
                    quiet = 0
                } else {
                    quiet += 1
                }
            }
        }
        return onsets
    }

    /// The capture time of `frame`, from when the chunks were read: each chunk's first frame was
    /// captured no later than its `readTime` minus its length, so each implies a latest time for
    /// frame 0, late by scheduling jitter and never early (as the recorder measures them); the
    /// earliest implied time of the chunks within half a second of `frame` is taken.
    private func measuredTime(of frame: Int64, _ chunks: [AudioChunk]) -> Double? {
        let rate = Double(chunks.first?.sampleRate ?? 48000)
        let near = chunks.filter { abs(Double($0.firstSample - frame)) < rate / 2 }
        let origins = near.compactMap { c in c.readTime.map { $0 - Double(c.frameCount + Int(c.firstSample)) / rate } }
        guard let origin = origins.min() else { return nil }
        return origin + Double(frame) / rate
    }

    func testNegotiatesFortyEightKilohertzStereoAndWhatIsAskedFor() throws {
        _ = try feeder()
        let stereo = MicrophoneSource(id: "mic", device: PulseAudioServer.pipePCM, duration: 1)
        let h = StageHarness(stereo)
        try h.prepare()
        let p = try XCTUnwrap(try h.negotiate())
        XCTAssertEqual(p.audio?.sampleRate, 48000)
        XCTAssertEqual(p.audio?.channels, 2)
        XCTAssertEqual(stereo.negotiated?.sampleFormat, "s16le")
        XCTAssertTrue(h.events.contains { "\($0.kind)".contains("microphone cffifo: 48000 Hz, 2 channels") }, "\(h.events)")
        _ = h.finish()

        let mono = MicrophoneSource(id: "mic", device: PulseAudioServer.pipePCM, sampleRate: 44100, channels: 1, duration: 1)
        let chunks = try record(mono)
        XCTAssertEqual(mono.negotiated?.sampleRate, 44100)
        XCTAssertEqual(mono.negotiated?.channels, 1)
        XCTAssertTrue(chunks.allSatisfy { $0.sampleRate == 44100 && $0.channels == 1 })
        XCTAssertEqual(chunks.reduce(0) { $0 + $1.frameCount }, 44100)
        XCTAssertEqual(mono.framesCaptured, 44100)
        // Continuous device count.
        for (a, b) in zip(chunks, chunks.dropFirst()) { XCTAssertEqual(b.firstSample, a.firstSample + Int64(a.frameCount)) }
    }

    func testBeepTimesLandWithinFiveMillisecondsOfTheWholeSeconds() throws {
        let feed = try feeder()
        let chunks = try record(MicrophoneSource(id: "mic", device: PulseAudioServer.pipePCM, duration: 8))
        let due = feed.beeps.map(\.time)
        let onsets = beepOnsets(chunks)
        XCTAssertGreaterThanOrEqual(onsets.count, 6, "beeps found: \(onsets.count)")
        var errors: [Double] = [], raw: [Double] = []
        for o in onsets {
            let t = try XCTUnwrap(measuredTime(of: o, chunks))
            let expected = try XCTUnwrap(due.min { abs($0 - t) < abs($1 - t) })
            errors.append((t - expected) * 1000)
            let c = try XCTUnwrap(chunks.last { $0.firstSample <= o })
            raw.append((try XCTUnwrap(c.clockTime) + Double(o - c.firstSample) / 48000 - expected) * 1000)
        }
        print("beep error ms (earliest read-time bound within 0.5 s): \(errors.map { String(format: "%+.2f", $0) })")
        print("beep error ms (its own chunk's clockTime): \(raw.map { String(format: "%+.2f", $0) })")
        for e in errors { XCTAssertLessThanOrEqual(abs(e), 5, "beep error \(e) ms; all: \(errors)") }
    }

    func testFastMicrophoneDeliversItsExtraFramesPerSecond() throws {
        let feed = try feeder(ppm: 3000)
        let chunks = try record(MicrophoneSource(id: "mic", device: PulseAudioServer.pipePCM, duration: 7))
        let onsets = beepOnsets(chunks)
        XCTAssertGreaterThanOrEqual(onsets.count, 5)
        // Beeps are due one CLOCK_MONOTONIC second apart: their spacing in frames is the device rate.
        let spacing = Double(try XCTUnwrap(onsets.last) - onsets[0]) / Double(onsets.count - 1)
        // Frames per measured second: a least-squares line through the earliest-measured chunk of
        // every second of audio, measured as the recorder does: read time minus the chunk's length
        // (late by jitter, never early; a sound server's latency estimate is early at the start).
        func measure(_ c: AudioChunk) -> Double? { c.readTime.map { $0 - Double(c.frameCount) / 48000 } }
        var points: [(t: Double, f: Double)] = []
        for second in 0..<7 {
            let bin = chunks.filter { $0.firstSample / 48000 == Int64(second) && measure($0) != nil }
            if let c = bin.min(by: { measure($0)! - Double($0.firstSample) / 48000 < measure($1)! - Double($1.firstSample) / 48000 }) {
                points.append((try XCTUnwrap(measure(c)), Double(c.firstSample)))
            }
        }
        let n = Double(points.count), mt = points.map(\.t).reduce(0, +) / n, mf = points.map(\.f).reduce(0, +) / n
        let perSecond =
            points.map { ($0.t - mt) * ($0.f - mf) }.reduce(0, +) / points.map { ($0.t - mt) * ($0.t - mt) }.reduce(0, +)
        let ppm = (perSecond / 48000 - 1) * 1e6
        print("+3000 ppm feeder (\(feed.rate) frames/s): beep spacing \(spacing) frames, \(perSecond) frames per measured second (\(ppm) ppm)")
        XCTAssertEqual(spacing, 48144, accuracy: 2)
        XCTAssertEqual(ppm, 3000, accuracy: 300)
    }

    func testStalledMicrophoneFailsWithNoAudio() throws {
        let feed = try feeder()
        let source = MicrophoneSource(id: "mic", device: PulseAudioServer.pipePCM, stallSeconds: 1)
        let h = StageHarness(source)
        try h.prepare()
        _ = try h.negotiate()
        DispatchQueue.global().asyncAfter(deadline: .now() + 1) { feed.stop() }
        let start = Date()
        XCTAssertThrowsError(try h.produce()) { e in
            XCTAssertTrue("\(e)".contains("microphone 'cffifo' sent no audio for 1 second"), "\(e)")
        }
        let took = Date().timeIntervalSince(start)
        XCTAssertGreaterThan(source.framesCaptured, 24000)
        XCTAssertLessThan(took, 3.5, "took \(took) s")
        _ = h.finish(.failed)
    }

    /// A gap is no frames for a while: the device count goes on where it was and the measured
    /// time jumps by the gap. Measured by the read times: `clockTime` takes the jump in over
    /// seconds through PulseAudio (its latency estimate is smoothed); the read times at once.
    func testGapShowsAsAJumpOfTheMeasuredTime() throws {
        let feed = try feeder()
        feed.gap(at: feed.startTime + 1.5, milliseconds: 300)
        let chunks = try record(MicrophoneSource(id: "mic", device: PulseAudioServer.pipePCM, duration: 5))
        XCTAssertEqual(feed.framesSkipped, 14400, accuracy: 480)
        for (a, b) in zip(chunks, chunks.dropFirst()) { XCTAssertEqual(b.firstSample, a.firstSample + Int64(a.frameCount)) }
        // As the recorder measures: read time minus the chunk's length (never early).
        let origins = chunks.compactMap { c in c.readTime.map { (c.firstSample, $0 - Double(c.frameCount + Int(c.firstSample)) / 48000) } }
        let before = try XCTUnwrap(origins.filter { $0.0 < 48000 }.map(\.1).min())
        var moved: [String] = []
        for second in 1..<5 {
            let o = origins.filter { $0.0 >= Int64(second) * 48000 && $0.0 < Int64(second + 1) * 48000 }.map(\.1).min()
            moved.append(String(format: "%.1f", ((o ?? before) - before) * 1000))
        }
        print("gap of 300 ms at 1.5 s: measured time of frame 0, per second of audio, moved by \(moved) ms")
        let after = try XCTUnwrap(origins.filter { $0.0 > 4 * 48000 }.map(\.1).min())
        XCTAssertEqual(after - before, 0.3, accuracy: 0.02, "the read times show the whole gap")
    }

    func testNullSinkMonitorRecords() throws {
        let source = MicrophoneSource(id: "mic", device: PulseAudioServer.monitorPCM, duration: 1)
        let chunks = try record(source)
        XCTAssertEqual(source.framesCaptured, 48000)
        XCTAssertTrue(chunks.allSatisfy { $0.clockTime != nil && $0.channels == 2 })
    }

    func testMissingDeviceFailsInPrepareNamingItAndTheReason() throws {
        let h = StageHarness(MicrophoneSource(id: "mic", device: "hw:9,0"))
        XCTAssertThrowsError(try h.prepare()) { e in
            let text = "\(e)"
            XCTAssertTrue(text.contains("microphone 'hw:9,0': cannot open: No such file or directory"), text)
            XCTAssertTrue(text.contains("clipflow devices"), text)
        }
    }

    func testGracefulStopRecordsTheTailPastTheStopTime() throws {
        _ = try feeder()
        let source = MicrophoneSource(id: "mic", device: PulseAudioServer.pipePCM)
        let h = StageHarness(source)
        try h.prepare()
        _ = try h.negotiate()
        let stopTime = Mutex<Double>(0)
        DispatchQueue.global().asyncAfter(deadline: .now() + 1.5) {
            stopTime.withLock { $0 = SystemClock().now() }
            h.stop()
        }
        try h.produce()
        let ended = SystemClock().now()
        let chunks = h.finish().compactMap { if case .audio(let a)? = $0.media { return a } else { return nil } }
        let last = try XCTUnwrap(chunks.last)
        let lastEnd = try XCTUnwrap(last.clockTime) + Double(last.frameCount) / 48000
        let stop = stopTime.withLock { $0 }
        print("graceful stop: audio ends \((lastEnd - stop) * 1000) ms after the stop; produce returned \((ended - stop) * 1000) ms after it")
        XCTAssertGreaterThanOrEqual(lastEnd, stop + 0.3)
        XCTAssertLessThan(lastEnd, stop + 0.4)
    }

    func testCancelEndsPromptly() throws {
        _ = try feeder()
        let h = StageHarness(MicrophoneSource(id: "mic", device: PulseAudioServer.pipePCM))
        try h.prepare()
        _ = try h.negotiate()
        let cancelled = Mutex<Double>(0)
        DispatchQueue.global().asyncAfter(deadline: .now() + 1) {
            cancelled.withLock { $0 = SystemClock().now() }
            h.cancel()
        }
        try h.produce()
        let took = SystemClock().now() - cancelled.withLock { $0 }
        XCTAssertLessThan(took, 0.2, "produce returned \(took) s after the cancel")
        _ = h.finish(.cancelled)
    }

    /// The sound server SIGKILLed while the source reads (alsa-lib's pulse plugin may then never
    /// return from a wait): `produce` still ends, within 5 s of the kill (`hungSeconds` and
    /// `releaseSeconds`; or, if the device answers with nothing, the stall's 5 s), the device gone
    /// or the stall reported. Three trials, each with a server of its own: a read hangs in about half.
    func testKilledSoundServerEndsTheSourceWithinBounds() throws {
        for trial in 1...3 {
            let s = try PulseAudioServer.start()
            defer { s.stop() }
            s.useInThisProcess()
            let feed = MicrophoneFeeder(server: s)
            try feed.start()
            defer { feed.stop() }
            let source = MicrophoneSource(id: "mic", device: PulseAudioServer.pipePCM)
            let h = StageHarness(source)
            try h.prepare()
            _ = try h.negotiate()
            let outcome = Mutex<String?>(nil)
            let ended = DispatchSemaphore(value: 0)
            DispatchQueue.global().async {
                do {
                    try h.produce()
                    outcome.withLock { $0 = "ended" }
                } catch {
                    outcome.withLock { $0 = "\(error)" }
                }
                ended.signal()
            }
            Thread.sleep(forTimeInterval: 1)
            feed.stop()
            s.kill()
            let killed = Date()
            guard ended.wait(timeout: .now() + 7) == .success else {
                XCTFail("trial \(trial): produce still runs 7 s after the sound server was killed")
                continue
            }
            let took = Date().timeIntervalSince(killed)
            let how = outcome.withLock { $0 } ?? ""
            print("trial \(trial): produce ended \(String(format: "%.2f", took)) s after the kill: \(how); device lost: \(source.deviceLost)")
            if how == "ended" {
                XCTAssertTrue(source.deviceLost, "trial \(trial): ended without the device counted as gone")
                XCTAssertLessThan(took, 5, "trial \(trial): a hung read counts as the device gone after 3 s, and is left after 1 s more")
            } else {
                XCTAssertTrue(how.contains("sent no audio"), "trial \(trial): \(how)")
            }
            XCTAssertGreaterThan(source.framesCaptured, 24000, "trial \(trial)")
            _ = h.finish(how == "ended" ? .completed : .failed)
        }
        server?.useInThisProcess()
    }

    /// A read that never returns (`PulseAudioServer.stuckPCM`: its feeder stops, its FIFO stays
    /// open and empty): `produce` ends within `hungSeconds` and `releaseSeconds` of it, the device
    /// counted as gone, and a notice says its reading thread was left behind.
    func testReadThatNeverReturnsEndsTheSourceWithinBounds() throws {
        let s = try XCTUnwrap(server)
        // Held open for writing until the end, so that the read waits rather than finds the end
        // of the file; closing it lets the left-behind thread end.
        let holder = open(s.stuckFIFOPath, O_RDWR | O_CLOEXEC)
        XCTAssertGreaterThanOrEqual(holder, 0, "cannot open \(s.stuckFIFOPath)")
        defer { close(holder) }
        let source = MicrophoneSource(id: "mic", device: PulseAudioServer.stuckPCM)
        let h = StageHarness(source)
        try h.prepare()
        _ = try h.negotiate()
        let feed = MicrophoneFeeder(fifo: s.stuckFIFOPath)
        try feed.start()
        defer { feed.stop() }
        let outcome = Mutex<String?>(nil)
        let ended = DispatchSemaphore(value: 0)
        DispatchQueue.global().async {
            do {
                try h.produce()
                outcome.withLock { $0 = "ended" }
            } catch {
                outcome.withLock { $0 = "\(error)" }
            }
            ended.signal()
        }
        Thread.sleep(forTimeInterval: 1)
        feed.stop()
        let stuck = Date()
        guard ended.wait(timeout: .now() + 8) == .success else {
            return XCTFail("produce still runs 8 s after its device stopped answering")
        }
        let took = Date().timeIntervalSince(stuck)
        print("produce ended \(String(format: "%.2f", took)) s after the device stopped answering")
        XCTAssertEqual(outcome.withLock { $0 }, "ended")
        XCTAssertTrue(source.deviceLost)
        XCTAssertTrue(source.lossReason?.contains("microphone 'cfstuck' stopped answering") == true, source.lossReason ?? "nil")
        XCTAssertLessThan(took, MicrophoneSource.hungSeconds + MicrophoneSource.releaseSeconds + 1.5)
        let notices = h.events.compactMap { e -> String? in if case .notice(let m) = e.kind { return m } else { return nil } }
        XCTAssertTrue(notices.contains { $0.contains("left behind, with the device open") }, "\(notices)")
        _ = h.finish()
    }

    func testDevicesListsTheTestMicrophonesWithRatesAndChannels() throws {
        let env = try XCTUnwrap(server).environment
        let binary = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
        let r = try Run.run([binary, "devices"], env: env)
        let out = r.out
        XCTAssertTrue(out.contains("microphones (ALSA capture):"), out)
        for name in [PulseAudioServer.pipePCM, PulseAudioServer.monitorPCM] {
            let lines = out.split(separator: "\n").map(String.init)
            let i = try XCTUnwrap(lines.firstIndex { $0.hasPrefix("  \(name):") }, out)
            XCTAssertTrue(lines[i].contains("clipflow test mic"), lines[i])
            XCTAssertEqual(lines[i + 1].trimmingCharacters(in: .whitespaces), "rates 1-384000 Hz, channels 1-32", out)
        }
    }
}
