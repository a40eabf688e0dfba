internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// Re-encodes one region of an `AudioJoinPlan`: decodes the clips' audio around the join, trims it
/// to the exact timeline (no priming, no padding), maps output samples to timeline samples with the
/// region's slide, and encodes AAC frames that drop into the output grid between copied frames.
///
/// Runs on whichever thread calls `render`; owns everything it opens.
struct AudioRegionRenderer {
    let plan: AudioJoinPlan
    let clips: [ClipInfo]
    let sampleRate: Int32
    let channels: Int32
    let bitRate: Int64

    /// Encoded packets for output frames `region.frames`, in order; pts/dts are output frame indices
    /// times 1024 (the caller converts them to the output track's timing).
    func render(_ region: AudioJoinPlan.Region) throws -> [Packet] {
        let F = AudioJoinPlan.frameSize
        let P = plan.priming
        let r0 = (region.frames.lowerBound - 1) * F          // first raw sample fed to the encoder
        let r1 = (region.frames.upperBound + 1) * F          // one frame of look-ahead past the end
        func timeline(_ r: Int64) -> Double { Double(r - P) - region.shift(atRaw: Double(r)) }
        let tLo = Int64(timeline(r0).rounded(.down)) - 4
        let tHi = Int64(timeline(r1 - 1).rounded(.up)) + 4
        let count = Int(tHi - tLo)
        var pcm = [[Float]](repeating: [Float](repeating: 0, count: count), count: Int(channels))

        for (i, clip) in clips.enumerated() {
            let u = max(tLo, plan.clips[i].start), v = min(tHi, plan.ends[i])
            if u >= v { continue }
            try decode(clip: clip, from: u - plan.clips[i].start, to: v - plan.clips[i].start) { s, ch, value in
                let t = plan.clips[i].start + s
                if t >= u && t < v { pcm[ch][Int(t - tLo)] = value }
            }
        }

        // Encoder input: raw [r0, r1) mapped through the region's slide.
        let n = Int(r1 - r0)
        var input = [[Float]](repeating: [Float](repeating: 0, count: n), count: Int(channels))
        for k in 0..<n {
            let t = timeline(r0 + Int64(k)) - Double(tLo)
            for ch in 0..<Int(channels) { input[ch][k] = interpolate(pcm[ch], at: t) }
        }
        return try encode(input, firstRaw: r0, keep: region.frames)
    }

    /// Catmull-Rom interpolation; exact at integer positions.
    private func interpolate(_ x: [Float], at t: Double) -> Float {
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

    /// Decodes audible samples [s0, s1) of a clip, calling `put(sampleIndex, channel, value)`.
    private func decode(clip: ClipInfo, from s0: Int64, to s1: Int64,
                        put: (Int64, Int, Float) -> Void) throws {
        guard let a = clip.audio else { return }
        let dmx = try Demuxer(path: clip.path)
        let tb = a.timeBase.av
        let samplesTB = AVRational(num: 1, den: a.sampleRate)
        // Start three frames early: the first decoded frame after a seek lacks its overlap.
        let seekSample = max(-a.priming, s0 - 3 * AudioJoinPlan.frameSize)
        try dmx.seek(stream: a.streamIndex, to: a.start + rescale(seekSample, samplesTB, tb))
        let dec = try CodecContext.decoder(for: dmx.codecpar(a.streamIndex), what: "decoding audio of '\(clip.path)'")
        let pkt = try Packet(), frame = try Frame()
        var done = false
        // AAC frames are 1024 samples each, back to back, whatever the container's timestamps say
        // (some muxers store jittered durations). Frames are placed by packet index: the packet's
        // raw position is rounded to the frame grid and handed to the decoder as its pts.
        let rawZero = rescale(a.start, tb, samplesTB) - a.priming   // pts (samples) of raw sample 0
        func drain() throws {
            while try dec.receive(frame) {
                defer { frame.unref() }
                let raw = frame.f.pointee.pts
                let first = raw - a.priming
                let ns = Int(frame.f.pointee.nb_samples)
                if first >= s1 { done = true; return }
                let fmt = AVSampleFormat(rawValue: frame.f.pointee.format)
                guard fmt == AV_SAMPLE_FMT_FLTP || fmt == AV_SAMPLE_FMT_FLT else {
                    throw ClipFlowError.failure("'\(clip.path)': unexpected decoded sample format")
                }
                let planar = fmt == AV_SAMPLE_FMT_FLTP
                for ch in 0..<Int(channels) {
                    guard let base = frame.data(planar ? ch : 0) else { continue }
                    let fp = UnsafeRawPointer(base).assumingMemoryBound(to: Float.self)
                    for k in 0..<ns {
                        let s = first + Int64(k)
                        if s < s0 || s >= s1 { continue }
                        put(s, ch, planar ? fp[k] : fp[k * Int(channels) + ch])
                    }
                }
            }
        }
        while !done, try dmx.read(into: pkt) {
            guard Int(pkt.p.pointee.stream_index) == a.streamIndex else { continue }
            let ptsSamples = rescale(pkt.p.pointee.pts, tb, samplesTB)
            let j = floorDiv(ptsSamples - rawZero + AudioJoinPlan.frameSize / 2, AudioJoinPlan.frameSize)
            pkt.p.pointee.pts = j * AudioJoinPlan.frameSize
            pkt.p.pointee.dts = pkt.p.pointee.pts
            av_packet_free_side_data(pkt.p)     // no skip-samples: we trim ourselves
            _ = try dec.send(pkt)
            try drain()
        }
        if !done {
            _ = try dec.send(nil)
            try drain()
        }
    }

    private func encode(_ input: [[Float]], firstRaw r0: Int64, keep: Range<Int64>) throws -> [Packet] {
        let F = AudioJoinPlan.frameSize
        let enc = try CodecContext.encoder(named: "aac", what: "re-encoding audio at a join") { c in
            c.pointee.sample_rate = sampleRate
            c.pointee.sample_fmt = AV_SAMPLE_FMT_FLTP
            av_channel_layout_default(&c.pointee.ch_layout, channels)
            // A few frames only: spend bits freely (twice the clip's rate, within AAC LC's range).
            let perChannel = Int64(channels)
            c.pointee.bit_rate = min(max(2 * bitRate, 128_000 * perChannel), 256_000 * perChannel)
            c.pointee.time_base = AVRational(num: 1, den: sampleRate)
            c.pointee.profile = FF_PROFILE_AAC_LOW
        }
        guard enc.ctx.pointee.frame_size == Int32(F), Int64(enc.ctx.pointee.initial_padding) % F == 0 else {
            throw ClipFlowError.failure("AAC encoder frame layout is not 1024-sample frames")
        }
        var out: [Packet] = []
        let pkt = try Packet()
        func collect() throws {
            while try enc.receive(packet: pkt) {
                let frameIndex = floorDiv(pkt.p.pointee.pts + r0, F)
                if keep.contains(frameIndex) {
                    let p = try pkt.clone()
                    p.p.pointee.pts = frameIndex
                    p.p.pointee.dts = frameIndex
                    out.append(p)
                }
                pkt.unref()
            }
        }
        let n = input.first?.count ?? 0
        let frame = try Frame()
        var pos = 0
        while pos < n {
            let len = min(Int(F), n - pos)
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
            frame.f.pointee.pts = Int64(pos)
            try enc.send(frame: frame)
            try collect()
            pos += len
        }
        try enc.send(frame: nil)
        try collect()
        guard out.count == keep.count else {
            throw ClipFlowError.failure("internal: re-encoded \(out.count) audio frames for a join, expected \(keep.count)")
        }
        return out
    }
}
