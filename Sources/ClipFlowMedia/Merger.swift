internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// Options for `Merger`.
public struct MergeOptions: Sendable {
    /// Where the merged MP4 goes (written under a temporary name, renamed when complete).
    public var output: URL
    /// Clockwise turn added to the clips' own orientation: 0, 90, 180 or 270.
    public var rotate: Int = 0
    /// Reserve this many bytes for `moov` instead of the computed bound (tests of the fallback).
    public var moovReserveOverride: Int? = nil
    public init(output: URL, rotate: Int = 0) {
        self.output = output
        self.rotate = rotate
    }
}

/// What a merge produced.
public struct MergeResult: Sendable {
    public var output: URL
    public var clips: Int
    public var videoFrames: Int
    public var audioFrames: Int64
    public var reencodedAudioFrames: Int64
    /// Total clockwise rotation written into the display matrix.
    public var rotation: Int
    public var bytes: Int64
    /// Bytes reserved for moov and bytes it used (one-pass fast start), or nil after the fallback.
    public var moovReserved: Int?
    public var moovUsed: Int?
    public var usedSecondPass: Bool
    /// Where each clip's pictures are in the output (for messages about the output's content).
    public var sources: [Thumbnailer.Source] = []
}

/// Joins MP4/MOV clips into one fast-start MP4 by packet copy (see `AudioJoinPlan` for audio).
///
/// Threading: `run()` works on the calling thread; audio join regions are rendered on one
/// background queue in parallel and handed over (ownership transfer) as they complete.
public final class Merger {
    public let inputs: [String]
    public let options: MergeOptions
    let progress: ProgressReporter
    let cancel: CancellationFlag

    public init(inputs: [String], options: MergeOptions, progress: ProgressReporter = SilentProgress(),
                cancel: CancellationFlag = CancellationFlag()) {
        self.inputs = inputs
        self.options = options
        self.progress = progress
        self.cancel = cancel
    }

    public func run() throws -> MergeResult {
        guard !inputs.isEmpty else { throw ClipFlowError.badInput("no input clips given") }
        guard [0, 90, 180, 270].contains(options.rotate) else {
            throw ClipFlowError.badInput("--rotate must be 0, 90, 180 or 270 (got \(options.rotate))")
        }
        let inputUses = inputs.enumerated().map { OutputSafety.Use(path: $1, label: "input \($0 + 1)") }
        if let clash = OutputSafety.clashes(inputs: inputUses, outputs: [OutputSafety.Use(path: options.output.path, label: "output")]).first {
            throw ClipFlowError.badInput(clash.description)
        }
        // Probe on every core (nothing else runs yet); errors are reported for the first bad input
        // in the order given, as a sequential probe would.
        let probed = ProbeResults(count: inputs.count)
        let inputs = self.inputs, cancel = self.cancel
        DispatchQueue.concurrentPerform(iterations: inputs.count) { i in
            probed.set(i, cancel.isCancelled ? .failure(ClipFlowError.interrupted) : Result { try ClipProbe.probe(inputs[i]) })
        }
        let clips = try probed.all()
        try Compatibility.check(clips)
        let layout = try Layout(clips: clips, rotate: options.rotate)

        let out = try AtomicOutput(target: options.output, label: "output")
        var result: MergeResult
        do {
            result = try mux(layout: layout, to: out.temporary.path, onePass: true)
        } catch let e as MoovTooSmall {
            progress.notice("reserved \(e.reserved) bytes for the index but it needed more; writing fast start in a second pass")
            result = try mux(layout: layout, to: out.temporary.path, onePass: false)
        }
        let boxes = try MP4Boxes.topLevel(path: out.temporary.path)
        guard MP4Boxes.isFastStart(boxes) else {
            throw ClipFlowError.failure("internal: written file is not fast-start (boxes: \(boxes.map(\.type)))")
        }
        if result.moovReserved != nil {
            if let moov = boxes.first(where: { $0.type == "moov" }) { result.moovUsed = Int(moov.size) }
        }
        try out.commit()
        result.output = options.output
        return result
    }

    struct MoovTooSmall: Error { let reserved: Int }

