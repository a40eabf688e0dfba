internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// What a merge needs to know about one input clip, read from its container (sample tables and
/// codec configuration) without decoding anything. A value type: no FFmpeg pointers escape.
public struct ClipInfo: Sendable {
    public struct Rational: Sendable, Equatable, CustomStringConvertible {
        public var num: Int32, den: Int32
        public var description: String { "\(num)/\(den)" }
    }
    public struct Video: Sendable {
        public var streamIndex: Int
        public var codec: String
        var codecID: UInt32
        public var codecTag: UInt32
        public var width: Int32, height: Int32
        public var pixelFormat: String?
        public var profile: String?
        public var extradata: [UInt8]
        public var timeBase: Rational
        public var start: Int64  // first presentation time (time base units)
        public var duration: Int64  // presentation duration (time base units)
        public var packets: Int
        public var keyframes: Int
        public var bytes: Int64
        public var durationRuns: Int
        /// Clockwise turn a player applies when showing the picture (0, 90, 180, 270).
        public var rotation: Int
        public var sampleAspect: Rational
        /// Average pictures per second (0 for a track without duration).
        public var frameRate: Double {
            let seconds = Double(duration) * Double(timeBase.num) / Double(timeBase.den)
            return seconds > 0 ? Double(packets) / seconds : 0
        }
    }
    public struct Audio: Sendable {
        public var streamIndex: Int
        public var codec: String
        var codecID: UInt32
        public var sampleRate: Int32
        public var channels: Int32
        public var objectType: Int  // AAC audio object type (2 = LC)
        public var extradata: [UInt8]
        public var timeBase: Rational
        public var start: Int64  // first audible sample (time base units)
        public var duration: Int64  // audible length (time base units)
        public var priming: Int64  // samples before the first audible one
        public var packets: Int
        public var bytes: Int64
        public var bitRate: Int64
        public var durationRuns: Int
        /// The first and last packets' places in the file, for decoding near the clip's edges.
        var edges: AudioEdges
    }

    public var path: String
    public var fileSize: Int64
    public var container: String
    public var video: Video
    public var audio: Audio?

    /// Audible audio length in samples.
    public var audioSamples: Int64 {
        guard let a = audio else { return 0 }
        return rescale(a.duration, AVRational(num: a.timeBase.num, den: a.timeBase.den), AVRational(num: 1, den: a.sampleRate))
    }
    public var videoSeconds: Double { Double(video.duration) * Double(video.timeBase.num) / Double(video.timeBase.den) }
    public var mediaBytes: Int64 { video.bytes + (audio?.bytes ?? 0) }
}

/// Position, size and timestamp (stream time base) of a clip's first and last AAC packets, from
/// its sample table: the join renderer decodes the audio around each join from these without
/// opening the clip's demuxer again. Bounded per clip (`edgeCount` each end), so a long input
/// keeps no per-packet table.
struct AudioEdges: Sendable {
    struct Entry: Sendable, Equatable {
        var pos: Int64
        var size: Int32
        var timestamp: Int64
    }
    static let edgeCount = 48
    /// Packets 0..<head.count.
    var head: [Entry] = []
    /// Packets total - tail.count ..< total (empty when head holds them all).
    var tail: [Entry] = []
    var total = 0

    /// Packet k, if it is one of the edges.
    func entry(_ k: Int) -> Entry? {
        if k >= 0 && k < head.count { return head[k] }
        let t = k - (total - tail.count)
        return t >= 0 && t < tail.count ? tail[t] : nil
    }

    /// The last packet whose timestamp is at most `ts` (the first packet if none is), if that is
    /// one of the edges and the answer does not depend on packets in between.
    func lastIndex(atOrBefore ts: Int64) -> Int? {
        guard total > 0 else { return nil }
        if head.count == total || ts < (tail.first?.timestamp ?? .max) {
            // In the head, unless the head ends before ts and more packets follow it.
            if let last = head.last, last.timestamp <= ts, head.count < total { return nil }
            return max(0, (head.lastIndex { $0.timestamp <= ts }) ?? 0)
        }
        guard let i = tail.lastIndex(where: { $0.timestamp <= ts }) else { return nil }
        return total - tail.count + i
    }

