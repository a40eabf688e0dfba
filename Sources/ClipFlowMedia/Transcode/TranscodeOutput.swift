internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// The encoders and the fast-start MP4 muxer of a transcode: pictures to H.264 (libx264) or HEVC
/// (libx265, tagged hvc1), audio to AAC in 1024-sample frames. Written under a temporary name;
/// `finish` writes the index at the front (second pass, as `movflags +faststart`) and renames the
/// file into place. Owner: one thread (the encode stage's queue, or `Transcoder.run`'s caller).
final class TranscodeOutput {
    struct Plan {
        var frame: PictureSize
        var timeBase: AVRational
        /// The nominal rate (encoder rate control and GOP length).
        var frameRate: AVRational
        var rotation: Int
        var audio: (rate: Int, channels: Int)?
        var settings: TranscodeSettings
    }

    let target: URL
    private let output: AtomicOutput
    private let mux: OutputMuxer
    private let venc: CodecContext
    private let vstream: UnsafeMutablePointer<AVStream>
    private let aac: AACEncoder?
    private let astream: UnsafeMutablePointer<AVStream>?
    private let packet: Packet
    /// Each picture's duration in the plan's time base, by pts, until its packet comes out (the
    /// muxer then writes the last picture's true duration).
    private var durations: [Int64: Int64] = [:]
    /// The latest video packet, written when the next one comes, or at the end with the duration
    /// that makes the track end with its last picture: the MP4 muxer ends the track (and its
    /// edit list) at the last packet's decode time plus its duration, counted from the first
    /// packet's decode time, and with B-frames and uneven frame spacing the last packet's own
    /// duration would end it early or late.
    private var heldVideo: Packet?
    private var firstVideoDTS: Int64?
    private var firstVideoPTS: Int64?
    /// End of the latest-ending picture, in the plan's time base.
    private var presentationEnd: Int64 = 0
    private(set) var videoFrames = 0
    /// End of the last picture handed to the encoder, in seconds.
    private(set) var videoSeconds = 0.0
    private let plan: Plan

    init(target: URL, replacing: Bool, plan: Plan) throws {
        self.target = target
        self.plan = plan
        output = try AtomicOutput(target: target, label: "-o", replacing: replacing)
        mux = try OutputMuxer(path: output.temporary.path, shownAs: target.path)
        packet = try Packet()
        let s = plan.settings
        let global = mux.ctx.pointee.oformat.pointee.flags & AVFMT_GLOBALHEADER != 0
        let rate = plan.frameRate.double > 0 ? plan.frameRate.double : 30
        let gop = s.keyframeSeconds.map { Int32(max(1, ($0 * rate).rounded())) }
        var options = ["preset": s.encoderPreset]
        if let c = s.crf, s.videoBitRate == nil { options["crf"] = String(c) }
        switch s.videoCodec {
        case .h264:
            if let p = s.profile { options["profile"] = p }
            if let l = s.level { options["level"] = l }
            // Keyframes exactly every `gop` pictures, each an IDR starting a closed GOP.
            if let gop { options["x264-params"] = "scenecut=0:open-gop=0:keyint-min=\(gop)" }
        case .hevc:
            if let p = s.profile { options["profile"] = p }
            options["x265-params"] =
                (gop.map { "keyint=\($0):min-keyint=\($0):scenecut=0:open-gop=0:" } ?? "") + (s.level.map { "level-idc=\($0):" } ?? "") + "log-level=error"
        }
        venc = try CodecContext.encoder(named: s.videoCodec.encoderName, what: "\(s.videoCodec == .h264 ? "H.264" : "HEVC") encoder", options: options) { c in
            c.pointee.width = Int32(plan.frame.width)
            c.pointee.height = Int32(plan.frame.height)
            c.pointee.pix_fmt = AV_PIX_FMT_YUV420P
            c.pointee.time_base = plan.timeBase
            c.pointee.framerate = plan.frameRate
            if let gop { c.pointee.gop_size = gop }
            c.pointee.color_range = AVCOL_RANGE_MPEG
            c.pointee.thread_count = 0
            if let b = s.videoBitRate { c.pointee.bit_rate = Int64(b) }
            if let m = s.maxRate {
                c.pointee.rc_max_rate = Int64(m)
                c.pointee.rc_buffer_size = Int32(clamping: 2 * m)
            }
            if global { c.pointee.flags |= AV_CODEC_FLAG_GLOBAL_HEADER }
        }
        guard let vs = avformat_new_stream(mux.ctx, nil) else { throw ClipFlowError.failure("out of memory adding a stream") }
        try FF.check(avcodec_parameters_from_context(vs.pointee.codecpar, venc.ctx), "video stream parameters")
        if s.videoCodec == .hevc { vs.pointee.codecpar.pointee.codec_tag = fourcc("hvc1") }
        vs.pointee.time_base = plan.timeBase
        if plan.rotation != 0 { try FF.check(cf_stream_set_display_rotation(vs, Double(plan.rotation)), "writing the display matrix") }
        vstream = vs
        if let a = plan.audio {
            let enc = try AACEncoder(rate: a.rate, channels: a.channels, bitRate: s.audioBitRate, globalHeader: global)
            guard let st = avformat_new_stream(mux.ctx, nil) else { throw ClipFlowError.failure("out of memory adding a stream") }
            try FF.check(avcodec_parameters_from_context(st.pointee.codecpar, enc.codec.ctx), "audio stream parameters")
            st.pointee.time_base = enc.timeBase
            aac = enc
            astream = st
        } else {
            aac = nil
            astream = nil
        }
        try mux.writeHeader(moovReserve: nil, fastStartSecondPass: true)
    }

