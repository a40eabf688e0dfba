internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// How raw pictures and audio become clip fragments.
public struct RecordOptions: Sendable, Equatable {
    /// Where fragments go (created if missing). Fragments are named `<prefix>-NNNN.mp4`, numbered
    /// on from the highest number already there.
    public var directory: String
    public var prefix = "clip"
    /// Start a new fragment every this many seconds (at the next picture; it starts on a
    /// keyframe). 0: one fragment until stopped or paused.
    public var segmentSeconds: Double = 0
    /// Stop recording once the fragments in the directory (earlier ones included, as the phone
    /// app's "max record time" counts every clip of the recording) reach this many seconds. 0: no cap.
    public var maxSeconds: Double = 0
    /// libx264 preset. "veryfast" keeps 720p30 in real time on 2 cores; "ultrafast" for 1080p30.
    public var preset = "veryfast"
    /// libx264 constant rate factor (lower: better and bigger).
    public var crf = 23
    /// Longest run between keyframes inside a fragment.
    public var keyframeSeconds: Double = 2
    public var audioBitRate = 128_000
    /// Encoder threads (0: libx264 chooses).
    public var threads = 0

    public init(directory: String) { self.directory = directory }

    public var problem: String? {
        if segmentSeconds < 0 || !segmentSeconds.isFinite { return "segment length \(segmentSeconds) must be 0 or more seconds" }
        if maxSeconds < 0 || !maxSeconds.isFinite { return "max duration \(maxSeconds) must be 0 or more seconds" }
        if !(0...51).contains(crf) { return "crf \(crf) is out of range (0 to 51)" }
        if !Self.presets.contains(preset) { return "unknown preset '\(preset)' (one of \(Self.presets.joined(separator: ", ")))" }
        if prefix.isEmpty || prefix.contains("/") { return "prefix '\(prefix)' must be a non-empty file name part" }
        if !(keyframeSeconds > 0) { return "keyframe interval must be above 0 seconds" }
        return nil
    }

    public static let presets = ["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow"]
}

/// A finished fragment.
public struct RecordedClip: Sendable, Equatable {
    public var path: String
    public var index: Int
    public var videoFrames: Int
    /// Seconds of video (first picture to the end of the last one).
    public var seconds: Double
    public var audioSamples: Int64
}

/// Encodes raw pictures (H.264, libx264) and audio (AAC) into clip fragments, each a complete MP4
/// (written under a temporary name, renamed when closed).
///
/// Each fragment has its own encoders, so it starts on a keyframe with its own AAC priming and
/// edit list, exactly like a phone's clip fragments, and `merge` joins them sample-accurately. The
/// encoders use identical settings, so the fragments' parameters match and merge without
/// re-encoding. No B-frames: a camera recorder gains little from them at real time, and every
/// picture is then a clean cut point.
///
/// Audio is cut at the picture that starts a fragment: samples before it close the old fragment,
/// the rest start the new one, so no sample is lost or doubled between fragments. Each
/// fragment's audio starts with its first picture and ends with its last (silence fills what the
/// source did not deliver), so joined fragments play continuous sound.
///
/// Live audio (chunks with a capture time, from a microphone) is placed by `LiveAudioAligner` on
/// the capture clock and moved onto the pictures' timeline by the first picture's capture time.
/// It arrives later than the pictures of the same instant, so while `audioInputOpen` a picture
/// waits until the audio reaches its end (at most `longestAudioWait`, then it goes on and its
/// audio is silence).
///
/// With audio from a source of its own (`separateAudio`), the recording starts when both deliver:
/// pictures wait for that source's first sound, and those that begin before it are left out
/// (`picturesBeforeSound`), so the first fragment has sound from its first picture. While none
/// has come, only the newest `longestAudioWait` of pictures are kept; once the audio input
/// ends without any, the pictures are recorded without it.
///
/// Not thread-safe: one owner (the record stage's queue).
public final class FragmentRecorder {
    public let options: RecordOptions
    /// Fragments closed by this recorder and not deleted through it (`deleteLast`), in order.
    public private(set) var clips: [RecordedClip] = []
    /// Called when a fragment is closed (complete and renamed into place).
    public var onClosed: ((RecordedClip) -> Void)?
    /// Pictures missing according to the sources' sequence numbers (lost before they reached us).
    public private(set) var missingPictures: Int64 = 0
    public private(set) var picturesEncoded: Int64 = 0
    public private(set) var paused = false
    /// True once the total reached `maxSeconds`; further input is ignored.
    public private(set) var full = false