    init() {}
    init(_ dmx: Demuxer, stream: Int) {
        let st = dmx.stream(stream)
        let n = Int(avformat_index_get_entries_count(st))
        total = n
        func at(_ k: Int) -> Entry? {
            guard let e = avformat_index_get_entry(st, Int32(k)) else { return nil }
            return Entry(pos: e.pointee.pos, size: Int32(e.pointee.size), timestamp: e.pointee.timestamp)
        }
        let e = Self.edgeCount
        if n <= 2 * e {
            head = (0..<n).compactMap(at)
        } else {
            head = (0..<e).compactMap(at)
            tail = ((n - e)..<n).compactMap(at)
        }
        if head.count + tail.count != min(n, 2 * e) { head = []; tail = []; total = 0 }  // unreadable index: no edges
    }
}

extension ClipInfo.Rational {
    init(_ r: AVRational) { num = r.num; den = r.den }
    var av: AVRational { AVRational(num: num, den: den) }
}

public enum ClipProbe {
    /// The demuxer every accepted clip was probed as (FFmpeg's MOV/MP4 demuxer); later opens of
    /// the same clip name it instead of probing the file again.
    static let demuxerName = "mov"

    /// Reads a clip's parameters. Errors name the file and the problem (missing, empty, unreadable,
    /// not a video, truncated, unsupported codec).
    public static func probe(_ path: String) throws -> ClipInfo {
        try checkReadableFile(path)
        // Own I/O so that the last frames' payloads, read only for their timestamps, are skipped.
        let reader = try MappedReader(path: path)
        let dmx = try Demuxer(path: path, format: nil, reader: reader)
        return try probe(dmx, reader: reader)
    }

    /// Plain-file checks with clear messages before FFmpeg sees the file: it exists, is a file,
    /// not empty, and can be read.
    public static func checkReadableFile(_ path: String) throws {
        var st = stat()
        if stat(path, &st) != 0 {
            if errno == ENOENT { throw ClipFlowError.badInput("input '\(path)': no such file") }
            throw ClipFlowError.badInput("input '\(path)': \(String(cString: strerror(errno)))")
        }
        if (st.st_mode & S_IFMT) == S_IFDIR { throw ClipFlowError.badInput("input '\(path)' is a directory, not a video file") }
        if st.st_size == 0 { throw ClipFlowError.badInput("input '\(path)' is empty (0 bytes)") }
        if access(path, R_OK) != 0 {
            throw ClipFlowError.badInput("input '\(path)': permission denied (cannot read it; check its permissions)")
        }
    }

