import XCTest
import ClipFlowCore
@testable import ClipFlowMedia
import ClipFlowTestSupport

/// Joins of fragments cut by the ffmpeg CLI from one continuous recording, each fragment encoded
/// on its own (so its audio is damaged at its edges, as phone and camera fragments are), judged
/// against the continuous source by `scripts/join-metrics` on ffmpeg's decode.
final class JoinRepairTests: XCTestCase {
    let fx = Fixtures.shared
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    /// Where the clips start in the source, and how long each is: cuts on video frame boundaries
    /// at 30 fps, so each clip's audio is exactly as long as its video, at varied sample positions
    /// against the AAC frame grid.
    static let offset = 0.1
    static let durations = [3.0, 2.9, 3.2, 3.0]

    struct Metrics: Decodable {
        struct Join: Decodable {
            var at: Double
            var lag: Int
            var d2_ratio: Double
            var hf_db: Double
        }
        var rate: Int
        var length: Int
        var joins: [Join]
    }

    /// The continuous source and its clips (four, `durations` long). The sound is `audio` (an
    /// ffmpeg lavfi source), or the first input of `input` when given, kept as 16-bit PCM (as a
    /// microphone's: a noise floor at -96 dB) or with `float` as 32-bit float (as synthesised
    /// sound: none). `container`: the source's; in MKV (timestamps in milliseconds) the clips' AAC
    /// durations jitter around 1024, as OBS recordings cut by the ffmpeg CLI have them.
    func fragments(
        _ name: String, audio: String, rate: Int, channels: Int, input: [String] = [], container: String = "mov",
        durations: [Double] = JoinRepairTests.durations, float: Bool = false
    ) throws -> (source: String, clips: [String]) {
        let source = try fx.clip(
            "repair-\(name)-source.\(container)",
            input + [
                "-f", "lavfi", "-i", audio, "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=30:duration=14",
                "-t", "14", "-map", "0:a", "-map", "\(input.isEmpty ? 1 : 2):v",
                "-ar", "\(rate)", "-ac", "\(channels)", "-c:a", float ? "pcm_f32le" : "pcm_s16le"
            ] + Fixtures.x264)
        var start = Self.offset
        var clips: [String] = []
        for (i, d) in durations.enumerated() {
            clips.append(
                try fx.clip(
                    "repair-\(name)-\(container)-\(i).mp4",
                    ["-ss", String(format: "%.4f", start), "-t", String(format: "%.4f", d), "-i", source] + Fixtures.x264 + ["-c:a", "aac", "-b:a", "128k"]))
            start += d
        }
        return (source, clips)
    }

    func metrics(_ output: String, source: String) throws -> Metrics {
        try Self.metrics(output, source: source, offset: Self.offset, durations: Self.durations)
    }

    /// `scripts/join-metrics` on `output`, made of clips cut back to back from `source` at `offset`
    /// whose sound lasts `durations`; `placed`: how long each lasts in `output`, when not that.
    static func metrics(_ output: String, source: String, offset: Double, durations: [Double], placed: [Double]? = nil) throws -> Metrics {
        let list = { (d: [Double]) in d.map { "\($0)" }.joined(separator: ",") }
        let r = try Run.run(
            [
                root.appendingPathComponent("scripts/join-metrics").path, output, source,
                "--offset", "\(offset)", "--durations", list(durations)
            ] + (placed.map { ["--output-durations", list($0)] } ?? []))
        return try JSONDecoder().decode(Metrics.self, from: r.stdout)
    }

