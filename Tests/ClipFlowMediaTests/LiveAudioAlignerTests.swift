import ClipFlowCore
import ClipFlowTestSupport
import XCTest

@testable import ClipFlowMedia

/// The microphone's placement on the capture clock, on a simulated device whose clock and
/// measures are known exactly: 10 minutes of audio (and more) in a few seconds of computation.
/// The real device path (alsa-lib, PulseAudio) is checked end to end by the record tests.
final class LiveAudioAlignerTests: XCTestCase {
    /// A device whose sample clock runs `ppm` fast against the capture clock, delivering chunks
    /// of 480 samples whose capture times are measured late (as ALSA's through PulseAudio are:
    /// mostly under a millisecond, now and then by 5 to 20 ms). Its signal is a quiet 440 Hz tone
    /// with a 1 kHz beep at every whole second of the capture clock. `lose` drops the samples
    /// captured in a time range (an overrun).
    struct Device {
        let rate = 48_000
        var ppm = 0.0
        var start = 1000.25
        var lose: Range<Double>?
        var rng = SplitMix64(seed: 7)
        /// Chunks carry `readTime` (0.5 to 3.5 ms after their last sample), and after a loss
        /// the capture time measures catch up with it only over seconds, as a sound server's
        /// smoothed latency estimate does.
        var soundServer = false
        /// The reader is descheduled over this range: what is captured meanwhile is read at its end.
        var stall: Range<Double>?

        func trueTime(_ j: Int64) -> Double { start + Double(j) / (Double(rate) * (1 + ppm / 1e6)) }

        static func signal(_ t: Double) -> Float {
            let inBeep = t - t.rounded(.down) < 0.02
            return inBeep ? Float(0.5 * sin(2 * .pi * 1000 * t)) : Float(0.05 * sin(2 * .pi * 440 * t))
        }

        var delivered: Int64 = 0
        var produced: Int64 = 0

        /// The next chunk of 480 samples the device delivers (skipping lost ones), and the true
        /// capture time of its last sample.
        mutating func next() -> (chunk: AudioChunk, end: Double) {
            let n = 480
            while let lose, lose.contains(trueTime(produced)) { produced += Int64(n) }
            let t0 = trueTime(produced)
            var s = [Float](repeating: 0, count: n * 2)
            for i in 0..<n {
                let v = Self.signal(trueTime(produced + Int64(i)))
                s[2 * i] = v
                s[2 * i + 1] = v
            }
            let usual = rng.next() % 100 < 90
            let micros = Double(usual ? 300 + rng.next() % 700 : 5000 + rng.next() % 15_000)
            var measured = t0 + micros / 1e6
            var read: Double?
            if soundServer {
                let end = trueTime(produced + Int64(n))
                read = end + 0.0005 + Double(rng.next() % 3000) / 1e6
                if let stall, stall.contains(end) { read = stall.upperBound + Double(rng.next() % 1000) / 1e6 }
                if let lose, t0 >= lose.upperBound { measured -= (lose.upperBound - lose.lowerBound) * exp(-(t0 - lose.upperBound) / 1.5) }
            }
            let chunk = AudioChunk(sampleRate: rate, channels: 2, samples: s, firstSample: delivered, clockTime: measured, readTime: read)
            delivered += Int64(n)
            produced += Int64(n)
            return (chunk, trueTime(produced))
        }

        /// Runs `seconds` of audio through `aligner`; returns the placed output on the grid.
        mutating func run(_ aligner: LiveAudioAligner, seconds: Double) throws -> (first: Int64, samples: [Float]) {
            var placed: [AudioChunk] = []
            let total = Int64(seconds * Double(rate))
            while produced < total { placed += try aligner.take(next().chunk) }
            placed += try aligner.finish()
            let first = placed.first!.firstSample
            var out: [Float] = []
            for c in placed {
                let at = Int(c.firstSample - first)
                if at > out.count { out += [Float](repeating: 0, count: at - out.count) }
                // Overlap (never expected here) would be cut by the recorder; keep the later run.
                if at < out.count { out.removeLast(out.count - at) }
                for i in 0..<c.frameCount { out.append(c.samples[2 * i]) }
            }
            return (first, out)
        }
    }

    /// Where each beep starts on the grid, minus the whole second it was made at (seconds).
    func beepErrors(_ placed: (first: Int64, samples: [Float]), rate: Int) -> [Double] {
        var errors: [Double] = []
        let begin = Double(placed.first) / Double(rate)
        let end = begin + Double(placed.samples.count) / Double(rate)
        var second = begin.rounded(.up)
        while second + 0.03 < end {
            let from = max(0, Int(((second - 0.01) - begin) * Double(rate)))
            let to = min(placed.samples.count, from + rate / 20)
            if let k = (from..<to).first(where: { abs(placed.samples[$0]) > 0.25 }) {
                errors.append(begin + Double(k) / Double(rate) - second)
            } else {
                errors.append(.infinity)
            }
            second += 1
        }
        return errors
    }

