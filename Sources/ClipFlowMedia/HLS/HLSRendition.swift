internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// Where one rendition's bytes go inside the ladder's folder: `NAME/init.mp4` and one
/// `NAME/seg-N.m4s` per segment, or (`singleFile`) one `NAME.mp4` holding the init section and
/// then every segment in order, addressed by byte ranges. Keeps what the playlists need of each
/// segment. Owner: its rendition stage.
final class RenditionFiles {
    let name: String
    let singleFile: Bool
    private let ladder: URL
    private var handle: FileHandle?
    private var written = 0
    private(set) var segments: [HLSSegment] = []
    private var initRange: ByteRange?

    init(name: String, ladder: URL, singleFile: Bool) throws {
        self.name = name
        self.ladder = ladder
        self.singleFile = singleFile
        if singleFile {
            let path = ladder.appendingPathComponent("\(name).mp4").path
            guard FileManager.default.createFile(atPath: path, contents: nil), let h = FileHandle(forWritingAtPath: path) else {
                throw ClipFlowError.output("cannot create '\(path)'", errno: errno)
            }
            handle = h
        } else {
            // Not recreating the ladder's folder: once it is gone (a stop), nothing is written.
            try FileManager.default.createDirectory(at: ladder.appendingPathComponent(name), withIntermediateDirectories: false)
        }
    }
    deinit { try? handle?.close() }

    var initURI: String { singleFile ? "\(name).mp4" : "\(name)/init.mp4" }

    func writeInit(_ bytes: [UInt8]) throws {
        if singleFile {
            try append(bytes)
            initRange = ByteRange(offset: 0, length: bytes.count)
        } else {
            try save(bytes, as: initURI)
        }
    }

    /// One media segment (moof + mdat) lasting `seconds`.
    func writeSegment(_ bytes: [UInt8], seconds: Double) throws {
        let first = FragmentInfo(bytes)?.firstSampleRange
        if singleFile {
            let offset = written
            try append(bytes)
            segments.append(
                HLSSegment(
                    uri: initURI, seconds: seconds, bytes: bytes.count, offset: offset,
                    iframe: first.map { ByteRange(offset: offset + $0.offset, length: $0.length) }))
        } else {
            let uri = "\(name)/seg-\(segments.count).m4s"
            try save(bytes, as: uri)
            segments.append(HLSSegment(uri: uri, seconds: seconds, bytes: bytes.count, iframe: first.map { ByteRange(offset: $0.offset, length: $0.length) }))
        }
    }

    /// Ends the rendition; its playlist inputs.
    func track(codecs: String) throws -> HLSTrack {
        if let h = handle {
            do { try h.close() } catch { throw ClipFlowError.output("cannot write '\(initURI)'", writing: error) }
            handle = nil
        }
        return HLSTrack(playlistURI: "\(name).m3u8", initURI: initURI, initRange: initRange, segments: segments, codecs: codecs)
    }

    private func append(_ bytes: [UInt8]) throws {
        do { try handle!.write(contentsOf: Data(bytes)) } catch {
            throw ClipFlowError.output("cannot write '\(ladder.appendingPathComponent(initURI).path)'", writing: error)
        }
        written += bytes.count
    }

    private func save(_ bytes: [UInt8], as uri: String) throws {
        let url = ladder.appendingPathComponent(uri)
        try DurableFiles.write(bytes, to: url.path)
    }
}

