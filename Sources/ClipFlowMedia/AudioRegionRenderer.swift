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
/// One encoder for all regions: each region's input is preceded by a fade-in frame and followed
/// by a fade-out frame, so the encoder sees gentle transitions between regions, and only packets
/// whose MDCT windows lie wholly inside a region's own, unfaded input are kept. (A fresh encoder per region
/// spent most of its time warming up.)
///
/// Threading: `renderAll` runs on one background thread and owns the encoder; it starts a second
/// thread that decodes and prepares the regions' PCM (and owns the decoders) one or two regions
/// ahead, so preparing region i+1 overlaps encoding region i. The encoder gets the same input in
/// the same order as when one thread did both, so its output is the same bit for bit.
struct AudioRegionRenderer {
    let plan: AudioJoinPlan
    let clips: [ClipInfo]
    let sampleRate: Int32
    let channels: Int32
    let bitRate: Int64

    static let spliceWindow = 256        // half-width of the correlation window
    static let spliceSearch: Int64 = 300 // search +- this many samples around the ideal jump
    static let crossfade = 256

    /// Renders every region in order; `deliver(i, packets)` is called as soon as region i is
    /// complete (packets' pts/dts are output frame indices). Stops when `shouldStop()` is true.
    func renderAll(shouldStop: () -> Bool, deliver: (Int, Result<[Packet], Error>) -> Void) {
        let F = AudioJoinPlan.frameSize
        let encoder: JoinEncoder
        do {
            encoder = try JoinEncoder(sampleRate: sampleRate, channels: channels, bitRate: bitRate)
        } catch {
            for i in plan.regions.indices { deliver(i, .failure(error)) }
            return
        }
        var pending: [(index: Int, start: Int64, keep: Range<Int64>, firstFrame: Int64)] = []
        var collected: [Int: [Packet]] = [:]
        var failed = false

        func take(_ packets: [Packet]) {
            for p in packets {
                let q = p.p.pointee.pts
                guard let r = pending.first(where: { q >= $0.start && q < $0.start + Int64($0.keep.count + 4) * F }) else { continue }
                let frame = r.firstFrame + (q - r.start) / F
                if r.keep.contains(frame) {
                    p.p.pointee.pts = frame
                    p.p.pointee.dts = frame
                    collected[r.index, default: []].append(p)
                }
            }
            // Deliver regions whose kept frames are all in.
            while let r = pending.first, (collected[r.index]?.count ?? 0) == r.keep.count {
                deliver(r.index, .success(collected.removeValue(forKey: r.index) ?? []))
                pending.removeFirst()
            }
        }

        // The inputs, prepared on another thread in region order.
        let inputs = RegionInputs(capacity: 2)
        let renderer = self
        let preparer = Thread {
            MediaThreads.yieldToCopy()
            var decoders = DecoderCache(clips: renderer.clips, channels: Int(renderer.channels))
            for region in renderer.plan.regions {
                if inputs.cancelled { inputs.put(.failure(ClipFlowError.interrupted)); continue }
                inputs.put(Result { try renderer.regionInput(region, decoders: &decoders) })
            }
            inputs.finish()
        }
        preparer.start()
        defer { inputs.cancel(); inputs.waitFinished() }

        var inputPos: Int64 = 0
        for (i, region) in plan.regions.enumerated() {
            if failed || shouldStop() {
                inputs.cancel()
                deliver(i, .failure(failed ? ClipFlowError.failure("audio join rendering stopped") : ClipFlowError.interrupted))
                continue
            }
            do {
                let pcm = try inputs.take().get()
                // Input frames: fade-in (a-2), a-1 ..< b+1, fade-out (b+1).
                pending.append((i, inputPos, region.frames, region.frames.lowerBound - 2))
                take(try encoder.encode(pcm, at: inputPos))
                inputPos += Int64(pcm[0].count)
            } catch {
                failed = true
                deliver(i, .failure(error))
                pending.removeAll { $0.index == i }
            }
        }
        do {
            take(try encoder.flush())
        } catch {
            for r in pending { deliver(r.index, .failure(error)) }
            pending.removeAll()
        }
        for r in pending {
            deliver(r.index, .failure(ClipFlowError.failure(
                "internal: re-encoded \(collected[r.index]?.count ?? 0) audio frames for a join, expected \(r.keep.count)")))
        }
    }

