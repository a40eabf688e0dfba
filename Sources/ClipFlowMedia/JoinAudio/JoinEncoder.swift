internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// One AAC LC encoder fed region after region. Owned by the rendering thread.
final class JoinEncoder {
    let enc: CodecContext
    let channels: Int32
    let sampleRate: Int32
    private let pkt: Packet
    private let frame: Frame

    /// The "fast" coder without its stereo and noise searches (the cheapest configuration; the
    /// timings are in benchmarks/README.md). The mid/side search runs trial quantisations for
    /// every band; at the clips' own bit rate plain L/R coding loses nothing audible over a
    /// handful of frames, and intensity stereo and noise substitution would only smear a tone at
    /// a seam.
    static let encoderOptions = ["aac_coder": "fast", "aac_ms": "0", "aac_is": "0", "aac_pns": "0", "aac_tns": "0"]

    /// The rate an encoder asked for `bitRate` codes at: within 64-256 kb/s per channel.
    static func rate(_ bitRate: Int64, channels: Int32) -> Int64 {
        min(max(bitRate, 64_000 * Int64(channels)), 256_000 * Int64(channels))
    }

    /// The rate this encoder codes at, bits per second.
    private(set) var codingRate: Int64

    /// `bitRate`: the clips' own (see `rate`).
    init(sampleRate: Int32, channels: Int32, bitRate: Int64) throws {
        self.channels = channels
        self.sampleRate = sampleRate
        let coding = Self.rate(bitRate, channels: channels)
        codingRate = coding
        enc = try CodecContext.encoder(named: "aac", what: "re-encoding audio at the joins", options: Self.encoderOptions) { c in
            c.pointee.sample_rate = sampleRate
            c.pointee.sample_fmt = AV_SAMPLE_FMT_FLTP
            av_channel_layout_default(&c.pointee.ch_layout, channels)
            c.pointee.bit_rate = coding
            c.pointee.time_base = AVRational(num: 1, den: sampleRate)
            c.pointee.profile = FF_PROFILE_AAC_LOW
        }
        guard enc.ctx.pointee.frame_size == Int32(AudioJoinPlan.frameSize),
            Int64(enc.ctx.pointee.initial_padding) == AudioJoinPlan.frameSize
        else {
            throw ClipFlowError.failure("the AAC encoder does not use 1024-sample frames with 1024 samples of delay")
        }
        pkt = try Packet()
        frame = try Frame()
    }

    /// Codes the next frames at `rate` (bits per second, taken as it is). FFmpeg's AAC encoder
    /// reads the rate at every frame, in its rate control, so the quantiser it reached carries
    /// over: what `AudioRegionRenderer` lowers the rate for (`codingRate(after:...)`) is coded
    /// with the same quantiser as before, once instead of six times.
    func setRate(_ rate: Int64) {
        codingRate = rate
        enc.ctx.pointee.bit_rate = rate
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
