internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// One rung of a ladder: its picture height (width follows the source's shape) and encoder
/// settings.
public struct LadderRung: Sendable, Equatable {
    public var name: String
    public var height: Int
    public var crf: Int
    public var maxRate: Int
    public init(name: String, height: Int, crf: Int = 21, maxRate: Int) {
        self.name = name
        self.height = height
        self.crf = crf
        self.maxRate = maxRate
    }

    /// Apple's HLS authoring ladder, from the top: the rungs not above the source.
    public static func auto(sourceHeight: Int) -> [LadderRung] {
        let all = [
            LadderRung(name: "1080p", height: 1080, maxRate: 6_000_000), LadderRung(name: "720p", height: 720, maxRate: 3_500_000),
            LadderRung(name: "540p", height: 540, maxRate: 2_000_000), LadderRung(name: "360p", height: 360, maxRate: 1_000_000)
        ]
        let fit = all.filter { $0.height <= sourceHeight }
        return fit.isEmpty ? [all.last!] : fit
    }
}

/// Where segments start, in seconds: 0, then `first`, then every `length` (the `feed` profile
/// starts with a short segment so a feed's first picture comes fast).
public struct SegmentSchedule: Sendable, Equatable {
    public var length: Double
    public var first: Double
    public init(length: Double, first: Double? = nil) {
        self.length = length
        self.first = first ?? length
    }
    public static let vod = SegmentSchedule(length: 6)
    public static let feed = SegmentSchedule(length: 2, first: 1)

    /// The first boundary strictly after `t` seconds.
    func boundary(after t: Double) -> Double {
        if t < first - 1e-9 { return first }
        return first + (((t - first) / length + 1e-9).rounded(.down) + 1) * length
    }
}

/// What `HLSLadderWriter` made.
public struct HLSLadderResult: Sendable {
    public var directory: URL
    public var master: URL
    public var renditions: [String]
    public var segments: Int
}

/// Writes an HLS ladder of fMP4 renditions from one decode (prototype for issue 16): the decoding
/// thread decodes and converts each picture once at the top rung's size and hands a reference to
/// every rung's encoding thread through its own bounded queue (the slowest rung sets the pace);
/// each rung scales, encodes (x264, keyframes forced at every segment boundary, scene cuts off)
/// and cuts its segments where the boundary's keyframe comes out. Audio is encoded once (AAC) on
/// the decoding thread and cut at the first AAC frame at or after each boundary. Playlists are
/// written from what the segments measure (`HLSPlaylists`). The ladder is written into a
/// temporary folder next to `directory` and renamed into place when complete.
/// Not thread-safe: `run` once, from one thread.
public final class HLSLadderWriter {
    public let inputs: [String]
    public let directory: URL
    public let schedule: SegmentSchedule
    public let encoderPreset: String
    private let rungsAsked: [LadderRung]?
    private let cancel: CancellationFlag
    private let progress: ProgressReporter

    public init(
        inputs: [String], directory: URL, rungs: [LadderRung]? = nil, schedule: SegmentSchedule = .vod, encoderPreset: String = "veryfast",
        progress: ProgressReporter = SilentProgress(), cancel: CancellationFlag = CancellationFlag()
    ) {
        self.inputs = inputs
        self.directory = directory
        self.rungsAsked = rungs
        self.schedule = schedule
        self.encoderPreset = encoderPreset
        self.progress = progress
        self.cancel = cancel
    }