/// One video rendition of a ladder: takes raw pictures (port `frames`; audio is not its part),
/// scales each to the rung's size (short side = the rung's height, the pictures' shape kept),
/// encodes it in the rung's codec with a keyframe on the picture nearest every segment boundary
/// and nowhere else (x264 High: forced there, scene cuts off, closed GOPs; SVT-AV1, which takes no
/// forced keyframe: a new encoder from each boundary, whose sequence header must equal the first
/// one's), and starts a segment at each boundary's keyframe, so every rendition of the ladder
/// cuts at the same instants. With a `timing` (the ladder may hold
/// the source's own packets) it waits for its decision before the first picture: the boundaries
/// are then the source's keyframes the copy cuts at, and the rung the source's packets stand in
/// for is left out (said in its result). At end of stream it hands the ladder its description (port
/// `rendition`). A rung above the pictures' short side is left out unless `always` (the ladder's
/// smallest H.264 rung): said in its result (`left_out`), and as a notice when the rung was asked for by
/// name (`asked`; an automatic ladder leaves rungs above the source out by design).
/// With `makesPoster` it also chooses the ladder's cover from the pictures as they pass
/// (`PassingCoverChoice`) and hands it on with its description (`LadderPoster`); left out for
/// the source's packets, it still chooses it and hands on the cover alone.
/// Belongs to its stage queue.
final class VideoRenditionStage: Stage {
    let id: String
    let rung: LadderRung
    let always: Bool
    let asked: Bool
    /// The cover being chosen (nil: this rendition makes none).
    private var poster: PassingCoverChoice?
    private let ladder: LadderFolder
    private var schedule: SegmentSchedule
    private let timing: LadderTiming?
    private let preset: String
    private let singleFile: Bool
    var inputTypes: Set<PortType> { [.frames] }
    var outputType: PortType? { .rendition }

    /// Encoding state, made from the first picture.
    private var size = PictureSize(width: 0, height: 0)
    private var converter: PictureConverter?
    private var encoder: CodecContext?
    /// Pictures sent to `encoder` since it was made.
    private var sent = 0
    /// The first encoder's global header: every later one (AV1) must have the same.
    private var header: [UInt8]?
    /// The init segment written (its sample entry names the codec's configuration).
    private var initSegment: [UInt8] = []
    private var writer: FragmentWriter?
    private var files: RenditionFiles?
    private let source: Frame
    private let packet: Packet
    private var frameRate = 30.0
    private var nextBoundary: Int64 = 0
    private var segmentStart: Int64 = 0
    private var segmentHasData = false
    private var lastEnd: Int64 = 0
    private var skipped = false
    /// Left out for the source's packets, it still chooses the covers from the passing pictures.
    private var choosingOnly = false
    /// The encoder's clock: 90 kHz.
    static let timeBase = AVRational(num: 1, den: 90_000)

    init(
        id: String, rung: LadderRung, always: Bool, asked: Bool, ladder: LadderFolder, schedule: SegmentSchedule, preset: String, singleFile: Bool,
        makesPoster: Bool = false, timing: LadderTiming? = nil
    ) throws {
        self.timing = timing
        poster = makesPoster ? try PassingCoverChoice() : nil
        self.id = id
        self.rung = rung
        self.always = always
        self.asked = asked
        self.ladder = ladder
        self.schedule = schedule
        self.preset = preset
        self.singleFile = singleFile
        source = try Frame()
        packet = try Packet()
    }

