internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// Re-encodes the regions of an `AudioJoinPlan`, in order, with one AAC encoder: decodes the clips'
/// audio around each join, trims it to the exact timeline (no priming, no padding), maps output
/// samples to timeline samples, and encodes frames that drop into the output grid between copied
/// frames.
///
/// The map. In each region the shift between output and timeline must move from the left clip's
/// copy shift to the right clip's. Most of that move is made as one splice at the point of the
/// slide zone where the waveform best matches itself a shift away (a whole number of periods for
/// tonal sound, crossfaded over 256 samples), and only the remainder (less than half a period for a
/// tone) is spread as a slight change of speed over the zone. Outside the zone the map equals the
/// copied frames' so MDCT aliasing cancels across the seams.
///
/// One encoder for all regions (its rate lowered for sound it cannot spend the clips' rate on, see
/// `codingRate(after:...)`): each region's input is preceded by a fade-in frame and followed by a
/// fade-out frame (one region's fade-out is mixed into the next one's fade-in), so the encoder
/// sees gentle transitions between regions, and only packets whose MDCT windows lie wholly inside
/// a region's own, unfaded input are kept. A region whose coding carries a burst of noise
/// (`JoinNoise`, found by decoding it) is coded again by fresh encoders at the clips' rate and
/// higher ones, and the quietest coding is kept.
///
/// Threading: `renderAll` runs on one background thread and owns the encoder; it starts a second
/// thread that decodes and prepares the regions' PCM (and owns the decoders) one or two regions
/// ahead, so preparing region i+1 overlaps encoding region i. The encoder gets every region's
/// input in region order, so its output does not depend on how far ahead the preparer runs.
struct AudioRegionRenderer {
    let plan: AudioJoinPlan
    let clips: [ClipInfo]
    let sampleRate: Int32
    let channels: Int32
    let bitRate: Int64

    static let spliceWindow = 256  // half-width of the correlation window
    static let spliceSearch: Int64 = 300  // search +- this many samples around the ideal jump
    static let crossfade = 256
    /// The splice's crossfade weights (raised cosine over `crossfade` samples) and the region's
    /// fade-in and fade-out over one frame, computed once.
    static let spliceWeights = (0..<crossfade).map { 0.5 - 0.5 * cos(Double.pi * Double($0) / Double(crossfade)) }
    static let fadeIn = (0..<Int(AudioJoinPlan.frameSize)).map { Float(0.5 - 0.5 * cos(Double.pi * Double($0) / Double(AudioJoinPlan.frameSize))) }
    static let fadeOut = (0..<Int(AudioJoinPlan.frameSize)).map { Float(0.5 + 0.5 * cos(Double.pi * Double($0) / Double(AudioJoinPlan.frameSize))) }

    /// A region as re-encoded: the frames (within the planned region's `frames`, around its
    /// `least`) and their packets, in order (pts/dts are output frame indices).
    struct Rendered {
        var frames: Range<Int64>
        var packets: [Packet]
        /// Whether the packets were coded at a lowered rate (`codingRate(after:...)`).
        var lowered = false
    }