    /// Encodes one picture (pts in the plan's time base; `end`: where it stops showing, seconds).
    func encode(picture: Frame, end: Double) throws {
        picture.f.pointee.pict_type = AV_PICTURE_TYPE_NONE
        let pts = picture.f.pointee.pts
        let endTicks = Int64((end / plan.timeBase.double).rounded())
        durations[pts] = max(1, endTicks - pts)
        presentationEnd = max(presentationEnd, endTicks)
        try venc.send(frame: picture)
        videoFrames += 1
        videoSeconds = max(videoSeconds, end)
        try drainVideo()
    }

    /// Queues audio; encodes every whole 1024-sample frame.
    func encode(audio s: PlanarSamples) throws { try aac?.encode(s, writeAudio) }

    /// Flushes the encoders, writes the index and renames the file into place. Returns its size.
    func finish() throws -> Int64 {
        try aac?.finish(writeAudio)
        try venc.send(frame: nil)
        try drainVideo()
        if let last = heldVideo, let dts0 = firstVideoDTS, let pts0 = firstVideoPTS {
            last.p.pointee.duration = max(1, presentationEnd - pts0 + dts0 - last.p.pointee.dts)
            try writeVideo(last)
            heldVideo = nil
        }
        let rc = mux.writeTrailer()
        if rc < 0 { throw ClipFlowError.output("writing '\(target.path)' failed: \(FF.describe(rc))") }
        try mux.close()
        let size = ((try? FileManager.default.attributesOfItem(atPath: output.temporary.path))?[.size] as? NSNumber)?.int64Value ?? 0
        try output.commit()
        return size
    }

    /// Removes the temporary file (a failed or cancelled transcode leaves nothing).
    func discard() { output.discard() }

    private func writeAudio(_ p: Packet) throws {
        guard let aac, let astream else { return }
        p.p.pointee.stream_index = astream.pointee.index
        av_packet_rescale_ts(p.p, aac.timeBase, astream.pointee.time_base)
        try mux.write(p)
    }

    private func drainVideo() throws {
        while try venc.receive(packet: packet) {
            packet.p.pointee.stream_index = vstream.pointee.index
            if let d = durations.removeValue(forKey: packet.p.pointee.pts) { packet.p.pointee.duration = d }
            if firstVideoDTS == nil { firstVideoDTS = packet.p.pointee.dts }
            firstVideoPTS = min(firstVideoPTS ?? .max, packet.p.pointee.pts)
            if let h = heldVideo { try writeVideo(h) }
            heldVideo = try packet.clone()
            packet.unref()
        }
    }

    private func writeVideo(_ p: Packet) throws {
        av_packet_rescale_ts(p.p, venc.ctx.pointee.time_base, vstream.pointee.time_base)
        try mux.write(p)
    }
}
