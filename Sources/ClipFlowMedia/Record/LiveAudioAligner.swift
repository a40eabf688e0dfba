internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// Places a live microphone's audio on the capture clock (CLOCK_MONOTONIC, the clock camera
/// pictures are stamped on), so that sound and picture of the same instant meet in the file.
///
/// It takes `AudioChunk`s whose `firstSample` counts the samples the device delivered and whose
/// `clockTime` measures when the first was captured (late by up to tens of milliseconds), or
/// better, whose `readTime` says when they were read: their first sample was captured no later
/// than that minus their length (a bound that is never early; a sound server's latency estimate,
/// which `clockTime` is made from, is early by up to the length of a loss for seconds after one,
/// and at the start). The measure used is that bound where known, else `clockTime`. It
/// returns chunks on the clock's sample grid: sample `k` is at `k / sampleRate` seconds on the
/// capture clock. On the way:
/// - **clock model.** The device's sample clock against the capture clock is a line fitted to the
///   earliest measure of each half second (measures are only ever late, so the lower envelope is
///   the truth), over the last 30 seconds;
/// - **drift.** A device that runs fast or slow (hundreds of ppm are common) is followed by
///   libswresample's soft compensation: the resampling ratio is steered, never a jump, so no
///   click; at most `maxCorrection` (1%) pitch change while it catches up;
/// - **lost audio.** Samples the device lost (an overrun) are counted (`overruns`,
///   `lostSeconds`) and their place is left empty (the recorder fills it with silence of exactly
///   that length), so what follows stays in sync. A loss shows as the measures jumping late
///   against the model and staying late for `confirmSeconds` of the clock (a reader that was
///   only descheduled catches up within that). Measures are left out of the fit for
///   `settleSeconds` after a loss and wherever they fall early of the model.
///
/// The first output waits for `anchorSeconds` of audio, so the placement starts from a fitted
/// clock; chunks are held while a jump is being confirmed (`confirmSeconds`). Not thread-safe: one
/// owner (the recorder).
final class LiveAudioAligner {
    let sampleRate: Int
    let channels: Int
    /// Times audio was lost, and how many seconds were lost in all.
    private(set) var overruns = 0
    private(set) var lostSeconds = 0.0
    /// Peak level of the latest chunk, dBFS.
    private(set) var level: Double?
    /// The device's rate as measured against the capture clock (samples per second); nil until fitted.
    var measuredRate: Double? { fitted.map { 1 / $0.slope } }

    static let anchorSeconds = 0.3
    static let windowSeconds = 0.5
    static let historyWindows = 60
    /// A measure later than the model by this much is a suspected loss of audio...
    static let jumpSeconds = 0.035
    /// ... confirmed when every measure for this long stays that late.
    static let confirmSeconds = 0.15
    static let maxCorrection = 0.01
    /// Beyond this placement error (a model that moved a lot at once), the output is cut or
    /// padded instead of steered.
    static let hardErrorSeconds = 0.060

    static let settleSeconds = 5.0

    /// Model index of a device sample: delivered samples plus lost ones (the device's timeline).
    private var lost: Int64 = 0
    /// A chunk not yet given to the resampler: its model index and capture time measure.
    private struct Held {
        var index: Int64
        var time: Double
        var chunk: AudioChunk
        /// The measure minus the model's time for it.
        func lag(_ model: (Int64) -> Double) -> Double { time - model(index) }
    }
    private var held: [Held] = []
    /// The lowest lag of each quarter second of placed chunks (the last two seconds): how late
    /// measures are when nothing is lost.
    private var lagLows: [Double] = []
    private var lagWindow: (start: Int64, low: Double)?
    /// Capture time measures of chunks before this model index are left out of the fit.
    private var fitFrom: Int64 = 0
    /// Earliest-measure points, one per window, and the window being filled.
    private var points: [(index: Double, time: Double)] = []
    private var window: (start: Int64, index: Int64, time: Double)?
    /// time(index) = intercept + slope * index, from `points`.
    private var fitted: (intercept: Double, slope: Double)?
    /// Output: the grid index of the next sample the resampler will give.
    private var nextOut: Int64?
    /// Model index just past the last sample given to the resampler.
    private var fedEnd: Int64 = 0
    private var swr: OpaquePointer?