    public func run() throws -> HLSLadderResult {
        let fm = FileManager.default
        // Nothing is replaced: a ladder goes into a folder that does not exist yet.
        if fm.fileExists(atPath: directory.path) {
            throw ClipFlowError.output("-o '\(directory.path)' exists; a ladder is written into a new folder (remove it or choose another)")
        }
        let work = directory.deletingLastPathComponent().appendingPathComponent(
            ".\(directory.lastPathComponent).clipflow-tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try fm.createDirectory(at: work, withIntermediateDirectories: true)
        var committed = false
        defer { if !committed { try? fm.removeItem(at: work) } }

        // A rung's height is the picture's short side: portrait sources get portrait renditions
        // (720p of a 1080x1920 video is 720x1280), pixels turned upright.
        let display = try Transcoder.probe(inputs[0]).video.displaySize
        let short = min(display.width, display.height)
        let rungs = rungsAsked ?? LadderRung.auto(sourceHeight: short)
        var settings = TranscodeSettings()
        let topShort = min(short, rungs.map(\.height).max() ?? short)
        settings.height =
            display.height > display.width ? TranscodeGeometry.even(Double(topShort) * Double(display.height) / Double(display.width)) : topShort
        settings.upright = true
        let decoder = Transcoder(inputs: inputs, output: work.appendingPathComponent("unused.mp4"), settings: settings, cancel: cancel)

        var workers: [RungWorker] = []
        var audio: AudioRendition?
        var failed: Error?
        var total = 0.0
        let started = Date()
        var lastReport = Date.distantPast
        func report(_ media: Double, final: Bool = false) {
            let now = Date()
            guard final || now.timeIntervalSince(lastReport) >= 0.25 else { return }
            lastReport = now
            let wall = now.timeIntervalSince(started)
            progress.report(
                ProgressEvent(
                    phase: "hls", completed: Int64(media * 1000), total: Int64(max(total, media) * 1000), unit: "ms", speed: wall > 0 ? media / wall : nil))
        }
        var media = 0.0
        do {
            try decoder.decodeOnly { item, plan in
                let shape = plan.output
                if workers.isEmpty {
                    total = plan.totalSeconds
                    for r in rungs {
                        let w = try RungWorker(rung: r, source: shape, folder: work, schedule: schedule, preset: encoderPreset)
                        w.start()
                        workers.append(w)
                    }
                    if let a = shape.audio { audio = try AudioRendition(rate: a.rate, channels: a.channels, folder: work, schedule: schedule) }
                }
                switch item {
                case .picture(let f, let end):
                    media = end
                    report(end)
                    for w in workers {
                        let copy = try Frame()
                        try FF.check(av_frame_ref(copy.f, f.f), "sharing a picture")
                        guard w.queue.push(copy) == .ok else { throw w.failure ?? ClipFlowError.interrupted }
                    }
                case .audio(let s):
                    try audio?.encode(s)
                }
            }
            for w in workers { w.queue.endOfStream() }
        } catch {
            failed = error
            for w in workers { w.queue.consumerDone() }
        }
        for w in workers { w.join() }
        if let e = failed ?? workers.compactMap(\.failure).first { throw e }
        report(media, final: true)

        var video: [HLSTrack] = []
        for w in workers { video.append(try w.finish()) }
        let audioTrack = try audio?.finish()
        for v in video {
            try HLSPlaylists.media(v).write(to: work.appendingPathComponent(v.playlistURI), atomically: false, encoding: .utf8)
            if let i = v.iframesURI { try HLSPlaylists.iframes(v).write(to: work.appendingPathComponent(i), atomically: false, encoding: .utf8) }
        }
        if let a = audioTrack { try HLSPlaylists.media(a).write(to: work.appendingPathComponent(a.playlistURI), atomically: false, encoding: .utf8) }
        try HLSPlaylists.master(video: video, audio: audioTrack).write(to: work.appendingPathComponent("master.m3u8"), atomically: false, encoding: .utf8)
        try feedManifest(video: video, audio: audioTrack).write(to: work.appendingPathComponent("feed.json"), atomically: false, encoding: .utf8)
        // The poster: a representative frame of the top rendition, upright.
        let top = work.appendingPathComponent("poster-source.mp4")
        if let v = video.first {
            // The rendition's parts one after another, one part in memory at a time.
            guard fm.createFile(atPath: top.path, contents: nil), let out = FileHandle(forWritingAtPath: top.path) else {
                throw ClipFlowError.output("cannot write '\(top.path)' for the poster")
            }
            do {
                for part in [v.initURI] + v.segments.map(\.uri) { try out.write(contentsOf: try Data(contentsOf: work.appendingPathComponent(part))) }
                try out.close()
            } catch {
                try? out.close()
                throw ClipFlowError.output("cannot write '\(top.path)' for the poster: \(error.localizedDescription)")
            }
            _ = try Thumbnailer(path: top.path, cancel: cancel).write(to: work.appendingPathComponent("poster.jpg"))
            try fm.removeItem(at: top)
        }
        guard rename(work.path, directory.path) == 0 else {
            throw ClipFlowError.output("cannot move the ladder into '\(directory.path)': \(String(cString: strerror(errno)))")
        }
        committed = true
        return HLSLadderResult(
            directory: directory, master: directory.appendingPathComponent("master.m3u8"), renditions: video.map(\.playlistURI),
            segments: video.first?.segments.count ?? 0)
    }
}

extension HLSLadderWriter {
    /// `feed.json`: what a feed client needs to start this video fast: its id (the folder's
    /// name), cover, master playlist, duration, and the init and first segments of the rendition
    /// a player starts on (the lowest) and of the audio, to prefetch while the video before it plays.
    func feedManifest(video: [HLSTrack], audio: HLSTrack?) -> String {
        func node(_ v: JSONValue) -> JSONNode { JSONNode(v) }
        var prefetch: [JSONNode] = []
        for t in [video.last, audio].compactMap({ $0 }) {
            guard let first = t.segments.first else { continue }
            prefetch.append(node(.object([(key: "init", value: node(.string(t.initURI))), (key: "segment", value: node(.string(first.uri)))])))
        }
        let seconds = video.first.map { $0.segments.reduce(0) { $0 + $1.seconds } } ?? 0
        let entry = JSONValue.object([
            (key: "id", value: node(.string(directory.lastPathComponent))), (key: "cover", value: node(.string("poster.jpg"))),
            (key: "master", value: node(.string("master.m3u8"))), (key: "duration", value: node(.number((seconds * 1000).rounded() / 1000))),
            (key: "prefetch", value: node(.array(prefetch)))
        ])
        return JSONValue.object([(key: "videos", value: node(.array([node(entry)])))]).serialized + "\n"
    }
}

/// One rung's encoding thread. `@unchecked Sendable`: everything but the queue belongs to the
/// encoding thread from `start` until `join` returns, then to the caller (`finish`); `failure` is
/// written before the thread ends the queue and read after the queue's lock ordered the two.
final class RungWorker: @unchecked Sendable {
    let queue = BoundedQueue<Frame>(capacity: 3)
    private(set) var failure: Error?
    private let rung: LadderRung
    private let size: PictureSize
    private let converter: PictureConverter
    private let encoder: CodecContext
    private var writer: FragmentWriter?
    private let folder: URL
    private let timeBase: AVRational
    private let schedule: SegmentSchedule
    private var nextBoundary: Int64 = 0
    private var segments: [HLSSegment] = []
    private var segmentStart: Int64 = 0
    private var initWritten = false
    private let packet: Packet
    private var lastEnd: Int64 = 0
    private let done = DispatchSemaphore(value: 0)
    private let frameRate: Double