    func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        if let duration = item.parameters?.duration { poster?.expect(duration: duration) }
        guard case .video(let v) = item.payload else { return .ok }
        if context.stopRequested { return .flushing }
        let taken = try stopping(context) { try take(v, context) }
        try poster?.look(at: v)
        return taken
    }

    private func take(_ v: VideoFrame, _ context: StageContext) throws -> FlowResult {
        if choosingOnly { return .ok }
        if converter == nil {
            if let timing {
                let decision = timing.await(until: { context.stopRequested })
                var replacing: String?
                switch decision {
                case nil: return .flushing
                case .schedule: break
                case .keyframes(let cuts, let replaced):
                    replacing = replaced
                    if replaced == rung.name {
                        skipped = true
                        context.emit(RenditionLeftOut(reason: "the source's own pictures are this rung (copy)"))
                        choosingOnly = poster != nil
                        return choosingOnly ? .ok : .endOfStream
                    }
                    schedule = schedule.cutting(at: cuts)
                }
                if rung.needsTopPassedThrough, replacing == nil {
                    skipped = true
                    let why = "the top rung is encoded, so AV1 stops at \(LadderRung.av1MaxHeightTopEncoded)p to keep the ladder's time"
                    context.emit(RenditionLeftOut(reason: why))
                    context.emit(.notice("\(rung.name) left out: \(why)"))
                    return .endOfStream
                }
            }
            let short = min(v.width, v.height)
            if rung.height > short, !always {
                skipped = true
                let why = "the pictures are \(v.width)x\(v.height), smaller than the rung"
                context.emit(RenditionLeftOut(reason: why))
                if asked { context.emit(.notice("\(rung.name) left out: \(why)")) }
                return .endOfStream
            }
            try start(v, short: min(rung.height, short))
        }
        try encode(v)
        return .ok
    }

    func drain(_ context: StageContext) throws {
        if choosingOnly, !context.stopRequested, let chosen = poster?.chosen {
            _ = context.push(Item(.value(LadderPoster(picture: chosen.picture, time: chosen.time)), type: .rendition))
            return
        }
        guard !skipped, !context.stopRequested else { return }
        try stopping(context) { try end(context) }
    }

    private func end(_ context: StageContext) throws {
        guard let encoder else { return }
        try encoder.send(frame: nil)
        try receivePackets()
        guard let writer, let files else { throw ClipFlowError.failure("\(rung.name): no picture was encoded") }
        try files.writeSegment(try writer.finish(), seconds: seconds(lastEnd - segmentStart))
        let codecs =
            rung.codec == .h264
            ? CodecStrings.avc(AVCConfiguration.fromAnnexB(encoder.extradata)?.bytes ?? []) ?? "avc1.640028"
            : try InitSegmentInfo(initSegment)?.codecs
                ?? { throw ClipFlowError.failure("\(rung.name): the init segment has no AV1 configuration (av1C)") }()
        var t = try files.track(codecs: codecs)
        t.width = size.width
        t.height = size.height
        t.frameRate = frameRate
        t.iframesURI = "\(rung.name)-iframes.m3u8"
        try ladder.write(HLSPlaylists.media(t), to: t.playlistURI)
        try ladder.write(HLSPlaylists.iframes(t), to: t.iframesURI!)
        var item = Item(.value(t), type: .rendition)
        if let chosen = poster?.chosen { item.facts[LadderPoster.self] = LadderPoster(picture: chosen.picture, time: chosen.time) }
        if context.push(item) == .flushing { return }
    }

    func finish(_ context: StageContext, outcome: StageOutcome) {
        // Whoever ends first removes an unfinished ladder; the ladder stage does too.
        if outcome != .completed { ladder.discard() }
    }

    private func start(_ v: VideoFrame, short: Int) throws {
        size =
            v.height > v.width
            ? PictureSize(width: short, height: TranscodeGeometry.even(Double(v.height) * Double(short) / Double(v.width)))
            : PictureSize(width: TranscodeGeometry.even(Double(v.width) * Double(short) / Double(v.height)), height: short)
        converter = PictureConverter(frame: size, pool: try PicturePool(size: size))
        frameRate = v.nominalRate ?? 30
        encoder = try makeEncoder()
        files = try RenditionFiles(name: rung.name, ladder: ladder.work, singleFile: singleFile)
    }

    /// An encoder for the rung's codec at `size`; keyframes only where a segment starts.
    private func makeEncoder() throws -> CodecContext {
        let size = self.size, rung = self.rung, rate = frameRate
        func configure(_ c: UnsafeMutablePointer<AVCodecContext>) {
            c.pointee.width = Int32(size.width)
            c.pointee.height = Int32(size.height)
            c.pointee.pix_fmt = AV_PIX_FMT_YUV420P
            c.pointee.time_base = Self.timeBase
            c.pointee.framerate = av_d2q(rate, 1_000_000)
            c.pointee.gop_size = 100_000
            c.pointee.flags |= AV_CODEC_FLAG_GLOBAL_HEADER
        }
        switch rung.codec {
        case .h264:
            return try CodecContext.encoder(
                named: "libx264", what: "H.264 encoder (\(rung.name))",
                options: ["preset": preset, "crf": String(rung.crf), "profile": "high", "forced-idr": "1", "x264-params": "scenecut=0:open-gop=0"]
            ) { c in
                configure(c)
                c.pointee.rc_max_rate = Int64(rung.maxRate)
                c.pointee.rc_buffer_size = Int32(clamping: 2 * rung.maxRate)
            }
        case .av1:
            return try CodecContext.encoder(
                named: "libsvtav1", what: "AV1 encoder (\(rung.name))",
                // One thread's buffers (lp=1): by default SVT-AV1 reserves over a gigabyte per
                // encoder, beyond a worker's bound; a ladder's renditions keep the cores busy.
                options: ["preset": String(LadderRung.av1Preset), "crf": String(rung.crf), "svtav1-params": "lp=1"],
                configure: configure)
        }
    }

    /// Ends the AV1 encoder's pictures (their packets go into the segment being written) and
    /// makes a new encoder, whose first picture is a keyframe.
    private func restartEncoder() throws {
        guard sent > 0, let old = encoder else { return }
        try old.send(frame: nil)
        try receivePackets()
        encoder = try makeEncoder()
        sent = 0
        if let header, encoder!.extradata != header {
            throw ClipFlowError.failure("\(rung.name): the AV1 encoder's sequence header changed from one segment to the next")
        }
    }

    private func seconds(_ ticks: Int64) -> Double { Double(ticks) / Double(Self.timeBase.den) }

    private func encode(_ v: VideoFrame) throws {
        // The ladder's decode stage hands pictures in padded buffers (`PicturePacker`), so
        // libswscale reads them in place.
        let picture: Frame = try PicturePacker.withFrame(v, in: source, what: rung.name) { source in
            let full = PixelRect(x: 0, y: 0, width: v.width, height: v.height)
            return try converter!.convert(
                source, placement: Placement(crop: full, dest: PixelRect(x: 0, y: 0, width: size.width, height: size.height), pads: false))
        }
        let pts = Int64((v.time * Double(Self.timeBase.den)).rounded())
        picture.f.pointee.pts = pts
        picture.f.pointee.pict_type = AV_PICTURE_TYPE_NONE
        let half = 0.5 / frameRate
        if pts >= nextBoundary - Int64((half * Double(Self.timeBase.den)).rounded()) {
            if rung.codec == .av1 { try restartEncoder() } else { picture.f.pointee.pict_type = AV_PICTURE_TYPE_I }
            nextBoundary = schedule.boundary(after: v.time + half, ticksPerSecond: Double(Self.timeBase.den))
        }
        lastEnd = max(lastEnd, pts + Int64((Double(Self.timeBase.den) / frameRate).rounded()))
        try encoder!.send(frame: picture)
        sent += 1
        try receivePackets()
    }

    private func receivePackets() throws {
        guard let encoder, let files else { return }
        while try encoder.receive(packet: packet) {
            if writer == nil {
                let par = try CodecParameters(from: encoder)
                writer = try FragmentWriter(copying: par.p, timeBase: Self.timeBase, what: rung.name)
                initSegment = try writer!.header()
                try files.writeInit(initSegment)
                header = encoder.extradata
            }
            // Keyframes come only where forced, at the boundaries: each starts a segment.
            if packet.isKeyframe, segmentHasData {
                let pts = packet.p.pointee.pts
                try files.writeSegment(try writer!.cut(), seconds: seconds(pts - segmentStart))
                segmentStart = pts
                segmentHasData = false
            }
            try writer!.write(packet, in: Self.timeBase)
            segmentHasData = true
            packet.unref()
        }
    }
}