    init(sampleRate: Int, channels: Int) throws {
        self.sampleRate = sampleRate
        self.channels = channels
        var outLayout = AVChannelLayout()
        var inLayout = AVChannelLayout()
        av_channel_layout_default(&outLayout, Int32(channels))
        av_channel_layout_default(&inLayout, Int32(channels))
        _ = try FF.check(
            swr_alloc_set_opts2(&swr, &outLayout, AV_SAMPLE_FMT_FLT, Int32(sampleRate), &inLayout, AV_SAMPLE_FMT_FLT, Int32(sampleRate), 0, nil),
            "setting up the microphone's clock correction")
        _ = try FF.check(swr_init(swr), "setting up the microphone's clock correction")
        // Soft compensation needs the resampler even at equal rates: this turns it on.
        _ = try FF.check(swr_set_compensation(swr, 0, Int32(sampleRate)), "setting up the microphone's clock correction")
    }

    deinit { swr_free(&swr) }

    /// Takes one chunk from the device; returns what can be placed now (possibly nothing).
    func take(_ chunk: AudioChunk) throws -> [AudioChunk] {
        guard chunk.sampleRate == sampleRate, chunk.channels == channels else {
            throw ClipFlowError.badInput(
                "record: the microphone's audio changed from \(sampleRate) Hz x\(channels) to \(chunk.sampleRate) Hz x\(chunk.channels) mid-stream")
        }
        guard let time = chunk.clockTime else {
            throw ClipFlowError.badInput("record: live audio without a capture time")
        }
        level = Self.peak(chunk.samples)
        let index = chunk.firstSample + lost
        let measure = chunk.readTime.map { $0 - Double(chunk.frameCount) / Double(sampleRate) } ?? time
        observe(index: index, time: measure)
        held.append(Held(index: index, time: measure, chunk: chunk))
        return try release()
    }

    /// Everything held and buffered, placed (the end of the stream).
    func finish() throws -> [AudioChunk] {
        var out = try release(final: true)
        if nextOut != nil, let tail = try convert(nil, frames: 0) { out.append(tail) }
        return out
    }

    // MARK: the clock model

    private func observe(index: Int64, time: Double) {
        if index < fitFrom { return }
        // Early of the model by more than a jump: a latency estimate still catching up.
        if let m = modelTime(index), time < m - Self.jumpSeconds { return }
        let span = Int64(Self.windowSeconds * Double(sampleRate))
        if let w = window, index - w.start < span {
            if time - Double(index) / Double(sampleRate) < w.time - Double(w.index) / Double(sampleRate) { window = (w.start, index, time) }
            return
        }
        if let w = window {
            points.append((Double(w.index), w.time))
            if points.count > Self.historyWindows { points.removeFirst(points.count - Self.historyWindows) }
            fit()
        }
        window = (index, index, time)
    }

    /// Least squares over the windows' earliest measures; with fewer than 4 windows, the nominal
    /// rate through the earliest measure.
    private func fit() {
        let nominal = 1 / Double(sampleRate)
        guard points.count >= 4 else {
            let best = points.min { $0.time - $0.index * nominal < $1.time - $1.index * nominal }!
            fitted = (best.time - best.index * nominal, nominal)
            return
        }
        let n = Double(points.count)
        let mx = points.reduce(0) { $0 + $1.index } / n
        let my = points.reduce(0) { $0 + $1.time } / n
        var sxx = 0.0
        var sxy = 0.0
        for p in points {
            sxx += (p.index - mx) * (p.index - mx)
            sxy += (p.index - mx) * (p.time - my)
        }
        var slope = sxx > 0 ? sxy / sxx : nominal
        // A device off by more than 2% is not a clock difference but a mislabelled rate.
        slope = min(max(slope, nominal * 0.98), nominal * 1.02)
        // Through the lower envelope: shift the line down to the earliest residual.
        let residuals = points.map { $0.time - (my + ($0.index - mx) * slope) }
        let low = residuals.sorted()[max(0, residuals.count / 10)]
        fitted = (my - mx * slope + low, slope)
    }

    private func modelTime(_ index: Int64) -> Double? {
        fitted.map { $0.intercept + Double(index) * $0.slope }
    }

    // MARK: placing