    private var segment: Segment?
    private var nextIndex: Int
    /// Number of the first fragment this recorder writes: lower numbers were there before it.
    private let firstIndex: Int
    private var lastSequence: Int64?
    /// Seconds of the fragments that were in the directory when recording started and still are
    /// (counts against `maxSeconds`; 0 without it).
    private var earlierSeconds: Double
    // Audio not yet given to a fragment: interleaved samples starting at sample `audioFirst`.
    private var audio: [Float] = []
    private var audioFirst: Int64 = 0
    private var audioFormat: (rate: Int, channels: Int)?
    /// True once audio (or silence standing for it) has been buffered: `audioFirst` is meaningful.
    private var audioStarted = false
    private var lastVideoTime: Double?
    private var nominalFrame: Double = 1.0 / 30
    private var aligner: LiveAudioAligner?
    /// A picture's capture time minus its stream time: moves live audio onto the pictures' timeline.
    private var clockOffset: Double?
    /// Placed live audio that arrived before the first picture (at most `longestAudioWait` of it).
    private var unplaced: [AudioChunk] = []
    /// Pictures waiting for the audio of their instant.
    private var waiting: [VideoFrame] = []
    /// Set by the owner while an input that carries audio is open: pictures wait for their audio.
    public var audioInputOpen = false
    /// Set by the owner when the audio comes from a source of its own beside the pictures (a
    /// microphone): pictures recorded without it are counted in `muteSeconds`.
    public var separateAudio = false
    /// Seconds of recorded pictures that no audio from the separate source reached (their sound
    /// is silence standing in for it): the source went away, or sent nothing for longer than
    /// `longestAudioWait`. A picture counts when less than half of it has audio.
    public private(set) var muteSeconds = 0.0
    /// End (sample index on the pictures' timeline) of the audio received so far; nil before any.
    private var receivedAudioEnd: Int64?
    /// Where the separate source's first sound starts (sample index on the pictures' timeline).
    private var soundFrom: Int64?
    /// True until a picture goes on to the recording: while `separateAudio`, pictures before the
    /// first sound are left out.
    private var awaitingFirstPicture = true
    /// Pictures left out because they began before the separate source's first sound.
    public private(set) var picturesBeforeSound = 0
    public static let longestAudioWait = 1.0

    public init(options: RecordOptions) throws {
        _ = FF.setup
        if let p = options.problem { throw ClipFlowError.badInput("record: \(p)") }
        self.options = options
        do { try FileManager.default.createDirectory(atPath: options.directory, withIntermediateDirectories: true) } catch {
            throw ClipFlowError.output("cannot create the recording directory '\(options.directory)'", writing: error)
        }
        guard access(options.directory, W_OK) == 0 else {
            throw ClipFlowError.output("cannot write into the recording directory '\(options.directory)' (permission denied)")
        }
        let existing = ClipStore(directory: options.directory, prefix: options.prefix).clipFiles()
        nextIndex = (existing.map(\.index).max() ?? 0) + 1
        firstIndex = nextIndex
        earlierSeconds = options.maxSeconds > 0 ? existing.reduce(0) { $0 + ((try? ClipProbe.probe($1.path).videoSeconds) ?? 0) } : 0
        if options.maxSeconds > 0, earlierSeconds >= options.maxSeconds { full = true }
    }

    /// Seconds recorded so far, fragments already in the directory included, those deleted
    /// through `deleteLast` not: what `maxSeconds` caps.
    public var totalSeconds: Double {
        earlierSeconds + clips.reduce(0) { $0 + $1.seconds } + (segment.map { ($0.lastTime ?? $0.startTime) - $0.startTime + nominalFrame } ?? 0)
    }