    /// Renders every region in order; `deliver(i, rendered)` is called as soon as region i is
    /// complete. Stops when `shouldStop()` is true.
    func renderAll(threads: HelperThreads, shouldStop: () -> Bool, deliver: (Int, Result<Rendered, Error>) -> Void) {
        let F = AudioJoinPlan.frameSize
        let encoder: JoinEncoder
        do {
            encoder = try JoinEncoder(sampleRate: sampleRate, channels: channels, bitRate: bitRate)
        } catch {
            for i in plan.regions.indices { deliver(i, .failure(error)) }
            return
        }
        let noise: JoinNoise
        do {
            noise = try JoinNoise(encoder: encoder)
        } catch {
            for i in plan.regions.indices { deliver(i, .failure(error)) }
            return
        }
        // A region on its way through the encoder: its input (frame `firstFrame` on), the lowest
        // rate the encoder had while its packets came out (a frame comes out two frames of input
        // after it, so a region's last frames are coded at the next region's rate) and the
        // packets of its kept frames, after the packet of the frame before them (`lead`).
        struct Pending {
            var index: Int
            var start: Int64
            var keep: Range<Int64>
            var firstFrame: Int64
            var pcm: [[Float]]
            var rate: Int64
            var lead: Packet? = nil
            var packets: [Packet] = []
        }
        var pending: [Pending] = []
        var failed = false
        let nominal = encoder.codingRate
        // The rate the next regions are to be coded at, and while it is lowered, the region that
        // lowered it as the clips' rate coded it (`LoweredBar`).
        var wantedRate = nominal
        var loweredBar: LoweredBar?

        func take(_ packets: [Packet]) {
            for p in packets {
                let q = p.p.pointee.pts
                guard let i = pending.firstIndex(where: { q >= $0.start && q < $0.start + Int64($0.keep.count + 4) * F }) else { continue }
                let frame = pending[i].firstFrame + (q - pending[i].start) / F
                p.p.pointee.pts = frame
                p.p.pointee.dts = frame
                if pending[i].keep.contains(frame) {
                    pending[i].packets.append(p)
                    pending[i].rate = min(pending[i].rate, encoder.codingRate)
                } else if frame == pending[i].keep.lowerBound - 1 {
                    pending[i].lead = p
                }
            }
            // Deliver regions whose kept frames are all in.
            while let r = pending.first, r.packets.count == r.keep.count {
                pending.removeFirst()
                deliver(r.index, Result { try finished(r) })
            }
        }

        func levels(_ r: Pending, _ lead: Packet, _ kept: [Packet]) throws -> [JoinNoise.Level] {
            try noise.levels([lead] + kept, frames: ([lead] + kept).map { $0.p.pointee.pts }, input: r.pcm, inputFrame: r.firstFrame)
        }
        // The region coded by a fresh encoder at `rate`: the packet before its kept frames and theirs.
        func codedAfresh(_ r: Pending, rate: Int64) throws -> (lead: Packet, kept: [Packet])? {
            let fresh = try JoinEncoder(sampleRate: sampleRate, channels: channels, bitRate: rate)
            var kept: [Packet] = [], lead: Packet? = nil
            for p in try fresh.encode(r.pcm, at: 0) + fresh.flush() {
                let frame = r.firstFrame + p.p.pointee.pts / F
                p.p.pointee.pts = frame
                p.p.pointee.dts = frame
                if r.keep.contains(frame) { kept.append(p) } else if frame == r.keep.lowerBound - 1 { lead = p }
            }
            guard let lead, kept.count == r.keep.count else { return nil }
            return (lead, kept)
        }

        // The region as it is to be written. A region coded at the lowered rate that does not
        // pass the bar is coded again at the clips' rate, and the next regions go back to it; one
        // coded at the clips' rate that could not spend it, without a noise burst, lowers the
        // rate for the next (`codingRate(after:...)`). Where the packets code a noise burst,
        // those of the quietest coding by fresh encoders at the clips' rate and higher ones.
        func finished(_ r: Pending) throws -> Rendered {
            guard var lead = r.lead else { return Rendered(frames: r.keep, packets: r.packets) }
            var packets = r.packets
            var lowered = r.rate != nominal
            var first = try levels(r, lead, packets)
            // The levels judge the kept frames after the lead's.
            let energy = Self.energy(r.pcm, frames: r.keep, firstFrame: r.firstFrame)
            if lowered, loweredBar?.passes(first, energy: energy) != true {
                wantedRate = nominal
                loweredBar = nil
                guard let again = try codedAfresh(r, rate: nominal) else {
                    throw ClipFlowError.failure("internal: re-encoding a join region at the clips' rate gave too few frames")
                }
                (lead, packets) = again
                lowered = false
                first = try levels(r, lead, packets)
            } else if !JoinNoise.hasBurst(first), let bar = lowered ? loweredBar : LoweredBar(first, energy: energy) {
                let bits = Double(packets.reduce(0) { $0 + Int($1.p.pointee.size) } * 8) / Double(packets.count)
                if let rate = Self.codingRate(after: bits, current: r.rate, sampleRate: sampleRate, channels: channels), rate < wantedRate {
                    wantedRate = rate
                    loweredBar = bar
                }
            }
            guard JoinNoise.hasBurst(first) else { return Rendered(frames: r.keep, packets: packets, lowered: lowered) }
            var best = (packets: packets, worst: JoinNoise.worst(first), lowered: lowered)
            let rates = Set([1, 2, 4].map { JoinEncoder.rate(bitRate * $0, channels: channels) }).sorted()
            for rate in rates {
                guard let coded = try codedAfresh(r, rate: rate) else { continue }
                let worst = JoinNoise.worst(try levels(r, coded.lead, coded.kept))
                if worst < best.worst { best = (coded.kept, worst, false) }
            }
            return Rendered(frames: r.keep, packets: best.packets, lowered: best.lowered)
        }

        // The inputs (frames and PCM of each region, or the error preparing it), prepared on
        // another thread in region order, at most two ahead; each array passes to the encoding
        // side with it.
        let inputs = BoundedQueue<Result<(frames: Range<Int64>, pcm: [[Float]]), Error>>(capacity: 2)
        let preparing = DispatchGroup()
        let renderer = self
        preparing.enter()
        threads.start("join audio decoder") {
            MediaThreads.yieldToCopy()
            var decoders = DecoderCache(clips: renderer.clips, channels: Int(renderer.channels))
            for region in renderer.plan.regions {
                guard inputs.wantsMore else { break }
                guard inputs.push(Result { try renderer.regionInput(region, decoders: &decoders) }) == .ok else { break }
            }
            inputs.endOfStream()
            preparing.leave()
        }
        // Returns only once the preparer (and its decoders) are done.
        defer {
            inputs.flush()
            preparing.wait()
        }

        // A region's fade-out frame is held back and sent mixed with the next region's fade-in
        // frame: one frame between regions instead of two (neither is kept).
        var inputPos: Int64 = 0
        var fadeOut: [[Float]]? = nil
        let frame = Int(F)
        for i in plan.regions.indices {
            if failed || shouldStop() {
                inputs.flush()
                deliver(i, .failure(failed ? ClipFlowError.failure("audio join rendering stopped") : ClipFlowError.interrupted))
                continue
            }
            do {
                let (frames, pcm) = try (inputs.pull()?.element ?? .failure(ClipFlowError.interrupted)).get()
                if wantedRate != encoder.codingRate { encoder.setRate(wantedRate) }
                // Input frames: fade-in (a-2), a-1 ..< b+1, fade-out (b+1).
                pending.append(
                    Pending(index: i, start: inputPos, keep: frames, firstFrame: frames.lowerBound - 2, pcm: pcm, rate: encoder.codingRate))
                let n = pcm[0].count
                let sent = pcm.indices.map { ch -> [Float] in
                    var x = Array(pcm[ch][0..<(n - frame)])
                    if let fadeOut { for k in 0..<frame { x[k] += fadeOut[ch][k] } }
                    return x
                }
                fadeOut = pcm.map { Array($0[(n - frame)...]) }
                take(try encoder.encode(sent, at: inputPos))
                inputPos += Int64(n - frame)
            } catch {
                failed = true
                fadeOut = nil
                deliver(i, .failure(error))
                pending.removeAll { $0.index == i }
            }
        }
        do {
            if let fadeOut { take(try encoder.encode(fadeOut, at: inputPos)) }
            take(try encoder.flush())
        } catch {
            for r in pending { deliver(r.index, .failure(error)) }
            pending.removeAll()
        }
        for r in pending {
            deliver(
                r.index,
                .failure(
                    ClipFlowError.failure(
                        "internal: re-encoded \(r.packets.count) audio frames for a join, expected \(r.keep.count)")))
        }
    }