    /// Merges the fragments and checks every join as the source has it: second difference at most
    /// twice the source's, energy above 3 kHz at most 6 dB over the source's, total length within
    /// an AAC frame, and (for sound that does not repeat itself every period, where a lag can be
    /// measured) the lag within an AAC frame. Returns the merge's result.
    @discardableResult
    func checkJoins(
        _ name: String, audio: String, rate: Int = 48000, channels: Int = 1, input: [String] = [], container: String = "mov",
        durations: [Double] = JoinRepairTests.durations, float: Bool = false, lagMeasurable: Bool = false
    ) throws -> MergeResult {
        let (source, clips) = try fragments(
            name, audio: audio, rate: rate, channels: channels, input: input, container: container, durations: durations, float: float)
        let out = fx.scratch("repair-\(name)").appendingPathComponent("merged.mp4")
        let r = try Merger(inputs: clips, options: MergeOptions(output: out)).run()
        XCTAssertEqual(r.clips, durations.count)
        XCTAssertEqual(try Probe.decodeErrors(out.path), "")
        let m = try Self.metrics(out.path, source: source, offset: Self.offset, durations: durations)
        XCTAssertEqual(m.joins.count, durations.count - 1)
        XCTAssertLessThanOrEqual(abs(m.length), 1024, "\(name): total length off by \(m.length) samples")
        for j in m.joins {
            let label = "\(name), join at \(j.at) s"
            XCTAssertLessThanOrEqual(j.d2_ratio, 2, "\(label): second difference \(j.d2_ratio)x the source's (a click)")
            XCTAssertLessThanOrEqual(j.hf_db, 6, "\(label): \(j.hf_db) dB more energy above 3 kHz than the source (a click)")
            if lagMeasurable { XCTAssertLessThanOrEqual(abs(j.lag), 1024, "\(label): \(j.lag) samples off the source") }
        }
        return r
    }

    func testSinesFrom100HzTo5kHzJoinWithoutClicks() throws {
        for f in [100, 1000, 5000] {
            try checkJoins("sine\(f)", audio: "sine=frequency=\(f):sample_rate=48000:duration=14,volume=6")
        }
    }

    func testStereoToneAt44100JoinsWithoutClicks() throws {
        try checkJoins("sine440-44k", audio: "sine=frequency=440:sample_rate=44100:duration=14,volume=6", rate: 44100, channels: 2)
    }

    func testChordJoinsWithoutClicks() throws {
        try checkJoins(
            "chord",
            audio: "sine=f=261.63:r=48000:d=14[a];sine=f=329.63:r=48000:d=14[b];sine=f=392:r=48000:d=14[c];[a][b][c]amix=inputs=3:normalize=0,volume=2",
            channels: 2)
    }

    /// Twelve clips of about a second: enough joins for their rate to be lowered.
    static let shortDurations = [1.0, 0.9, 1.2, 1.0, 0.9, 1.1, 1.0, 1.2, 0.9, 1.0, 1.1, 1.0]

    /// The merge benchmark's quiet chord, synthesised (no noise floor): after the first joins, the
    /// rest are coded at a lowered rate (`JoinCodingRateTests`).
    func testQuietSteadyChordJoinsWithoutClicks() throws {
        let r = try checkJoins(
            "quiet-chord",
            audio: "sine=f=220:r=48000:d=14,volume=0.35[a];sine=f=330:r=48000:d=14,volume=0.35[b];[a][b]amix=inputs=2:normalize=0",
            channels: 2, durations: Self.shortDurations, float: true)
        XCTAssertGreaterThanOrEqual(r.joinsAtLoweredRate.count, 8, "of 11 joins: \(r.joinsAtLoweredRate)")
    }

    /// The quiet chord, then from 7.5 s loud noise: the joins in the noise, sent to the encoder at
    /// the rate the chord lowered, are coded again at the clips' rate.
    func testQuietChordThenNoiseJoinsWithoutClicks() throws {
        let chord = "0.044*sin(2*PI*220*t)+0.044*sin(2*PI*330*t)"
        let r = try checkJoins(
            "chord-noise", audio: "aevalsrc=exprs=if(lt(t\\,7.5)\\,\(chord)\\,0.25*(2*random(0)-1)):s=48000:d=14", channels: 2,
            durations: Self.shortDurations, float: true)
        // Clip k starts at `offset` plus the clips before it: the joins in the noise stay at the clips' rate.
        let chordJoins = Self.shortDurations.indices.filter { Self.offset + Self.shortDurations[..<$0].reduce(0, +) < 7.5 }
        XCTAssertFalse(r.joinsAtLoweredRate.isEmpty)
        XCTAssertTrue(Set(r.joinsAtLoweredRate).isSubset(of: chordJoins), "lowered: \(r.joinsAtLoweredRate), in the chord: \(chordJoins)")
    }