    /// Probe results filled from concurrent probes, read once all are done.
    final class ProbeResults: @unchecked Sendable {
        private var results: [Result<ClipInfo, Error>?]
        private let lock = NSLock()
        init(count: Int) { results = Array(repeating: nil, count: count) }
        func set(_ i: Int, _ r: Result<ClipInfo, Error>) { lock.lock(); results[i] = r; lock.unlock() }
        func all() throws -> [ClipInfo] {
            lock.lock(); defer { lock.unlock() }
            return try results.map { try $0!.get() }
        }
    }

    /// Timing of every clip in the output, computed before anything is written.
    struct Layout {
        let clips: [ClipInfo]
        let rotation: Int
        let videoTB: AVRational
        /// Added to each clip's video timestamps (after rescaling to videoTB).
        let videoOffsets: [Int64]
        /// Output time (videoTB) of each clip's first picture.
        let starts: [Int64]
        let videoEnd: Int64
        let audio: AudioJoinPlan?
        let sampleRate: Int32
        /// Output audio pts of raw sample 0 (1/sampleRate).
        let audioBase: Int64

        /// A time base in which every clip's timestamps are exact (1 / the least common multiple
        /// of the timescales), or else the finest of them: rescaling a finer time base to a
        /// coarser one rounds neighbouring frames together (decode times that no longer increase).
        static func commonTimeBase(_ bases: [AVRational]) -> AVRational {
            func gcd(_ a: Int64, _ b: Int64) -> Int64 { b == 0 ? a : gcd(b, a % b) }
            var lcm: Int64 = 1
            for b in bases {
                guard b.num == 1, b.den > 0 else { lcm = 0; break }
                lcm = lcm / gcd(lcm, Int64(b.den)) * Int64(b.den)
                if lcm > Int64(Int32.max) { lcm = 0; break }
            }
            if lcm > 0 { return AVRational(num: 1, den: Int32(lcm)) }
            return bases.min { $0.double < $1.double } ?? AVRational(num: 1, den: 1)
        }

        init(clips: [ClipInfo], rotate: Int) throws {
            self.clips = clips
            let first = clips[0]
            rotation = (first.video.rotation + rotate) % 360
            videoTB = Self.commonTimeBase(clips.map(\.video.timeBase.av))
            var offsets: [Int64] = []
            var v: Int64 = 0                       // V_c, output time of clip c's first frame
            var starts: [Int64] = []
            for c in clips {
                let tb = c.video.timeBase.av
                offsets.append(v - rescale(c.video.start, tb, videoTB))
                starts.append(v)
                v += rescale(c.video.duration, tb, videoTB)
            }
            videoOffsets = offsets
            self.starts = starts
            videoEnd = v
            guard let a0 = first.audio else {
                audio = nil; sampleRate = 0; audioBase = 0
                return
            }
            sampleRate = a0.sampleRate
            let sr = AVRational(num: 1, den: a0.sampleRate)
            // X_c: timeline position of each clip's first audible sample, relative to clip 0's.
            var xs: [Int64] = []
            for (i, c) in clips.enumerated() {
                guard let a = c.audio else { throw ClipFlowError.failure("internal: clip without audio") }
                let videoAt = rescale(starts[i], videoTB, sr)
                let audioVsVideo = rescale(a.start, a.timeBase.av, sr) - rescale(c.video.start, c.video.timeBase.av, sr)
                xs.append(videoAt + audioVsVideo)
            }
            let x0 = xs[0]
            if a0.objectType != 2 && clips.count > 1 {
                throw ClipFlowError.incompatible(
                    "'\(first.path)': \(Compatibility.aacProfileName(a0.objectType)) audio cannot be joined sample-accurately yet; only AAC LC is supported for joins")
            }
            let planClips = clips.enumerated().map { i, c in
                AudioJoinPlan.Clip(start: xs[i] - x0, length: c.audioSamples, priming: c.audio!.priming,
                                   frames: Int64(c.audio!.packets))
            }
            audio = try AudioJoinPlan(clips: planClips)
            audioBase = x0 - audio!.priming
        }
    }