    /// The largest step between neighbouring samples outside the beeps: the tone's own is
    /// 0.0029; a click (a jump in the resampling) is larger.
    func largestStepOfTheTone(_ placed: (first: Int64, samples: [Float]), rate: Int) -> Float {
        var m: Float = 0
        for i in 1..<placed.samples.count {
            let t = Double(placed.first + Int64(i)) / Double(rate)
            let f = t - t.rounded(.down)
            if f > 0.998 || f < 0.025 { continue }
            m = max(m, abs(placed.samples[i] - placed.samples[i - 1]))
        }
        return m
    }

    func testTenMinutesAt300PpmStayWithinAMillisecond() throws {
        for (ppm, seconds) in [(300.0, 600.0), (-300.0, 60.0)] {
            var device = Device(ppm: ppm)
            let aligner = try LiveAudioAligner(sampleRate: 48_000, channels: 2)
            let placed = try device.run(aligner, seconds: seconds)
            let errors = beepErrors(placed, rate: 48_000)
            XCTAssertGreaterThanOrEqual(errors.count, Int(seconds) - 2)
            // After the first seconds (the fit starts from the nominal rate), every beep is placed
            // within a millisecond of when it was made, at the end of the ten minutes too.
            let settled = errors.dropFirst(3)
            XCTAssertLessThan(settled.map(abs).max()!, 0.001, "ppm \(ppm): \(settled.prefix(10)) ... \(settled.suffix(5))")
            XCTAssertLessThan(errors.map(abs).max()!, 0.0333, "ppm \(ppm): even the first beeps within a video frame: \(errors.prefix(5))")
            XCTAssertEqual(aligner.overruns, 0)
            XCTAssertEqual(aligner.measuredRate!, 48_000 * (1 + ppm / 1e6), accuracy: 1.0)
            // The device's samples span seconds / (1 + ppm) of the capture clock, and fill that much of the grid.
            XCTAssertEqual(Double(placed.samples.count) / 48_000, seconds / (1 + ppm / 1e6), accuracy: 0.02)
            XCTAssertLessThan(largestStepOfTheTone(placed, rate: 48_000), 0.0035, "no click")
        }
    }

    func testLostAudioIsCountedAndLeavesAGapOfItsLength() throws {
        var device = Device(ppm: -300, lose: 1030.4..<1030.65)
        let aligner = try LiveAudioAligner(sampleRate: 48_000, channels: 2)
        let placed = try device.run(aligner, seconds: 60)
        XCTAssertEqual(aligner.overruns, 1)
        XCTAssertEqual(aligner.lostSeconds, 0.25, accuracy: 0.011)
        let errors = beepErrors(placed, rate: 48_000)
        XCTAssertLessThan(errors.dropFirst(3).map(abs).max()!, 0.001, "sync holds after the loss: \(errors)")
        XCTAssertLessThan(largestStepOfTheTone(placed, rate: 48_000), 0.06, "no step but the gap's own edges")
    }

    /// Through a sound server: the loss is seen from when chunks arrive, though the capture time
    /// measures take seconds to show it.
    func testLostAudioThroughASoundServerIsSeenFromArrivals() throws {
        var device = Device(ppm: 300, lose: 1030.4..<1030.65)
        device.soundServer = true
        let aligner = try LiveAudioAligner(sampleRate: 48_000, channels: 2)
        let placed = try device.run(aligner, seconds: 60)
        XCTAssertEqual(aligner.overruns, 1)
        XCTAssertEqual(aligner.lostSeconds, 0.25, accuracy: 0.011)
        let errors = beepErrors(placed, rate: 48_000)
        XCTAssertLessThan(errors.dropFirst(3).map(abs).max()!, 0.003, "sync holds after the loss (the loss measured within the arrivals' jitter): \(errors)")
    }

    /// A reader descheduled for 300 ms reads what was captured meanwhile at once: nothing was lost.
    func testAReaderThatFellBehindLosesNothing() throws {
        var device = Device(ppm: 0)
        device.soundServer = true
        device.stall = 1010.3..<1010.6
        let aligner = try LiveAudioAligner(sampleRate: 48_000, channels: 2)
        let placed = try device.run(aligner, seconds: 20)
        XCTAssertEqual(aligner.overruns, 0)
        let errors = beepErrors(placed, rate: 48_000)
        XCTAssertLessThan(errors.dropFirst(3).map(abs).max()!, 0.001, "\(errors)")
    }

    func testAMeasureThatIsLateOnceIsNotALoss() throws {
        var device = Device(ppm: 0)
        device.rng = SplitMix64(seed: 99)
        let aligner = try LiveAudioAligner(sampleRate: 48_000, channels: 2)
        _ = try device.run(aligner, seconds: 30)
        XCTAssertEqual(aligner.overruns, 0)
    }
}