    /// Audio the microphone lost (overruns), and the seconds of silence standing in for it.
    public var audioOverruns: Int { aligner?.overruns ?? 0 }
    public var audioLostSeconds: Double { aligner?.lostSeconds ?? 0 }
    /// Peak level of the latest live audio, dBFS.
    public var audioLevel: Double? { aligner?.level }
    /// Pictures taken but waiting for their audio.
    public var picturesWaiting: Int { waiting.count }
    /// False while the first pictures wait for the separate source's first sound.
    public var recordingStarted: Bool { !awaitingFirstPicture }

    /// The audio format to expect before any audio arrives (from the stream's parameters): every
    /// fragment then has an audio track, silent until the audio comes.
    public func expectAudio(sampleRate: Int, channels: Int) {
        if audioFormat == nil, sampleRate > 0, channels > 0 { audioFormat = (sampleRate, channels) }
    }

    /// Number of the open fragment, or of the one the next picture opens (between fragments,
    /// just after a split); nil while paused or once the recording is over.
    public var currentFragment: Int? { segment?.index ?? (paused || full ? nil : nextIndex) }

    /// Seconds in the open fragment (0 if none is open).
    public var openFragmentSeconds: Double {
        segment.map { ($0.lastTime ?? $0.startTime) - $0.startTime + nominalFrame } ?? 0
    }

    /// Takes one picture or audio run. Returns false once the maximum total time is reached
    /// (the open fragment is then closed and nothing more is taken).
    @discardableResult
    public func append(_ frame: MediaFrame) throws -> Bool {
        if full { return false }
        switch frame {
        case .audio(let a) where a.clockTime != nil: try takeLiveAudio(a)
        case .audio(let a): try takeAudio(a)
        case .video(let v):
            if clockOffset == nil, let c = v.clockTime {
                clockOffset = c - v.time
                let early = unplaced
                unplaced = []
                for a in early { try placeLiveAudio(a) }
            } else if v.clockTime == nil, aligner != nil {
                throw ClipFlowError.badInput(
                    "record: the microphone's audio is placed by capture time, and these pictures carry none (their source is not live)")
            }
            waiting.append(v)
        }
        try releasePictures()
        return !full
    }

    /// Lets the waiting pictures through whose audio has arrived (all of them once no audio
    /// input is open, and any that waited longer than `longestAudioWait`).
    public func releasePictures() throws {
        while let v = waiting.first, !full {
            if awaitingFirstPicture && separateAudio {
                if let from = soundFrom {
                    if sampleIndex(v.time) < from {
                        waiting.removeFirst()
                        picturesBeforeSound += 1
                        continue
                    }
                } else if audioInputOpen {
                    guard let newest = waiting.last, newest.time - v.time >= Self.longestAudioWait else { break }
                    waiting.removeFirst()
                    picturesBeforeSound += 1
                    continue
                }
            }
            if audioInputOpen, let newest = waiting.last, newest.time - v.time < Self.longestAudioWait {
                guard let f = audioFormat, audioStarted, audioFirst + Int64(audio.count / f.channels) >= sampleIndex(v.time + nominalFrame) else { break }
            }
            waiting.removeFirst()
            try takeVideo(v)
        }
        if full { waiting.removeAll() }
    }

    private func takeLiveAudio(_ a: AudioChunk) throws {
        if aligner == nil {
            if lastVideoTime != nil || !waiting.isEmpty, clockOffset == nil {
                throw ClipFlowError.badInput(
                    "record: the microphone's audio is placed by capture time, and the pictures carry none (their source is not live)")
            }
            aligner = try LiveAudioAligner(sampleRate: a.sampleRate, channels: a.channels)
        }
        for c in try aligner!.take(a) { try placeLiveAudio(c) }
    }

    /// Takes live audio placed on the capture clock, on the pictures' timeline.
    private func placeLiveAudio(_ c: AudioChunk) throws {
        guard let offset = clockOffset else {
            unplaced.append(c)
            let keep = Int64(Self.longestAudioWait * Double(c.sampleRate))
            while let first = unplaced.first, c.firstSample - first.firstSample > keep { unplaced.removeFirst() }
            return
        }
        let shift = Int64((offset * Double(c.sampleRate)).rounded())
        try takeAudio(AudioChunk(sampleRate: c.sampleRate, channels: c.channels, samples: c.samples, firstSample: c.firstSample - shift))
    }

