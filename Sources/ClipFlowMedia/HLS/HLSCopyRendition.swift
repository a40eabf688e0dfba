internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// A rendition that passes one compliant source through untouched (`copy` in a ladder): its
/// H.264 or HEVC packets are put into fMP4 segments as they are, each segment starting at one of
/// the source's keyframes, chosen before the copy begins (`SourceKeyframes.cuts`: the keyframe
/// nearest each segment length). The stage decides the ladder's `LadderTiming` from them, so the
/// encoded renditions force their keyframes at the same instants and a player can switch.
/// What it is (`Role`):
/// - `alone`: a copy-only ladder; the AAC audio is copied too, cut at the AAC frame nearest each
///   boundary of the schedule. A picture turned by a display matrix is carried in the init
///   segment's track header (which Chromium's HLS player honours).
/// - `beside`: a rendition of its own beside the encoded rungs; a source it cannot copy is refused.
/// - `passthrough`: stands in for the ladder's top rung when the source fits it (`Passthrough`),
///   as a copy, or the earlier ladder's copy linked (cut at the same keyframes: same source, same
///   schedule); an HEVC source that fits is a rendition beside the rung instead; otherwise it
///   copies nothing, the rung is encoded, and the reason is a notice.
/// - `timing`: copies nothing (the ladder takes an earlier copy of the source, `LadderReuse`), only
///   decides the timing that copy was cut with.
/// Refused, naming the reason: several inputs, a codec HLS does not carry, a first packet that is
/// not a keyframe, a mirrored picture (or a turned one beside upright rungs), keyframes further
/// apart than a segment beside encoded rungs.
/// With `makesPoster` (a copy asked for; never a passthrough, whose covers the smallest rung
/// chooses), the ladder's poster is made from the source while the packets are copied
/// (`LadderFolder.startPoster`).
/// Takes the input files (ports `clips`, `video`); hands the ladder its description(s) (port
/// `rendition`). Belongs to its stage queue.
final class CopyRenditionStage: Stage {
    enum Role: Equatable {
        case alone, beside, timing
        /// `rungs`: the ladder's encoded rungs, one of which the source may stand in for;
        /// `earlier`: a copy of the source an earlier ladder made, linked instead of copying again.
        case passthrough(Passthrough, rungs: [LadderRung], earlier: LadderReuse?)
    }

    let id: String
    private let ladder: LadderFolder
    private let timing: LadderTiming
    private let role: Role
    private let schedule: SegmentSchedule
    private let singleFile: Bool
    private let makesPoster: Bool
    private let timelineStart: Double
    private var inputs: [String] = []
    var inputTypes: Set<PortType> { [.clips, .video] }
    var outputType: PortType? { .rendition }

    init(
        id: String, role: Role, ladder: LadderFolder, timing: LadderTiming, schedule: SegmentSchedule, singleFile: Bool, makesPoster: Bool,
        timelineStart: Double = 0
    ) {
        self.id = id
        self.role = role
        self.timing = timing
        self.timelineStart = timelineStart
        self.ladder = ladder
        self.schedule = schedule
        self.singleFile = singleFile
        self.makesPoster = makesPoster
    }