    static func probe(_ dmx: Demuxer, reader: MappedReader? = nil) throws -> ClipInfo {
        let path = dmx.path
        let fmt = dmx.formatName
        guard fmt.contains("mov") || fmt.contains("mp4") else {
            throw ClipFlowError.badInput("input '\(path)' is a '\(fmt)' file; merge takes MP4/MOV clips")
        }
        var fileSize: Int64 = 0
        var st = stat()
        if stat(path, &st) == 0 { fileSize = Int64(st.st_size) }

        var videoIdx: Int? = nil, audioIdx: Int? = nil
        for i in 0..<dmx.streamCount {
            let t = dmx.codecpar(i).pointee.codec_type
            if t == AVMEDIA_TYPE_VIDEO, videoIdx == nil,
                (dmx.stream(i).pointee.disposition & AV_DISPOSITION_ATTACHED_PIC) == 0
            {
                videoIdx = i
            }
            if t == AVMEDIA_TYPE_AUDIO, audioIdx == nil { audioIdx = i }
        }
        guard let vi = videoIdx else { throw ClipFlowError.badInput("input '\(path)' has no video track") }

        // Video
        let vpar = dmx.codecpar(vi).pointee
        let vst = dmx.stream(vi).pointee
        let vcodec = String(cString: avcodec_get_name(vpar.codec_id))
        guard vpar.codec_id == AV_CODEC_ID_H264 || vpar.codec_id == AV_CODEC_ID_HEVC else {
            throw ClipFlowError.badInput("input '\(path)': video codec '\(vcodec)' is not supported; merge copies H.264 or H.265 video")
        }
        let vstats = dmx.indexStats(vi)
        // The sample tables as written, checked against each other and the file size: FFmpeg's
        // index repairs or cuts short what does not add up (see SampleTables).
        let tracks = try readTables(path: path, fileSize: fileSize, reader: reader)
        // FFmpeg names each stream after its track (AVStream.id = tkhd track_ID); streams it adds
        // itself (cover art) have no track.
        func track(of stream: Int, kind: String) throws -> SampleTables {
            let id = UInt32(truncatingIfNeeded: dmx.stream(stream).pointee.id)
            guard let t = tracks.first(where: { $0.trackID == id }) else {
                throw ClipFlowError.badInput("input '\(path)': its movie box (moov) has no track with the id (\(id)) of its \(kind) stream")
            }
            return t
        }
        let vtrack = try track(of: vi, kind: "video")
        // Samples in movie fragments have no sample tables to check and no edit list to trim the
        // AAC priming: refused plainly rather than joined with drifting audio.
        if vtrack.fragmented {
            throw ClipFlowError.badInput(
                "input '\(path)' is a fragmented MP4 (its samples are in movie fragments), which merge does not take; remux it first: ffmpeg -i IN -c copy OUT.mp4"
            )
        }
        try vtrack.check(kind: "video", fileSize: fileSize, path: path)
        try checkIndex(vstats, against: vtrack, kind: "video", timeBase: vst.time_base, path: path)
        if let ai = audioIdx {
            let atrack = try track(of: ai, kind: "audio")
            try atrack.check(kind: "audio", fileSize: fileSize, path: path)
            try checkIndex(dmx.indexStats(ai), against: atrack, kind: "audio", timeBase: dmx.stream(ai).pointee.time_base, path: path)
        }
        guard vstats.count > 0 else { throw ClipFlowError.badInput("input '\(path)': the video track has no frames") }
        // Pictures an edit list hides must be decoded but not shown; a track of joined clips has
        // one edit list, so they would be shown. Said plainly; a conform re-encodes such a clip
        // (`Merger` says how to ask for it).
        if vstats.hidden > 0 {
            throw ClipFlowError.badInput(
                "input '\(path)': its edit list hides its first \(vstats.hidden) picture\(vstats.hidden == 1 ? "" : "s") (decoded from the keyframe before a cut, as `ffmpeg -ss T -c copy` writes when T is not a keyframe), which a join by copy would show; cut it on a keyframe, or re-encode it"
            )
        }
        // Truncation: the sample tables point past the end of the file.
        var dataEnd = vstats.endOfData
        if let ai = audioIdx { dataEnd = max(dataEnd, dmx.indexStats(ai).endOfData) }
        if dataEnd > fileSize {
            throw ClipFlowError.badInput(
                "input '\(path)' is truncated: its sample table points to byte \(dataEnd) but the file has \(fileSize) bytes")
        }
        var rotation = 0
        let rot = cf_stream_display_rotation(dmx.stream(vi))
        if !rot.isNaN {
            let cw = Int((-rot).rounded())
            rotation = ((cw % 360) + 360) % 360
            if rotation % 90 != 0 {
                throw ClipFlowError.badInput("input '\(path)': display matrix turns the picture by \(rotation) degrees; only multiples of 90 are supported")
            }
        }
        let vtb = vst.time_base
        var vstart = vst.start_time
        if vstart == FF.noPTS { vstart = 0 }
        // The container's track duration can be shorter than the last frame's presentation end
        // (variable frame rate with B-frames), so read the last frames' timestamps instead.
        let vend = try presentationEnd(dmx, vi, reader: reader)
        let vdur = vend - vstart
        if vdur <= 0 {
            throw ClipFlowError.badInput("input '\(path)': the video track has no duration")
        }
        let pixfmt = vpar.format >= 0 ? av_get_pix_fmt_name(AVPixelFormat(rawValue: vpar.format)).map { String(cString: $0) } : nil
        let profile = vpar.profile >= 0 ? avcodec_profile_name(vpar.codec_id, vpar.profile).map { String(cString: $0) } : nil
        let video = ClipInfo.Video(
            streamIndex: vi, codec: vcodec, codecID: vpar.codec_id.rawValue, codecTag: vpar.codec_tag,
            width: vpar.width, height: vpar.height, pixelFormat: pixfmt, profile: profile,
            extradata: bytes(vpar.extradata, Int(vpar.extradata_size)),
            timeBase: .init(vtb), start: vstart, duration: vdur,
            packets: vstats.count, keyframes: vstats.keyframes, bytes: vstats.bytes, durationRuns: vstats.durationRuns,
            rotation: rotation, sampleAspect: .init(vpar.sample_aspect_ratio))

        // Audio
        var audio: ClipInfo.Audio? = nil
        if let ai = audioIdx {
            let apar = dmx.codecpar(ai).pointee
            let ast = dmx.stream(ai).pointee
            let acodec = String(cString: avcodec_get_name(apar.codec_id))
            guard apar.codec_id == AV_CODEC_ID_AAC else {
                throw ClipFlowError.badInput("input '\(path)': audio codec '\(acodec)' is not supported; merge takes AAC audio (or none)")
            }
            let astats = dmx.indexStats(ai)
            let atb = ast.time_base
            var astart = ast.start_time
            if astart == FF.noPTS { astart = 0 }
            var adur = ast.duration
            let extra = bytes(apar.extradata, Int(apar.extradata_size))
            let objectType = extra.isEmpty ? 0 : Int(extra[0] >> 3)
            let sr = apar.sample_rate
            let primingTB = astats.count > 0 ? astart - astats.firstTimestamp : 0
            let priming = rescale(primingTB, atb, AVRational(num: 1, den: sr))
            if objectType == 2 { try track(of: ai, kind: "audio").checkAACFrames(sampleRate: sr, path: path) }
            var audible = rescale(adur, atb, AVRational(num: 1, den: sr))
            // An edit list's duration is in the movie's timescale (the ffmpeg CLI: milliseconds),
            // so a `-c copy` cut's edit may claim up to a tick more than its frames hold: less
            // than a frame over is that rounding, and the audio ends with its last frame.
            let held = Int64(astats.count) * AudioJoinPlan.frameSize - max(0, priming)
            if astats.count > 0, adur > 0, audible > held, audible - held < AudioJoinPlan.frameSize {
                audible = held
                adur = rescale(held, AVRational(num: 1, den: sr), atb)
            }
            if astats.count > 0 && adur > 0 && max(0, priming) + audible > Int64(astats.count) * AudioJoinPlan.frameSize {
                throw ClipFlowError.badInput(
                    "input '\(path)': its audio edit list (elst) makes \(audible) samples audible after \(priming) of priming, but its \(astats.count) AAC frames hold \(Int64(astats.count) * AudioJoinPlan.frameSize)"
                )
            }
            if astats.count > 0 && adur > 0 {
                audio = ClipInfo.Audio(
                    streamIndex: ai, codec: acodec, codecID: apar.codec_id.rawValue, sampleRate: sr,
                    channels: apar.ch_layout.nb_channels, objectType: objectType, extradata: extra,
                    timeBase: .init(atb), start: astart, duration: adur, priming: max(0, priming),
                    packets: astats.count, bytes: astats.bytes, bitRate: apar.bit_rate,
                    durationRuns: astats.durationRuns, edges: AudioEdges(dmx, stream: ai))
            }
        }
        return ClipInfo(path: path, fileSize: fileSize, container: fmt, video: video, audio: audio)
    }

