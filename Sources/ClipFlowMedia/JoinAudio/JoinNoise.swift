internal import CClipFlowFFmpeg
import ClipFlowCore

/// The coding noise of a join's re-encoded frames, measured by decoding them again.
///
/// FFmpeg's AAC encoder now and then codes a frame of steady, tonal sound with a burst of
/// broadband noise tens of dB over its usual noise (its psychoacoustic model reacting to the
/// faint noise above the tones), which is heard as a click where it falls at a join. The burst
/// depends on the encoder's state and bit rate, so a region coded with one is coded again by
/// fresh encoders at higher rates (`AudioRegionRenderer`) and the quietest coding is kept.
///
/// Noise is measured in the high band, as the energy of the fourth difference (a click is
/// broadband, a tone's fourth difference is small): per frame, that of the decoded samples minus
/// the encoder's input, against that of the input itself and the region's typical noise.
/// Owned by the rendering thread.
final class JoinNoise {
    /// A frame's noise over the larger of its input's own high band and the region's median
    /// noise beyond which it is a burst (9 dB).
    static let burstRatio = 8.0

    /// High-band energies of one frame: of the coding error and of the input.
    struct Level: Equatable {
        var noise: Double
        var sound: Double
    }

    private let decoder: CodecContext
    private let decoded: Frame

    /// A decoder for what `encoder` writes.
    init(encoder: JoinEncoder) throws {
        guard let par = avcodec_parameters_alloc() else { throw ClipFlowError.failure("out of memory (checking re-encoded audio)") }
        defer { var p: UnsafeMutablePointer<AVCodecParameters>? = par; avcodec_parameters_free(&p) }
        try FF.check(avcodec_parameters_from_context(par, encoder.enc.ctx), "checking re-encoded audio: encoder parameters")
        decoder = try CodecContext.decoder(for: par, what: "checking the audio re-encoded at a join")
        decoded = try Frame()
    }

    /// The levels of the frames `packets` code after their first (which is decoded only for
    /// the overlap it gives the second). `frames[i]` is the output frame of `packets[i]`;
    /// `input` is the encoder's input from the start of output frame `inputFrame`.
    func levels(_ packets: [Packet], frames: [Int64], input: [[Float]], inputFrame: Int64) throws -> [Level] {
        let F = Int(AudioJoinPlan.frameSize)
        avcodec_flush_buffers(decoder.ctx)
        var out: [Level] = []
        var index = 0
        func drain() throws {
            while try decoder.receive(decoded) {
                defer { decoded.unref(); index += 1 }
                guard index > 0, index < frames.count else { continue }
                let at = Int(frames[index] - inputFrame) * F
                let count = min(F, Int(decoded.f.pointee.nb_samples))
                guard at >= 0, at + count <= input[0].count, decoded.f.pointee.format == AV_SAMPLE_FMT_FLTP.rawValue else {
                    throw ClipFlowError.failure("internal: a re-encoded join frame does not line up with its input")
                }
                var level = Level(noise: 0, sound: 0)
                for ch in input.indices {
                    guard let d = decoded.data(ch) else { continue }
                    let y = UnsafeRawPointer(d).assumingMemoryBound(to: Float.self)
                    input[ch].withUnsafeBufferPointer { x in
                        for k in 4..<count {
                            let s = Self.highPass { Double(x[at + k - $0]) }
                            let e = Self.highPass { Double(y[k - $0] - x[at + k - $0]) }
                            level.sound += s * s
                            level.noise += e * e
                        }
                    }
                }
                out.append(level)
            }
        }
        for p in packets {
            while !(try decoder.send(p)) { try drain() }
            try drain()
        }
        _ = try decoder.send(nil)
        try drain()
        return out
    }

    /// The fourth difference at a sample, from the samples `back` of it (0 ... 4): a high-pass
    /// filter passing 10 kHz at +4 dB, 3 kHz at -17 dB and the tones of speech and music below
    /// 500 Hz at -60 dB or less.
    @inline(__always) private static func highPass(_ back: (Int) -> Double) -> Double {
        back(0) - 4 * back(1) + 6 * back(2) - 4 * back(3) + back(4)
    }

    /// High-band energy of a frame's noise under which it is not heard whatever the frames
    /// around it (the fourth difference of noise near -85 dBFS).
    static let inaudible = 1e-5

    /// Whether a frame's noise is a burst: over `burstRatio` times the larger of its own sound's
    /// high band and the median noise of the frames, and not `inaudible`.
    static func hasBurst(_ levels: [Level]) -> Bool {
        guard !levels.isEmpty else { return false }
        let median = levels.map(\.noise).sorted()[levels.count / 2]
        return levels.contains { $0.noise > inaudible && $0.noise > burstRatio * max($0.sound, median) }
    }

    /// The loudest frame noise, to compare codings of one input.
    static func worst(_ levels: [Level]) -> Double { levels.map(\.noise).max() ?? 0 }
}
