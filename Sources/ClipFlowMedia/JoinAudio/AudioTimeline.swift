internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// Planar 32-bit float samples at the output's rate, one array per channel.
struct PlanarSamples {
    var channels: [[Float]]
    var count: Int { channels.first?.count ?? 0 }

    static func silence(channels: Int, count: Int) -> PlanarSamples {
        PlanarSamples(channels: Array(repeating: [Float](repeating: 0, count: count), count: channels))
    }

    init(channels: [[Float]]) { self.channels = channels }

    /// `frames` sample frames of `interleaved` (`channelCount` samples each) from frame `first`.
    init(interleaved: [Float], channelCount: Int, from first: Int = 0, frames: Int) {
        channels = (0..<channelCount).map { c in
            [Float](unsafeUninitializedCapacity: frames) { plane, made in
                for i in 0..<frames { plane[i] = interleaved[(first + i) * channelCount + c] }
                made = frames
            }
        }
    }

    /// The samples interleaved (frame after frame, the channels in order within each).
    var interleaved: [Float] {
        let n = channels.count
        return [Float](unsafeUninitializedCapacity: count * n) { out, made in
            for (c, plane) in channels.enumerated() { for i in plane.indices { out[i * n + c] = plane[i] } }
            made = count * n
        }
    }
}

/// Decoded audio of any sample format, rate and layout to planar float at the output's rate
/// and channel count (libswresample). One per clip; confined to the decoding thread.
final class AudioResampler {
    let rate: Int
    let channels: Int
    private var swr: OpaquePointer?
    private var sourceKey: [Int32] = []

    init(rate: Int, channels: Int) {
        self.rate = rate
        self.channels = channels
    }
    deinit { swr_free(&swr) }

    /// The samples of `frame`, converted (the resampler may keep a few back until `flush`).
    func convert(_ frame: Frame) throws -> PlanarSamples {
        let f = frame.f.pointee
        var inLayout = AVChannelLayout()
        if f.ch_layout.order == AV_CHANNEL_ORDER_UNSPEC {
            av_channel_layout_default(&inLayout, f.ch_layout.nb_channels)
        } else {
            try FF.check(withUnsafePointer(to: f.ch_layout) { av_channel_layout_copy(&inLayout, $0) }, "reading a channel layout")
        }
        defer { av_channel_layout_uninit(&inLayout) }
        let key = [f.format, f.sample_rate, inLayout.nb_channels, Int32(truncatingIfNeeded: inLayout.u.mask)]
        if swr == nil || key != sourceKey {
            swr_free(&swr)
            var outLayout = AVChannelLayout()
            av_channel_layout_default(&outLayout, Int32(channels))
            defer { av_channel_layout_uninit(&outLayout) }
            try FF.check(
                swr_alloc_set_opts2(&swr, &outLayout, AV_SAMPLE_FMT_FLTP, Int32(rate), &inLayout, AVSampleFormat(f.format), f.sample_rate, 0, nil),
                "setting up audio conversion")
            try FF.check(swr_init(swr), "setting up audio conversion from \(f.sample_rate) Hz x\(inLayout.nb_channels)")
            sourceKey = key
        }
        return try run(
            input: frame.f.pointee.extended_data.map { UnsafeMutableRawPointer($0).assumingMemoryBound(to: UnsafePointer<UInt8>?.self) },
            count: Int(f.nb_samples))
    }

    /// What the resampler still holds.
    func flush() throws -> PlanarSamples {
        guard swr != nil else { return PlanarSamples(channels: Array(repeating: [], count: channels)) }
        return try run(input: nil, count: 0)
    }

    private func run(input: UnsafeMutablePointer<UnsafePointer<UInt8>?>?, count: Int) throws -> PlanarSamples {
        let room = Int(swr_get_out_samples(swr, Int32(count))) + 32
        let buffer = UnsafeMutablePointer<Float>.allocate(capacity: room * channels)
        defer { buffer.deallocate() }
        var planes = (0..<channels).map { Optional(UnsafeMutableRawPointer(buffer + $0 * room).assumingMemoryBound(to: UInt8.self)) }
        let produced = try planes.withUnsafeMutableBufferPointer { p in
            try FF.check(swr_convert(swr, p.baseAddress, Int32(room), input, Int32(count)), "converting audio")
        }
        return PlanarSamples(channels: (0..<channels).map { Array(UnsafeBufferPointer(start: buffer + $0 * room, count: Int(produced))) })
    }
}