/// The ladder's one AAC rendition: takes raw audio (port `frames`; pictures are not its part),
/// encodes it once and cuts it at the AAC frame nearest each boundary (within half a frame; the
/// last frame never makes a segment of its own). At
/// end of stream it hands the ladder its description (port `rendition`); without audio it hands
/// nothing. Belongs to its stage queue.
final class AudioRenditionStage: Stage {
    let id: String
    private let ladder: LadderFolder
    private let schedule: SegmentSchedule
    private let singleFile: Bool
    var inputTypes: Set<PortType> { [.frames] }
    var outputType: PortType? { .rendition }

    private var aac: AACEncoder?
    private var writer: FragmentWriter?
    private var files: RenditionFiles?
    private var nextBoundary: Int64 = 0
    private var segmentStart: Int64 = 0
    private var hasData = false
    private var atBoundary: Packet?

    init(id: String, ladder: LadderFolder, schedule: SegmentSchedule, singleFile: Bool) {
        self.id = id
        self.ladder = ladder
        self.schedule = schedule
        self.singleFile = singleFile
    }

    func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        guard case .audio(let a) = item.payload, a.frameCount > 0 else { return .ok }
        if context.stopRequested { return .flushing }
        return try stopping(context) { try take(a) }
    }

    private func take(_ a: AudioChunk) throws -> FlowResult {
        if aac == nil {
            aac = try AACEncoder(rate: a.sampleRate, channels: a.channels, bitRate: 128_000, globalHeader: true)
            files = try RenditionFiles(name: "audio", ladder: ladder.work, singleFile: singleFile)
            nextBoundary = Int64((schedule.first * Double(a.sampleRate)).rounded())
        }
        guard a.sampleRate == aac!.rate, a.channels == aac!.channels else {
            throw ClipFlowError.badInput("audio changed from \(aac!.rate) Hz, \(aac!.channels) channels to \(a.sampleRate) Hz, \(a.channels) channels")
        }
        var planar = PlanarSamples.silence(channels: a.channels, count: a.frameCount)
        a.samples.withUnsafeBufferPointer { s in
            for c in 0..<a.channels { for i in 0..<a.frameCount { planar.channels[c][i] = s[i * a.channels + c] } }
        }
        try aac!.encode(planar, write)
        return .ok
    }

    func drain(_ context: StageContext) throws {
        guard !context.stopRequested else { return }
        try stopping(context) { try end(context) }
    }

    private func end(_ context: StageContext) throws {
        guard let aac, let files else { return }
        try aac.finish(write)
        guard let w = writer else { throw ClipFlowError.failure("audio: nothing was encoded") }
        if let last = atBoundary { try w.write(last, in: aac.timeBase) }
        try files.writeSegment(try w.finish(), seconds: Double(aac.sent - segmentStart) / Double(aac.rate))
        var t = try files.track(codecs: CodecStrings.aac(aac.codec.extradata) ?? "mp4a.40.2")
        t.channels = aac.channels
        try ladder.write(HLSPlaylists.media(t), to: t.playlistURI)
        if context.push(Item(.value(t), type: .rendition)) == .flushing { return }
    }

    func finish(_ context: StageContext, outcome: StageOutcome) {
        if outcome != .completed { ladder.discard() }
    }

    private func write(_ packet: Packet) throws {
        guard let aac, let files else { return }
        let rate = Double(aac.rate)
        if writer == nil {
            let par = try CodecParameters(from: aac.codec)
            writer = try FragmentWriter(copying: par.p, timeBase: aac.timeBase, what: "audio")
            try files.writeInit(try writer!.header())
        }
        // The packet at a boundary is held until another follows: when it is the last, it ends
        // the segment before instead of making a segment of its own (the encoder's tail).
        if let first = atBoundary {
            atBoundary = nil
            let pts = max(0, first.p.pointee.pts)
            try files.writeSegment(try writer!.cut(), seconds: Double(pts - segmentStart) / rate)
            segmentStart = pts
            nextBoundary = schedule.boundary(after: Double(nextBoundary) / rate, ticksPerSecond: rate)
            try writer!.write(first, in: aac.timeBase)
        }
        if hasData, max(0, packet.p.pointee.pts) >= nextBoundary - 512 {
            let held = try Packet()
            try FF.check(av_packet_ref(held.p, packet.p), "holding an AAC packet")
            atBoundary = held
            return
        }
        try writer!.write(packet, in: aac.timeBase)
        hasData = true
    }
}