    init(rung: LadderRung, source: TranscodeOutput.Plan, folder: URL, schedule: SegmentSchedule, preset: String) throws {
        self.rung = rung
        self.folder = folder.appendingPathComponent(rung.name)
        try FileManager.default.createDirectory(at: self.folder, withIntermediateDirectories: true)
        let f = source.frame
        let short = min(rung.height, min(f.width, f.height))
        size =
            f.height > f.width
            ? PictureSize(width: short, height: TranscodeGeometry.even(Double(f.height) * Double(short) / Double(f.width)))
            : PictureSize(width: TranscodeGeometry.even(Double(f.width) * Double(short) / Double(f.height)), height: short)
        converter = PictureConverter(frame: size, pool: try PicturePool(size: size))
        timeBase = source.timeBase
        frameRate = source.frameRate.double > 0 ? source.frameRate.double : 30
        self.schedule = schedule
        let size = self.size
        encoder = try CodecContext.encoder(
            named: "libx264", what: "H.264 encoder (\(rung.name))",
            options: ["preset": preset, "crf": String(rung.crf), "profile": "high", "forced-idr": "1", "x264-params": "scenecut=0:open-gop=0"]
        ) { c in
            c.pointee.width = Int32(size.width)
            c.pointee.height = Int32(size.height)
            c.pointee.pix_fmt = AV_PIX_FMT_YUV420P
            c.pointee.time_base = source.timeBase
            c.pointee.framerate = source.frameRate
            c.pointee.gop_size = 100_000  // keyframes only where forced, at the boundaries
            c.pointee.rc_max_rate = Int64(rung.maxRate)
            c.pointee.rc_buffer_size = Int32(clamping: 2 * rung.maxRate)
            c.pointee.flags |= AV_CODEC_FLAG_GLOBAL_HEADER
        }
        packet = try Packet()
    }

    func start() {
        Thread { [self] in
            do {
                while let p = queue.pull() { try encode(p.element) }
                try flush()
            } catch {
                failure = error
                queue.consumerDone()
            }
            done.signal()
        }.start()
    }

    func join() { done.wait() }

    private func encode(_ source: Frame) throws {
        let full = PixelRect(x: 0, y: 0, width: Int(source.f.pointee.width), height: Int(source.f.pointee.height))
        let picture = try converter.convert(
            source, placement: Placement(crop: full, dest: PixelRect(x: 0, y: 0, width: size.width, height: size.height), pads: false), turn: 0)
        let pts = source.f.pointee.pts
        picture.f.pointee.pts = pts
        picture.f.pointee.pict_type = AV_PICTURE_TYPE_NONE
        if pts >= nextBoundary {
            picture.f.pointee.pict_type = AV_PICTURE_TYPE_I
            nextBoundary = Int64((schedule.boundary(after: Double(pts) * timeBase.double) / timeBase.double).rounded())
        }
        lastEnd = max(lastEnd, pts + Int64((1 / frameRate / timeBase.double).rounded()))
        try encoder.send(frame: picture)
        try drain()
    }

    private func flush() throws {
        try encoder.send(frame: nil)
        try drain()
    }

