import Foundation

/// Conceals the damaged edges of two fragments where they meet.
///
/// A fragment encoded on its own starts and stops abruptly; its codec spreads that step as noise
/// over its first and last tens of milliseconds, so fragments cut from one continuous recording
/// click where they are joined even when their samples line up exactly. This finds the damage
/// from the signal and replaces it, keeping the number of samples:
///
/// - Detection: a linear predictor (Burg's method, `detectOrder` coefficients) is fitted on
///   `detectSeconds` of audio just inside the longest span looked at, in each channel;
///   running it towards the edge, the first 2.5 ms whose prediction error (RMS) exceeds a
///   threshold times the error level of the fitting audio starts the damage (the right fragment
///   is read in reverse time); the earliest damage in any channel counts.
/// - Steady sound (`Sound.steady`: tones, chords, hum, noise; measured by `sound(...)`) keeps its
///   character for as long as a codec's damage lasts, so damage is looked for up to 80 ms with a
///   low threshold and replaced by the sound itself, repeated: each side is extended by its own
///   last period (found by self-correlation, 2.5-30 ms; 30 ms of it for sound with no period),
///   period after period crossfaded, the two extensions brought into phase (each read a little
///   faster or slower, by at most half a period over the span) and crossfaded into each other.
///   The span may be written shorter or longer than it was (`shortening`), which moves the audio
///   after it without a second splice.
/// - Changing sound (speech, music that moves) cannot be repeated without being heard, so damage
///   is looked for over 30 ms only, with a higher threshold, and replaced by the two sides' audio
///   extrapolated by their predictors, crossfaded, and never louder than the sides around it.
///
/// Short silence between the fragments (audio a little shorter than its video) is filled the same
/// way. Audio with no damage found, and joins where either side is silent, are left untouched, bit
/// for bit. Pure arithmetic on the caller's buffers: no state, any thread.
public enum EdgeRepair {
    public enum Sound: Sendable, Equatable {
        case steady
        case changing

        /// Longest span replaced on each side of a join.
        public var maxSeconds: Double { self == .steady ? 0.08 : 0.03 }
        /// Prediction error (RMS over 2.5 ms), in multiples of the clean error level, that marks
        /// damage. Low for steady sound: a codec's damage fades out tens of milliseconds from the
        /// edge, and what replaces it repeats the sound itself.
        var threshold: Float { self == .steady ? 2 : 6 }
    }

    public static let detectOrder = 32
    /// Seconds of audio the detecting predictor is fitted on (at most 2048 samples).
    public static let detectSeconds = 0.02
    /// Extra samples replaced on the undamaged side of the first damaged one (the predictor
    /// reacts a few samples late).
    public static let guardSamples = 16
    /// Seconds of audio beyond the longest span whose loudness decides `Sound`.
    public static let steadinessSeconds = 0.12
    /// Largest change, in dB, of the loudness of 20 ms blocks over `steadinessSeconds` for steady
    /// sound.
    public static let steadyDecibels = 1.5

    /// Shortest crossfade on each side between sides that do not continue each other.
    public static let bridgeSeconds = 0.01

    /// What `repair` changed: samples replaced before and after the join, and how many samples
    /// shorter the replaced span came out (`shortening`, when it was asked for and done).
    public struct Repair: Equatable, Sendable {
        public var before: Int
        public var after: Int
        public var shortened = 0
        public static let none = Repair(before: 0, after: 0)
    }

    /// Samples `sound` reads beyond each edge.
    public static func steadinessReach(_ sampleRate: Int) -> Int {
        Int(Double(sampleRate) * (Sound.steady.maxSeconds + steadinessSeconds))
    }