    /// A lower rate to code the next regions at, after a region coded at `current` whose frames
    /// took `usedBits` each on average; nil: keep `current`. Sound the fast coder cannot spend
    /// the rate on (a quiet steady chord: at its finest quantiser its frames stay under two thirds
    /// of the clips' rate) makes it code every frame six times over, chasing the rate. Asked for
    /// 1.1x the bits it uses (at least 16 kb/s a channel), it codes each frame once, with the
    /// quantiser it had reached.
    static func codingRate(after usedBits: Double, current: Int64, sampleRate: Int32, channels: Int32) -> Int64? {
        let frames = Double(sampleRate) / Double(AudioJoinPlan.frameSize)
        guard usedBits < 0.7 * Double(current) / frames else { return nil }
        let lowered = max(Int64(usedBits * 1.1 * frames), 16_000 * Int64(channels))
        return lowered < current ? lowered : nil
    }

    /// What a region coded at a lowered rate must match: the region that lowered it, as the
    /// clips' rate coded it. The same sound (its energy per frame within a factor of 2) with at
    /// most 1 dB more coding noise (`JoinNoise`'s, in the high band); richer or louder sound is
    /// coded at the clips' rate.
    struct LoweredBar {
        let energyPerFrame: Double
        let noisePerFrame: Double