    func testToneWithNoiseJoinsWithoutClicksAndKeepsItsPlace() throws {
        try checkJoins(
            "tone-noise",
            audio: "sine=frequency=220:sample_rate=44100:duration=14,volume=4[s];anoisesrc=r=44100:a=0.08:c=pink:d=14[n];[s][n]amix=inputs=2:normalize=0",
            rate: 44100, channels: 2, lagMeasurable: true)
    }

    /// Cut from MKV recordings (PCM, millisecond timestamps): the clips' AAC durations jitter
    /// (1014-1039 at 44.1 kHz), and they join as cleanly as the others.
    func testClipsCutFromMKVRecordingsJoinWithoutClicks() throws {
        try checkJoins("sine440-44k", audio: "sine=frequency=440:sample_rate=44100:duration=14,volume=6", rate: 44100, channels: 2, container: "mkv")
        try checkJoins(
            "chord",
            audio: "sine=f=261.63:r=48000:d=14[a];sine=f=329.63:r=48000:d=14[b];sine=f=392:r=48000:d=14[c];[a][b][c]amix=inputs=3:normalize=0,volume=2",
            channels: 2, container: "mkv")
        try checkJoins(
            "tone-noise",
            audio: "sine=frequency=220:sample_rate=44100:duration=14,volume=4[s];anoisesrc=r=44100:a=0.08:c=pink:d=14[n];[s][n]amix=inputs=2:normalize=0",
            rate: 44100, channels: 2, container: "mkv", lagMeasurable: true)
    }

    func testSpeechJoinsWithoutClicksAndKeepsItsPlace() throws {
        let wav = fx.scratch("speech").appendingPathComponent("speech.wav").path
        try Run.run([
            "espeak-ng", "-w", wav,
            "Every fragment of a recording is joined to the next one, and nobody should hear where. The quick brown fox jumps over the lazy dog, seven silver swans swam silently seaward."
        ])
        try checkJoins(
            "speech", audio: "anullsrc=r=48000:cl=mono:d=14", input: ["-stream_loop", "-1", "-i", wav],
            lagMeasurable: true)
    }

    /// A join re-encodes the frames it must and only as many more as its repair takes: none for
    /// fragments of silence (nothing to repair), more for fragments whose edges are damaged.
    func testOnlyARepairWidensTheFramesReencodedAtAJoin() throws {
        func leastFrames(_ clips: [String]) throws -> Int64 {
            let layout = try Merger.Layout(clips: clips.map { try ClipProbe.probe($0) }, rotate: 0)
            let plan = try XCTUnwrap(layout.audio)
            XCTAssertTrue(plan.regions.contains { $0.frames != $0.least }, "the plan leaves room to repair")
            return plan.regions.reduce(0) { $0 + Int64($1.least.count) }
        }
        let silent = try (0..<3).map { i in
            try fx.clip(
                "repair-silent-\(i).mp4",
                ["-f", "lavfi", "-i", "anullsrc=r=48000:cl=mono", "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=30", "-t", "2"]
                    + Fixtures.x264 + ["-c:a", "aac", "-b:a", "128k"])
        }
        let quiet = try Merger(inputs: silent, options: MergeOptions(output: fx.scratch("repair-silent").appendingPathComponent("m.mp4"))).run()
        XCTAssertEqual(quiet.reencodedAudioFrames, try leastFrames(silent))

        let (_, damaged) = try fragments("sine1000", audio: "sine=frequency=1000:sample_rate=48000:duration=14,volume=6", rate: 48000, channels: 1)
        let repaired = try Merger(inputs: damaged, options: MergeOptions(output: fx.scratch("repair-widen").appendingPathComponent("m.mp4"))).run()
        XCTAssertGreaterThan(repaired.reencodedAudioFrames, try leastFrames(damaged))
    }