    /// Whether the sound on both sides of a join is steady: the loudness of 20 ms blocks of the
    /// channel mix, over `steadinessSeconds` beyond the longest span on each side, varies by at
    /// most `steadyDecibels` (standard deviation). `changing` when there is not enough audio.
    public static func sound(_ channels: [[Float]], leftEnd: Int, rightStart: Int, sampleRate: Int) -> Sound {
        guard let count = channels.first?.count else { return .changing }
        let reach = steadinessReach(sampleRate)
        let skip = Int(Double(sampleRate) * Sound.steady.maxSeconds)
        guard leftEnd - reach >= 0, rightStart + reach <= count else { return .changing }
        let block = sampleRate / 50
        let blocks = (reach - skip) / block
        func spread(_ from: Int) -> Double {
            // The channels' mix over the blocks, then each block's loudness.
            var mix = [Double](repeating: 0, count: blocks * block)
            mix.withUnsafeMutableBufferPointer { m in
                for channel in channels { channel.withUnsafeBufferPointer { x in for i in m.indices { m[i] += Double(x[from + i]) } } }
            }
            let levels = (0..<blocks).map { b -> Double in
                var sum = 0.0
                for i in (b * block)..<((b + 1) * block) { sum += mix[i] * mix[i] }
                return 10 * log10(sum / Double(block) + 1e-12)
            }
            let mean = levels.reduce(0, +) / Double(max(1, levels.count))
            return (levels.reduce(0) { $0 + ($1 - mean) * ($1 - mean) } / Double(max(1, levels.count))).squareRoot()
        }
        let steady = spread(leftEnd - reach) <= steadyDecibels && spread(rightStart + skip) <= steadyDecibels
        return steady ? .steady : .changing
    }