    /// Rendered join regions, filled by a background queue; `take(i)` waits for region i.
    final class RegionResults: @unchecked Sendable {
        private var results: [Result<[Packet], Error>?]
        private let cond = NSCondition()
        private var abandonedFlag = false
        /// Set when the merge stops early, so the renderer does no more work.
        var abandoned: Bool {
            get { cond.lock(); defer { cond.unlock() }; return abandonedFlag }
            set { cond.lock(); abandonedFlag = newValue; cond.unlock() }
        }
        init(count: Int) { results = Array(repeating: nil, count: count) }
        func put(_ i: Int, _ r: Result<[Packet], Error>) {
            cond.lock(); results[i] = r; cond.broadcast(); cond.unlock()
        }
        func take(_ i: Int) throws -> [Packet] {
            cond.lock()
            while results[i] == nil { cond.wait() }
            let r = results[i]!
            results[i] = .success([])
            cond.unlock()
            return try r.get()
        }
    }

    private func mux(layout: Layout, to path: String, onePass: Bool) throws -> MergeResult {
        let clips = layout.clips
        let first = clips[0]
        let total = clips.reduce(Int64(0)) { $0 + $1.mediaBytes }

        // Start rendering audio join regions on the second core.
        var regionResults: RegionResults? = nil
        var reencoded: Int64 = 0
        if let plan = layout.audio, !plan.regions.isEmpty, let a0 = first.audio {
            let results = RegionResults(count: plan.regions.count)
            regionResults = results
            let renderer = AudioRegionRenderer(plan: plan, clips: clips, sampleRate: a0.sampleRate,
                                               channels: a0.channels, bitRate: a0.bitRate)
            let cancel = self.cancel
            Thread {
                MediaThreads.yieldToCopy()
                renderer.renderAll(shouldStop: { cancel.isCancelled || results.abandoned },
                                   deliver: { i, r in results.put(i, r) })
            }.start()
            reencoded = plan.regions.reduce(0) { $0 + Int64($1.frames.count) }
        }
        defer { regionResults?.abandoned = true }

        let mux = try OutputMuxer(path: path, shownAs: options.output.path)
        let vst = try mux.addStream(copying: first, video: true)
        vst.pointee.time_base = layout.videoTB
        try FF.check(cf_stream_set_display_rotation(vst, Double(layout.rotation)), "writing the orientation")
        var ast: UnsafeMutablePointer<AVStream>? = nil
        if layout.audio != nil { ast = try mux.addStream(copying: first, video: false) }

        var reserve: Int? = nil
        if onePass {
            var tracks = [MoovEstimate.Track(
                samples: clips.reduce(0) { $0 + $1.video.packets },
                keyframes: clips.reduce(0) { $0 + $1.video.keyframes },
                durationRuns: clips.reduce(0) { $0 + $1.video.durationRuns + 2 },
                isVideo: true, extradataBytes: first.video.extradata.count)]
            if let plan = layout.audio {
                tracks.append(.init(samples: Int(plan.frameCount), keyframes: Int(plan.frameCount),
                                    durationRuns: 4, isVideo: false, extradataBytes: first.audio!.extradata.count))
            }
            reserve = options.moovReserveOverride ?? MoovEstimate.bytes(tracks: tracks)
        }
        try mux.writeHeader(moovReserve: reserve, fastStartSecondPass: !onePass)
        let vtbOut = vst.pointee.time_base
        let atbOut = ast?.pointee.time_base ?? AVRational(num: 1, den: 1)
        let srTB = AVRational(num: 1, den: layout.sampleRate)

        var done: Int64 = 0
        var lastReport = DispatchTime.now().uptimeNanoseconds
        var lastVideoDts = Int64.min
        var lastVideoClip = 0
        var videoFrames = 0
        var audioFramesWritten: Int64 = 0
        var nextRegion = 0
        let pkt = try Packet()

        func writeAudio(_ p: Packet, frame k: Int64) throws {
            guard let plan = layout.audio, let ast else { return }
            let pts = k * AudioJoinPlan.frameSize + layout.audioBase
            let dur = k == plan.frameCount - 1 ? plan.lastFrameDuration : AudioJoinPlan.frameSize
            p.p.pointee.stream_index = ast.pointee.index
            p.p.pointee.pts = rescale(pts, srTB, atbOut)
            p.p.pointee.dts = p.p.pointee.pts
            p.p.pointee.duration = rescale(dur, srTB, atbOut)
            p.p.pointee.pos = -1
            try mux.writeInOrder(p)
            audioFramesWritten += 1
        }
        func emitRegions(before k: Int64) throws {
            guard let plan = layout.audio, let regionResults else { return }
            while nextRegion < plan.regions.count, plan.regions[nextRegion].frames.lowerBound < k {
                let packets = try regionResults.take(nextRegion)
                for p in packets { try writeAudio(p, frame: p.p.pointee.pts) }
                nextRegion += 1
            }
        }

        // Clips are mapped and their packets listed ahead, on a helper thread (ClipOpener):
        // the copy loop only points a packet at each sample and hands it to the muxer.
        let opener = ClipOpener(clips: clips, audio: layout.audio != nil)
        defer { opener.stop() }
        for (ci, clip) in clips.enumerated() {
            let (mapped, packets) = try opener.take(ci)
            mux.sink.register(mapped)
            let vtbIn = clip.video.timeBase.av
            let copy = layout.audio?.copies.first(where: { $0.clip == ci })
            let audioTB = clip.audio?.timeBase.av
            // Packets are written in the clip's file order (the demuxer returns them so), not
            // through the muxer's interleaving queue: the output then keeps the clip's own
            // interleaving, so each clip goes out in a few long `sendfile` ranges (the queue's
            // dts order differs from the file order wherever audio and video are offset, which
            // cut a 60-clip merge into 5,500 ranges).
            for e in packets {
                try cancel.check()
                let out = e.own ?? pkt
                if e.own == nil { mapped.point(out.p, at: e) }
                let size = Int64(e.size)
                if e.stream == clip.video.streamIndex {
                    let p = out.p
                    guard e.dts != FF.noPTS, e.pts != FF.noPTS else {
                        throw ClipFlowError.badInput("input '\(clip.path)': a video packet has no timestamp")
                    }
                    let off = layout.videoOffsets[ci]
                    let dts = rescale(rescale(e.dts, vtbIn, layout.videoTB) + off, layout.videoTB, vtbOut)
                    let pts = rescale(rescale(e.pts, vtbIn, layout.videoTB) + off, layout.videoTB, vtbOut)
                    guard dts > lastVideoDts else {
                        if lastVideoClip == ci {
                            throw ClipFlowError.badInput("input '\(clip.path)': its video decode times do not increase; it cannot be joined by copy")
                        }
                        throw ClipFlowError.incompatible(
                            "cannot join '\(clips[lastVideoClip].path)' and '\(clip.path)' by copy: the second's first frames would be decoded before the first's last ones (decode times not increasing)")
                    }
                    lastVideoDts = dts
                    lastVideoClip = ci
                    p.pointee.dts = dts
                    p.pointee.pts = pts
                    p.pointee.duration = rescale(e.duration, vtbIn, vtbOut)
                    p.pointee.flags = e.flags
                    p.pointee.stream_index = vst.pointee.index
                    p.pointee.pos = -1
                    try mux.writeInOrder(out)
                    videoFrames += 1
                } else if let a = clip.audio, e.stream == a.streamIndex, let copy, let audioTB {
                    let ptsSamples = rescale(e.pts, audioTB, srTB)
                    let rawStart = ptsSamples - (rescale(a.start, audioTB, srTB) - a.priming)
                    let j = floorDiv(rawStart + AudioJoinPlan.frameSize / 2, AudioJoinPlan.frameSize)
                    let k = j + copy.offset
                    if copy.frames.contains(k) {
                        try emitRegions(before: k)
                        out.p.pointee.flags = e.flags
                        try writeAudio(out, frame: k)
                    }
                } else {
                    continue
                }
                done += size
                let now = DispatchTime.now().uptimeNanoseconds
                if now - lastReport > 100_000_000 {
                    lastReport = now
                    progress.report(ProgressEvent(phase: "merge", completed: done, total: total))
                }
            }
        }
        try emitRegions(before: Int64.max)
        let rc = mux.writeTrailer()
        if rc < 0 {
            if mux.sink.writeError != 0 {
                throw ClipFlowError.output("writing '\(options.output.path)' failed: \(String(cString: strerror(mux.sink.writeError)))")
            }
            if onePass, let reserve { throw MoovTooSmall(reserved: reserve) }
            throw ClipFlowError.output("finishing '\(options.output.path)' failed: \(FF.describe(rc))")
        }
        try mux.close()
        progress.report(ProgressEvent(phase: "merge", completed: total, total: total))
        if let plan = layout.audio, audioFramesWritten != plan.frameCount {
            throw ClipFlowError.failure("internal: wrote \(audioFramesWritten) audio frames, planned \(plan.frameCount)")
        }
        var st = stat()
        let bytes: Int64 = stat(path, &st) == 0 ? Int64(st.st_size) : 0
        return MergeResult(output: options.output, clips: clips.count, videoFrames: videoFrames,
                           audioFrames: layout.audio?.frameCount ?? 0, reencodedAudioFrames: reencoded,
                           rotation: layout.rotation, bytes: bytes, moovReserved: reserve, moovUsed: nil,
                           usedSecondPass: !onePass,
                           sources: clips.indices.map { i in
                               Thumbnailer.Source(path: clips[i].path, start: Double(layout.starts[i]) * layout.videoTB.double,
                                                  end: Double(i + 1 < clips.count ? layout.starts[i + 1] : layout.videoEnd) * layout.videoTB.double)
                           })
    }
}