    /// Closes the open fragment; pictures and audio are ignored until `resume`.
    public func pause() throws {
        paused = true
        try closeSegment(end: nil)
    }

    /// Starts a new fragment at the next picture.
    public func resume() { paused = false }

    /// Closes the open fragment (end of recording). The recorder can take no more input.
    public func finish() throws {
        if let a = aligner { for c in try a.finish() { try placeLiveAudio(c) } }
        audioInputOpen = false
        try releasePictures()
        try closeSegment(end: nil)
        full = true
    }

    /// Deletes the highest-numbered closed fragment in the directory (the open one, under its
    /// temporary name, is never it) and takes its seconds out of `totalSeconds`, so `maxSeconds`
    /// counts only fragments that exist. A fragment of this recording leaves `clips`. Returns the
    /// deleted file and its seconds, nil when the directory holds no fragment.
    public func deleteLast() throws -> (path: String, seconds: Double)? {
        guard let last = ClipStore(directory: options.directory, prefix: options.prefix).clipFiles().last else { return nil }
        let ours = clips.lastIndex { $0.path == last.path }
        let seconds = ours.map { clips[$0].seconds } ?? (try? ClipProbe.probe(last.path).videoSeconds) ?? 0
        guard unlink(last.path) == 0 else {
            throw ClipFlowError.output("cannot delete '\(last.path)': \(String(cString: strerror(errno)))")
        }
        if let i = ours {
            clips.remove(at: i)
        } else if last.index < firstIndex, options.maxSeconds > 0 {
            earlierSeconds = max(0, earlierSeconds - seconds)
        }
        return (last.path, seconds)
    }

    /// Abandons the open fragment (its temporary file is removed); closed fragments stay.
    public func abandon() {
        segment?.output.discard()
        segment = nil
    }

    // MARK: input

    private func takeAudio(_ a: AudioChunk) throws {
        if let f = audioFormat, f != (a.sampleRate, a.channels) {
            throw ClipFlowError.badInput("record: audio changed from \(f.rate) Hz x\(f.channels) to \(a.sampleRate) Hz x\(a.channels) mid-stream")
        }
        if audioFormat == nil { audioFormat = (a.sampleRate, a.channels) }
        if !audioStarted {
            audioStarted = true
            audioFirst = a.firstSample
        }
        if separateAudio, soundFrom == nil { soundFrom = a.firstSample }
        receivedAudioEnd = max(receivedAudioEnd ?? .min, a.firstSample + Int64(a.frameCount))
        // Append, closing any gap with silence (the timeline stays exact) and skipping overlap.
        let end = audioFirst + Int64(audio.count / a.channels)
        if a.firstSample > end {
            audio += [Float](repeating: 0, count: Int(a.firstSample - end) * a.channels)
            audio += a.samples
        } else {
            let skip = Int(end - a.firstSample)
            if skip < a.frameCount { audio += a.samples[(skip * a.channels)...] }
        }
        try feedAudio(upTo: lastVideoTime.map { sampleIndex($0) })
    }

    private func takeVideo(_ v: VideoFrame) throws {
        awaitingFirstPicture = false
        if let last = lastSequence, v.sequence > last + 1 { missingPictures += v.sequence - last - 1 }
        lastSequence = v.sequence
        if let r = v.nominalRate, r > 0 { nominalFrame = 1 / r } else if let last = lastVideoTime, v.time > last { nominalFrame = min(1, v.time - last) }
        if paused {
            lastVideoTime = v.time
            dropAudio(before: sampleIndex(v.time))
            return
        }
        if let s = segment, options.segmentSeconds > 0, v.time - s.startTime >= options.segmentSeconds - nominalFrame / 2 {
            try closeSegment(end: v.time)
        }
        if options.maxSeconds > 0, totalSeconds + nominalFrame > options.maxSeconds + 1e-6 {
            try closeSegment(end: v.time)
            full = true
            return
        }
        if segment == nil {
            dropAudio(before: sampleIndex(v.time))
            segment = try Segment(recorder: self, first: v, index: nextIndex)
            nextIndex += 1
        }
        lastVideoTime = v.time
        try segment!.encode(v)
        picturesEncoded += 1
        if separateAudio, (receivedAudioEnd ?? .min) < sampleIndex(v.time + nominalFrame / 2) { muteSeconds += nominalFrame }
        try feedAudio(upTo: sampleIndex(v.time))
    }