    /// Repairs the join where the left fragment ends at index `leftEnd` of `channels` and the right
    /// one starts at `rightStart` (`rightStart - leftEnd` samples of silence between them, at most
    /// `maxGap`, are filled too), changing at most `maxSpan` samples of each fragment (and at most
    /// `sound.maxSeconds`). `bridging`: the two sides are not one continuous waveform (the
    /// caller jumped between them), so they are crossfaded even where no damage shows. The
    /// caller must provide `context(maxSpan:sampleRate:)` samples beyond
    /// each edge; with less, or with a longer gap, nothing changes.
    ///
    /// `shortening`: for steady sound, the replaced span is written that many samples shorter
    /// (longer when negative), so `channels` change length and the audio after the join comes
    /// that much earlier (the caller's jump across the join, made inside sound that is repeated
    /// anyway); the result's `shortened` says it was done. Changing sound ignores it.
    @discardableResult
    public static func repair(
        _ channels: inout [[Float]], leftEnd: Int, rightStart: Int, maxSpan: Int, sampleRate: Int, sound: Sound, bridging: Bool = false,
        shortening: Int = 0
    ) -> Repair {
        let span = min(maxSpan, Int(Double(sampleRate) * sound.maxSeconds))
        guard let count = channels.first?.count, span > 0 else { return .none }
        let gap = rightStart - leftEnd
        let need = context(maxSpan: span, sampleRate: sampleRate)
        guard gap >= 0, gap <= maxGap(sampleRate), leftEnd - need >= 0, rightStart + need <= count else { return .none }
        let fit = detectSamples(sampleRate)
        // The channels' mix over what is read: mix[i - origin] for sample i.
        let origin = leftEnd - need
        var mix = [Float](repeating: 0, count: rightStart + need - origin)
        for ch in channels {
            ch.withUnsafeBufferPointer { x in mix.withUnsafeMutableBufferPointer { m in for i in m.indices { m[i] += x[origin + i] } } }
        }

        let leftSide = Array(mix[(leftEnd - span - fit - origin)..<(leftEnd - origin)])
        let rightSide = reversed(mix, (rightStart - origin)..<(rightStart + span + fit - origin))
        // Sound meeting silence is not one waveform to continue: left as it is.
        guard !isSilent(leftSide.prefix(fit)), !isSilent(rightSide.prefix(fit)) else { return .none }
        // Sides that do not continue each other (`bridging`) are crossfaded over at least
        // `bridgeSeconds` each, damaged or not.
        var least = bridging ? min(span, Int(Double(sampleRate) * bridgeSeconds)) : 0
        // A shortening replaces at least that much and `bridgeSeconds` more on each side.
        if sound == .steady && shortening != 0 { least = max(least, min(span, abs(shortening) + Int(Double(sampleRate) * bridgeSeconds))) }
        // Damage is looked for in each channel (a codec may damage one more than the other).
        let smoothing = smoothingSamples(sampleRate)
        var before = least, after = least
        var leftFilters: [[Double]] = [], rightFilters: [[Double]] = []  // each channel's predictor
        for x in channels {
            let l = damage(forward: Array(x[(leftEnd - span - fit)..<leftEnd]), span: span, threshold: sound.threshold, smoothing: smoothing)
            let r = damage(forward: reversed(x, rightStart..<(rightStart + span + fit)), span: span, threshold: sound.threshold, smoothing: smoothing)
            before = max(before, l.samples)
            after = max(after, r.samples)
            leftFilters.append(l.filter)
            rightFilters.append(r.filter)
        }
        guard before > 0 || after > 0 || gap > 0 else { return .none }
        let start = leftEnd - before, end = rightStart + after
        let n = end - start
        // Periods are found on the mix, so every channel repeats the same stretch of time.
        // Each side's audio beyond the damage, as far as filling reads (`historySamples`).
        let h = historySamples(sampleRate)
        let periods =
            sound == .steady
            ? (
                period(Array(mix[(start - h - origin)..<(start - origin)]), sampleRate: sampleRate),
                period(reversed(mix, (end - origin)..<(end + h - origin)), sampleRate: sampleRate)
            ) : nil
        if let (pl, pr) = periods {
            // Each side's sound repeated across what is written (`m` samples), `reach` samples
            // further (the backward extension's extra samples come first), then brought into
            // phase with each other (`inPhase`) before they are crossfaded.
            let m = n - shortening
            guard m >= n / 2 else { return .none }
            let reach = max(pl, pr) / 2 + 2
            var forwards: [[Float]] = [], backwards: [[Float]] = []
            for c in channels.indices {
                let x = channels[c]
                forwards.append(repeated(Array(x[(start - h)..<start]), period: pl, count: m + reach, sampleRate: sampleRate, lead: leftFilters[c]))
                backwards.append(
                    reversed(repeated(reversed(x, end..<(end + h)), period: pr, count: m + reach, sampleRate: sampleRate, lead: rightFilters[c])))
            }
            let longest = periodRange(sampleRate).upperBound
            let shift = max(pl, pr) < longest ? phaseShift(forwards, backwards, count: m, reach: reach, period: min(pl, pr), sampleRate: sampleRate) : 0
            let fade = weights(m)
            for c in channels.indices {
                channels[c].replaceSubrange(start..<end, with: inPhase(forwards[c], backwards[c], count: m, reach: reach, shift: shift, crossfade: fade))
            }
            return Repair(before: before, after: after, shortened: shortening)
        }
        let crossfade = weights(n)
        for c in channels.indices {
            let x = channels[c]
            let left = Array(x[(start - h)..<start])
            let right = reversed(x, end..<(end + h))
            let forward = predicted(left, count: n, sampleRate: sampleRate)
            let backward = reversed(predicted(right, count: n, sampleRate: sampleRate))
            var joined = [Float](repeating: 0, count: n)
            for k in 0..<n { joined[k] = (1 - crossfade[k]) * forward[k] + crossfade[k] * backward[k] }
            let window = levelWindow(sampleRate)
            level(&joined, from: rms(left.suffix(window)), to: rms(right.suffix(window)), window: window)
            for k in 0..<n { channels[c][start + k] = joined[k] }
        }
        return Repair(before: before, after: after)
    }