/// Runs a rendition's work; once the run is stopping (SIGINT, another stage failed) a failure
/// is the stop's doing (the ladder's folder may be gone already) and reported as an interruption.
func stopping<T>(_ context: StageContext, _ body: () throws -> T) throws -> T {
    do { return try body() } catch  where context.stopRequested { throw ClipFlowError.interrupted }
}

extension PixelFormat {
    /// The FFmpeg pixel format of these planes (nil: compressed).
    var ffmpeg: AVPixelFormat? {
        switch self {
        case .yuv420p: return AV_PIX_FMT_YUV420P
        case .nv12: return AV_PIX_FMT_NV12
        case .yuyv422: return AV_PIX_FMT_YUYV422
        case .mjpeg: return nil
        }
    }
}

/// Codec parameters filled from an opened encoder (an owner class: freed in its deinit).
final class CodecParameters {
    let p: UnsafeMutablePointer<AVCodecParameters>
    init(from c: CodecContext) throws {
        guard let p = avcodec_parameters_alloc() else { throw ClipFlowError.failure("out of memory (codec parameters)") }
        self.p = p
        try FF.check(avcodec_parameters_from_context(p, c.ctx), "codec parameters")
    }
    deinit {
        var q: UnsafeMutablePointer<AVCodecParameters>? = p
        avcodec_parameters_free(&q)
    }
}