    /// The measure holds a single continuous AAC encode of the source to it (the chord: without
    /// the codec's own noise as the floor above 3 kHz, such an encode fails in places).
    func testTheMeasurePassesAContinuousEncodeOfTheSource() throws {
        let (source, _) = try fragments(
            "chord",
            audio: "sine=f=261.63:r=48000:d=14[a];sine=f=329.63:r=48000:d=14[b];sine=f=392:r=48000:d=14[c];[a][b][c]amix=inputs=3:normalize=0,volume=2",
            rate: 48000, channels: 2)
        let continuous = fx.scratch("repair-continuous").appendingPathComponent("chord.m4a").path
        try Run.run(["ffmpeg", "-v", "error", "-y", "-ss", "\(Self.offset)", "-i", source, "-vn", "-c:a", "aac", "-b:a", "128k", continuous])
        let m = try metrics(continuous, source: source)
        for j in m.joins {
            XCTAssertLessThanOrEqual(j.d2_ratio, 2, "continuous encode at \(j.at) s")
            XCTAssertLessThanOrEqual(j.hf_db, 6, "continuous encode at \(j.at) s")
        }
    }

    /// The measure can fail: ffmpeg's concat copy-join of the same sine fragments clicks.
    func testTheMeasureCatchesTheClicksOfAConcatCopyJoin() throws {
        let (source, clips) = try fragments("sine1000", audio: "sine=frequency=1000:sample_rate=48000:duration=14,volume=6", rate: 48000, channels: 1)
        let dir = fx.scratch("repair-concat")
        let list = dir.appendingPathComponent("list.txt")
        try clips.map { "file '\($0)'" }.joined(separator: "\n").write(to: list, atomically: true, encoding: .utf8)
        let naive = dir.appendingPathComponent("naive.mp4").path
        try Run.run(["ffmpeg", "-v", "error", "-f", "concat", "-safe", "0", "-i", list.path, "-c", "copy", naive])
        let m = try metrics(naive, source: source)
        XCTAssertTrue(m.joins.contains { $0.hf_db > 6 || $0.d2_ratio > 2 }, "\(m.joins)")
    }
}

/// `EdgeRepair` alone, on synthetic audio.
final class EdgeRepairTests: XCTestCase {
    let rate = 48000

    func sine(_ n: Int, from: Int = 0, frequency: Double = 330, amplitude: Float = 0.5) -> [Float] {
        (0..<n).map { amplitude * Float(sin(2 * Double.pi * frequency * Double(from + $0) / Double(rate))) }
    }

    func maxSecondDifference(_ x: [Float], _ range: Range<Int>) -> Float {
        range.dropFirst().dropLast().map { abs(x[$0 - 1] - 2 * x[$0] + x[$0 + 1]) }.max() ?? 0
    }

    /// The crossfade weights, worked out by turning a vector step by step, stay within a Float's
    /// rounding of the raised cosine.
    func testCrossfadeWeightsAreTheRaisedCosine() {
        for n in [1, 7, 31, 32, 33, 120, 1_000, 7_680] {
            let w = EdgeRepair.weights(n)
            XCTAssertEqual(w.count, n)
            for k in 0..<n {
                let angle = Double.pi * (Double(k) + 0.5) / Double(n)
                let exact = 0.5 - 0.5 * cos(angle)
                XCTAssertEqual(Double(w[k]), exact, accuracy: 1e-7, "n \(n), k \(k)")
            }
        }
    }

    func testACleanJoinIsLeftUntouchedBitForBit() {
        let x = sine(20000)
        var channels = [x, x.map { $0 * 0.5 }]
        let r = EdgeRepair.repair(&channels, leftEnd: 10000, rightStart: 10000, maxSpan: 2880, sampleRate: rate, sound: .steady)
        XCTAssertEqual(r, .none)
        XCTAssertTrue(channels == [x, x.map { $0 * 0.5 }], "not a sample changed")
    }