    private func release(final: Bool = false) throws -> [AudioChunk] {
        if fitted == nil {
            // Anchor on the earliest measure of the first `anchorSeconds`.
            guard let first = held.first, let last = held.last else { return [] }
            let span = last.index + Int64(last.chunk.frameCount) - first.index
            if !final && Double(span) < Self.anchorSeconds * Double(sampleRate) { return [] }
            let nominal = 1 / Double(sampleRate)
            let best = held.min { $0.time - Double($0.index) * nominal < $1.time - Double($1.index) * nominal }!
            fitted = (best.time - Double(best.index) * nominal, nominal)
        }
        var out: [AudioChunk] = []
        let model = { (i: Int64) in self.modelTime(i)! }
        while let h = held.first {
            let usual = lagLows.min() ?? h.lag(model)
            if h.lag(model) - usual > Self.jumpSeconds && !final {
                // Confirm: every chunk measured in the next `confirmSeconds` stays late by about as much.
                if held.last!.time - h.time < Self.confirmSeconds { break }
                let lows = held.map { $0.lag(model) }.min()! - usual
                if lows > Self.jumpSeconds {
                    let missing = Int64((lows * Double(sampleRate)).rounded())
                    lost += missing
                    overruns += 1
                    lostSeconds += Double(missing) / Double(sampleRate)
                    for k in held.indices { held[k].index += missing }
                    // Measures since the loss are not the model's (they were taken before it was
                    // known), nor are the next few seconds' (see `settleSeconds`).
                    points.removeAll { $0.index >= Double(h.index) }
                    window = nil
                    fitFrom = h.index + missing + Int64(Self.settleSeconds * Double(sampleRate))
                    continue
                }
            }
            held.removeFirst()
            noteLag(h.index, h.lag(model))
            if let c = try place(h.index, h.chunk) { out.append(c) }
        }
        return out
    }

    /// Keeps the lowest arrival lag per quarter second of the last two seconds.
    private func noteLag(_ index: Int64, _ lag: Double) {
        let span = Int64(Double(sampleRate) / 4)
        if let w = lagWindow, index - w.start < span {
            lagWindow = (w.start, min(w.low, lag))
            return
        }
        if let w = lagWindow {
            lagLows.append(w.low)
            if lagLows.count > 8 { lagLows.removeFirst() }
        }
        lagWindow = (index, lag)
    }

    /// Gives one chunk to the resampler, steering its ratio so that the output stays where the
    /// model puts the input.
    private func place(_ index: Int64, _ chunk: AudioChunk) throws -> AudioChunk? {
        let rate = Double(sampleRate)
        if nextOut == nil {
            nextOut = Int64((modelTime(index)! * rate).rounded())
            fedEnd = index
        }
        if index > fedEnd {
            // Lost samples: leave their place empty on the grid.
            nextOut! += index - fedEnd
            fedEnd = index
        }
        let (intercept, slope) = fitted!
        // Where the input given so far should end on the grid, and where it does.
        let target = (intercept + Double(fedEnd) * slope) * rate
        let placed = Double(nextOut!) + Double(swr_get_delay(swr, Int64(sampleRate)))
        let error = target - placed
        if abs(error) > Self.hardErrorSeconds * rate {
            nextOut! += Int64(error.rounded())
        } else {
            // Per second of output: the model's ratio, plus half the error.
            let perSecond = rate * (slope * rate - 1) + error / 2
            let delta = min(max(perSecond, -Self.maxCorrection * rate), Self.maxCorrection * rate)
            _ = try FF.check(swr_set_compensation(swr, Int32(delta.rounded()), Int32(sampleRate)), "steering the microphone's clock correction")
        }
        fedEnd = index + Int64(chunk.frameCount)
        return try convert(chunk.samples, frames: chunk.frameCount)
    }

    /// Runs the resampler (nil input: flush) and stamps what it gives with the next grid index.
    private func convert(_ samples: [Float]?, frames: Int) throws -> AudioChunk? {
        let room = Int(swr_get_out_samples(swr, Int32(frames))) + 64
        var out = [Float](repeating: 0, count: room * channels)
        let made: Int32 = try out.withUnsafeMutableBytes { o in
            var op: UnsafeMutablePointer<UInt8>? = o.baseAddress?.assumingMemoryBound(to: UInt8.self)
            if let samples {
                return try samples.withUnsafeBytes { i in
                    var ip: UnsafePointer<UInt8>? = i.baseAddress?.assumingMemoryBound(to: UInt8.self)
                    return try FF.check(swr_convert(swr, &op, Int32(room), &ip, Int32(frames)), "correcting the microphone's clock")
                }
            }
            return try FF.check(swr_convert(swr, &op, Int32(room), nil, 0), "correcting the microphone's clock")
        }
        guard made > 0 else { return nil }
        out.removeLast((room - Int(made)) * channels)
        let c = AudioChunk(sampleRate: sampleRate, channels: channels, samples: out, firstSample: nextOut!)
        nextOut! += Int64(made)
        return c
    }

    static func peak(_ samples: [Float]) -> Double {
        var m: Float = 0
        for s in samples { m = max(m, abs(s)) }
        return m > 0 ? 20 * log10(Double(m)) : -120
    }
}
