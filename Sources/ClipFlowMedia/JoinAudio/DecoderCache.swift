internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// The clips' audio files and decoders, kept open while consecutive regions need the same clip.
/// Owned by the renderer's preparing thread (see `AudioRegionRenderer`).
///
/// Packets are read with pread at the places the probe noted for each clip's first and last
/// packets (`AudioEdges`), so no demuxer is opened again. A range outside those edges (a region
/// deep inside a long clip: not made by today's planner) is read through the clip's demuxer
/// instead. Clips whose audio is configured alike (a join's clips almost always are) share one
/// decoder: every range is decoded from a flushed decoder, so what it decoded before does not
/// matter, and opening a decoder costs more than decoding a few frames.
struct DecoderCache {
    let clips: [ClipInfo]
    let channels: Int
    private final class Source {
        let fd: Int32
        var demuxer: Demuxer? = nil
        init(fd: Int32) { self.fd = fd }
        deinit { Glibc.close(fd) }
    }
    /// What a decoder is opened with.
    private struct Configuration: Hashable {
        var sampleRate: Int32
        var channels: Int32
        var extradata: [UInt8]
    }
    private var open: [Int: Source] = [:]
    private var decoders: [Configuration: CodecContext] = [:]
    /// Demuxers opened for ranges outside the edge tables (tests look at it).
    private(set) var demuxerOpens = 0
    /// Decoders opened (tests look at it).
    var decoderOpens: Int { decoders.count }

    init(clips: [ClipInfo], channels: Int) {
        self.clips = clips
        self.channels = channels
    }

    /// Timeline samples [from, to) per channel (silence where no clip has audio).
    mutating func timeline(plan: AudioJoinPlan, from tLo: Int64, to tHi: Int64) throws -> [[Float]] {
        // One flat buffer, channel after channel, filled through a pointer (no per-sample
        // nested-array store), split at the end.
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
    private mutating func decode(
        clip i: Int, from s0: Int64, to s1: Int64,
        put: (Int64, Int, UnsafePointer<Float>, Int, Int) -> Void
    ) throws {
        let clip = clips[i]
        guard let a = clip.audio else { return }
        let src: Source
        if let o = open[i] {
            src = o
        } else {
            let fd = Glibc.open(clip.path, O_RDONLY | O_CLOEXEC)
            if fd < 0 { throw ClipFlowError.badInput("input '\(clip.path)': \(String(cString: strerror(errno)))") }
            src = Source(fd: fd)
            open[i] = src
        }
        let configuration = Configuration(sampleRate: a.sampleRate, channels: a.channels, extradata: a.extradata)
        let what = "decoding audio of '\(clip.path)'"
        let dec: CodecContext
        if let d = decoders[configuration] {
            dec = d
            dec.what = what
        } else {
            dec = try CodecContext.aacDecoder(for: a, what: what)
            decoders[configuration] = dec
        }
        let F = AudioJoinPlan.frameSize
        let tb = a.timeBase.av
        let samplesTB = AVRational(num: 1, den: a.sampleRate)
        // Start early enough that the frame holding s0 is not the first one decoded after the
        // seek (that one lacks its overlap): for AAC LC a frame and a half early (one frame
        // before, whichever frame a timestamp up to half a frame off lands on); three frames for
        // other object types, which carry more state from frame to frame.
        let lead = a.objectType == 2 ? F + F / 2 : 3 * F
        let seekSample = max(-a.priming, s0 - lead)
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
            av_packet_free_side_data(pkt.p)  // no skip-samples: we trim ourselves
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
                guard let e = a.edges.entry(k) else { break }  // past the edges: demuxer below
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

        // Through the demuxer, with exact-size reads of the audio samples only (a buffered read
        // would pull in the video around each sample).
        let dmx: Demuxer
        if let d = src.demuxer {
            dmx = d
        } else {
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