    func testSoundMeetingSilenceIsLeftUntouched() {
        let x = sine(10000) + [Float](repeating: 0, count: 10000)
        var channels = [x]
        XCTAssertEqual(EdgeRepair.repair(&channels, leftEnd: 10000, rightStart: 10000, maxSpan: 2880, sampleRate: rate, sound: .steady), .none)
        XCTAssertTrue(channels == [x], "not a sample changed")
    }

    func testDamagedEdgesAreReplacedByTheWaveformTheyInterrupt() {
        // A continuous tone whose last 20 ms before the join and first 15 ms after it are smeared
        // (noise and a jump), as a codec smears an abrupt start and stop.
        var x = sine(20000)
        var g = SplitMix64(seed: 7)
        for i in 9040..<10720 { x[i] += Float(Double(g.next() % 2000) / 1000 - 1) * 0.1 }
        let clean = sine(20000)
        var channels = [x]
        let r = EdgeRepair.repair(&channels, leftEnd: 10000, rightStart: 10000, maxSpan: 2880, sampleRate: rate, sound: .steady)
        XCTAssertGreaterThanOrEqual(r.before, 960)
        XCTAssertGreaterThanOrEqual(r.after, 720)
        XCTAssertEqual(channels[0].count, 20000)
        let y = channels[0]
        XCTAssertLessThan(maxSecondDifference(y, 8000..<12000), 2 * maxSecondDifference(clean, 8000..<12000))
        // Outside what was replaced, nothing changed.
        XCTAssertTrue(y[0..<(10000 - r.before)] == x[0..<(10000 - r.before)], "nothing changed before the repair")
        XCTAssertTrue(y[(10000 + r.after)...] == x[(10000 + r.after)...], "nothing changed after the repair")
    }

    func testDamagedSpeechLikeEdgesArePredictedNotRepeated() {
        // Changing sound: a tone whose level steps every 20 ms; damage only in the last 10 ms.
        var x = (0..<40000).map { i -> Float in
            let step: Float = (i / 960) % 2 == 0 ? 0.5 : 0.25
            return step * Float(sin(2 * Double.pi * 220 * Double(i) / 48000))
        }
        var g = SplitMix64(seed: 11)
        for i in 19520..<20000 { x[i] += Float(Double(g.next() % 2000) / 1000 - 1) * 0.1 }
        XCTAssertEqual(EdgeRepair.sound([x], leftEnd: 20000, rightStart: 20000, sampleRate: rate), .changing)
        var channels = [x]
        let r = EdgeRepair.repair(&channels, leftEnd: 20000, rightStart: 20000, maxSpan: 4000, sampleRate: rate, sound: .changing)
        XCTAssertGreaterThanOrEqual(r.before, 480)
        XCTAssertLessThanOrEqual(r.before, 1440, "changing sound: at most 30 ms replaced")
        XCTAssertLessThanOrEqual(r.after, 1440)
    }

    func testASteadyToneIsSteadyAndAToneThatStepsIsNot() {
        let tone = sine(40000)
        XCTAssertEqual(EdgeRepair.sound([tone], leftEnd: 20000, rightStart: 20000, sampleRate: rate), .steady)
        let stepping = tone.enumerated().map { $0.1 * ((($0.0 / 960) % 2 == 0) ? 1 : 0.5) }
        XCTAssertEqual(EdgeRepair.sound([stepping], leftEnd: 20000, rightStart: 20000, sampleRate: rate), .changing)
        XCTAssertEqual(EdgeRepair.sound([tone], leftEnd: 2000, rightStart: 2000, sampleRate: rate), .changing, "not enough audio to tell")
    }

    /// The RMS of `x` over 10 ms windows within `range`, the lowest.
    func lowestLevel(_ x: [Float], _ range: Range<Int>) -> Float {
        stride(from: range.lowerBound, to: range.upperBound - 480, by: 120).map { i in
            (x[i..<(i + 480)].reduce(0) { $0 + $1 * $1 } / 480).squareRoot()
        }.min() ?? 0
    }