    private static func readTables(path: String, fileSize: Int64, reader: MappedReader?) throws -> [SampleTables] {
        if let reader { return try SampleTables.read(fd: reader.fd, fileSize: fileSize, path: path) }
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 { throw ClipFlowError.badInput("input '\(path)': \(String(cString: strerror(errno)))") }
        defer { Glibc.close(fd) }
        return try SampleTables.read(fd: fd, fileSize: fileSize, path: path)
    }

    /// FFmpeg's index of a track must be the tables as written: same sample count, same timescale.
    private static func checkIndex(
        _ stats: Demuxer.IndexStats, against t: SampleTables, kind: String,
        timeBase: AVRational, path: String
    ) throws {
        if stats.count != t.sampleSizes.count {
            throw ClipFlowError.badInput(
                "input '\(path)': only \(stats.count) of the \(t.sampleSizes.count) \(kind) samples its tables list can be read")
        }
        if timeBase.num != 1 || UInt32(max(0, timeBase.den)) != t.timescale {
            throw ClipFlowError.badInput(
                "input '\(path)': \(kind) media header (mdhd) gives a timescale of \(t.timescale) units per second, read as \(timeBase.num)/\(timeBase.den)")
        }
    }

    /// max(pts + duration) over the video track: seeks to the last 16 frames in decode order (the
    /// deepest H.264/H.265 reordering) and reads only those packets. Leaves the demuxer positioned
    /// near the end: callers read nothing else from it.
    private static func presentationEnd(_ dmx: Demuxer, _ vi: Int, reader: MappedReader?) throws -> Int64 {
        let st = dmx.stream(vi)
        let n = Int(avformat_index_get_entries_count(st))
        guard n > 0, let e = avformat_index_get_entry(st, Int32(max(0, n - 16))) else { return 0 }
        var saved: [AVDiscard] = []
        for i in 0..<dmx.streamCount {
            saved.append(dmx.stream(i).pointee.discard)
            if i != vi { dmx.stream(i).pointee.discard = AVDISCARD_ALL }
        }
        defer { for i in 0..<dmx.streamCount { dmx.stream(i).pointee.discard = saved[i] } }
        // Timestamps come from the sample table; the H.264/H.265 parser would only zero and scan
        // a copy of every packet (av_fast_padded_malloc), most of the probe's time.
        dmx.ctx.pointee.flags |= AVFMT_FLAG_NOPARSE
        if let reader {
            var samples: [Int64: Int32] = [:]
            dmx.forEachIndexEntry(vi) { pos, size in samples[pos] = size }
            reader.skipPayloads(samples, shadowed: [])
        }
        try FF.check(
            av_seek_frame(dmx.ctx, Int32(vi), e.pointee.timestamp, AVSEEK_FLAG_ANY | AVSEEK_FLAG_BACKWARD),
            "input '\(dmx.path)': seeking to its last frames", kind: .badInput)
        let pkt = try Packet()
        var end = Int64.min
        while try dmx.read(into: pkt) {
            guard Int(pkt.p.pointee.stream_index) == vi else { continue }
            let pts = pkt.p.pointee.pts
            if pts != FF.noPTS { end = max(end, pts + max(0, pkt.p.pointee.duration)) }
        }
        guard end != Int64.min else {
            throw ClipFlowError.badInput("input '\(dmx.path)': its last video frames could not be read (truncated?)")
        }
        return end
    }

    private static func bytes(_ p: UnsafeMutablePointer<UInt8>?, _ n: Int) -> [UInt8] {
        guard let p, n > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: p, count: n))
    }
}