    /// The lag d within half a `period` either way at which the forward extensions, read d
    /// samples on, match the backward ones (normalised correlation of the channel mixes over
    /// `periodWindow` samples, or two periods if shorter, around the middle of the `count`
    /// replaced): of the lags matching within 0.01 of
    /// the best, the smallest (a tone matches itself every period of its own, and `period` may
    /// span several); 0 when nothing matches well (the two sides are not one tone).
    /// `forwards[c][k]` continues the left side at span sample k; `backwards[c][reach + k]`
    /// continues the right side there.
    static func phaseShift(_ forwards: [[Float]], _ backwards: [[Float]], count n: Int, reach: Int, period: Int, sampleRate: Int) -> Int {
        let half = min(period / 2, reach - 2)
        let w = min(2 * period, periodWindow(sampleRate), n - half)
        let from = max(half, (n - w) / 2)
        guard half > 0, w >= 32, from + w + half <= n + reach else { return 0 }
        func mix(_ x: [[Float]], _ range: Range<Int>) -> [Float] {
            var m = [Float](repeating: 0, count: range.count)
            for ch in x { for i in range { m[i - range.lowerBound] += ch[i] } }
            return m
        }
        let b = mix(backwards, (reach + from)..<(reach + from + w))
        let f = mix(forwards, (from - half)..<(from + w + half))
        let eb = b.reduce(0) { $0 + $1 * $1 }
        guard eb > 0 else { return 0 }
        let scores = (-half...half).map { d -> (lag: Int, score: Float) in
            var dot: Float = 0, ef: Float = 0
            for i in 0..<w {
                let y = f[i + half + d]
                dot += y * b[i]
                ef += y * y
            }
            return (d, ef > 0 ? dot / (eb * ef).squareRoot() : 0)
        }
        let best = scores.map(\.score).max() ?? 0
        guard best >= 0.8 else { return 0 }
        return scores.filter { $0.score >= best - 0.01 }.min { abs($0.lag) < abs($1.lag) }?.lag ?? 0
    }

    /// `count` samples from the forward extension into the backward one with no loss of level
    /// where the two are out of phase: the forward one is read `shift` samples further, and the
    /// backward one `shift` samples less far, as the `crossfade` moves over to it (each side
    /// unchanged at its own edge), so both read the same phase all along. A change of speed of
    /// at most half a period over the span, in place of the dip or cancellation of crossfading
    /// two copies of a tone out of phase.
    static func inPhase(_ forward: [Float], _ backward: [Float], count n: Int, reach: Int, shift: Int, crossfade: [Float]) -> [Float] {
        var out = [Float](repeating: 0, count: n)
        let d = Double(shift)
        for k in 0..<n {
            let u = Double(crossfade[k])
            let f = interpolated(forward, Double(k) + d * u)
            let b = interpolated(backward, Double(reach + k) - d * (1 - u))
            out[k] = (1 - crossfade[k]) * f + crossfade[k] * b
        }
        return out
    }

    /// `x` at position `t` (Catmull-Rom between its samples; the edge samples beyond its ends).
    static func interpolated(_ x: [Float], _ t: Double) -> Float {
        let i = Int(t.rounded(.down))
        let f = Float(t - Double(i))
        func at(_ j: Int) -> Float { x[min(max(j, 0), x.count - 1)] }
        if f == 0 { return at(i) }
        return catmullRom(at(i - 1), at(i), at(i + 1), at(i + 2), f)
    }

    /// Catmull-Rom interpolation between `p1` (f = 0) and `p2` (f = 1), with their neighbours
    /// `p0` and `p3`.
    @inline(__always) static func catmullRom(_ p0: Float, _ p1: Float, _ p2: Float, _ p3: Float, _ f: Float) -> Float {
        let a = -0.5 * p0 + 1.5 * p1 - 1.5 * p2 + 0.5 * p3
        let b = p0 - 2.5 * p1 + 2 * p2 - 0.5 * p3
        let c = -0.5 * p0 + 0.5 * p2
        return ((a * f + b) * f + c) * f + p1
    }

    /// `x[range]` (all of `x` by default) in reverse order: the right side of a join is read
    /// backwards from its edge.
    static func reversed(_ x: [Float], _ range: Range<Int>? = nil) -> [Float] {
        let r = range ?? x.indices
        return [Float](unsafeUninitializedCapacity: r.count) { out, count in
            x.withUnsafeBufferPointer { src in
                for k in 0..<r.count { out[k] = src[r.upperBound - 1 - k] }
            }
            count = r.count
        }
    }

    /// Longest silence between two fragments that is filled (a video frame at 24 fps).
    public static func maxGap(_ sampleRate: Int) -> Int { sampleRate / 24 }

    public static func detectSamples(_ sampleRate: Int) -> Int { min(2048, Int(Double(sampleRate) * detectSeconds)) }
    /// Samples over which the prediction error's power is measured (2.5 ms).
    static func smoothingSamples(_ sampleRate: Int) -> Int { max(16, sampleRate / 400) }
    /// Shortest and longest period looked for (2.5 ms and 30 ms), and the stretch compared.
    static func periodRange(_ sampleRate: Int) -> ClosedRange<Int> { (sampleRate / 400)...(sampleRate * 3 / 100) }
    static func periodWindow(_ sampleRate: Int) -> Int { sampleRate / 100 }