    /// A tone whose two sides meet half a period out of phase (a gap of 22.5 periods filled):
    /// the fill reads each side a little faster or slower into phase with the other, so the tone
    /// keeps its level across the join instead of cancelling where the two are crossfaded.
    func testTonesMeetingOutOfPhaseKeepTheirLevel() {
        // 1 kHz: a period of 48 samples; the gap is 1080 samples.
        let left = sine(10000, frequency: 1000), right = sine(10000, from: 11080 + 24, frequency: 1000)
        var channels = [left + [Float](repeating: 0, count: 1080) + right]
        var g = SplitMix64(seed: 5)
        for i in 9200..<10000 { channels[0][i] += Float(Double(g.next() % 2000) / 1000 - 1) * 0.1 }
        let r = EdgeRepair.repair(&channels, leftEnd: 10000, rightStart: 11080, maxSpan: 3840, sampleRate: rate, sound: .steady)
        XCTAssertGreaterThan(r.before, 0)
        let y = channels[0]
        XCTAssertGreaterThan(lowestLevel(y, 8000..<14000), 0.9 * 0.5 / Float(2).squareRoot(), "the tone dips at the join")
        XCTAssertLessThan(maxSecondDifference(y, 8000..<14000), 1.5 * maxSecondDifference(sine(4000, frequency: 1000), 0..<4000))
    }

    /// A shortening writes the replaced span that much shorter, so everything after it comes
    /// that much earlier, and the tone runs on without a break.
    func testAShorteningMovesTheAudioAfterTheJoinEarlier() {
        let x = sine(30000, frequency: 220)
        for shortening in [600, -400] {
            var channels = [x]
            let r = EdgeRepair.repair(
                &channels, leftEnd: 15000, rightStart: 15000, maxSpan: 3840, sampleRate: rate, sound: .steady, shortening: shortening)
            XCTAssertEqual(r.shortened, shortening)
            let y = channels[0]
            XCTAssertEqual(y.count, x.count - shortening)
            XCTAssertTrue(y[0..<(15000 - r.before)] == x[0..<(15000 - r.before)], "nothing changed before the repair")
            let after = 15000 + r.after
            XCTAssertTrue(y[(after - shortening)...] == x[after...], "the audio after the repair, \(shortening) samples earlier")
            XCTAssertGreaterThan(lowestLevel(y, 12000..<18000), 0.9 * 0.5 / Float(2).squareRoot())
            XCTAssertLessThan(maxSecondDifference(y, 12000..<18000), 1.5 * maxSecondDifference(sine(4000, frequency: 220), 0..<4000))
        }
    }

    func testAShortGapBetweenFragmentsIsFilledAndALongOneIsNot() {
        // 1600 samples missing (audio one 30 fps frame shorter than its video).
        let left = sine(10000), right = sine(10000, from: 11600)
        var channels = [left + [Float](repeating: 0, count: 1600) + right]
        EdgeRepair.repair(&channels, leftEnd: 10000, rightStart: 11600, maxSpan: 2880, sampleRate: rate, sound: .steady)
        let y = channels[0]
        XCTAssertLessThan(maxSecondDifference(y, 9000..<12600), 2 * maxSecondDifference(sine(4000), 0..<4000))
        let rms = (y[10000..<11600].reduce(0) { $0 + $1 * $1 } / 1600).squareRoot()
        XCTAssertGreaterThan(rms, 0.25, "the gap is filled with the tone, not silence")

        let long = left + [Float](repeating: 0, count: 4800) + right
        var untouched = [long]
        XCTAssertEqual(EdgeRepair.repair(&untouched, leftEnd: 10000, rightStart: 14800, maxSpan: 2880, sampleRate: rate, sound: .steady), .none)
        XCTAssertTrue(untouched == [long], "not a sample changed")
    }
}