        /// Sound energy per frame (all channels) under which a region is silence: an RMS of about
        /// -83 dBFS in stereo.
        static let silence = 1e-5

        /// `levels`: the coding's, frame by frame; `energy`: the sound's over those frames. Nil
        /// for silence (nothing to match).
        init?(_ levels: [JoinNoise.Level], energy: Double) {
            guard !levels.isEmpty, energy > Self.silence * Double(levels.count) else { return nil }
            energyPerFrame = energy / Double(levels.count)
            noisePerFrame = levels.reduce(0) { $0 + $1.noise } / Double(levels.count)
        }

        func passes(_ levels: [JoinNoise.Level], energy: Double) -> Bool {
            guard let coded = LoweredBar(levels, energy: energy) else { return false }
            return coded.energyPerFrame <= 2 * energyPerFrame && coded.energyPerFrame >= energyPerFrame / 2
                && coded.noisePerFrame <= 1.26 * noisePerFrame + JoinNoise.inaudible
        }
    }

    /// The energy of `pcm` (all channels) in `frames`, input frame `firstFrame` being its start.
    static func energy(_ pcm: [[Float]], frames: Range<Int64>, firstFrame: Int64) -> Double {
        let F = Int(AudioJoinPlan.frameSize)
        let from = Int(frames.lowerBound - firstFrame) * F
        let to = min(from + frames.count * F, pcm.first?.count ?? 0)
        guard from < to else { return 0 }
        return pcm.reduce(0) { sum, channel in channel[from..<to].reduce(sum) { $0 + Double($1) * Double($1) } }
    }

