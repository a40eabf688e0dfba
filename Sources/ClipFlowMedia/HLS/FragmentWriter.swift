internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// Bytes the muxer writes, gathered in memory until taken (an AVIOContext without seeking: a
/// fragmented MP4 is written front to back). Owner: its `FragmentWriter`.
final class ByteCollector {
    var bytes: [UInt8] = []
    func take() -> [UInt8] {
        defer { bytes.removeAll(keepingCapacity: true) }
        return bytes
    }
}

private func collectorWrite(_ opaque: UnsafeMutableRawPointer?, _ buf: UnsafeMutablePointer<UInt8>?, _ size: Int32) -> Int32 {
    guard let opaque, let buf, size > 0 else { return 0 }
    let c = Unmanaged<ByteCollector>.fromOpaque(opaque).takeUnretainedValue()
    c.bytes.append(contentsOf: UnsafeBufferPointer(start: buf, count: Int(size)))
    return size
}

/// One rendition of a CMAF/fMP4 ladder: an init segment (ftyp + moov) and then one media segment
/// (moof + mdat) per `cut()`, each handed back as bytes (the caller names and writes the files,
/// and keeps the sizes and durations for the playlists). The MP4 muxer runs with
/// `frag_custom+empty_moov+default_base_moof+skip_trailer`: fragments only when cut, offsets
/// relative to each moof (segments are independent files), no index at the end.
/// Not thread-safe: one owner (the rendition's encoding thread).
final class FragmentWriter {
    let ctx: UnsafeMutablePointer<AVFormatContext>
    private let collector = ByteCollector()
    private var open = true

    /// One stream with `parameters` (from the encoder, global header), time base `timeBase`.
    init(copying parameters: UnsafePointer<AVCodecParameters>, timeBase: AVRational, what: String) throws {
        _ = FF.setup
        var c: UnsafeMutablePointer<AVFormatContext>? = nil
        try FF.check(avformat_alloc_output_context2(&c, nil, "mp4", nil), "\(what): creating the fMP4 muxer")
        guard let c else { throw ClipFlowError.failure("\(what): creating the fMP4 muxer failed") }
        ctx = c
        let size: Int32 = 1 << 16
        guard let buf = av_malloc(Int(size))?.assumingMemoryBound(to: UInt8.self) else { throw ClipFlowError.failure("out of memory (\(what))") }
        let opaque = Unmanaged.passUnretained(collector).toOpaque()
        guard let pb = avio_alloc_context(buf, size, 1, opaque, nil, collectorWrite, nil) else {
            av_free(buf)
            throw ClipFlowError.failure("out of memory (\(what))")
        }
        ctx.pointee.pb = pb
        guard let st = avformat_new_stream(ctx, nil) else { throw ClipFlowError.failure("out of memory (\(what))") }
        try FF.check(avcodec_parameters_copy(st.pointee.codecpar, parameters), "\(what): stream parameters")
        st.pointee.codecpar.pointee.codec_tag = 0
        st.pointee.time_base = timeBase
    }

    deinit {
        if let pb = ctx.pointee.pb {
            av_freep(&pb.pointee.buffer)
            var p: UnsafeMutablePointer<AVIOContext>? = pb
            avio_context_free(&p)
            ctx.pointee.pb = nil
        }
        avformat_free_context(ctx)
    }

    var stream: UnsafeMutablePointer<AVStream> { ctx.pointee.streams[0]! }

    /// The init segment. `keepingTime`: the segments carry the packets' own decode times (their
    /// `tfdt`), not times from 0 (a rendition whose timeline starts later: `LiveLadder`).
    func header(keepingTime: Bool = false) throws -> [UInt8] {
        var opts: OpaquePointer? = nil
        defer { av_dict_free(&opts) }
        av_dict_set(&opts, "movflags", "+frag_custom+empty_moov+default_base_moof+skip_trailer" + (keepingTime ? "+frag_discont" : ""), 0)
        if keepingTime {
            // Otherwise the muxer moves the first packet to 0 (`avoid_negative_ts` make_zero,
            // without an edit list) before `frag_discont` can keep its time.
            av_dict_set(&opts, "use_editlist", "0", 0)
            ctx.pointee.avoid_negative_ts = 0
        }
        try FF.check(avformat_write_header(ctx, &opts), "writing an init segment")
        avio_flush(ctx.pointee.pb)
        return collector.take()
    }

    /// Adds a packet whose timestamps are in `timeBase` to the current segment.
    func write(_ pkt: Packet, in timeBase: AVRational) throws {
        av_packet_rescale_ts(pkt.p, timeBase, stream.pointee.time_base)
        pkt.p.pointee.stream_index = 0
        try FF.check(av_write_frame(ctx, pkt.p), "writing a segment")
    }

    /// Ends the current segment and returns it (moof + mdat).
    func cut() throws -> [UInt8] {
        try FF.check(av_write_frame(ctx, nil), "ending a segment")
        avio_flush(ctx.pointee.pb)
        return collector.take()
    }

    /// Ends the last segment; the writer takes no more.
    func finish() throws -> [UInt8] {
        guard open else { return [] }
        open = false
        let last = try cut()
        try FF.check(av_write_trailer(ctx), "ending the rendition")
        avio_flush(ctx.pointee.pb)
        return last + collector.take()
    }
}