    private func sampleIndex(_ t: Double) -> Int64 {
        guard let f = audioFormat else { return 0 }
        return Int64((t * Double(f.rate)).rounded())
    }

    private func dropAudio(before index: Int64) {
        guard let f = audioFormat, audioStarted, index > audioFirst else { return }
        let n = min(Int(index - audioFirst), audio.count / f.channels)
        audio.removeFirst(n * f.channels)
        audioFirst += Int64(n)
        if audio.isEmpty { audioFirst = index }
    }

    /// Gives the open fragment's audio encoder whole AAC frames of the samples before `limit`.
    private func feedAudio(upTo limit: Int64?, flush: Bool = false) throws {
        guard let seg = segment, let f = audioFormat, let limit else { return }
        if seg.audioStart == nil {
            // The fragment's audio starts with its first picture: silence stands for what came later.
            let start = sampleIndex(seg.startTime)
            seg.audioStart = start
            if !audioStarted {
                audioStarted = true
                audioFirst = start
            } else if audioFirst > start {
                audio.insert(contentsOf: [Float](repeating: 0, count: Int(audioFirst - start) * f.channels), at: 0)
                audioFirst = start
            }
        }
        dropAudio(before: seg.audioStart! + seg.audioSent)
        let available = Int(min(limit, audioFirst + Int64(audio.count / f.channels)) - audioFirst)
        guard available > 0 else { return }
        var used = 0
        while available - used >= 1024 || (flush && used < available) {
            let n = min(1024, available - used)
            try seg.encodeAudio(audio, from: used, frames: n, format: f)
            used += n
        }
        audio.removeFirst(used * f.channels)
        audioFirst += Int64(used)
    }

    private func closeSegment(end: Double?) throws {
        guard let seg = segment else { return }
        let endTime = end ?? ((lastVideoTime ?? seg.startTime) + nominalFrame)
        if let f = audioFormat {
            // ... and ends with its last: silence stands for what did not arrive.
            try feedAudio(upTo: sampleIndex(endTime), flush: false)
            let have = audioFirst + Int64(audio.count / f.channels)
            if have < sampleIndex(endTime) { audio += [Float](repeating: 0, count: Int(sampleIndex(endTime) - have) * f.channels) }
            try feedAudio(upTo: sampleIndex(endTime), flush: true)
        }
        segment = nil
        let clip = try seg.close(endTime: endTime)
        clips.append(clip)
        onClosed?(clip)
    }

    // MARK: one fragment

