internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// An MP4 muxer writing to a file (output AVFormatContext + its AVIOContext). One owner.
final class OutputMuxer {
    let ctx: UnsafeMutablePointer<AVFormatContext>
    let path: String
    /// The name errors use: the target, not the hidden temporary file being written.
    let shownAs: String
    let sink: MuxerOutputFile
    private var ioOpen = false

    init(path: String, shownAs: String) throws {
        _ = FF.setup
        self.path = path
        self.shownAs = shownAs
        var c: UnsafeMutablePointer<AVFormatContext>? = nil
        try FF.check(avformat_alloc_output_context2(&c, nil, "mp4", path), "creating the MP4 muxer")
        guard let c else { throw ClipFlowError.failure("creating the MP4 muxer failed") }
        ctx = c
        sink = try MuxerOutputFile(path: path, shownAs: shownAs)
        guard let buf = av_malloc(MuxerOutputFile.bufferSize)?.assumingMemoryBound(to: UInt8.self) else {
            throw ClipFlowError.failure("out of memory for the output buffer")
        }
        let opaque = Unmanaged.passUnretained(sink).toOpaque()
        guard let pb = avio_alloc_context(buf, Int32(MuxerOutputFile.bufferSize), 1, opaque, nil, fileSinkWrite, fileSinkSeek) else {
            av_free(buf)
            throw ClipFlowError.failure("out of memory for the output")
        }
        // Direct mode: every avio_write reaches the sink with the caller's pointer, so packet
        // payloads that point into a mapped clip are sent from the clip's file (`MuxerOutputFile`). The
        // buffer still gathers the muxer's small header and index writes.
        pb.pointee.direct = 1
        ctx.pointee.pb = pb
        ioOpen = true
    }

    /// An output abandoned before its trailer is freed without writing one (its temporary file is
    /// discarded by the caller); avformat_free_context releases the muxer's state.
    deinit {
        if ioOpen { freeIO() }
        avformat_free_context(ctx)
    }

    /// Adds a stream copying the clip's video or audio parameters.
    func addStream(copying clip: ClipInfo, video: Bool) throws -> UnsafeMutablePointer<AVStream> {
        guard let st = avformat_new_stream(ctx, nil) else { throw ClipFlowError.failure("out of memory adding a stream") }
        let dmx = try Demuxer(path: clip.path, format: ClipProbe.demuxerName)
        let idx = video ? clip.video.streamIndex : clip.audio!.streamIndex
        try FF.check(avcodec_parameters_copy(st.pointee.codecpar, dmx.codecpar(idx)), "copying stream parameters")
        let par = st.pointee.codecpar!
        if video {
            let tag = par.pointee.codec_tag
            let keep: [UInt32] = [fourcc("hvc1"), fourcc("hev1"), fourcc("avc1"), fourcc("avc3")]
            par.pointee.codec_tag = keep.contains(tag) ? tag : 0
            st.pointee.time_base = clip.video.timeBase.av
            st.pointee.sample_aspect_ratio = par.pointee.sample_aspect_ratio
        } else {
            par.pointee.codec_tag = 0
            if par.pointee.ch_layout.order == AV_CHANNEL_ORDER_UNSPEC {
                let n = par.pointee.ch_layout.nb_channels
                av_channel_layout_uninit(&par.pointee.ch_layout)
                av_channel_layout_default(&par.pointee.ch_layout, n)
            }
            if par.pointee.frame_size == 0 { par.pointee.frame_size = 1024 }
            st.pointee.time_base = AVRational(num: 1, den: par.pointee.sample_rate)
        }
        return st
    }

    func writeHeader(moovReserve: Int?, fastStartSecondPass: Bool) throws {
        var opts: OpaquePointer? = nil
        defer { av_dict_free(&opts) }
        if let moovReserve { av_dict_set(&opts, "moov_size", String(moovReserve), 0) }
        if fastStartSecondPass { av_dict_set(&opts, "movflags", "+faststart", 0) }
        try FF.check(avformat_write_header(ctx, &opts), "writing the MP4 header of '\(shownAs)'", kind: .output)
    }

    /// Writes (and takes the data of) a packet, interleaving by decode time.
    func write(_ pkt: Packet) throws {
        let rc = av_interleaved_write_frame(ctx, pkt.p)
        if rc < 0 { throw ClipFlowError.output("writing '\(shownAs)' failed: \(FF.describe(rc))") }
    }

    /// Writes a packet now, in the caller's order (no interleaving queue); the caller keeps it.
    /// The caller must already give each stream's packets in decode order and interleave the
    /// streams sensibly.
    func writeInOrder(_ pkt: Packet) throws {
        let rc = av_write_frame(ctx, pkt.p)
        if rc < 0 { throw ClipFlowError.output("writing '\(shownAs)' failed: \(FF.describe(rc))") }
    }

    func writeTrailer() -> Int32 {
        av_write_trailer(ctx)
    }

    func close() throws {
        if ioOpen {
            avio_flush(ctx.pointee.pb)
            let err = ctx.pointee.pb.pointee.error
            freeIO()
            if err < 0 { throw ClipFlowError.output("writing '\(shownAs)' failed: \(FF.describe(err))") }
            try sink.close()
        }
    }

    private func freeIO() {
        ioOpen = false
        if let pb = ctx.pointee.pb {
            av_freep(&pb.pointee.buffer)
            var p: UnsafeMutablePointer<AVIOContext>? = pb
            avio_context_free(&p)
            ctx.pointee.pb = nil
        }
    }
}

func fourcc(_ s: String) -> UInt32 {
    let b = Array(s.utf8)
    return UInt32(b[0]) | UInt32(b[1]) << 8 | UInt32(b[2]) << 16 | UInt32(b[3]) << 24
}