    /// The frames a region re-encodes and their PCM, for output raw [(a-2)*1024, (b+2)*1024): a
    /// fade-in frame, the region's own input (the kept frames' windows, one frame back and one
    /// frame of look-ahead), and a fade-out frame. A join of two clips is re-encoded over what
    /// the region must (`least`) plus what repairing the fragments' edges there needs, up to
    /// the region's `frames`.
    func regionInput(_ planned: AudioJoinPlan.Region, decoders: inout DecoderCache) throws -> (frames: Range<Int64>, pcm: [[Float]]) {
        let F = AudioJoinPlan.frameSize
        let P = plan.priming
        // Timeline (without jump) at the start of the zone, and the jump wanted.
        let delta = planned.rightShift - planned.leftShift  // shift change
        let ideal = -delta  // content jump wanted
        let base0 = -P - planned.leftShift  // T = r + base0 before the zone
        // The timeline under the most the region may re-encode and, around a join to repair,
        // the audio that tells steady sound from changing sound.
        let join = repairableJoin(planned)
        let rightStart = join.map { _ in plan.clips[planned.clips.upperBound].start }
        let reach = join == nil ? 0 : Int64(EdgeRepair.steadinessReach(Int(sampleRate)))
        let most = planned.frames
        let tLo = min((most.lowerBound - 2) * F + base0 - Self.spliceSearch - Int64(Self.spliceWindow) - 8, (join ?? 0) - reach)
        let tHi = max(
            (most.upperBound + 2) * F + base0 + abs(ideal) + Self.spliceSearch + Int64(Self.spliceWindow) + 8, (rightStart ?? 0) + reach + 1)
        var timeline = try decoders.timeline(plan: plan, from: tLo, to: tHi)
        var region = planned.rendering(planned.least)
        // The part of the jump made inside a repair of steady sound (`EdgeRepair`'s shortening).
        var shortened: Int64 = 0
        if let end = join, let start = rightStart {
            // The fragments' damaged edges, repaired where they meet on the timeline (one
            // continuous waveform there), inside what the zone reads so the seams stay exact.
            let widest = planned.slideZone
            let span = min(end - (widest.lowerBound + base0), widest.upperBound + base0 + ideal - start) - Self.repairMargin
            let left = Int(end - tLo), right = Int(start - tLo)
            var repair = EdgeRepair.Repair.none
            if span > 0 {
                let sound = EdgeRepair.sound(timeline, leftEnd: left, rightStart: right, sampleRate: Int(sampleRate))
                let lp = plan.clips[planned.clips.lowerBound]
                repair = EdgeRepair.repair(
                    &timeline, leftEnd: left, rightStart: right, maxSpan: Int(span), sampleRate: Int(sampleRate), sound: sound,
                    bridging: plan.ends[planned.clips.lowerBound] < lp.start + lp.length, shortening: Int(ideal))
                shortened = Int64(repair.shortened)
            }
            // The zone holds the repaired samples and the splice at the join, with a margin.
            let half = Int64(Self.crossfade) / 2
            let rawLeft = min(end - Int64(repair.before), end - half) - Self.repairMargin - base0
            let rawRight = max(start + Int64(repair.after) - base0 - ideal, end - base0 + half) + Self.repairMargin
            let a = max(most.lowerBound, min(planned.least.lowerBound, floorDiv(rawLeft, F) - 1))
            let b = min(most.upperBound, max(planned.least.upperBound, ceilDiv(rawRight, F) + 1))
            region = planned.rendering(a..<b)
        }
        let r0 = (region.frames.lowerBound - 2) * F
        let r1 = (region.frames.upperBound + 2) * F
        let zone = region.slideZone

        // Choose the splice: where the left clip ends (one join in the region; else at the middle
        // of the zone), the jump J near `ideal` where the waveform matches best; the rest is slid
        // linearly over the zone.
        let mid = join.map { $0 - base0 } ?? (zone.lowerBound + zone.upperBound) / 2
        let zlen = Double(zone.count)
        var jump: Int64 = 0
        if ideal != shortened {
            jump = bestJump(timeline, at: mid + base0 - tLo, ideal: ideal - shortened)
        }
        let residual = Double(ideal - shortened - jump)

        let n = Int(r1 - r0)
        let chans = Int(channels)
        // Only the part of the timeline the map reads, with the interpolation's neighbours: each
        // channel copied with two samples of its edge repeated on both sides, so reading a
        // neighbour never needs a bounds clamp.
        let reach0 = Int(r0 + base0 - tLo) - Int(abs(residual)) - 2
        let reach1 = Int(r1 + base0 - tLo) + Int(abs(residual)) + Int(abs(jump)) + 3
        let w0 = max(0, reach0), w1 = min(timeline[0].count, reach1)
        let tn = w1 - w0
        let stride = tn + 4
        var source = [Float]()
        source.reserveCapacity(stride * chans)
        for ch in 0..<chans {
            let x = timeline[ch]
            source.append(contentsOf: [x[w0], x[w0]])
            source.append(contentsOf: x[w0..<w1])
            source.append(contentsOf: [x[w1 - 1], x[w1 - 1]])
        }
        // Where each output sample reads (before the jump; after it, `jump` further), worked
        // out once for all channels. The crossfade between the two readings spans the samples
        // [fadeFrom, fadeTo) (none when there is no jump).
        var before = [Position](repeating: Position(index: 0, fraction: 0), count: n)
        let fadeFrom = jump == 0 ? n : min(n, max(0, Int(mid - Int64(Self.crossfade / 2) - r0)))
        let fadeTo = jump == 0 ? n : min(n, max(fadeFrom, Int(mid + Int64(Self.crossfade / 2) - r0)))
        var after = [Position](repeating: Position(index: 0, fraction: 0), count: n - fadeFrom)
        for k in 0..<n {
            let r = r0 + Int64(k)
            var slide = 0.0
            if r >= zone.upperBound { slide = residual } else if r > zone.lowerBound { slide = residual * (Double(r) - Double(zone.lowerBound)) / zlen }
            let t = Double(r + base0 - tLo - Int64(w0)) + slide
            before[k] = Position(t, within: tn)
            if k >= fadeFrom { after[k - fadeFrom] = Position(t + Double(jump), within: tn) }
        }
        var flat = [Float](repeating: 0, count: n * chans)
        source.withUnsafeBufferPointer { src in
            flat.withUnsafeMutableBufferPointer { dst in
                for ch in 0..<chans {
                    // x[i] is timeline sample w0 + i, for i in -2 ..< tn + 2.
                    let x = src.baseAddress! + ch * stride + 2
                    let out = dst.baseAddress! + ch * n
                    for k in 0..<fadeFrom { out[k] = before[k].value(x) }
                    for k in fadeFrom..<fadeTo {
                        let w = Self.spliceWeights[k + Int(r0 - mid) + Self.crossfade / 2]
                        out[k] = Float(1 - w) * before[k].value(x) + Float(w) * after[k - fadeFrom].value(x)
                    }
                    for k in fadeTo..<n { out[k] = after[k - fadeFrom].value(x) }
                    // Fades on the first and last frame (outside every kept packet's window).
                    let f = Int(F)
                    for k in 0..<f { out[k] *= Self.fadeIn[k] }
                    for k in 0..<f { out[n - f + k] *= Self.fadeOut[k] }
                }
            }
        }
        return (region.frames, (0..<chans).map { Array(flat[($0 * n)..<(($0 + 1) * n)]) })
    }

