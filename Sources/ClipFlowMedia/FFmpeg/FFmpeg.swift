internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

// Owner classes for FFmpeg objects (one owner per C object, freed in deinit) and the one
// checked helper through which every FFmpeg call that can fail goes (a failure names the call
// and FFmpeg's words).
//
// Threading: each owner is confined to one thread at a time. Classes are @unchecked Sendable only
// so that ownership can be handed from one queue to another (an ownership transfer); each says
// what it owns.

enum FF {
    static let setup: Void = {
        cf_log_install()
    }()

    /// FFmpeg's own text for an error code, plus the last message FFmpeg logged on this thread.
    static func describe(_ rc: Int32) -> String {
        var buf = [CChar](repeating: 0, count: 256)
        av_strerror(rc, &buf, buf.count)
        let text = String(nulTerminated: buf)
        var logBuf = [CChar](repeating: 0, count: 512)
        cf_log_take_last(&logBuf, Int32(logBuf.count))
        let logged = String(nulTerminated: logBuf)
        if !logged.isEmpty, !text.contains(logged) { return "\(text) (\(logged))" }
        return text
    }

    /// Checks an FFmpeg return code. Negative values throw, naming the operation and FFmpeg's message.
    @discardableResult
    static func check(
        _ rc: Int32, _ operation: @autoclosure () -> String,
        kind: ClipFlowError.Kind = .failure
    ) throws -> Int32 {
        if rc < 0 {
            // A write that found no space is a full disk, whatever the operation's kind.
            if rc == err(ENOSPC) || rc == err(EDQUOT) { throw ClipFlowError.diskFull("\(operation()): \(describe(rc))") }
            throw ClipFlowError(kind, "\(operation()): \(describe(rc))")
        }
        return rc
    }

    static let eof = cf_averror_eof()
    static let eagain = cf_averror_eagain()
    static let noPTS = cf_nopts()
    static func err(_ posix: Int32) -> Int32 { cf_averror(posix) }
}