/// One sample of a clip, as the copy loop needs it: where it is in the file and its timing as the
/// demuxer gives it (stream time base).
struct ClipPacket {
    var stream: Int
    var pos: Int64
    var size: Int32
    var pts: Int64
    var dts: Int64
    var duration: Int64
    var flags: Int32
    /// Audio: the packet is to point into the shadow (the muxer peeks at its first bytes).
    var shadowed: Bool
    /// A packet whose bytes the demuxer really read (not a whole sample of the index), or nil.
    var own: Packet?
}

/// Prepares the clips of a merge for the copy loop, in order, on a helper thread a few clips
/// ahead of it (`ahead`): maps each clip, opens its demuxer over the mapping with the payloads of its
/// samples skipped (the demuxer reads only sample tables), and lists its video and audio packets
/// in file order (`ClipPacket`). Demuxing (~0.2 ms to open a clip, ~1 µs a packet, with a
/// packet-sized allocation each) is then off the copy's critical path. The mapping is made on the
/// helper and handed over whole to the thread that takes it, which owns it from then on.
final class ClipOpener: @unchecked Sendable {
    typealias Opened = (MappedClip, [ClipPacket])
    /// How far past the next clip the copy will take the helper may prepare (so up to three
    /// clips are ready). With none past it, the copy found its next clip unready several times a
    /// merge when the helpers' core was busy.
    static let ahead = 2
    private let cond = NSCondition()
    private var ready: [Int: Result<Opened, Error>] = [:]
    private var taken = 0
    private var stopped = false
    private var finished = false