    /// Samples `repair` reads beyond each edge.
    public static func context(maxSpan: Int, sampleRate: Int) -> Int {
        maxSpan + max(detectSamples(sampleRate) + detectOrder, historySamples(sampleRate))
    }

    /// Samples before a replaced span that filling reads: the period search (the longest period,
    /// the stretch compared and a coarse step), the repeated period with its overlap, the
    /// predictor's fit and the loudness window, whichever is longest.
    static func historySamples(_ sampleRate: Int) -> Int {
        let searching = periodRange(sampleRate).upperBound + periodWindow(sampleRate) + coarseStep
        let repeating = periodRange(sampleRate).upperBound * 5 / 4 + detectOrder
        return max(searching, repeating, detectSamples(sampleRate) + detectOrder, levelWindow(sampleRate))
    }

    /// A crossfade over n samples from one side (0) to the other (1), raised cosine: element k is
    /// 0.5 - 0.5 cos(pi (k + 0.5) / n). The cosines come from turning a unit vector by a fixed
    /// angle sample after sample, restarted from an exact cosine every 32 samples (the rounding
    /// stays far below a Float's).
    static func weights(_ n: Int) -> [Float] {
        let step = Double.pi / Double(n)
        let (turnSin, turnCos) = (sin(step), cos(step))
        var out = [Float](repeating: 0, count: n)
        var k = 0
        while k < n {
            let angle = step * (Double(k) + 0.5)
            var x = cos(angle), y = sin(angle)
            for j in k..<min(n, k + 32) {
                out[j] = Float(0.5 - 0.5 * x)
                (x, y) = (x * turnCos - y * turnSin, x * turnSin + y * turnCos)
            }
            k += 32
        }
        return out
    }

    // MARK: Detection

    /// Below -80 dBFS (mean square of the channel mix).
    static func isSilent(_ x: ArraySlice<Float>) -> Bool {
        x.reduce(0) { $0 + Double($1) * Double($1) } / Double(max(1, x.count)) < 1e-8
    }

    /// Damaged samples at the end of `x`, whose last `span` samples may be damaged and whose
    /// audio before that is taken as clean: from the first sample where the prediction error's
    /// power over `smoothing` samples exceeds `threshold` squared times its power over the clean
    /// audio. 0 for audio the predictor follows.
    /// Also the predictor fitted on the clean audio.
    static func damage(forward x: [Float], span: Int, threshold: Float, smoothing: Int) -> (samples: Int, filter: [Double]) {
        let order = detectOrder
        let clean = x.count - span
        let (a, level) = x.withUnsafeBufferPointer { burg(UnsafeBufferPointer(rebasing: $0[0..<clean]), order: order) }
        if level <= 0 { return (0, a) }
        // Prediction errors over the span and the `smoothing` samples before it, worked out a
        // chunk at a time up to the first damage.
        let filter = a.map(Float.init)
        let first = clean - smoothing
        let chunk = 512
        var errors = residuals(x, filter, from: first, to: min(x.count, clean + chunk))
        let limit = Double(threshold * threshold) * level * Double(smoothing)
        var power = errors[0..<smoothing].reduce(0.0) { $0 + Double($1) }
        var k = smoothing
        while true {
            while k < errors.count {
                power += Double(errors[k]) - Double(errors[k - smoothing])
                if power > limit {
                    // The window ending at k is the first too strong: damage starts in it.
                    return (min(span, x.count - first - k + smoothing / 2 + guardSamples), a)
                }
                k += 1
            }
            let done = first + errors.count
            if done == x.count { return (0, a) }
            errors += residuals(x, filter, from: done, to: min(x.count, done + chunk))
        }
    }

