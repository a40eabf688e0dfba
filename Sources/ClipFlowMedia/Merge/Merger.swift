internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation
import Synchronization

/// Options for `Merger`.
public struct MergeOptions: Sendable {
    /// Where the merged MP4 goes (written under a temporary name, renamed when complete).
    public var output: URL
    /// Clockwise turn added to the clips' own orientation: 0, 90, 180 or 270.
    public var rotate: Int = 0
    /// The output's clockwise display turn, whatever the clips carry (0, 90, 180 or 270; nil:
    /// the first clip's own plus `rotate`).
    public var setRotation: Int? = nil
    /// An existing file at `output` is replaced (otherwise refused).
    public var overwrite = false
    /// Reserve this many bytes for `moov` instead of the computed bound (tests of the fallback).
    public var moovReserveOverride: Int? = nil
    /// H.264/H.265 clips whose parameter sets differ are joined too: each clip whose sets differ
    /// from the clip before it carries them in front of its first keyframe, and an H.264 track
    /// declares the highest level of all (`merge --conform`: clips re-encoded to join the
    /// others). Without it, sets are still sent in band where clips differ only where decoding
    /// does not look (H.264 level and VUI: `ConformPlan.harmonisable`); other differences are
    /// refused.
    public var parameterSetsInBand = false
    /// How a refusal names the settings that would join the clips: as the command line spells
    /// them (`clipflow merge`), or as a pipeline's stage fields.
    public var spelling = SettingSpelling.commandLine
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
    /// The joins (each by the index of the clip after it) whose re-encoded audio was coded at a
    /// lowered rate: synthesised sound FFmpeg's AAC coder cannot spend the clips' rate on
    /// (`AudioRegionRenderer.codingRate(after:...)`).
    public var joinsAtLoweredRate: [Int] = []
    /// Total clockwise rotation written into the display matrix.
    public var rotation: Int
    public var bytes: Int64
    /// Bytes reserved for moov and bytes it used (one-pass fast start), or nil after the fallback.
    public var moovReserved: Int?
    public var moovUsed: Int?
    public var usedSecondPass: Bool
    /// Where each clip's pictures are in the output (for messages about the output's content).
    public var sources: [FileOrigin] = []
    /// Clips that carried their own parameter sets in band (their sets differ from the clip
    /// before them).
    public var ownParameterSets = 0
}

/// Joins MP4/MOV clips into one fast-start MP4 by packet copy (see `AudioJoinPlan` for audio).
///
/// Threading: `run()` blocks the calling thread, which probes the clips not probed already on
/// every core (`concurrentPerform`), then writes the output itself. While it writes, three helper threads
/// (`threads`: a merge stage's are its context's, which the runner watches) work ahead of it, each
/// owning what it makes until the copy takes it: `ClipOpener` maps and lists the clips (handed
/// over per clip), and `AudioRegionRenderer` decodes the join audio on one thread and encodes it
/// on another (handed over per region through `RegionResults`). Cancelling `cancel` stops the
/// copy and, with it, the helpers; `mux` returns only after every helper has ended.
public final class Merger {
    public let inputs: [String]
    public let options: MergeOptions
    let progress: ProgressReporter
    let cancel: CancellationFlag
    let threads: HelperThreads
    /// Probes of `inputs` made already (by a merge's `ProbeStage`, by `ConformPlan`), by index,
    /// failures included; the others are probed here.
    let probed: [Result<ClipInfo, Error>?]

    public init(
        inputs: [String], options: MergeOptions, progress: ProgressReporter = SilentProgress(),
        cancel: CancellationFlag = CancellationFlag(), threads: HelperThreads = HelperThreads(), probed: [Result<ClipInfo, Error>?] = []
    ) {
        self.inputs = inputs
        self.options = options
        self.progress = progress
        self.cancel = cancel
        self.threads = threads
        self.probed = probed
    }