    init(clips: [ClipInfo], audio: Bool) {
        Thread { [self] in
            MediaThreads.yieldToCopy()
            for i in clips.indices {
                cond.lock()
                while !stopped && i > taken + Self.ahead { cond.wait() }
                let stop = stopped
                cond.unlock()
                if stop { break }
                let r = Result { try Self.open(clips[i], audio: audio, stop: stopFlag) }
                cond.lock()
                if !stopped { ready[i] = r }
                cond.broadcast()
                cond.unlock()
            }
            cond.lock(); finished = true; cond.broadcast(); cond.unlock()
        }.start()
    }

    /// `stopped`, for the per-packet check while opening: read without the lock, which the copy
    /// thread takes for every clip (a copy thread blocked on it could lose its core to a helper).
    private let stopFlag = CancellationFlag()

    /// Clip i (in order), waiting for it if needed; rethrows the error preparing it.
    func take(_ i: Int) throws -> Opened {
        cond.lock()
        while ready[i] == nil { cond.wait() }
        let r = ready.removeValue(forKey: i)!
        taken = i + 1
        cond.broadcast()
        cond.unlock()
        return try r.get()
    }

    /// Ends the helper and drops what it prepared that nobody took; waits until it is done.
    func stop() {
        stopFlag.cancel()
        cond.lock()
        stopped = true
        cond.broadcast()
        while !finished { cond.wait() }
        ready = [:]
        cond.unlock()
    }