    /// The squared prediction errors of the filter `a` (a[0] = 1) over x[from..<to] (from >=
    /// a.count - 1), eight at a time in SIMD lanes. In single precision: the errors of audio a
    /// codec has been through are far above its rounding.
    static func residuals(_ x: [Float], _ a: [Float], from: Int, to: Int) -> [Float] {
        let order = a.count - 1
        let n = to - from
        var out = [Float](repeating: 0, count: n)
        x.withUnsafeBufferPointer { xp in
            a.withUnsafeBufferPointer { ap in
                out.withUnsafeMutableBufferPointer { op in
                    let raw = UnsafeRawPointer(xp.baseAddress!)
                    let dst = UnsafeMutableRawPointer(op.baseAddress!)
                    var k = 0
                    while k + 8 <= n {
                        let i = from + k
                        var e = SIMD8<Float>(repeating: 0)
                        for j in 0...order {
                            e += ap[j] * raw.loadUnaligned(fromByteOffset: (i - j) * 4, as: SIMD8<Float>.self)
                        }
                        dst.storeBytes(of: e * e, toByteOffset: k * 4, as: SIMD8<Float>.self)
                        k += 8
                    }
                    while k < n {
                        let i = from + k
                        var e: Float = 0
                        for j in 0...order { e += ap[j] * xp[i - j] }
                        op[k] = e * e
                        k += 1
                    }
                }
            }
        }
        return out
    }

    /// Burg's method: the prediction-error filter a[0] = 1, a[1...order], of `x`, and the mean
    /// square of its prediction errors over `x` (after its first `order` samples).
    ///
    /// The backward errors are kept one index lower at every stage (`b[t]` holds stage m's
    /// backward error at sample t + m), so each stage pairs `f[m + 1 + t]` with `b[t]` and
    /// updates both in place, eight pairs at a time in SIMD lanes. The errors are single
    /// precision (the audio a codec has been through is far noisier than its rounding); the
    /// reflection coefficients and the filter are double.
    static func burg(_ x: UnsafeBufferPointer<Float>, order: Int) -> (filter: [Double], errorPower: Double) {
        let n = x.count
        var f = Array(x), b = f
        var a = [Double](repeating: 0, count: order + 1)
        a[0] = 1
        var previous = a
        let stages = min(order, max(0, n - 1))
        f.withUnsafeMutableBufferPointer { fb in
            b.withUnsafeMutableBufferPointer { bb in
                for m in 0..<stages {
                    let fp = UnsafeMutableRawPointer(fb.baseAddress! + m + 1), bp = UnsafeMutableRawPointer(bb.baseAddress!)
                    let count = n - 1 - m
                    var num8 = SIMD8<Float>(repeating: 0), den8 = SIMD8<Float>(repeating: 0)
                    var t = 0
                    while t + 8 <= count {
                        let u = fp.loadUnaligned(fromByteOffset: t * 4, as: SIMD8<Float>.self)
                        let v = bp.loadUnaligned(fromByteOffset: t * 4, as: SIMD8<Float>.self)
                        num8 += u * v
                        den8 += u * u + v * v
                        t += 8
                    }
                    var num = Double(num8.sum()), den = Double(den8.sum())
                    while t < count {
                        let u = Double(fb[m + 1 + t]), v = Double(bb[t])
                        num += u * v
                        den += u * u + v * v
                        t += 1
                    }
                    let k = den > 0 ? -2 * num / den : 0
                    // a <- a + k * reversed(a), over a[0...m+1] (a[m+1] is 0 before).
                    for i in 0...(m + 1) { previous[i] = a[i] }
                    for i in 0...(m + 1) { a[i] = previous[i] + k * previous[m + 1 - i] }
                    let kf = Float(k)
                    t = 0
                    while t + 8 <= count {
                        let u = fp.loadUnaligned(fromByteOffset: t * 4, as: SIMD8<Float>.self)
                        let v = bp.loadUnaligned(fromByteOffset: t * 4, as: SIMD8<Float>.self)
                        fp.storeBytes(of: u + kf * v, toByteOffset: t * 4, as: SIMD8<Float>.self)
                        bp.storeBytes(of: v + kf * u, toByteOffset: t * 4, as: SIMD8<Float>.self)
                        t += 8
                    }
                    while t < count {
                        let u = fb[m + 1 + t], v = bb[t]
                        fb[m + 1 + t] = u + kf * v
                        bb[t] = v + kf * u
                        t += 1
                    }
                }
            }
        }
        // The forward errors left after the last stage are the filter's prediction errors.
        let tail = f[stages...]
        return (a, tail.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(max(1, tail.count)))
    }