    func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        if let p = item.path { inputs.append(p) }
        // A join is not passed through: the encoded rungs need not wait for the inputs' end.
        if case .passthrough = role, inputs.count > 1 { timing.decide(.schedule) }
        return .ok
    }

    func drain(_ context: StageContext) throws {
        try stopping(context) { try copy(context) }
    }

    private func copy(_ context: StageContext) throws {
        if case .passthrough = role, inputs.count != 1 {
            timing.decide(.schedule)
            return
        }
        guard inputs.count == 1, let path = inputs.first else {
            throw ClipFlowError.badInput("copy passes one video through; got \(inputs.count) inputs (join them first with clipflow merge, or leave copy out)")
        }
        let source = try Demuxer(path: path)
        try FF.check(avformat_find_stream_info(source.ctx, nil), "input '\(path)': reading its streams")
        let v = av_find_best_stream(source.ctx, AVMEDIA_TYPE_VIDEO, -1, -1, nil, 0)
        guard v >= 0 else { throw ClipFlowError.badInput("input '\(path)': no video to copy") }
        let halfFrame = 0.5 / CopiedTrack.frameRate(of: source.stream(Int(v)))
        if case .passthrough(let fit, let rungs, let earlier) = role {
            return try passThrough(path, source, video: Int(v), fit, rungs: rungs, earlier: earlier, halfFrame: halfFrame, context)
        }
        let keys = try SourceKeyframes.read(source, stream: Int(v), stopped: { context.stopRequested })
        if case .beside = role, keys.longestGap > schedule.length + halfFrame {
            throw ClipFlowError.badInput(
                "input '\(path)': its keyframes are up to \(String(format: "%.1f", keys.longestGap)) s apart; copy beside encoded renditions needs one at least every segment (\(String(format: "%g", schedule.length)) s): copy it alone or leave copy out"
            )
        }
        let cuts = keys.cuts(schedule, halfFrame: halfFrame)
        timing.decide(.keyframes(cuts, replacing: nil))
        if case .timing = role { return }
        try copy(path, video: Int(v), cuts: cuts, makesPoster: makesPoster, context)
    }

    /// The source as the top rung of `rungs`, if it fits (`Passthrough`): judged by its stream's
    /// parameters first, its packets read only when those fit; then copied, or `earlier`'s copy
    /// of it linked.
    private func passThrough(
        _ path: String, _ source: Demuxer, video v: Int, _ fit: Passthrough, rungs: [LadderRung], earlier: LadderReuse?, halfFrame: Double,
        _ context: StageContext
    ) throws {
        let par = source.codecpar(v).pointee
        guard let rung = Passthrough.rung(forShortSide: Int(min(par.width, par.height)), in: rungs) else {
            timing.decide(.schedule)
            return
        }
        let verdict = fit.verdict(source, stream: v, rung: rung)
        if case .refused(let why) = verdict { return refuse(rung, why, context) }
        let keys = try SourceKeyframes.read(source, stream: v, stopped: { context.stopRequested })
        if let why = fit.refusal(keys: keys, rung: rung, schedule: schedule, halfFrame: halfFrame) { return refuse(rung, why, context) }
        let cuts = keys.cuts(schedule, halfFrame: halfFrame)
        // HEVC is a rendition beside the rung; H.264 stands in for it. The covers are the
        // smallest rung's choice either way.
        timing.decide(.keyframes(cuts, replacing: verdict == .beside ? nil : rung.name))
        if verdict == .standsIn, let earlier, let linked = try earlier.link(into: ladder.work).first {
            _ = context.push(Item(.value(linked), type: .rendition))
            return
        }
        try copy(path, video: v, cuts: cuts, makesPoster: false, context)
    }

    /// A passthrough that does not fit: the rung is encoded on the regular schedule, and why is said.
    private func refuse(_ rung: LadderRung, _ why: String, _ context: StageContext) {
        timing.decide(.schedule)
        context.emit(.notice("\(rung.name) encoded, not passed through: \(why)"))
    }

    /// Copies the video of `path` (and, alone, its audio) cut at `cuts`.
    private func copy(_ path: String, video v: Int, cuts: [Double], makesPoster: Bool, _ context: StageContext) throws {
        let alone: Bool
        if case .alone = role { alone = true } else { alone = false }
        let source = try Demuxer(path: path)
        try FF.check(avformat_find_stream_info(source.ctx, nil), "input '\(path)': reading its streams")
        if makesPoster {
            try ladder.startPoster(from: path, threads: context.helpers)
            context.onCancel { [ladder] in ladder.cancelPoster() }
        }
        let video = try CopiedTrack(
            source, stream: v, name: "copy", ladder: ladder, schedule: schedule, singleFile: singleFile, path: path, alone: alone,
            timelineStart: timelineStart)
        var audio: CopiedTrack?
        if alone {
            let a = av_find_best_stream(source.ctx, AVMEDIA_TYPE_AUDIO, -1, Int32(v), nil, 0)
            if a >= 0 {
                audio = try CopiedTrack(
                    source, stream: Int(a), name: "audio", ladder: ladder, schedule: schedule, singleFile: singleFile, path: path, alone: true,
                    timelineStart: timelineStart)
            }
        }
        let packet = try Packet()
        var lastReport = Date.distantPast
        let total = Double(source.ctx.pointee.duration) / Double(AV_TIME_BASE)
        var nextCut = 1
        while try source.read(into: packet) {
            defer { packet.unref() }
            if context.stopRequested { return }
            let index = Int(packet.p.pointee.stream_index)
            if index == video.stream {
                let t = try video.add(
                    packet,
                    cutting: { key, time in
                        guard key, nextCut < cuts.count, time - video.videoZero >= cuts[nextCut] - video.halfFrame else { return false }
                        nextCut += 1
                        return true
                    })
                if Date().timeIntervalSince(lastReport) >= 0.25 {
                    lastReport = Date()
                    context.progress(Int64(t * 1000), of: Int64(max(total, t) * 1000), unit: "ms")
                }
            } else if let a = audio, index == a.stream {
                _ = try a.add(packet, cutting: { _, time in time >= a.nextBoundary - a.halfFrame })
            }
        }
        var described = try video.finish()
        described.frameRate = video.frameRate
        try ladder.write(HLSPlaylists.media(described), to: described.playlistURI)
        try ladder.write(HLSPlaylists.iframes(described), to: described.iframesURI!)
        if context.push(Item(.value(described), type: .rendition)) == .flushing { return }
        if let a = audio {
            let t = try a.finish()
            try ladder.write(HLSPlaylists.media(t), to: t.playlistURI)
            if context.push(Item(.value(t), type: .rendition)) == .flushing { return }
        }
    }

    func finish(_ context: StageContext, outcome: StageOutcome) {
        // The encoded renditions wait for the timing: whatever happened, they get one.
        timing.decide(.schedule)
        if outcome != .completed { ladder.discard() }
    }

    /// One stream copied into its own rendition. Owner: the copy stage.
    private final class CopiedTrack {
        let stream: Int
        let name: String
        private let writer: FragmentWriter
        private let files: RenditionFiles
        private let timeBase: AVRational
        private let offset: Int64
        /// Ticks added to every written timestamp: the ladder's `timelineStart`.
        private let shift: Int64
        private let isVideo: Bool
        private let codecs: String
        private let size: PictureSize
        let frameRate: Double
        /// Seconds from the start of the file's timeline (the copy's time zero) to the video's
        /// first timestamp (the time zero of the source's keyframe cuts).
        let videoZero: Double
        /// Seconds: the boundary the next segment should start at; half a frame (or AAC frame), the
        /// tolerance around it.
        var nextBoundary = 0.0
        let halfFrame: Double
        private var segmentStart: Int64?
        private var end: Int64 = 0
        private let schedule: SegmentSchedule
        private let channels: Int

        /// `alone`: no encoded rendition is made beside the copy (a turned picture is carried then).
        init(
            _ source: Demuxer, stream: Int, name: String, ladder: LadderFolder, schedule: SegmentSchedule, singleFile: Bool, path: String,
            alone: Bool, timelineStart: Double
        ) throws {
            var turn: Double? = nil
            self.stream = stream
            self.name = name
            self.schedule = schedule
            let st = source.stream(stream)
            let par = source.codecpar(stream)
            channels = Int(par.pointee.ch_layout.nb_channels)
            timeBase = st.pointee.time_base
            isVideo = par.pointee.codec_type == AVMEDIA_TYPE_VIDEO
            let start = source.ctx.pointee.start_time == cf_nopts() ? 0 : source.ctx.pointee.start_time
            offset = av_rescale_q(start, AVRational(num: 1, den: AV_TIME_BASE), timeBase)
            let streamStart = st.pointee.start_time == cf_nopts() ? offset : st.pointee.start_time
            videoZero = Double(streamStart - offset) * Double(timeBase.num) / Double(timeBase.den)
            shift = Int64((timelineStart * Double(timeBase.den) / Double(timeBase.num)).rounded())
            let extradata = par.pointee.extradata.map { Array(UnsafeBufferPointer(start: $0, count: Int(par.pointee.extradata_size))) } ?? []
            if isVideo {
                switch par.pointee.codec_id {
                case AV_CODEC_ID_H264: codecs = CodecStrings.avc(extradata) ?? "avc1.640028"
                case AV_CODEC_ID_HEVC: codecs = CodecStrings.hevc(extradata, sampleEntry: "hvc1") ?? "hvc1"
                default:
                    throw ClipFlowError.badInput(
                        "input '\(path)': its video is \(String(cString: avcodec_get_name(par.pointee.codec_id))); copy needs H.264 or HEVC (leave copy out to re-encode)"
                    )
                }
                let orientation = DisplayOrientation(of: source, stream: stream)
                if orientation.mirrored || (orientation.turn != 0 && !alone) {
                    throw ClipFlowError.badInput(
                        "input '\(path)': its pictures are \(orientation.mirrored ? "mirrored" : "turned") by a display matrix, which a copy carries only alone (no encoded renditions beside it) and never mirrored; leave copy out (the ladder turns the pixels)"
                    )
                }
                turn = orientation.turn == 0 ? nil : Double(orientation.turn)
                size = PictureSize(width: Int(par.pointee.width), height: Int(par.pointee.height))
                frameRate = Self.frameRate(of: st)
                halfFrame = 0.5 / frameRate
            } else {
                guard par.pointee.codec_id == AV_CODEC_ID_AAC else {
                    throw ClipFlowError.badInput(
                        "input '\(path)': its audio is \(String(cString: avcodec_get_name(par.pointee.codec_id))); copy needs AAC (leave copy out to re-encode)"
                    )
                }
                codecs = CodecStrings.aac(extradata) ?? "mp4a.40.2"
                size = PictureSize(width: 0, height: 0)
                frameRate = 0
                halfFrame = 512 / Double(max(1, par.pointee.sample_rate))
            }
            writer = try FragmentWriter(copying: par, timeBase: timeBase, what: "\(name) (copy)")
            // The source's turn (clockwise degrees, as the merge writes it) goes into the init
            // segment's track header, which players honour.
            if let turn, cf_stream_set_display_rotation(writer.stream, turn) < 0 {
                throw ClipFlowError.failure("\(name) (copy): cannot write the display matrix")
            }
            if par.pointee.codec_id == AV_CODEC_ID_HEVC {
                writer.stream.pointee.codecpar.pointee.codec_tag =
                    UInt32(UInt8(ascii: "h")) | UInt32(UInt8(ascii: "v")) << 8 | UInt32(UInt8(ascii: "c")) << 16 | UInt32(UInt8(ascii: "1")) << 24
            }
            files = try RenditionFiles(name: name, ladder: ladder.work, singleFile: singleFile)
            try files.writeInit(try writer.header(keepingTime: shift != 0))
        }

        /// Pictures per second as the stream says (30 when it does not).
        static func frameRate(of st: UnsafeMutablePointer<AVStream>) -> Double {
            let r = st.pointee.avg_frame_rate.num > 0 ? st.pointee.avg_frame_rate : st.pointee.r_frame_rate
            return r.num > 0 && r.den > 0 ? Double(r.num) / Double(r.den) : 30
        }

        private func seconds(_ ticks: Int64) -> Double { Double(ticks) * Double(timeBase.num) / Double(timeBase.den) }

        /// Adds a packet, first ending the segment when `cutting(keyframe, seconds)` says so;
        /// returns the packet's time in seconds.
        func add(_ packet: Packet, cutting: (Bool, Double) throws -> Bool) throws -> Double {
            let p = packet.p.pointee
            let pts = (p.pts == cf_nopts() ? p.dts : p.pts) - offset
            let time = seconds(pts)
            if segmentStart == nil {
                if isVideo, !packet.isKeyframe { throw ClipFlowError.badInput("\(name): the source does not start with a keyframe; leave copy out") }
                segmentStart = pts
                nextBoundary = schedule.boundary(after: time + halfFrame)
            } else if try cutting(packet.isKeyframe, time) {
                try files.writeSegment(try writer.cut(), seconds: seconds(pts - segmentStart!))
                segmentStart = pts
                nextBoundary = schedule.boundary(after: time + halfFrame)
            }
            end = max(end, pts + (p.duration > 0 ? p.duration : Int64((2 * halfFrame * Double(timeBase.den) / Double(timeBase.num)).rounded())))
            packet.p.pointee.pts = p.pts == cf_nopts() ? cf_nopts() : p.pts - offset + shift
            packet.p.pointee.dts = p.dts == cf_nopts() ? cf_nopts() : p.dts - offset + shift
            try writer.write(packet, in: timeBase)
            return time
        }

        func finish() throws -> HLSTrack {
            guard let start = segmentStart else { throw ClipFlowError.badInput("\(name): the source has no packets to copy") }
            try files.writeSegment(try writer.finish(), seconds: seconds(end - start))
            var t = try files.track(codecs: codecs)
            if isVideo {
                t.width = size.width
                t.height = size.height
                t.iframesURI = "\(name)-iframes.m3u8"
            } else {
                t.channels = channels
            }
            return t
        }
    }
}
