internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// AAC-LC from planar float runs of any length: samples wait until a whole 1024-sample frame is
/// there; each encoded packet (pts in 1/rate, counted from the first sample) goes to the caller's
/// `write`. The one AAC encoder: transcodes, ladders and recordings encode through it. Owner:
/// one thread (the transcode's encode stage, the ladder's audio stage, the record stage).
final class AACEncoder {
    let rate: Int
    let channels: Int
    let codec: CodecContext
    private var fifo: [[Float]]
    /// Samples handed to the encoder so far.
    private(set) var sent: Int64 = 0
    private let frame: Frame
    private let packet: Packet

    /// `globalHeader`: the AudioSpecificConfig goes in the stream's extradata (MP4 does this).
    init(rate: Int, channels: Int, bitRate: Int, globalHeader: Bool) throws {
        self.rate = rate
        self.channels = channels
        codec = try CodecContext.encoder(named: "aac", what: "AAC encoder") { c in
            c.pointee.sample_fmt = AV_SAMPLE_FMT_FLTP
            c.pointee.sample_rate = Int32(rate)
            av_channel_layout_default(&c.pointee.ch_layout, Int32(channels))
            c.pointee.bit_rate = Int64(bitRate)
            c.pointee.time_base = AVRational(num: 1, den: Int32(rate))
            if globalHeader { c.pointee.flags |= AV_CODEC_FLAG_GLOBAL_HEADER }
        }
        fifo = Array(repeating: [], count: channels)
        frame = try Frame()
        packet = try Packet()
    }

    var timeBase: AVRational { AVRational(num: 1, den: Int32(rate)) }

    /// Queues `s` and encodes every whole frame.
    func encode(_ s: PlanarSamples, _ write: (Packet) throws -> Void) throws {
        for c in 0..<channels { fifo[c] += s.channels[c] }
        while (fifo.first?.count ?? 0) >= 1024 { try encodeFrame(1024, write) }
    }

    /// Encodes what is left (a last, shorter frame) and drains the encoder.
    func finish(_ write: (Packet) throws -> Void) throws {
        if let n = fifo.first?.count, n > 0 { try encodeFrame(n, write) }
        try codec.send(frame: nil)
        try drain(write)
    }

    private func encodeFrame(_ n: Int, _ write: (Packet) throws -> Void) throws {
        frame.unref()
        frame.f.pointee.format = AV_SAMPLE_FMT_FLTP.rawValue
        frame.f.pointee.nb_samples = Int32(n)
        frame.f.pointee.sample_rate = Int32(rate)
        av_channel_layout_default(&frame.f.pointee.ch_layout, Int32(channels))
        try FF.check(av_frame_get_buffer(frame.f, 0), "allocating audio")
        for c in 0..<channels {
            let plane = cf_frame_plane_f32(frame.f, Int32(c))!
            fifo[c].withUnsafeBufferPointer { plane.update(from: $0.baseAddress!, count: n) }
            fifo[c].removeFirst(n)
        }
        frame.f.pointee.pts = sent
        sent += Int64(n)
        try codec.send(frame: frame)
        try drain(write)
    }

    private func drain(_ write: (Packet) throws -> Void) throws {
        while try codec.receive(packet: packet) {
            try write(packet)
            packet.unref()
        }
    }
}