/// `JoinNoise` on a chord coded by the join encoder: the decoded frames line up with their input
/// (a clean coding has no burst), and a click coded with the chord is found as a burst in the
/// frame that holds it when the coding is judged against the chord alone.
final class JoinNoiseTests: XCTestCase {
    func testAClickCodedIntoAFrameIsABurstThereAndCleanCodingIsNot() throws {
        let F = Int(AudioJoinPlan.frameSize)
        let chord = (0..<(12 * F)).map { k -> Float in
            let t = Double(k) / 48000
            return Float(0.2 * sin(2 * .pi * 261.63 * t) + 0.15 * sin(2 * .pi * 329.63 * t) + 0.1 * sin(2 * .pi * 392 * t))
        }
        var click = chord
        click[6 * F + 300] += 0.05
        // Packet pts: the input sample each decodes to; frames 3 ... 9 are judged after frame 2.
        func coded(_ x: [Float]) throws -> (JoinNoise, [Packet], [Int64]) {
            let encoder = try JoinEncoder(sampleRate: 48000, channels: 2, bitRate: 128_000)
            let packets = try (encoder.encode([x, x], at: 0) + encoder.flush()).filter { (2 * Int64(F)...9 * Int64(F)).contains($0.p.pointee.pts) }
            return (try JoinNoise(encoder: encoder), packets, packets.map { $0.p.pointee.pts / Int64(F) })
        }
        let (noise, clean, frames) = try coded(chord)
        XCTAssertEqual(frames, Array(2...9))
        let levels = try noise.levels(clean, frames: frames, input: [chord, chord], inputFrame: 0)
        XCTAssertEqual(levels.count, 7)
        XCTAssertFalse(JoinNoise.hasBurst(levels), "\(levels)")

        let (_, clicked, clickedFrames) = try coded(click)
        let judged = try noise.levels(clicked, frames: clickedFrames, input: [chord, chord], inputFrame: 0)
        let loudest = judged.indices.max { judged[$0].noise < judged[$1].noise }
        XCTAssertEqual(loudest, 3, "the frame of input samples 6144 ..< 7168 is the fourth judged: \(judged)")
        XCTAssertTrue(JoinNoise.hasBurst(judged), "\(judged)")
    }
}

/// The rate joins are coded at: on a quiet steady chord (the merge benchmark's) the fast coder
/// cannot spend the clips' rate, so the regions after one like that are coded at a lowered rate,
/// as long as that codes the same sound no noisier (`AudioRegionRenderer.LoweredBar`); richer
/// sound is coded at the clips' rate.
final class JoinCodingRateTests: XCTestCase {
    static let F = Int(AudioJoinPlan.frameSize)

    /// 60 frames of the chord, 220 and 330 Hz at -27 dBFS each.
    static let chord = (0..<(60 * F)).map { k -> Float in
        let t = Double(k) / 48000
        return Float(0.044 * sin(2 * .pi * 220 * t) + 0.044 * sin(2 * .pi * 330 * t))
    }

    /// White noise at -12 dBFS.
    static let noise: [Float] = {
        var seed: UInt64 = 7
        return (0..<(60 * F)).map { _ -> Float in
            seed = seed &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Float(Int64(bitPattern: seed >> 1) % 2001 - 1000) / 4000
        }
    }()