    // MARK: Filling

    /// The lag within `periodRange` at which the end of `history` best matches itself
    /// (normalised correlation over `periodWindow` samples); the longest lag when nothing
    /// matches well (noise: repeating a long stretch is not heard as a repeat). Searched first on
    /// the history averaged over `coarseStep` samples, then around the best few coarse lags at
    /// full resolution (a sixteenth of the work of a full search).
    static func period(_ history: [Float], sampleRate: Int) -> Int {
        let range = periodRange(sampleRate), w = periodWindow(sampleRate)
        let n = history.count
        guard n >= range.upperBound + w + coarseStep else { return min(range.upperBound, max(1, n / 2)) }
        let step = coarseStep
        // coarse[j] averages history[n - (m - j) * step ..< n - (m - j - 1) * step]: it ends where history ends.
        let m = n / step
        var coarse = [Float](repeating: 0, count: m)
        for j in 0..<m {
            let start = n - (m - j) * step
            var sum: Float = 0
            for k in start..<(start + step) { sum += history[k] }
            coarse[j] = sum / Float(step)
        }
        let coarseRange = (range.lowerBound / step)...(range.upperBound / step)
        var candidates: [(lag: Int, score: Float)] = []  // the three best, best first
        for s in scores(coarse, window: w / step, lags: coarseRange) {
            guard candidates.count < 3 || s.score > candidates[2].score else { continue }
            candidates.insert(s, at: candidates.firstIndex { s.score > $0.score } ?? candidates.count)
            if candidates.count > 3 { candidates.removeLast() }
        }
        var best = range.upperBound, bestScore: Float = 0.5
        for c in candidates {
            let lo = max(range.lowerBound, c.lag * step - step), hi = min(range.upperBound, c.lag * step + step)
            guard lo <= hi else { continue }
            for s in scores(history, window: w, lags: lo...hi) where s.score > bestScore {
                bestScore = s.score
                best = s.lag
            }
        }
        return best
    }

    /// Samples averaged into one for the coarse period search.
    static let coarseStep = 4

    /// The normalised correlation of the last `window` samples of `x` with the `window` samples
    /// `lag` earlier, for each lag (lags whose stretch has no energy are left out).
    static func scores(_ x: [Float], window w: Int, lags: ClosedRange<Int>) -> [(lag: Int, score: Float)] {
        let n = x.count
        return x.withUnsafeBufferPointer { h -> [(lag: Int, score: Float)] in
            let base = UnsafeRawPointer(h.baseAddress!)
            let ref = n - w
            // Eight samples at a time in SIMD lanes, the rest one by one.
            func dot(_ a: Int, _ b: Int) -> Float {
                var acc = SIMD8<Float>(repeating: 0)
                var k = 0
                while k + 8 <= w {
                    acc +=
                        base.loadUnaligned(fromByteOffset: (a + k) * 4, as: SIMD8<Float>.self)
                        * base.loadUnaligned(fromByteOffset: (b + k) * 4, as: SIMD8<Float>.self)
                    k += 8
                }
                var sum = acc.sum()
                while k < w {
                    sum += h[a + k] * h[b + k]
                    k += 1
                }
                return sum
            }
            let eRef = dot(ref, ref)
            guard eRef > 0 else { return [] }
            var out: [(lag: Int, score: Float)] = []
            out.reserveCapacity(lags.count)
            for lag in lags {
                let seg = ref - lag
                let e = dot(seg, seg)
                if e > 0 { out.append((lag, dot(ref, seg) / (eRef * e).squareRoot())) }
            }
            return out
        }
    }