    private static func open(_ clip: ClipInfo, audio: Bool, stop: CancellationFlag) throws -> Opened {
        let mapped = try MappedClip(path: clip.path)
        let reader = try MappedReader(clip: mapped)
        let dmx = try Demuxer(path: clip.path, format: ClipProbe.demuxerName, reader: reader)
        let audioIndex = audio ? clip.audio?.streamIndex : nil
        var samples: [Int64: Int32] = [:]
        var shadowed: [(pos: Int64, size: Int32)] = []
        for i in 0..<dmx.streamCount {
            if i == clip.video.streamIndex {
                dmx.forEachIndexEntry(i) { pos, size in samples[pos] = size }
            } else if i == audioIndex {
                dmx.forEachIndexEntry(i) { pos, size in shadowed.append((pos, size)) }
            } else {
                dmx.stream(i).pointee.discard = AVDISCARD_ALL
            }
        }
        reader.skipPayloads(samples, shadowed: shadowed)
        var packets: [ClipPacket] = []
        packets.reserveCapacity(samples.count + shadowed.count)
        let pkt = try Packet()
        while try dmx.read(into: pkt) {
            try stop.check()
            let p = pkt.p.pointee
            let si = Int(p.stream_index)
            guard si == clip.video.streamIndex || si == audioIndex else { continue }
            let skipped = reader.takeSkipped()
            var e = ClipPacket(stream: si, pos: p.pos, size: p.size, pts: p.pts, dts: p.dts,
                               duration: p.duration, flags: p.flags,
                               shadowed: reader.isShadowed(pos: p.pos), own: nil)
            if !reader.isSample(pos: p.pos, size: p.size) || !mapped.contains(pos: p.pos, size: p.size) {
                // Read for real (not as one whole sample of the index): keep the bytes read.
                guard skipped == 0 else {
                    throw ClipFlowError.failure(
                        "internal: input '\(clip.path)': a packet at byte \(p.pos) is not one of its samples")
                }
                e.own = try pkt.clone()
            }
            packets.append(e)
        }
        return (mapped, packets)
    }
}

/// An MP4 muxer writing to a file (output AVFormatContext + its AVIOContext). One owner.
final class OutputMuxer {
    let ctx: UnsafeMutablePointer<AVFormatContext>
    let path: String
    /// The name errors use: the target, not the hidden temporary file being written.
    let shownAs: String
    let sink: FileSink
    private var ioOpen = false