    fileprivate final class Segment {
        let index: Int
        let path: String
        let output: AtomicOutput
        let mux: OutputMuxer
        let venc: CodecContext
        let vstream: UnsafeMutablePointer<AVStream>
        var aac: AACEncoder?
        var astream: UnsafeMutablePointer<AVStream>?
        let startTime: Double
        var lastTime: Double?
        var audioStart: Int64?
        var audioSent: Int64 = 0
        var frames = 0
        let width: Int, height: Int
        private let picture: Frame
        /// Points at the current source picture's bytes during `encode` (owns no buffer).
        private let wrapper: Frame
        private var scaler: Scaler?
        private var scalerFormat: AVPixelFormat?
        private let packet: Packet
        private var held: Packet?
        private var lastPTS: Int64 = -1
        private var headerWritten = false
        static let videoTimeBase = AVRational(num: 1, den: 90_000)

        init(recorder r: FragmentRecorder, first: VideoFrame, index: Int) throws {
            let o = r.options
            self.index = index
            path = (o.directory as NSString).appendingPathComponent(String(format: "%@-%04d.mp4", o.prefix, index))
            output = try AtomicOutput(target: URL(fileURLWithPath: path), label: "clip", replacing: false)
            mux = try OutputMuxer(path: output.temporary.path, shownAs: path)
            startTime = first.time
            width = first.width
            height = first.height
            picture = try Frame()
            wrapper = try Frame()
            picture.f.pointee.format = AV_PIX_FMT_YUV420P.rawValue
            picture.f.pointee.width = Int32(first.width)
            picture.f.pointee.height = Int32(first.height)
            try FF.check(av_frame_get_buffer(picture.f, 0), "allocating a picture")
            packet = try Packet()
            // The source's nominal rate (not a measured interval): every fragment gets the same
            // encoder settings, hence the same SPS, and merges without re-encoding.
            let rate = first.nominalRate ?? 30
            let fps = av_d2q(rate, 100_000)
            let gop = Int32(max(1, (o.keyframeSeconds * rate).rounded()))
            let muxFlags = mux.ctx.pointee.oformat.pointee.flags
            venc = try CodecContext.encoder(
                named: "libx264", what: "H.264 encoder",
                options: ["preset": o.preset, "crf": String(o.crf)]
            ) { c in
                c.pointee.width = Int32(first.width)
                c.pointee.height = Int32(first.height)
                c.pointee.pix_fmt = AV_PIX_FMT_YUV420P
                c.pointee.time_base = Segment.videoTimeBase
                c.pointee.framerate = fps
                c.pointee.gop_size = gop
                c.pointee.max_b_frames = 0
                c.pointee.thread_count = Int32(o.threads)
                if muxFlags & AVFMT_GLOBALHEADER != 0 { c.pointee.flags |= AV_CODEC_FLAG_GLOBAL_HEADER }
            }
            guard let vs = avformat_new_stream(mux.ctx, nil) else { throw ClipFlowError.failure("out of memory adding a stream") }
            vstream = vs
            try FF.check(avcodec_parameters_from_context(vs.pointee.codecpar, venc.ctx), "video stream parameters")
            vs.pointee.time_base = Segment.videoTimeBase
            if let f = r.audioFormat {
                let enc = try AACEncoder(rate: f.rate, channels: f.channels, bitRate: o.audioBitRate, globalHeader: muxFlags & AVFMT_GLOBALHEADER != 0)
                guard let st = avformat_new_stream(mux.ctx, nil) else { throw ClipFlowError.failure("out of memory adding a stream") }
                try FF.check(avcodec_parameters_from_context(st.pointee.codecpar, enc.codec.ctx), "audio stream parameters")
                st.pointee.time_base = enc.timeBase
                aac = enc
                astream = st
            }
            try mux.writeHeader(moovReserve: nil, fastStartSecondPass: false)
            headerWritten = true
        }

        func encode(_ v: VideoFrame) throws {
            guard v.width == width, v.height == height else {
                throw ClipFlowError.badInput("record: picture size changed from \(width)x\(height) to \(v.width)x\(v.height) mid-fragment")
            }
            let fmt: AVPixelFormat
            switch v.format {
            case .yuv420p: fmt = AV_PIX_FMT_YUV420P
            case .nv12: fmt = AV_PIX_FMT_NV12
            case .yuyv422: fmt = AV_PIX_FMT_YUYV422
            case .mjpeg: throw ClipFlowError.badInput("record: MJPEG pictures must be decoded before recording")
            }
            guard let need = v.format.frameBytes(width: width, height: height), v.data.count >= need else {
                throw ClipFlowError.badInput("record: picture \(v.sequence) has \(v.data.count) bytes, too few for \(width)x\(height) \(v.format.rawValue)")
            }
            var pts = Int64(((v.time - startTime) * 90_000).rounded())
            if pts <= lastPTS { pts = lastPTS + 1 }
            lastPTS = pts
            lastTime = v.time
            // One picture buffer per fragment, reused: the encoder copies what it keeps, and
            // av_frame_make_writable only reallocates if it ever holds a reference.
            try FF.check(av_frame_make_writable(picture.f), "preparing a picture")
            if scaler == nil || scalerFormat != fmt {
                scaler = try Scaler(
                    srcW: Int32(width), srcH: Int32(height), srcFormat: fmt,
                    dstW: Int32(width), dstH: Int32(height), dstFormat: AV_PIX_FMT_YUV420P)
                scalerFormat = fmt
            }
            try v.data.withUnsafeBytes { raw in
                // The source picture is wrapped in place (no copy), valid inside this closure only.
                try FF.check(cf_frame_wrap(wrapper.f, raw.bindMemory(to: UInt8.self).baseAddress, fmt, Int32(width), Int32(height)), "wrapping a picture")
                try scaler!.scale(wrapper, into: picture)
            }
            picture.f.pointee.pts = pts
            try venc.send(frame: picture)
            frames += 1
            try drainVideo()
        }

        private func drainVideo() throws {
            while try venc.receive(packet: packet) {
                packet.p.pointee.stream_index = vstream.pointee.index
                if let h = held {
                    h.p.pointee.duration = max(1, packet.p.pointee.pts - h.p.pointee.pts)
                    try writeVideo(h)
                }
                let keep = try packet.clone()
                packet.unref()
                held = keep
            }
        }

        private func writeVideo(_ p: Packet) throws {
            av_packet_rescale_ts(p.p, Segment.videoTimeBase, vstream.pointee.time_base)
            try mux.write(p)
        }

        /// Encodes `n` sample frames of the interleaved `samples` from frame `first` (whole AAC frames but for the
        /// fragment's last).
        func encodeAudio(_ samples: [Float], from first: Int, frames n: Int, format f: (rate: Int, channels: Int)) throws {
            guard let aac else { return }
            let planar = PlanarSamples(interleaved: samples, channelCount: f.channels, from: first, frames: n)
            audioSent += Int64(n)
            try aac.encode(planar, writeAudio)
        }

        private func writeAudio(_ p: Packet) throws {
            guard let aac, let astream else { return }
            p.p.pointee.stream_index = astream.pointee.index
            av_packet_rescale_ts(p.p, aac.timeBase, astream.pointee.time_base)
            try mux.write(p)
        }

        /// Flushes both encoders, writes the index and renames the fragment into place.
        func close(endTime: Double) throws -> RecordedClip {
            try venc.send(frame: nil)
            try drainVideo()
            if let h = held {
                let end = Int64(((endTime - startTime) * 90_000).rounded())
                h.p.pointee.duration = max(1, end - h.p.pointee.pts)
                try writeVideo(h)
                held = nil
            }
            try aac?.finish(writeAudio)
            let rc = mux.writeTrailer()
            if rc < 0 { throw ClipFlowError.output("finishing clip '\(path)' failed: \(FF.describe(rc))") }
            try mux.close()
            try output.commit()
            return RecordedClip(path: path, index: index, videoFrames: frames, seconds: max(0, endTime - startTime), audioSamples: audioSent)
        }
    }
}