extension CodecContext {
    /// The encoder's global header (x264: Annex B SPS/PPS; AAC: AudioSpecificConfig).
    var extradata: [UInt8] {
        guard let d = ctx.pointee.extradata, ctx.pointee.extradata_size > 0 else { return [] }
        return Array(UnsafeBufferPointer(start: d, count: Int(ctx.pointee.extradata_size)))
    }
}

extension AVCConfiguration {
    /// A configuration record from Annex B parameter sets (start codes, as libx264's global
    /// header): its first SPS and PPS.
    static func fromAnnexB(_ b: [UInt8]) -> AVCConfiguration? {
        var nals: [[UInt8]] = []
        var i = 0, start = -1
        while i + 3 <= b.count {
            if b[i] == 0, b[i + 1] == 0, b[i + 2] == 1 {
                if start >= 0 { nals.append(Array(b[start..<(i > 0 && b[i - 1] == 0 ? i - 1 : i)])) }
                start = i + 3
                i += 3
            } else {
                i += 1
            }
        }
        if start >= 0, start < b.count { nals.append(Array(b[start...])) }
        guard let sps = nals.first(where: { ($0.first ?? 0) & 0x1f == 7 }), sps.count > 3, let pps = nals.first(where: { ($0.first ?? 0) & 0x1f == 8 }) else {
            return nil
        }
        var rec: [UInt8] = [1, sps[1], sps[2], sps[3], 0xff, 0xe1, UInt8(sps.count >> 8), UInt8(sps.count & 0xff)] + sps
        rec += [1, UInt8(pps.count >> 8), UInt8(pps.count & 0xff)] + pps
        return AVCConfiguration(rec)
    }
}

/// A rung left out of its ladder, and why: its rendition's `result` event.
public struct RenditionLeftOut: StageResult, Equatable {
    public var reason: String

    public init(reason: String) { self.reason = reason }

    public var fields: [EventField] { [EventField("left_out", .string(reason))] }

    public init(fields: [EventField]) { self.init(reason: fields.text("left_out")) }
}