    /// Timeline position where the left clip's audio ends, for a region around one join whose
    /// zone has room for a repair on both sides (`AudioJoinPlan.repairRoom`); nil otherwise.
    func repairableJoin(_ region: AudioJoinPlan.Region) -> Int64? {
        guard region.clips.count == 2 else { return nil }
        let end = plan.ends[region.clips.lowerBound]
        let raw = end + plan.priming + region.leftShift
        let zone = region.slideZone
        guard raw - zone.lowerBound >= Self.repairMargin, zone.upperBound - raw >= Self.repairMargin else { return nil }
        return end
    }

    /// Samples left alone between a repair and the timeline the region's seams read.
    static let repairMargin: Int64 = 64

    /// The jump within `ideal +- spliceSearch` whose target waveform best matches the waveform at
    /// `center` (normalised cross-correlation on the channel mix); `ideal` itself for silence or noise.
    func bestJump(_ x: [[Float]], at center: Int64, ideal: Int64) -> Int64 {
        let w = Self.spliceWindow
        let c = Int(center)
        let count = x[0].count
        guard c - w >= 0, c + w <= count else { return ideal }
        // Candidate jumps whose window lies inside the buffer: o = c + j - w in [0, count - 2w].
        let jLo = max(ideal - Self.spliceSearch, Int64(w - c))
        let jHi = min(ideal + Self.spliceSearch, Int64(count - c - w))
        guard jLo <= jHi else { return ideal }
        // The channels' mix over the windows compared (mix[i - lo] for sample i); then plain dot
        // products.
        let lo = min(c - w, c + Int(jLo) - w), hi = max(c + w, c + Int(jHi) + w)
        var mix = [Float](repeating: 0, count: hi - lo)
        mix.withUnsafeMutableBufferPointer { m in
            for channel in x { channel.withUnsafeBufferPointer { ch in for i in m.indices { m[i] += ch[lo + i] } } }
        }
        return mix.withUnsafeBufferPointer { mixed -> Int64 in
            let m = mixed.baseAddress!  // m[i - lo]: sample i
            let a = m + (c - w - lo)  // the window around the splice
            let n2 = 2 * w
            var ea: Float = 0
            for k in 0..<n2 { ea += a[k] * a[k] }
            if ea < 1e-9 { return ideal }
            let nj = Int(jHi - jLo) + 1
            // Dot products and energies, eight candidates at a time in SIMD lanes: each lane still
            // adds its terms in the same order as a plain loop would (so the result is the same bit
            // for bit), eight independent chains per instruction instead of one.
            var dots = [Float](repeating: 0, count: nj), ebs = [Float](repeating: 0, count: nj)
            var q = 0
            while q + 8 <= nj {
                let b = UnsafeRawPointer(m + (c + Int(jLo) + q - w - lo))
                var d = SIMD8<Float>(repeating: 0), e = SIMD8<Float>(repeating: 0)
                for k in 0..<n2 {
                    let y = b.loadUnaligned(fromByteOffset: k * 4, as: SIMD8<Float>.self)
                    d += a[k] * y
                    e += y * y
                }
                for l in 0..<8 { dots[q + l] = d[l]; ebs[q + l] = e[l] }
                q += 8
            }
            while q < nj {
                let b = m + (c + Int(jLo) + q - w - lo)
                var d: Float = 0, e: Float = 0
                for k in 0..<n2 {
                    let y = b[k]
                    d += a[k] * y
                    e += y * y
                }
                dots[q] = d; ebs[q] = e
                q += 1
            }
            var best = ideal, bestScore = -Float.infinity
            for j in jLo...jHi {
                let dot = dots[Int(j - jLo)], eb = ebs[Int(j - jLo)]
                guard eb > 1e-9 else { continue }
                // Prefer jumps close to the ideal a little, so noise-like audio is not jumped far.
                let score = dot / (ea * eb).squareRoot() - 0.02 * Float(abs(j - ideal)) / Float(Self.spliceSearch)
                if score > bestScore { bestScore = score; best = j }
            }
            return best
        }
    }

    /// A reading position in the timeline: the sample at or before it and how far past it.
    struct Position {
        var index: Int
        var fraction: Float

        init(index: Int, fraction: Float) {
            self.index = index
            self.fraction = fraction
        }

        /// Position `t` of a timeline of `count` samples; beyond its first or last sample, the
        /// edge sample's (the caller's copy repeats each edge twice).
        init(_ t: Double, within count: Int) {
            let i = Int(t.rounded(.down))
            index = min(max(i, -1), count - 1)
            fraction = index == i ? Float(t - Double(i)) : 0
        }

        /// Catmull-Rom interpolation of x[index - 1 ... index + 2]; exact at integer positions.
        @inline(__always) func value(_ x: UnsafePointer<Float>) -> Float {
            if fraction == 0 { return x[index] }
            return EdgeRepair.catmullRom(x[index - 1], x[index], x[index + 1], x[index + 2], fraction)
        }
    }
}