    init(path: String, shownAs: String) throws {
        _ = FF.setup
        self.path = path
        self.shownAs = shownAs
        var c: UnsafeMutablePointer<AVFormatContext>? = nil
        try FF.check(avformat_alloc_output_context2(&c, nil, "mp4", path), "creating the MP4 muxer")
        guard let c else { throw ClipFlowError.failure("creating the MP4 muxer failed") }
        ctx = c
        sink = try FileSink(path: path, shownAs: shownAs)
        guard let buf = av_malloc(FileSink.bufferSize)?.assumingMemoryBound(to: UInt8.self) else {
            throw ClipFlowError.failure("out of memory for the output buffer")
        }
        let opaque = Unmanaged.passUnretained(sink).toOpaque()
        guard let pb = avio_alloc_context(buf, Int32(FileSink.bufferSize), 1, opaque, nil, fileSinkWrite, fileSinkSeek) else {
            av_free(buf)
            throw ClipFlowError.failure("out of memory for the output")
        }
        // Direct mode: every avio_write reaches the sink with the caller's pointer, so packet
        // payloads that point into a mapped clip are sent from the clip's file (`FileSink`). The
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

/// The output file descriptor behind the muxer's AVIOContext. Owned by one OutputMuxer; used on
/// the merge thread only.
///
/// Writes whose bytes lie in a registered `MappedClip` (its file mapping or its shadow, which
/// hold the file's bytes at the same offsets) are not copied: consecutive ones that are
/// also consecutive in the clip's file are gathered into one range and sent with `sendfile` (one
/// copy, in the kernel, from the page cache; `copy_file_range` refuses most cross-filesystem
/// pairs, e.g. ext4 to tmpfs). Any other write, a seek or closing sends the pending range first,
/// so the file is written in call order.
final class FileSink {
    static let bufferSize = 1 << 20
    let fd: Int32
    let shownAs: String
    private var closed = false
    private var clips: [Weak] = []
    private var pendingClip: MappedClip? = nil
    private var pendingOffset: Int64 = 0
    private var pendingLength = 0
    private var useSendfile = true
    /// First write error (errno), kept so a failed trailer is not mistaken for a short reservation.
    private(set) var writeError: Int32 = 0

    private struct Weak { weak var clip: MappedClip? }

    init(path: String, shownAs: String) throws {
        self.shownAs = shownAs
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        if fd < 0 { throw ClipFlowError.output("cannot write '\(shownAs)': \(String(cString: strerror(errno)))") }
    }

    /// Writes of bytes inside `clip` are sent from its file from now on (until it is freed).
    func register(_ clip: MappedClip) {
        clips.removeAll { $0.clip == nil }
        clips.append(Weak(clip: clip))
    }

    /// Returns 0 or a negative AVERROR.
    func write(_ p: UnsafeRawPointer, _ n: Int) -> Int32 {
        for w in clips {
            guard let c = w.clip, let off = c.fileOffset(of: p) else { continue }
            if pendingClip === c, pendingOffset + Int64(pendingLength) == off {
                pendingLength += n
                return 0
            }
            let rc = flush()
            if rc < 0 { return rc }
            pendingClip = c
            pendingOffset = off
            pendingLength = n
            return 0
        }
        let rc = flush()
        if rc < 0 { return rc }
        return writeAll(p, n)
    }

    /// Sends the pending range of a mapped clip. Returns 0 or a negative AVERROR.
    func flush() -> Int32 {
        guard let c = pendingClip else { return 0 }
        defer { pendingClip = nil; pendingLength = 0 }
        var off = off_t(pendingOffset)
        var left = pendingLength
        while left > 0 && useSendfile {
            let n = sendfile(fd, c.fd, &off, left)
            if n > 0 { left -= n; continue }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) && left == pendingLength {
                useSendfile = false      // this pair of files cannot splice: write from the mapping
                break
            }
            return fail(n < 0 ? errno : EIO)
        }
        if left > 0 { return writeAll(UnsafeRawPointer(c.base) + Int(off), left) }
        return 0
    }

    private func writeAll(_ p: UnsafeRawPointer, _ n: Int) -> Int32 {
        var done = 0
        while done < n {
            let k = Glibc.write(fd, p + done, n - done)
            if k < 0 {
                if errno == EINTR { continue }
                return fail(errno)
            }
            done += k
        }
        return 0
    }

    private func fail(_ e: Int32) -> Int32 {
        if writeError == 0 { writeError = e }
        return cf_averror(e)
    }

    func close() throws {
        guard !closed else { return }
        let rc = flush()
        closed = true
        pendingClip = nil
        let ok = Glibc.close(fd) == 0
        if rc < 0 { throw ClipFlowError.output("writing '\(shownAs)' failed: \(FF.describe(rc))") }
        if !ok { throw ClipFlowError.output("closing '\(shownAs)' failed: \(String(cString: strerror(errno)))") }
    }
    deinit { if !closed { _ = Glibc.close(fd) } }
}

private func fileSinkWrite(_ opaque: UnsafeMutableRawPointer?, _ buf: UnsafeMutablePointer<UInt8>?, _ size: Int32) -> Int32 {
    guard let opaque, let buf else { return cf_averror(EINVAL) }
    let sink = Unmanaged<FileSink>.fromOpaque(opaque).takeUnretainedValue()
    let rc = sink.write(buf, Int(size))
    return rc < 0 ? rc : size
}

private func fileSinkSeek(_ opaque: UnsafeMutableRawPointer?, _ offset: Int64, _ whence: Int32) -> Int64 {
    guard let opaque else { return Int64(cf_averror(EINVAL)) }
    let sink = Unmanaged<FileSink>.fromOpaque(opaque).takeUnretainedValue()
    let rc = sink.flush()
    if rc < 0 { return Int64(rc) }
    if whence == AVSEEK_SIZE {
        var st = stat()
        return fstat(sink.fd, &st) == 0 ? Int64(st.st_size) : Int64(cf_averror(errno))
    }
    let r = lseek(sink.fd, off_t(offset), whence & ~AVSEEK_FORCE)
    return r < 0 ? Int64(cf_averror(errno)) : Int64(r)
}

func fourcc(_ s: String) -> UInt32 {
    let b = Array(s.utf8)
    return UInt32(b[0]) | UInt32(b[1]) << 8 | UInt32(b[2]) << 16 | UInt32(b[3]) << 24
}