    /// PCM for output raw [(a-2)*1024, (b+2)*1024): a fade-in frame, the region's own input (the
    /// kept frames' windows, one frame back and one frame of look-ahead), and a fade-out frame.
    func regionInput(_ region: AudioJoinPlan.Region, decoders: inout DecoderCache) throws -> [[Float]] {
        let F = AudioJoinPlan.frameSize
        let P = plan.priming
        let r0 = (region.frames.lowerBound - 2) * F
        let r1 = (region.frames.upperBound + 2) * F
        let zone = region.slideZone
        // Timeline (without jump) at the start of the zone, and the jump wanted.
        let delta = region.rightShift - region.leftShift       // shift change
        let ideal = -delta                                      // content jump wanted
        let base0 = -P - region.leftShift                       // T = r + base0 before the zone
        let tLo = r0 + base0 - Self.spliceSearch - Int64(Self.spliceWindow) - 8
        let tHi = r1 + base0 + abs(ideal) + Self.spliceSearch + Int64(Self.spliceWindow) + 8
        let timeline = try decoders.timeline(plan: plan, from: tLo, to: tHi)

        // Choose the splice: at the middle of the zone, the jump J near `ideal` where the waveform
        // matches best; the rest is slid linearly over the zone.
        let mid = (zone.lowerBound + zone.upperBound) / 2
        var jump: Int64 = 0
        if ideal != 0 {
            jump = bestJump(timeline, at: mid + base0 - tLo, ideal: ideal)
        }
        let residual = Double(ideal - jump)
        let zlen = Double(zone.count)
        let half = Double(Self.crossfade) / 2

        let n = Int(r1 - r0)
        let chans = Int(channels)
        // Flat buffers read and written through pointers: per-sample nested-array access (a retain
        // and a uniqueness check for every sample of every channel) was most of this loop's time.
        let tn = timeline[0].count
        var source = [Float]()
        source.reserveCapacity(tn * chans)
        for ch in 0..<chans { source.append(contentsOf: timeline[ch]) }
        var flat = [Float](repeating: 0, count: n * chans)
        source.withUnsafeBufferPointer { src in
            flat.withUnsafeMutableBufferPointer { dst in
                for k in 0..<n {
                    let r = r0 + Int64(k)
                    let rd = Double(r)
                    var slide = 0.0
                    if r >= zone.upperBound { slide = residual }
                    else if r > zone.lowerBound { slide = residual * (rd - Double(zone.lowerBound)) / zlen }
                    let t = Double(r + base0 - tLo) + slide
                    // Crossfade from "before the jump" to "after the jump" around mid.
                    let w: Double
                    if jump == 0 || rd < Double(mid) - half { w = 0 }
                    else if rd >= Double(mid) + half { w = 1 }
                    else { w = 0.5 - 0.5 * cos(Double.pi * (rd - (Double(mid) - half)) / Double(Self.crossfade)) }
                    // Fades on the first and last frame (outside every kept packet's window).
                    var g: Float = 1
                    if k < Int(F) { g = Float(0.5 - 0.5 * cos(Double.pi * Double(k) / Double(F))) }
                    else if k >= n - Int(F) { g = Float(0.5 + 0.5 * cos(Double.pi * Double(k - (n - Int(F))) / Double(F))) }
                    for ch in 0..<chans {
                        let x = UnsafeBufferPointer(rebasing: src[(ch * tn)..<((ch + 1) * tn)])
                        var v: Float
                        if w == 0 { v = Self.interpolate(x, at: t) }
                        else if w == 1 { v = Self.interpolate(x, at: t + Double(jump)) }
                        else {
                            v = Float(1 - w) * Self.interpolate(x, at: t) + Float(w) * Self.interpolate(x, at: t + Double(jump))
                        }
                        dst[ch * n + k] = v * g
                    }
                }
            }
        }
        return (0..<chans).map { Array(flat[($0 * n)..<(($0 + 1) * n)]) }
    }