extension String {
    /// The text a C function wrote into `buffer`: its bytes up to the first NUL (all of them
    /// when there is none), as UTF-8.
    fileprivate init(nulTerminated buffer: [CChar]) {
        self.init(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// Process-wide settings for media work.
public enum MediaProcess {
    /// Makes glibc's malloc serve blocks of up to 64 MiB from the heap and keep up to 256 MiB of
    /// freed heap instead of returning it to the kernel (`mallopt`). For processes that allocate
    /// and free large buffers at a steady rate: a recording (`clipflow record`, and pipelines,
    /// which may record) frees a raw picture and an encoded packet for every frame, and with
    /// glibc's defaults each new one may be faulted in as fresh zeroed pages. The price is peak
    /// RSS (freed blocks stay mapped), so `clipflow merge`, which allocates nothing per packet
    /// (packets point into the mapped clips), does not call it. Call once at start-up, before
    /// other threads allocate.
    public static func tuneAllocator() { cf_tune_malloc() }
}

/// An AVPacket. `@unchecked Sendable`: owns the AVPacket (not its data's other references);
/// whoever holds it uses it, one thread at a time; freed in deinit.
final class Packet: @unchecked Sendable {
    let p: UnsafeMutablePointer<AVPacket>
    init() throws {
        guard let p = av_packet_alloc() else { throw ClipFlowError.failure("out of memory allocating a packet") }
        self.p = p
    }
    deinit {
        var q: UnsafeMutablePointer<AVPacket>? = p
        av_packet_free(&q)
    }
    func unref() { av_packet_unref(p) }
    var isKeyframe: Bool { p.pointee.flags & AV_PKT_FLAG_KEY != 0 }
    /// A copy of this packet (timing and flags too) whose data starts with `prefix`.
    func prefixed(with prefix: [UInt8]) throws -> Packet {
        let c = try Packet()
        let n = Int(p.pointee.size)
        try FF.check(av_new_packet(c.p, Int32(prefix.count + n)), "allocating a packet")
        try FF.check(av_packet_copy_props(c.p, p), "copying a packet's properties")
        if !prefix.isEmpty { c.p.pointee.data.update(from: prefix, count: prefix.count) }
        if n > 0, let d = p.pointee.data { memcpy(c.p.pointee.data + prefix.count, d, n) }
        c.p.pointee.stream_index = p.pointee.stream_index
        c.p.pointee.pts = p.pointee.pts
        c.p.pointee.dts = p.pointee.dts
        c.p.pointee.duration = p.pointee.duration
        c.p.pointee.flags = p.pointee.flags
        c.p.pointee.pos = -1
        return c
    }

    /// A new packet referencing the same data (no copy).
    func clone() throws -> Packet {
        let c = try Packet()
        try FF.check(av_packet_ref(c.p, p), "copying a packet")
        return c
    }
}

/// An AVFrame. `@unchecked Sendable`: owns the AVFrame; whoever holds it uses it, one thread at
/// a time; freed in deinit.
final class Frame: @unchecked Sendable {
    let f: UnsafeMutablePointer<AVFrame>
    init() throws {
        guard let f = av_frame_alloc() else { throw ClipFlowError.failure("out of memory allocating a frame") }
        self.f = f
    }
    deinit {
        var q: UnsafeMutablePointer<AVFrame>? = f
        av_frame_free(&q)
    }
    func unref() { av_frame_unref(f) }
    func data(_ i: Int) -> UnsafeMutablePointer<UInt8>? { cf_frame_data(f, Int32(i)) }
    func linesize(_ i: Int) -> Int { Int(cf_frame_linesize(f, Int32(i))) }
}

/// A demuxer (input AVFormatContext), opened read-only. Streams are exposed only by index and
/// value types, never as pointers that could outlive it. `@unchecked Sendable`: owns the format
/// context (and keeps its reader alive); one reader thread at a time; closed in deinit.
final class Demuxer: @unchecked Sendable {
    let ctx: UnsafeMutablePointer<AVFormatContext>
    let path: String

    /// Opens `path` (the container's headers only: no frame is decoded to fill in stream
    /// parameters). Errors name the file and say what is wrong with it. `format` names the
    /// demuxer when the file has been probed before (skips probing it again).
    init(path: String, format: String? = nil) throws {
        _ = FF.setup
        self.path = path
        var c: UnsafeMutablePointer<AVFormatContext>? = nil
        let rc = avformat_open_input(&c, path, format.flatMap { av_find_input_format($0) }, nil)
        if rc < 0 {
            if rc == FF.err(ENOENT) { throw ClipFlowError.badInput("input '\(path)': no such file") }
            if rc == FF.err(EACCES) { throw ClipFlowError.badInput("input '\(path)': permission denied (cannot read it)") }
            throw ClipFlowError.badInput("input '\(path)' is not a video FFmpeg can read: \(FF.describe(rc))")
        }
        guard let c else { throw ClipFlowError.failure("input '\(path)': demuxer did not open") }
        ctx = c
    }
    /// Opens a clip through `reader` (custom I/O; the reader outlives the demuxer). Payloads may
    /// be skipped (taken from a mapping, or not needed), so no parser looks at them. `format`: as
    /// in `init(path:format:)`.
    init(path: String, format: String?, reader: MappedReader) throws {
        _ = FF.setup
        self.path = path
        self.reader = reader
        var c: UnsafeMutablePointer<AVFormatContext>? = avformat_alloc_context()
        guard let alloc = c else { throw ClipFlowError.failure("out of memory opening '\(path)'") }
        alloc.pointee.pb = reader.pb
        alloc.pointee.flags |= AVFMT_FLAG_CUSTOM_IO | AVFMT_FLAG_NOPARSE
        let rc = avformat_open_input(&c, path, format.flatMap { av_find_input_format($0) }, nil)  // frees the context on failure
        if rc < 0 { throw ClipFlowError.badInput("input '\(path)' is not a video FFmpeg can read: \(FF.describe(rc))") }
        guard let c else { throw ClipFlowError.failure("input '\(path)': demuxer did not open") }
        ctx = c
    }
    private var reader: MappedReader? = nil

    deinit {
        var c: UnsafeMutablePointer<AVFormatContext>? = ctx
        avformat_close_input(&c)
    }

    var formatName: String { ctx.pointee.iformat.map { String(cString: $0.pointee.name) } ?? "" }
    var streamCount: Int { Int(ctx.pointee.nb_streams) }
    func stream(_ i: Int) -> UnsafeMutablePointer<AVStream> { ctx.pointee.streams[i]! }
    func codecpar(_ i: Int) -> UnsafeMutablePointer<AVCodecParameters> { stream(i).pointee.codecpar }

    /// Reads the next packet into `pkt` (unreffed first). Returns false at end of file.
    func read(into pkt: Packet) throws -> Bool {
        pkt.unref()
        let rc = av_read_frame(ctx, pkt.p)
        if rc == FF.eof { return false }
        if rc < 0 { throw ClipFlowError.badInput("input '\(path)': reading failed: \(FF.describe(rc))") }
        return true
    }

    /// Seeks `streamIndex` to the last keyframe at or before `timestamp` (stream time base).
    /// How a seek ended. `noFrame` is av_seek_frame's -1: no index entry of the kind asked for
    /// (av_strerror would read it as EPERM, "Operation not permitted").
    enum SeekOutcome {
        case done
        case noFrame
        case failed(Int32)
    }

    /// Seeks `streamIndex` to `timestamp` with av_seek_frame's `flags` (default: the keyframe at
    /// or before it; 0: the next keyframe; with AVSEEK_FLAG_ANY: any frame).
    func trySeek(stream streamIndex: Int, to timestamp: Int64, flags: Int32 = AVSEEK_FLAG_BACKWARD) -> SeekOutcome {
        let rc = av_seek_frame(ctx, Int32(streamIndex), timestamp, flags)
        return rc >= 0 ? .done : rc == -1 ? .noFrame : .failed(rc)
    }

    func seek(stream streamIndex: Int, to timestamp: Int64) throws {
        switch trySeek(stream: streamIndex, to: timestamp) {
        case .done: return
        case .noFrame: throw ClipFlowError.badInput("input '\(path)': no keyframe at or before \(timestamp) to seek to")
        case .failed(let rc): try FF.check(rc, "input '\(path)': seeking to \(timestamp)")
        }
    }

    struct IndexStats {
        var count = 0
        var keyframes = 0
        var bytes: Int64 = 0
        var endOfData: Int64 = 0  // max(pos + size)
        var firstTimestamp: Int64 = 0
        var durationRuns = 0  // number of runs of equal dts deltas
        /// Samples the track's edit list hides (decoded but not shown: a `-c copy` cut between
        /// keyframes starts at the keyframe before the cut).
        var hidden = 0
    }

    /// Calls `body(position, size)` for every entry of a stream's index (its sample table).
    func forEachIndexEntry(_ i: Int, _ body: (Int64, Int32) -> Void) {
        let st = stream(i)
        let n = avformat_index_get_entries_count(st)
        for k in 0..<n {
            guard let e = avformat_index_get_entry(st, k) else { continue }
            body(e.pointee.pos, Int32(e.pointee.size))
        }
    }

    /// Statistics of a stream's sample table (the demuxer's index), read without touching sample data.
    func indexStats(_ i: Int) -> IndexStats {
        let st = stream(i)
        var s = IndexStats()
        let n = Int(avformat_index_get_entries_count(st))
        s.count = n
        var prevTs: Int64 = 0
        var prevDelta: Int64 = .min
        for k in 0..<n {
            guard let e = avformat_index_get_entry(st, Int32(k)) else { continue }
            let size = Int64(e.pointee.size)
            s.bytes += size
            s.endOfData = max(s.endOfData, e.pointee.pos + size)
            if (e.pointee.flags & AVINDEX_KEYFRAME) != 0 { s.keyframes += 1 }
            if (e.pointee.flags & AVINDEX_DISCARD_FRAME) != 0 { s.hidden += 1 }
            if k == 0 {
                s.firstTimestamp = e.pointee.timestamp
            } else {
                let d = e.pointee.timestamp - prevTs
                if d != prevDelta { s.durationRuns += 1; prevDelta = d }
            }
            prevTs = e.pointee.timestamp
        }
        return s
    }
}

/// A decoder or encoder context (AVCodecContext). `@unchecked Sendable`: owns the codec context;
/// one stage/thread at a time; freed in deinit.
final class CodecContext: @unchecked Sendable {
    let ctx: UnsafeMutablePointer<AVCodecContext>
    /// What the codec is doing, for its errors (a shared decoder says which file it is on).
    var what: String

    private init(codec: UnsafePointer<AVCodec>, what: String) throws {
        guard let c = avcodec_alloc_context3(codec) else { throw ClipFlowError.failure("out of memory (\(what))") }
        ctx = c
        self.what = what
    }
    deinit {
        var c: UnsafeMutablePointer<AVCodecContext>? = ctx
        avcodec_free_context(&c)
    }

    /// A decoder for the given stream parameters.
    /// `threads` 0: as many as FFmpeg sees fit (frame and slice threads). `timeBase`: the unit of
    /// the packets' timestamps, so decoded frames carry durations in it.
    static func decoder(
        for par: UnsafePointer<AVCodecParameters>, what: String, threads: Int = 1, timeBase: AVRational? = nil
    ) throws -> CodecContext {
        guard let codec = avcodec_find_decoder(par.pointee.codec_id) else {
            throw ClipFlowError.failure("\(what): no decoder for \(String(cString: avcodec_get_name(par.pointee.codec_id)))")
        }
        let c = try CodecContext(codec: codec, what: what)
        try FF.check(avcodec_parameters_to_context(c.ctx, par), "\(what): decoder parameters")
        c.ctx.pointee.thread_count = Int32(threads)
        if let timeBase { c.ctx.pointee.pkt_timebase = timeBase }
        try FF.check(avcodec_open2(c.ctx, codec, nil), "\(what): opening decoder")
        return c
    }

    /// An AAC decoder for a clip's audio as probed (its AudioSpecificConfig, rate and channels),
    /// without the clip's demuxer.
    static func aacDecoder(for a: ClipInfo.Audio, what: String) throws -> CodecContext {
        guard let par = avcodec_parameters_alloc() else { throw ClipFlowError.failure("out of memory (\(what))") }
        defer { var p: UnsafeMutablePointer<AVCodecParameters>? = par; avcodec_parameters_free(&p) }
        par.pointee.codec_type = AVMEDIA_TYPE_AUDIO
        par.pointee.codec_id = AV_CODEC_ID_AAC
        par.pointee.sample_rate = a.sampleRate
        av_channel_layout_default(&par.pointee.ch_layout, a.channels)
        if !a.extradata.isEmpty {
            let n = a.extradata.count
            guard let x = av_mallocz(n + Int(AV_INPUT_BUFFER_PADDING_SIZE))?.assumingMemoryBound(to: UInt8.self) else {
                throw ClipFlowError.failure("out of memory (\(what))")
            }
            a.extradata.withUnsafeBufferPointer { x.update(from: $0.baseAddress!, count: n) }
            par.pointee.extradata = x
            par.pointee.extradata_size = Int32(n)
        }
        return try decoder(for: par, what: what)
    }

    /// An encoder by name, configured by `configure` before opening.
    static func encoder(
        named name: String, what: String, options: [String: String] = [:],
        configure: (UnsafeMutablePointer<AVCodecContext>) -> Void
    ) throws -> CodecContext {
        guard let codec = avcodec_find_encoder_by_name(name) else {
            throw ClipFlowError.failure("\(what): FFmpeg has no '\(name)' encoder")
        }
        let c = try CodecContext(codec: codec, what: what)
        configure(c.ctx)
        var dict: OpaquePointer? = nil
        for (k, v) in options { av_dict_set(&dict, k, v, 0) }
        defer { av_dict_free(&dict) }
        try FF.check(avcodec_open2(c.ctx, codec, &dict), "\(what): opening encoder")
        // Options the encoder did not take are left in the dictionary: a typo, or an FFmpeg
        // without them. Either way the encoder would not be the one configured.
        if let left = av_dict_get(dict, "", nil, AV_DICT_IGNORE_SUFFIX), let key = left.pointee.key {
            throw ClipFlowError.failure("\(what): the '\(name)' encoder has no option '\(String(cString: key))'")
        }
        return c
    }

    /// Sends a packet (nil = drain). EAGAIN is control flow: returns false.
    func send(_ pkt: Packet?) throws -> Bool {
        let rc = avcodec_send_packet(ctx, pkt?.p)
        if rc == FF.eagain || rc == FF.eof { return false }
        try FF.check(rc, "\(what): decoding")
        return true
    }
    /// Receives a decoded frame; false when more input is needed or the decoder is drained.
    func receive(_ frame: Frame) throws -> Bool {
        let rc = avcodec_receive_frame(ctx, frame.f)
        if rc == FF.eagain || rc == FF.eof { return false }
        try FF.check(rc, "\(what): decoding")
        return true
    }
    /// Sends a frame to an encoder (nil = flush).
    func send(frame: Frame?) throws {
        let rc = avcodec_send_frame(ctx, frame?.f)
        if rc == FF.eof { return }
        try FF.check(rc, "\(what): encoding")
    }
    /// Receives an encoded packet; false when more input is needed or the encoder is drained.
    func receive(packet: Packet) throws -> Bool {
        let rc = avcodec_receive_packet(ctx, packet.p)
        if rc == FF.eagain || rc == FF.eof { return false }
        try FF.check(rc, "\(what): encoding")
        return true
    }
}

/// A scaler (SwsContext). Owner: one thread; freed in deinit.
final class Scaler {
    let ctx: OpaquePointer
    init(srcW: Int32, srcH: Int32, srcFormat: AVPixelFormat, dstW: Int32, dstH: Int32, dstFormat: AVPixelFormat) throws {
        guard let c = sws_getContext(srcW, srcH, srcFormat, dstW, dstH, dstFormat, SWS_BICUBIC, nil, nil, nil) else {
            throw ClipFlowError.failure("cannot convert pictures of \(srcW)x\(srcH) to \(dstW)x\(dstH)")
        }
        ctx = c
    }
    deinit { sws_freeContext(ctx) }
    func scale(_ src: Frame, into dst: Frame) throws {
        try FF.check(sws_scale_frame(ctx, dst.f, src.f), "scaling a picture")
    }
}

extension UnsafeMutablePointer where Pointee == AVCodecParameters {
    /// Replaces the codec configuration (extradata) with `bytes`.
    func setExtradata(_ bytes: [UInt8]) throws {
        av_freep(&pointee.extradata)
        guard let x = av_mallocz(bytes.count + Int(AV_INPUT_BUFFER_PADDING_SIZE))?.assumingMemoryBound(to: UInt8.self) else {
            throw ClipFlowError.failure("out of memory (codec configuration)")
        }
        bytes.withUnsafeBufferPointer { x.update(from: $0.baseAddress!, count: bytes.count) }
        pointee.extradata = x
        pointee.extradata_size = Int32(bytes.count)
    }
}

extension AVRational {
    var double: Double { den == 0 ? 0 : Double(num) / Double(den) }
}

func rescale(_ v: Int64, _ from: AVRational, _ to: AVRational) -> Int64 {
    av_rescale_q_rnd(v, from, to, AVRounding(rawValue: AV_ROUND_NEAR_INF.rawValue | AV_ROUND_PASS_MINMAX.rawValue))
}

/// Scheduling of the merge's helper threads.
enum MediaThreads {
    /// Lowers the calling thread's priority (nice 10). While the merge thread copies, helper
    /// threads open the next clips and prepare the join audio; with more runnable threads than
    /// cores they would preempt the copy. At nice 10 the helpers mostly take the cycles the copy
    /// leaves. (The join encoder does not yield: the copy waits for each region it encodes.)
    static func yieldToCopy() {
        _ = setpriority(__priority_which_t(PRIO_PROCESS.rawValue), 0, 10)  // 0: the calling thread (nice is per thread on Linux)
    }
}