    /// Codes `x` in both channels, as the renderer does: from the clips' 128 kb/s, lowered to
    /// `loweredRate` from frame 20 on when given; the mean bits of frames 24 ..< 56, their levels
    /// (`JoinNoise`) and the sound's energy there.
    func code(_ x: [Float], loweredRate: Int64? = nil) throws -> (bits: Double, levels: [JoinNoise.Level], energy: Double) {
        let encoder = try JoinEncoder(sampleRate: 48000, channels: 2, bitRate: 128_000)
        let split = 20 * Self.F
        var packets = try encoder.encode([Array(x[..<split]), Array(x[..<split])], at: 0)
        if let loweredRate { encoder.setRate(loweredRate) }
        packets += try encoder.encode([Array(x[split...]), Array(x[split...])], at: Int64(split)) + encoder.flush()
        let judged = packets.filter { (23 * Int64(Self.F)..<56 * Int64(Self.F)).contains($0.p.pointee.pts) }
        XCTAssertEqual(judged.count, 33)
        let levels = try JoinNoise(encoder: encoder).levels(
            judged, frames: judged.map { $0.p.pointee.pts / Int64(Self.F) }, input: [x, x], inputFrame: 0)
        let bits = Double(judged.dropFirst().reduce(0) { $0 + Int($1.p.pointee.size) } * 8) / Double(judged.count - 1)
        return (bits, levels, AudioRegionRenderer.energy([x, x], frames: 24..<56, firstFrame: 0))
    }

    func rate(after bits: Double) -> Int64? {
        AudioRegionRenderer.codingRate(after: bits, current: 128_000, sampleRate: 48000, channels: 2)
    }

    func testASteadyChordIsCodedAtALoweredRateNoNoisierThanAtTheClipsRate() throws {
        let nominal = try code(Self.chord)
        let frameBits = 128_000.0 * Double(Self.F) / 48000
        XCTAssertLessThan(nominal.bits, 0.5 * frameBits, "the chord takes \(nominal.bits) bits a frame of \(frameBits)")
        let lowered = try XCTUnwrap(rate(after: nominal.bits))
        XCTAssertLessThan(lowered, 128_000)
        let bar = try XCTUnwrap(AudioRegionRenderer.LoweredBar(nominal.levels, energy: nominal.energy))
        let again = try code(Self.chord, loweredRate: lowered)
        XCTAssertEqual(again.bits, nominal.bits, accuracy: 0.1 * nominal.bits, "the quantiser the encoder reached carries over")
        // The rate reaches the running encoder: noise, which spends any rate, takes far fewer bits.
        XCTAssertLessThan(try code(Self.noise, loweredRate: 32_000).bits, 0.5 * (try code(Self.noise).bits))
        // Coded once a frame: within the rate control's margin of the lowered rate, so it stays.
        XCTAssertNil(AudioRegionRenderer.codingRate(after: again.bits, current: lowered, sampleRate: 48000, channels: 2))
        let coded = try XCTUnwrap(AudioRegionRenderer.LoweredBar(again.levels, energy: again.energy))
        XCTAssertTrue(
            bar.passes(again.levels, energy: again.energy), "coding noise \(coded.noisePerFrame) at \(lowered) b/s, \(bar.noisePerFrame) at 128 kb/s")
    }

    func testRicherSoundKeepsTheClipsRate() throws {
        let chord = try code(Self.chord)
        let bar = try XCTUnwrap(AudioRegionRenderer.LoweredBar(chord.levels, energy: chord.energy))
        let lowered = try XCTUnwrap(rate(after: chord.bits))
        // Noise coded at the lowered rate does not pass: it goes back to the clips' rate ...
        let noise = try code(Self.noise, loweredRate: lowered)
        XCTAssertFalse(bar.passes(noise.levels, energy: noise.energy))
        // ... where the coder spends the rate, so it stays there.
        XCTAssertNil(rate(after: try code(Self.noise).bits))
        // Noise as loud as the chord passes the energy check, not the coding noise one.
        let matched = try code(Self.noise.map { $0 * 0.305 }, loweredRate: lowered)
        XCTAssertEqual(matched.energy / chord.energy, 1, accuracy: 0.5)
        XCTAssertFalse(bar.passes(matched.levels, energy: matched.energy))
        // The chord louder by 12 dB is another sound.
        let louder = try code(Self.chord.map { $0 * 4 }, loweredRate: lowered)
        XCTAssertFalse(bar.passes(louder.levels, energy: louder.energy))
        // Silence sets no bar.
        let silence = try code([Float](repeating: 0, count: 60 * Self.F))
        XCTAssertNil(AudioRegionRenderer.LoweredBar(silence.levels, energy: silence.energy))
    }
}