    /// `count` samples continuing `history` by repeating its last `period` samples, each repeat
    /// crossfaded into the next over a quarter period (taken from the audio before it), and
    /// starting from the history's prediction by `lead` (the predictor of this steady sound)
    /// over `rampSamples` so the join is seamless.
    static func repeated(_ history: [Float], period: Int, count: Int, sampleRate: Int, lead filter: [Double]) -> [Float] {
        let n = history.count
        let overlap = max(8, period / 4)
        guard n >= period + overlap else { return predicted(history, count: count, sampleRate: sampleRate) }
        var out = [Float](repeating: 0, count: count)
        // One period plus the overlap before it, repeated every `period` samples.
        let grain = Array(history[(n - period - overlap)...])
        for k in 0..<min(count, period) { out[k] = history[n - period + k] }
        var at = period
        let fade = weights(overlap)
        while at - overlap < count {
            for i in 0..<grain.count {
                let j = at - overlap + i
                if j >= count { break }
                if i < overlap {
                    let u = fade[i]
                    out[j] = out[j] * (1 - u) + grain[i] * u
                } else {
                    out[j] = grain[i]
                }
            }
            at += period
        }
        let ramp = min(count, rampSamples(sampleRate))
        let lead = extrapolated(history, count: ramp, filter: filter)
        let rampWeights = weights(ramp)
        for k in 0..<ramp {
            let u = rampWeights[k]
            out[k] = lead[k] * (1 - u) + out[k] * u
        }
        return out
    }

    /// Samples over which a repeat takes over from the prediction (2.5 ms).
    static func rampSamples(_ sampleRate: Int) -> Int { max(16, sampleRate / 400) }

    /// `count` samples continuing `history` by the `detectOrder` predictor fitted on its last
    /// `fit` samples (default `detectSamples`).
    static func predicted(_ history: [Float], count: Int, sampleRate: Int, fit: Int? = nil) -> [Float] {
        let fitted = Array(history.suffix(fit ?? detectSamples(sampleRate)))
        let order = detectOrder
        guard fitted.count > 2 * order else { return [Float](repeating: 0, count: count) }
        return extrapolated(fitted, count: count, filter: fitted.withUnsafeBufferPointer { burg($0, order: order) }.filter)
    }

    /// `count` samples continuing `history` by the prediction-error filter `filter`.
    static func extrapolated(_ history: [Float], count: Int, filter a: [Double]) -> [Float] {
        let order = a.count - 1
        guard history.count >= order else { return [Float](repeating: 0, count: count) }
        var buf = history.suffix(order).map(Double.init)
        var out = [Float]()
        out.reserveCapacity(count)
        for _ in 0..<count {
            var p = 0.0
            let m = buf.count
            for j in 1...order { p -= a[j] * buf[m - j] }
            out.append(Float(p))
            buf.append(p)
        }
        return out
    }

    /// Samples over which loudness is measured (20 ms: several periods of anything audible).
    static func levelWindow(_ sampleRate: Int) -> Int { max(32, sampleRate / 50) }

    static func rms<C: Collection>(_ x: C) -> Float where C.Element == Float {
        Float((x.reduce(0) { $0 + Double($1) * Double($1) } / Double(max(1, x.count))).squareRoot())
    }

    /// Scales `x` down where it is louder (RMS over `window` samples around each sample) than the
    /// level moving from `from` to `to` along the crossfade: a predictor that grows over the span
    /// would otherwise make a bump. Only attenuates (0.5 ... 1: lifting a dip where the two
    /// predictions cancel brings out their beating as noise), easing to 1 at both ends so the
    /// span stays continuous with its neighbours.
    static func level(_ x: inout [Float], from: Float, to: Float, window: Int) {
        let n = x.count
        var sums = [Double](repeating: 0, count: n + 1)
        for k in 0..<n { sums[k + 1] = sums[k] + Double(x[k]) * Double(x[k]) }
        var gains = [Float](repeating: 1, count: n)
        let crossfade = weights(n)
        for k in 0..<n {
            let lo = max(0, k - window / 2), hi = min(n, k + window / 2 + 1)
            let local = Float(((sums[hi] - sums[lo]) / Double(hi - lo)).squareRoot())
            let target = (1 - crossfade[k]) * from + crossfade[k] * to
            let g = local > 1e-6 ? min(1, max(0.5, target / local)) : 1
            gains[k] = 1 + (g - 1) * Float(sin(Double.pi * (Double(k) + 0.5) / Double(n)))
        }
        for k in 0..<n { x[k] *= gains[k] }
    }
}