/// Places each clip's audio on the output timeline so that it stays in sync with the clip's
/// video, and keeps the output continuous (output sample n plays at n / rate seconds):
/// samples before the clip's video starts are dropped, a late start or a gap becomes silence,
/// samples past the clip's video end are dropped, and a clip whose audio is short (or absent)
/// is padded with silence. Positions are in samples from the clip's first video timestamp.
/// Samples are passed on only up to where the clip's video has reached (`release`), so that a
/// clip's trailing excess can still be dropped. Confined to the decoding thread.
struct AudioTimeline {
    let channels: Int
    /// A position that differs from the running one by more than this is a jump (a gap or an
    /// overlap), not jitter of the timestamps.
    let tolerance: Int64
    /// Output samples passed on so far.
    private(set) var emitted: Int64 = 0
    private var clipStart: Int64 = 0
    /// Clip position of the next sample `add` expects (nil: none yet in this clip).
    private var next: Int64?
    /// Samples not yet passed on, from clip position `heldFrom`.
    private var held: [[Float]]
    private var heldFrom: Int64 = 0
    /// Largest piece passed on at once (silence for a whole clip comes in pieces).
    static let piece = 4096

    init(channels: Int, rate: Int) {
        self.channels = channels
        tolerance = Int64(rate / 50)
        held = Array(repeating: [], count: channels)
    }

    private var heldCount: Int { held.first?.count ?? 0 }
    private var cursor: Int64 { emitted - clipStart }

    /// Adds decoded samples; `position` is where their timestamp puts them (nil: unknown).
    mutating func add(_ s: PlanarSamples, at position: Int64?) {
        guard s.count > 0 else { return }
        var pos = next ?? position ?? 0
        if let p = position, abs(p - pos) > tolerance { pos = p }
        next = pos + Int64(s.count)
        if heldCount == 0 {
            heldFrom = pos
            held = s.channels
            return
        }
        let end = heldFrom + Int64(heldCount)
        var skip = 0
        if pos > end {
            for c in 0..<channels { held[c] += [Float](repeating: 0, count: Int(pos - end)) }
        } else if pos < end {
            skip = min(s.count, Int(end - pos))
        }
        for c in 0..<channels { held[c] += s.channels[c][skip...] }
    }

    /// Passes on the samples before clip position `limit`.
    mutating func release(upTo limit: Int64, _ emit: (PlanarSamples) throws -> Void) rethrows {
        while cursor < limit, heldCount > 0 {
            if heldFrom > cursor {
                let n = Int(min(min(heldFrom, limit) - cursor, Int64(Self.piece)))
                try pass(.silence(channels: channels, count: n), emit)
                continue
            }
            if heldFrom < cursor {
                let drop = min(heldCount, Int(cursor - heldFrom))
                for c in 0..<channels { held[c].removeFirst(drop) }
                heldFrom += Int64(drop)
                continue
            }
            let n = min(heldCount, Int(limit - cursor), Self.piece)
            let part = PlanarSamples(channels: held.map { Array($0[..<n]) })
            for c in 0..<channels { held[c].removeFirst(n) }
            heldFrom += Int64(n)
            try pass(part, emit)
        }
    }

    /// Ends the current clip where output sample `end` begins (its video's end on the output
    /// timeline): what is held before it is passed on, silence fills the rest, samples after it
    /// are dropped. The next clip starts there.
    mutating func endClip(at end: Int64, _ emit: (PlanarSamples) throws -> Void) rethrows {
        let length = end - clipStart
        try release(upTo: length, emit)
        while cursor < length {
            try pass(.silence(channels: channels, count: Int(min(length - cursor, Int64(Self.piece)))), emit)
        }
        held = Array(repeating: [], count: channels)
        next = nil
        clipStart = max(emitted, end)
    }

    private mutating func pass(_ s: PlanarSamples, _ emit: (PlanarSamples) throws -> Void) rethrows {
        emitted += Int64(s.count)
        try emit(s)
    }
}