    public func run() throws -> MergeResult {
        guard !inputs.isEmpty else { throw ClipFlowError.badInput("no input clips given") }
        guard [0, 90, 180, 270].contains(options.rotate) else {
            throw ClipFlowError.badInput("--rotate must be 0, 90, 180 or 270 (got \(options.rotate))")
        }
        if let r = options.setRotation, ![0, 90, 180, 270].contains(r) {
            throw ClipFlowError.badInput("--set-rotation must be 0, 90, 180 or 270 (got \(r))")
        }
        let inputUses = inputs.enumerated().map { OutputSafety.Use(path: $1, label: "input \($0 + 1)") }
        if let clash = OutputSafety.clashes(inputs: inputUses, outputs: [OutputSafety.Use(path: options.output.path, label: "output")]).first {
            throw ClipFlowError.badInput(clash.description)
        }
        // Probe on every core (nothing else runs yet); errors are reported for the first bad input
        // in the order given, as a sequential probe would.
        let results = ProbeResults.probing(inputs, known: probed, cancel: cancel)
        let clips: [ClipInfo]
        do { clips = try results.all() } catch let e as ClipFlowError where e.kind == .badInput && !options.parameterSetsInBand {
            // A clip a copy cannot take (another container or codec, an edit list that hides
            // pictures) but a conform would re-encode: the refusal says so.
            try Self.refuse(e, inputs, probed: results.outcomes(), spelling: options.spelling)
        }
        var inBand = options.parameterSetsInBand
        do { try Compatibility.check(clips, parameterSetsInBand: inBand) } catch let e as ClipFlowError where !inBand {
            // Sets that differ only where decoding does not look (level, VUI) are copied as they
            // are, each clip's in front of its first picture: lossless, no `--conform` needed.
            if clips.dropFirst().allSatisfy({ Compatibility.difference(clips[0], $0) == nil || ConformPlan.harmonisable(clips[0], $0) }) {
                inBand = true
            } else {
                try Self.refuse(e, inputs, probed: results.outcomes(), spelling: options.spelling)
            }
        }
        let layout = try Layout(clips: clips, rotate: options.rotate, setRotation: options.setRotation)

        let out = try AtomicOutput(target: options.output, label: "output", replacing: options.overwrite)
        var result: MergeResult
        do {
            result = try mux(layout: layout, to: out.temporary.path, onePass: true, parameterSetsInBand: inBand)
        } catch let e as MoovTooSmall {
            progress.notice("reserved \(e.reserved) bytes for the index but it needed more; writing fast start in a second pass")
            result = try mux(layout: layout, to: out.temporary.path, onePass: false, parameterSetsInBand: inBand)
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

    /// Rethrows `e` (clips that cannot be joined by copy) saying what a conform would do instead,
    /// naming it as `spelling` does; `e` as it is when a conform could not join them either.
    private static func refuse(_ e: ClipFlowError, _ inputs: [String], probed: [Result<ClipInfo, Error>], spelling: SettingSpelling) throws -> Never {
        guard let plan = try? ConformPlan.make(inputs, probed: probed) else { throw e }
        var would: [String] = []
        let re = plan.reencoded.map { "\($0 + 1) (\(plan.clips[$0].path))" }
        let ha = plan.harmonised.map { "\($0 + 1) (\(plan.clips[$0].path))" }
        if !re.isEmpty { would.append("re-encode clip\(re.count == 1 ? "" : "s") \(re.joined(separator: ", "))") }
        if !ha.isEmpty { would.append("copy clip\(ha.count == 1 ? "" : "s") \(ha.joined(separator: ", ")) after harmonising parameter sets") }
        if would.isEmpty { throw e }
        let why = spelling == .commandLine ? "--conform --plan shows why" : "`clipflow merge --conform --plan` with the clips shows why"
        throw ClipFlowError(e.kind, e.message + "; \(spelling.on("conform")) would " + would.joined(separator: " and ") + " (\(why))")
    }

    struct MoovTooSmall: Error { let reserved: Int }

    /// Probe results filled from concurrent probes, read once all are done.
    final class ProbeResults: Sendable {
        private let results: Mutex<[Result<ClipInfo, Error>?]>
        init(count: Int) { results = Mutex(Array(repeating: nil, count: count)) }

        /// The probes of `paths`: those `known` (by index) as they are, the others made on every
        /// core; once `cancel` is set, the ones not yet made are `interrupted`.
        static func probing(_ paths: [String], known: [Result<ClipInfo, Error>?], cancel: CancellationFlag? = nil) -> ProbeResults {
            let results = ProbeResults(count: paths.count)
            DispatchQueue.concurrentPerform(iterations: paths.count) { i in
                if i < known.count, let outcome = known[i] { return results.set(i, outcome) }
                if cancel?.isCancelled == true { return results.set(i, .failure(ClipFlowError.interrupted)) }
                results.set(i, Result { try ClipProbe.probe(paths[i]) })
            }
            return results
        }

        func set(_ i: Int, _ r: Result<ClipInfo, Error>) { results.withLock { $0[i] = r } }
        func all() throws -> [ClipInfo] {
            try results.withLock { rs in try rs.map { try $0!.get() } }
        }
        /// Each probe's outcome, in input order.
        func outcomes() -> [Result<ClipInfo, Error>] { results.withLock { $0.map { $0! } } }
    }

    /// Rendered join regions, handed from the renderer's encoding thread to the copy thread
    /// through a `BoundedQueue` (room for every region, so the renderer never waits for the
    /// copy). The renderer delivers each region once, almost always in order (a failure can
    /// overtake a region still in the encoder); `take(i)` keeps what arrives early. The packets of
    /// a region pass to the taker. The queue is thread-safe; `early` belongs to the copy thread.
    final class RegionResults: @unchecked Sendable {
        typealias Rendered = (index: Int, packets: Result<AudioRegionRenderer.Rendered, Error>)
        let queue: BoundedQueue<Rendered>
        private var early: [Int: Result<AudioRegionRenderer.Rendered, Error>] = [:]

        init(count: Int) { queue = BoundedQueue(capacity: count) }

        /// Region i as rendered, waiting for it; rethrows the error rendering it.
        func take(_ i: Int) throws -> AudioRegionRenderer.Rendered {
            if let r = early.removeValue(forKey: i) { return try r.get() }
            while let p = queue.pull() {
                if p.element.index == i { return try p.element.packets.get() }
                early[p.element.index] = p.element.packets
            }
            throw ClipFlowError.failure("internal: the audio of join \(i + 1) was never rendered")
        }
    }

    private func mux(layout: Layout, to path: String, onePass: Bool, parameterSetsInBand: Bool) throws -> MergeResult {
        // Last out: the helpers (each told to stop by the defers below) have ended.
        defer { threads.wait() }
        let clips = layout.clips
        let first = clips[0]
        let total = clips.reduce(Int64(0)) { $0 + $1.mediaBytes }
        let mediaSeconds = Double(layout.videoEnd) * layout.videoTB.double
        let started = DispatchTime.now().uptimeNanoseconds
        /// Media seconds per wall second so far, taking the bytes copied as the share of the media.
        func speed(_ done: Int64, at now: UInt64) -> Double? {
            let wall = Double(now - started) / 1e9
            return wall > 0 && total > 0 ? Double(done) / Double(total) * mediaSeconds / wall : nil
        }

        // Start rendering audio join regions on the second core.
        var regionResults: RegionResults? = nil
        var reencoded: Int64 = 0
        var joinsAtLoweredRate: [Int] = []
        if let plan = layout.audio, !plan.regions.isEmpty, let a0 = first.audio {
            let results = RegionResults(count: plan.regions.count)
            regionResults = results
            let renderer = AudioRegionRenderer(
                plan: plan, clips: clips, sampleRate: a0.sampleRate,
                channels: a0.channels, bitRate: a0.bitRate)
            let cancel = self.cancel, queue = results.queue, threads = self.threads
            // The encoding thread keeps the copy's priority: the copy waits for every region, and
            // where the sound is costly to encode the encoder is the slower of the two (its
            // preparer, like the clip opener, yields).
            threads.start("join audio encoder") {
                renderer.renderAll(
                    threads: threads, shouldStop: { cancel.isCancelled || !queue.wantsMore },
                    deliver: { i, r in queue.push((i, r)) })
                queue.endOfStream()
            }
        }
        // The copy takes no more regions: the renderer stops at its next one.
        defer { regionResults?.queue.consumerDone() }

        let mux = try OutputMuxer(path: path, shownAs: options.output.path)
        let vst = try mux.addStream(copying: first, video: true)
        vst.pointee.time_base = layout.videoTB
        try FF.check(cf_stream_set_display_rotation(vst, Double(layout.rotation)), "writing the orientation")
        // In-band parameter sets: the sample entry declares the first clip's sets (H.264: at the
        // highest level of all); a clip whose sets differ from its predecessor's sends its own.
        var inBand: [Int: [UInt8]] = [:]
        if parameterSetsInBand {
            if let c0 = AVCConfiguration(first.video.extradata), first.video.codec == "h264" {
                let level = clips.compactMap { AVCConfiguration($0.video.extradata)?.level }.max() ?? c0.level
                try vst.pointee.codecpar.setExtradata(c0.withLevel(level).bytes)
            }
            for i in clips.indices.dropFirst() where clips[i].video.extradata != clips[i - 1].video.extradata {
                if let c = DecoderConfiguration(codec: clips[i].video.codec, extradata: clips[i].video.extradata) { inBand[i] = c.inBandPrefix }
            }
        }
        let ownParameterSets = inBand.count
        var ast: UnsafeMutablePointer<AVStream>? = nil
        if layout.audio != nil { ast = try mux.addStream(copying: first, video: false) }

        var reserve: Int? = nil
        if onePass {
            var tracks = [
                MoovEstimate.Track(
                    samples: clips.reduce(0) { $0 + $1.video.packets },
                    keyframes: clips.reduce(0) { $0 + $1.video.keyframes },
                    durationRuns: clips.reduce(0) { $0 + $1.video.durationRuns + 2 },
                    isVideo: true, extradataBytes: first.video.extradata.count)
            ]
            if let plan = layout.audio {
                tracks.append(
                    .init(
                        samples: Int(plan.frameCount), keyframes: Int(plan.frameCount),
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
        var taken: AudioRegionRenderer.Rendered? = nil  // region `nextRegion`, once taken
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
        // Writes the rendered regions that end at or before frame k; true when the region
        // reaching k re-encodes k itself (k is then not copied). A region's optional frames may
        // be copied, so it is taken (waiting for the renderer) once the copy reaches them.
        func emitRegions(before k: Int64) throws -> Bool {
            guard let plan = layout.audio, let regionResults else { return false }
            while nextRegion < plan.regions.count, plan.regions[nextRegion].frames.lowerBound <= k {
                let region = try taken ?? regionResults.take(nextRegion)
                if k < region.frames.upperBound {
                    taken = region
                    return k >= region.frames.lowerBound
                }
                for p in region.packets { try writeAudio(p, frame: p.p.pointee.pts) }
                reencoded += Int64(region.frames.count)
                if region.lowered { joinsAtLoweredRate += plan.regions[nextRegion].clips.dropFirst() }
                taken = nil
                nextRegion += 1
            }
            return false
        }

        // Clips are mapped and their packets listed ahead, on a helper thread (ClipOpener):
        // the copy loop only points a packet at each sample and hands it to the muxer.
        let opener = ClipOpener(clips: clips, audio: layout.audio != nil, threads: threads)
        defer { opener.stop() }
        for (ci, clip) in clips.enumerated() {
            let (mapped, packets) = try opener.next()
            mux.sink.register(mapped)
            let vtbIn = clip.video.timeBase.av
            let copy = layout.audio?.copies.first(where: { $0.clip == ci })
            let audioTB = clip.audio?.timeBase.av
            var leadingPackets = ci > 0  // see the decode times below
            // Packets are written in the clip's file order (the demuxer returns them so), not
            // through the muxer's interleaving queue: the output keeps the clip's own
            // interleaving, so each clip goes out in a few long `sendfile` ranges (the queue's
            // dts order differs from the file order wherever audio and video are offset).
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
                    var dts = rescale(rescale(e.dts, vtbIn, layout.videoTB) + off, layout.videoTB, vtbOut)
                    let pts = rescale(rescale(e.pts, vtbIn, layout.videoTB) + off, layout.videoTB, vtbOut)
                    // A clip with a longer decode delay (more B-frames in flight, or a lower frame
                    // rate) would start decoding before its predecessor ends: its first decode
                    // times move up to just after the predecessor's last (order and presentation
                    // times unchanged), as long as each stays at or before its presentation time.
                    if leadingPackets, dts <= lastVideoDts, lastVideoDts + 1 <= pts {
                        dts = lastVideoDts + 1
                    } else {
                        leadingPackets = false
                    }
                    guard dts > lastVideoDts else {
                        if lastVideoClip == ci {
                            throw ClipFlowError.badInput("input '\(clip.path)': its video decode times do not increase; it cannot be joined by copy")
                        }
                        throw ClipFlowError.incompatible(
                            "cannot join '\(clips[lastVideoClip].path)' and '\(clip.path)' by copy: the second's first frames would be decoded before the first's last ones (decode times not increasing)"
                        )
                    }
                    lastVideoDts = dts
                    lastVideoClip = ci
                    p.pointee.dts = dts
                    p.pointee.pts = pts
                    p.pointee.duration = rescale(e.duration, vtbIn, vtbOut)
                    p.pointee.flags = e.flags
                    p.pointee.stream_index = vst.pointee.index
                    p.pointee.pos = -1
                    if let prefix = inBand.removeValue(forKey: ci) {
                        try mux.writeInOrder(try out.prefixed(with: prefix))
                    } else {
                        try mux.writeInOrder(out)
                    }
                    videoFrames += 1
                } else if let a = clip.audio, e.stream == a.streamIndex, let copy, let audioTB {
                    let ptsSamples = rescale(e.pts, audioTB, srTB)
                    let rawStart = ptsSamples - (rescale(a.start, audioTB, srTB) - a.priming)
                    let j = floorDiv(rawStart + AudioJoinPlan.frameSize / 2, AudioJoinPlan.frameSize)
                    let k = j + copy.offset
                    if copy.frames.contains(k), try !emitRegions(before: k) {
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
                    progress.report(ProgressEvent(phase: "merge", completed: done, total: total, speed: speed(done, at: now)))
                }
            }
        }
        _ = try emitRegions(before: Int64.max)
        let rc = mux.writeTrailer()
        if rc < 0 {
            if mux.sink.writeError != 0 {
                throw ClipFlowError.output("writing '\(options.output.path)' failed", errno: mux.sink.writeError)
            }
            if onePass, let reserve { throw MoovTooSmall(reserved: reserve) }
            throw ClipFlowError.output("finishing '\(options.output.path)' failed: \(FF.describe(rc))")
        }
        try mux.close()
        progress.report(ProgressEvent(phase: "merge", completed: total, total: total, speed: speed(total, at: DispatchTime.now().uptimeNanoseconds)))
        if let plan = layout.audio, audioFramesWritten != plan.frameCount {
            throw ClipFlowError.failure("internal: wrote \(audioFramesWritten) audio frames, planned \(plan.frameCount)")
        }
        var st = stat()
        let bytes: Int64 = stat(path, &st) == 0 ? Int64(st.st_size) : 0
        return MergeResult(
            output: options.output, clips: clips.count, videoFrames: videoFrames,
            audioFrames: layout.audio?.frameCount ?? 0, reencodedAudioFrames: reencoded, joinsAtLoweredRate: joinsAtLoweredRate,
            rotation: layout.rotation, bytes: bytes, moovReserved: reserve, moovUsed: nil,
            usedSecondPass: !onePass,
            sources: clips.indices.map { i in
                FileOrigin(
                    path: clips[i].path, start: Double(layout.starts[i]) * layout.videoTB.double,
                    end: Double(i + 1 < clips.count ? layout.starts[i + 1] : layout.videoEnd) * layout.videoTB.double)
            }, ownParameterSets: ownParameterSets)
    }
}