    private func drain() throws {
        while try encoder.receive(packet: packet) {
            if writer == nil {
                let par = try CodecParameters(from: encoder)
                writer = try FragmentWriter(copying: par.p, timeBase: timeBase, what: rung.name)
                try Data(try writer!.header()).write(to: folder.appendingPathComponent("init.mp4"))
            }
            // Keyframes come only where forced, at the boundaries: each starts a segment.
            if packet.isKeyframe, segmentHasData { try cutSegment(at: packet.p.pointee.pts) }
            try writer!.write(packet, in: timeBase)
            segmentHasData = true
            packet.unref()
        }
    }
    private var segmentHasData = false

    private func cutSegment(at pts: Int64) throws {
        let bytes = try writer!.cut()
        try save(bytes, seconds: Double(pts - segmentStart) * timeBase.double)
        segmentStart = pts
        segmentHasData = false
    }

    private func save(_ bytes: [UInt8], seconds: Double) throws {
        let name = "seg-\(segments.count).m4s"
        try Data(bytes).write(to: folder.appendingPathComponent(name))
        let info = FragmentInfo(bytes)
        segments.append(HLSSegment(uri: "\(rung.name)/\(name)", seconds: seconds, bytes: bytes.count, iframe: info?.firstSampleRange))
    }

    /// Ends the last segment; the rendition's playlist inputs.
    func finish() throws -> HLSTrack {
        guard let w = writer else { throw ClipFlowError.failure("\(rung.name): no picture was encoded") }
        try save(try w.finish(), seconds: Double(lastEnd - segmentStart) * timeBase.double)
        let codecs = CodecStrings.avc(AVCConfiguration.fromAnnexB(encoder.extradata)?.bytes ?? []) ?? "avc1.640028"
        var t = HLSTrack(playlistURI: "\(rung.name).m3u8", initURI: "\(rung.name)/init.mp4", segments: segments, codecs: codecs)
        t.width = size.width
        t.height = size.height
        t.frameRate = frameRate
        t.iframesURI = "\(rung.name)-iframes.m3u8"
        return t
    }
}

/// The ladder's one AAC rendition, encoded on the decoding thread and cut at the AAC frame
/// nearest each boundary (within half a frame). Owner: the decoding thread.
final class AudioRendition {
    private let aac: AACEncoder
    private var writer: FragmentWriter?
    private let folder: URL
    private let schedule: SegmentSchedule
    private var nextBoundary: Int64
    private var segmentStart: Int64 = 0
    private var segments: [HLSSegment] = []
    private var hasData = false

    init(rate: Int, channels: Int, folder: URL, schedule: SegmentSchedule) throws {
        self.folder = folder.appendingPathComponent("audio")
        try FileManager.default.createDirectory(at: self.folder, withIntermediateDirectories: true)
        self.schedule = schedule
        nextBoundary = Int64((schedule.first * Double(rate)).rounded())
        aac = try AACEncoder(rate: rate, channels: channels, bitRate: 128_000, globalHeader: true)
    }

    func encode(_ s: PlanarSamples) throws { try aac.encode(s, write) }

    private func write(_ packet: Packet) throws {
        let rate = Double(aac.rate)
        if writer == nil {
            let par = try CodecParameters(from: aac.codec)
            writer = try FragmentWriter(copying: par.p, timeBase: aac.timeBase, what: "audio")
            try Data(try writer!.header()).write(to: folder.appendingPathComponent("init.mp4"))
        }
        let pts = max(0, packet.p.pointee.pts)
        if hasData, pts >= nextBoundary - 512 {
            try save(try writer!.cut(), seconds: Double(pts - segmentStart) / rate)
            segmentStart = pts
            hasData = false
            nextBoundary = Int64((schedule.boundary(after: Double(nextBoundary) / rate) * rate).rounded())
        }
        try writer!.write(packet, in: aac.timeBase)
        hasData = true
    }

    private func save(_ bytes: [UInt8], seconds: Double) throws {
        let name = "seg-\(segments.count).m4s"
        try Data(bytes).write(to: folder.appendingPathComponent(name))
        segments.append(HLSSegment(uri: "audio/\(name)", seconds: seconds, bytes: bytes.count, iframe: nil))
    }

    func finish() throws -> HLSTrack {
        try aac.finish(write)
        guard let w = writer else { throw ClipFlowError.failure("audio: nothing was encoded") }
        try save(try w.finish(), seconds: Double(aac.sent - segmentStart) / Double(aac.rate))
        var t = HLSTrack(
            playlistURI: "audio.m3u8", initURI: "audio/init.mp4", segments: segments, codecs: CodecStrings.aac(aac.codec.extradata) ?? "mp4a.40.2")
        t.channels = aac.channels
        return t
    }
}

/// Codec parameters filled from an opened encoder (owner class, habit 1).
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