/// The fragments in a recording directory: `<prefix>-NNNN.mp4`, in number order. Listing and
/// deleting the last clip (the phone app's "delete last clip").
public struct ClipStore: Sendable {
    public let directory: String
    public let prefix: String

    public init(directory: String, prefix: String = "clip") {
        self.directory = directory
        self.prefix = prefix
    }

    public struct Entry: Sendable, Equatable {
        public var path: String
        public var index: Int
    }

    /// Fragment files in number order (temporary files of a recording in progress are not listed).
    public func clipFiles() -> [Entry] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? []
        var out: [Entry] = []
        for n in names where n.hasPrefix(prefix + "-") && n.hasSuffix(".mp4") {
            let mid = n.dropFirst(prefix.count + 1).dropLast(4)
            if let i = Int(mid), mid.allSatisfy(\.isNumber) {
                out.append(Entry(path: (directory as NSString).appendingPathComponent(n), index: i))
            }
        }
        return out.sorted { $0.index < $1.index }
    }

    /// Removes the highest-numbered fragment and returns its path (nil if there is none).
    @discardableResult
    public func deleteLast() throws -> String? {
        guard let last = clipFiles().last else { return nil }
        guard unlink(last.path) == 0 else {
            throw ClipFlowError.output("cannot delete '\(last.path)': \(String(cString: strerror(errno)))")
        }
        return last.path
    }
}