    /// The jump within `ideal +- spliceSearch` whose target waveform best matches the waveform at
    /// `center` (normalised cross-correlation on the channel mix); `ideal` itself for silence or noise.
    func bestJump(_ x: [[Float]], at center: Int64, ideal: Int64) -> Int64 {
        let w = Self.spliceWindow
        let c = Int(center)
        let count = x[0].count
        // Mono mix once; then plain dot products.
        var mix = [Float](repeating: 0, count: count)
        for ch in x.indices { for i in 0..<count { mix[i] += x[ch][i] } }
        return mix.withUnsafeBufferPointer { m -> Int64 in
            guard c - w >= 0, c + w <= count else { return ideal }
            var ea: Float = 0
            for k in (c - w)..<(c + w) { ea += m[k] * m[k] }
            if ea < 1e-9 { return ideal }
            // Candidate jumps whose window lies inside the buffer: o = c + j - w in [0, count - 2w].
            let jLo = max(ideal - Self.spliceSearch, Int64(w - c))
            let jHi = min(ideal + Self.spliceSearch, Int64(count - c - w))
            guard jLo <= jHi else { return ideal }
            let nj = Int(jHi - jLo) + 1
            // Dot products and energies, eight candidates at a time in SIMD lanes: each lane still
            // adds its terms in the same order as a plain loop would (so the result is the same bit
            // for bit), eight independent chains per instruction instead of one.
            var dots = [Float](repeating: 0, count: nj), ebs = [Float](repeating: 0, count: nj)
            let a = m.baseAddress! + (c - w)
            let n2 = 2 * w
            var q = 0
            while q + 8 <= nj {
                let b = UnsafeRawPointer(m.baseAddress! + (c + Int(jLo) + q - w))
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
                let b = m.baseAddress! + (c + Int(jLo) + q - w)
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

    /// Catmull-Rom interpolation; exact at integer positions.
    private static func interpolate(_ x: UnsafeBufferPointer<Float>, at t: Double) -> Float {
        let i = Int(t.rounded(.down))
        let f = Float(t - Double(i))
        if f == 0, i >= 0, i < x.count { return x[i] }
        func at(_ k: Int) -> Float { x[min(max(k, 0), x.count - 1)] }
        let p0 = at(i - 1), p1 = at(i), p2 = at(i + 1), p3 = at(i + 2)
        let a = -0.5 * p0 + 1.5 * p1 - 1.5 * p2 + 0.5 * p3
        let b = p0 - 2.5 * p1 + 2 * p2 - 0.5 * p3
        let c = -0.5 * p0 + 0.5 * p2
        return ((a * f + b) * f + c) * f + p1
    }
}

/// PCM of the regions, handed in order from the preparing thread to the encoding thread (at most
/// `capacity` waiting). Ownership of each array passes with it.
final class RegionInputs: @unchecked Sendable {
    private let cond = NSCondition()
    private var queue: [Result<[[Float]], Error>] = []
    private let capacity: Int
    private var cancelledFlag = false
    private var finished = false

    init(capacity: Int) { self.capacity = capacity }

    /// Set when the encoding side stops early: the preparer then does no more work.
    var cancelled: Bool { cond.lock(); defer { cond.unlock() }; return cancelledFlag }

    func put(_ r: Result<[[Float]], Error>) {
        cond.lock()
        while queue.count >= capacity && !cancelledFlag { cond.wait() }
        if !cancelledFlag { queue.append(r) }
        cond.broadcast()
        cond.unlock()
    }
    func take() -> Result<[[Float]], Error> {
        cond.lock()
        defer { cond.unlock() }
        while queue.isEmpty {
            if cancelledFlag || finished { return .failure(ClipFlowError.interrupted) }
            cond.wait()
        }
        let r = queue.removeFirst()
        cond.broadcast()
        return r
    }
    func cancel() {
        cond.lock(); cancelledFlag = true; queue.removeAll(); cond.broadcast(); cond.unlock()
    }
    func finish() {
        cond.lock(); finished = true; cond.broadcast(); cond.unlock()
    }
    func waitFinished() {
        cond.lock(); while !finished { cond.wait() }; cond.unlock()
    }
}

/// Decoders for the clips' audio, kept open while consecutive regions need the same clip.
/// Owned by the rendering thread.
///
/// Packets are read with pread at the places the probe noted for each clip's first and last
/// packets (`AudioEdges`), so no demuxer is opened again (~0.25 ms a clip, 60 clips, on the core
/// that also encodes the joins). A range outside those edges (a region deep inside a long clip:
/// not made by today's planner) is read through the clip's demuxer instead.
struct DecoderCache {
    let clips: [ClipInfo]
    let channels: Int
    private final class Source {
        let fd: Int32
        let decoder: CodecContext
        var demuxer: Demuxer? = nil
        init(fd: Int32, decoder: CodecContext) { self.fd = fd; self.decoder = decoder }
        deinit { Glibc.close(fd) }
    }
    private var open: [Int: Source] = [:]
    /// Demuxers opened for ranges outside the edge tables (tests look at it).
    private(set) var demuxerOpens = 0

    init(clips: [ClipInfo], channels: Int) {
        self.clips = clips
        self.channels = channels
    }

    /// Timeline samples [from, to) per channel (silence where no clip has audio).
    mutating func timeline(plan: AudioJoinPlan, from tLo: Int64, to tHi: Int64) throws -> [[Float]] {
        // One flat buffer, channel after channel, filled through a pointer (a nested-array store
        // per sample was most of the join preparation's own time), split at the end.
        let n = Int(tHi - tLo)
        var flat = [Float](repeating: 0, count: n * channels)
        var used = Set<Int>()
        try flat.withUnsafeMutableBufferPointer { buf in
            let out = buf.baseAddress!
            for i in clips.indices {
                let u = max(tLo, plan.clips[i].start), v = min(tHi, plan.ends[i])
                if u >= v { continue }
                used.insert(i)
                let start = plan.clips[i].start
                // decode passes only samples in [u - start, v - start): indices stay in [0, n).
                try decode(clip: i, from: u - start, to: v - start) { s, ch, src, stride, count in
                    let d = out + ch * n + Int(start + s - tLo)
                    for k in 0..<count { d[k] = src[k * stride] }
                }
            }
        }
        // Close clips no longer needed (regions go forward in time).
        if let lowest = used.min() { for k in open.keys where k < lowest { open[k] = nil } }
        return (0..<channels).map { Array(flat[($0 * n)..<(($0 + 1) * n)]) }
    }

    /// Decodes audible samples [s0, s1) of clip i, calling `put(firstSampleIndex, channel,
    /// source, stride, count)` for each run of decoded samples of one channel.
    private mutating func decode(clip i: Int, from s0: Int64, to s1: Int64,
                                 put: (Int64, Int, UnsafePointer<Float>, Int, Int) -> Void) throws {
        let clip = clips[i]
        guard let a = clip.audio else { return }
        let src: Source
        if let o = open[i] { src = o } else {
            let fd = Glibc.open(clip.path, O_RDONLY | O_CLOEXEC)
            if fd < 0 { throw ClipFlowError.badInput("input '\(clip.path)': \(String(cString: strerror(errno)))") }
            let dec: CodecContext
            do { dec = try CodecContext.aacDecoder(for: a, what: "decoding audio of '\(clip.path)'") }
            catch { Glibc.close(fd); throw error }
            src = Source(fd: fd, decoder: dec)
            open[i] = src
        }
        let dec = src.decoder
        let F = AudioJoinPlan.frameSize
        let tb = a.timeBase.av
        let samplesTB = AVRational(num: 1, den: a.sampleRate)
        // Start three frames early: the first decoded frame after a seek lacks its overlap.
        let seekSample = max(-a.priming, s0 - 3 * F)
        let seekTo = a.start + rescale(seekSample, samplesTB, tb)
        // AAC frames are 1024 samples each, back to back, whatever the container's timestamps say
        // (some muxers store jittered durations): frames are placed by packet index, the packet's
        // raw position rounded to the frame grid and handed to the decoder as its pts.
        let rawZero = rescale(a.start, tb, samplesTB) - a.priming
        let pkt = try Packet(), frame = try Frame()
        var done = false
        func drain() throws {
            while try dec.receive(frame) {
                defer { frame.unref() }
                let first = frame.f.pointee.pts - a.priming
                let ns = Int(frame.f.pointee.nb_samples)
                if first >= s1 { done = true; return }
                let fmt = AVSampleFormat(rawValue: frame.f.pointee.format)
                guard fmt == AV_SAMPLE_FMT_FLTP || fmt == AV_SAMPLE_FMT_FLT else {
                    throw ClipFlowError.failure("'\(clip.path)': unexpected decoded sample format")
                }
                let planar = fmt == AV_SAMPLE_FMT_FLTP
                for ch in 0..<channels {
                    guard let base = frame.data(planar ? ch : 0) else { continue }
                    let fp = UnsafeRawPointer(base).assumingMemoryBound(to: Float.self)
                    let lo = max(0, Int(s0 - first)), hi = min(ns, Int(s1 - first))
                    if lo >= hi { continue }
                    put(first + Int64(lo), ch, planar ? fp + lo : fp + lo * channels + ch, planar ? 1 : channels, hi - lo)
                }
            }
        }
        func send(pts: Int64) throws {
            let ptsSamples = rescale(pts, tb, samplesTB)
            let j = floorDiv(ptsSamples - rawZero + F / 2, F)
            pkt.p.pointee.pts = j * F
            pkt.p.pointee.dts = pkt.p.pointee.pts
            av_packet_free_side_data(pkt.p)     // no skip-samples: we trim ourselves
            _ = try dec.send(pkt)
            try drain()
        }
        // End of the clip's audio: drain the decoder's last frame, leave it ready for a seek.
        func finishStream() throws {
            _ = try dec.send(nil)
            try drain()
            avcodec_flush_buffers(dec.ctx)
        }

        // From the edge table: the packet a backward seek to `seekTo` lands on, then onwards.
        avcodec_flush_buffers(dec.ctx)
        if var k = a.edges.lastIndex(atOrBefore: seekTo) {
            while !done, k < a.edges.total {
                guard let e = a.edges.entry(k) else { break }    // past the edges: demuxer below
                pkt.unref()
                try FF.check(av_new_packet(pkt.p, e.size), "reading audio of '\(clip.path)'")
                try readFully(src.fd, into: pkt.p.pointee.data, count: Int(e.size), at: e.pos, path: clip.path)
                pkt.p.pointee.stream_index = Int32(a.streamIndex)
                try send(pts: e.timestamp)
                k += 1
            }
            if done { return }
            if k == a.edges.total { return try finishStream() }
            avcodec_flush_buffers(dec.ctx)
        }

        // Through the demuxer (exact-size reads of the audio samples only: through AVIO's 32 KiB
        // buffer each sample read pulled in the video around it, ~30 MB for 60 clips).
        let dmx: Demuxer
        if let d = src.demuxer { dmx = d } else {
            let reader = try MappedReader(path: clip.path)
            reader.directReads()
            let d = try Demuxer(path: clip.path, format: ClipProbe.demuxerName, reader: reader)
            for k in 0..<d.streamCount where k != a.streamIndex { d.stream(k).pointee.discard = AVDISCARD_ALL }
            src.demuxer = d
            demuxerOpens += 1
            dmx = d
        }
        try dmx.seek(stream: a.streamIndex, to: seekTo)
        while !done, try dmx.read(into: pkt) {
            guard Int(pkt.p.pointee.stream_index) == a.streamIndex else { continue }
            try send(pts: pkt.p.pointee.pts)
        }
        if !done { try finishStream() }
    }
}

/// Reads exactly `count` bytes at `offset`; a short file is an error naming it.
private func readFully(_ fd: Int32, into buf: UnsafeMutablePointer<UInt8>?, count: Int, at offset: Int64, path: String) throws {
    guard let buf else { throw ClipFlowError.failure("out of memory reading '\(path)'") }
    var done = 0
    while done < count {
        let n = pread(fd, buf + done, count - done, off_t(offset + Int64(done)))
        if n < 0 && errno == EINTR { continue }
        if n < 0 { throw ClipFlowError.badInput("input '\(path)': reading failed: \(String(cString: strerror(errno)))") }
        if n == 0 { throw ClipFlowError.badInput("input '\(path)' ends inside an audio sample (truncated?)") }
        done += n
    }
}

/// One AAC LC encoder fed region after region. Owned by the rendering thread.
final class JoinEncoder {
    let enc: CodecContext
    let channels: Int32
    let sampleRate: Int32
    private let pkt: Packet
    private let frame: Frame

    /// The "fast" coder without its stereo and noise searches. Measured on 60 s of a stereo tone
    /// (ffmpeg CLI, this machine): default two-loop coder 1.1 s, "fast" 2.6 s, "fast" without the
    /// mid/side search 0.7 s, and without M/S, PNS, TNS and intensity stereo 0.6 s. The mid/side
    /// search runs trial quantisations for every band; at the clips' own bit rate plain L/R coding
    /// loses nothing audible over a handful of frames, and intensity stereo and noise substitution
    /// would only smear a tone at a seam.
    static let encoderOptions = ["aac_coder": "fast", "aac_ms": "0", "aac_is": "0", "aac_pns": "0", "aac_tns": "0"]

    init(sampleRate: Int32, channels: Int32, bitRate: Int64) throws {
        self.channels = channels
        self.sampleRate = sampleRate
        enc = try CodecContext.encoder(named: "aac", what: "re-encoding audio at the joins", options: Self.encoderOptions) { c in
            c.pointee.sample_rate = sampleRate
            c.pointee.sample_fmt = AV_SAMPLE_FMT_FLTP
            av_channel_layout_default(&c.pointee.ch_layout, channels)
            // The clip's own rate (within AAC LC's range). The "fast" coder: the default two-loop
            // search took 1 ms a frame here, most of a 60-clip merge's time.
            let perChannel = Int64(channels)
            c.pointee.bit_rate = min(max(bitRate, 64_000 * perChannel), 256_000 * perChannel)
            c.pointee.time_base = AVRational(num: 1, den: sampleRate)
            c.pointee.profile = FF_PROFILE_AAC_LOW
        }
        guard enc.ctx.pointee.frame_size == Int32(AudioJoinPlan.frameSize),
              Int64(enc.ctx.pointee.initial_padding) == AudioJoinPlan.frameSize else {
            throw ClipFlowError.failure("the AAC encoder does not use 1024-sample frames with 1024 samples of delay")
        }
        pkt = try Packet()
        frame = try Frame()
    }

    /// Encodes PCM placed at input sample `at`; returns the packets that came out (pts: input
    /// sample index of the first sample each packet decodes to).
    func encode(_ input: [[Float]], at: Int64) throws -> [Packet] {
        let F = Int(AudioJoinPlan.frameSize)
        var out: [Packet] = []
        let n = input[0].count
        var pos = 0
        while pos < n {
            let len = min(F, n - pos)
            frame.unref()
            frame.f.pointee.nb_samples = Int32(len)
            frame.f.pointee.format = AV_SAMPLE_FMT_FLTP.rawValue
            frame.f.pointee.sample_rate = sampleRate
            av_channel_layout_default(&frame.f.pointee.ch_layout, channels)
            try FF.check(av_frame_get_buffer(frame.f, 0), "allocating audio")
            for ch in 0..<Int(channels) {
                guard let d = frame.data(ch) else { continue }
                let fp = UnsafeMutableRawPointer(d).assumingMemoryBound(to: Float.self)
                input[ch].withUnsafeBufferPointer { src in
                    for k in 0..<len { fp[k] = src[pos + k] }
                }
            }
            frame.f.pointee.pts = at + Int64(pos)
            try enc.send(frame: frame)
            out += try collect()
            pos += len
        }
        return out
    }

    func flush() throws -> [Packet] {
        try enc.send(frame: nil)
        return try collect()
    }

    private func collect() throws -> [Packet] {
        var out: [Packet] = []
        while try enc.receive(packet: pkt) {
            out.append(try pkt.clone())
            pkt.unref()
        }
        return out
    }
}
