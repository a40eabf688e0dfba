import ClipFlowCore
import Foundation

/// How a picture of one shape goes into an output frame of another.
public enum Fit: String, CaseIterable, Sendable {
    /// The whole picture, scaled to fit inside the frame; the rest is black (letterbox/pillarbox).
    case contain
    /// The frame is filled; what overhangs is cropped, equally on both sides.
    case cover
    /// The picture is scaled to the frame's size, whatever its shape.
    case stretch
}

/// Frame timing of the output.
public enum FrameRatePolicy: Sendable, Equatable, CustomStringConvertible {
    /// Every decoded picture keeps its time (variable frame rate stays variable).
    case keep
    /// A constant rate `num/den` frames per second: for each output frame time, the picture shown
    /// at that time (pictures are repeated or dropped by timestamp).
    case fixed(num: Int, den: Int)

    /// Parses "keep", "N", "N.NN" or "N/D" (e.g. 30000/1001).
    public init?(parsing s: String) {
        if s == "keep" { self = .keep; return }
        let parts = s.split(separator: "/", omittingEmptySubsequences: false)
        if parts.count == 2, let n = Int(parts[0]), let d = Int(parts[1]), n > 0, d > 0, Double(n) / Double(d) <= 240 {
            self = .fixed(num: n, den: d)
            return
        }
        guard parts.count == 1, let r = Double(s), r > 0, r <= 240, r.isFinite else { return nil }
        if r == r.rounded() { self = .fixed(num: Int(r), den: 1); return }
        self = .fixed(num: Int((r * 1000).rounded()), den: 1000)
    }

    public var description: String {
        switch self {
        case .keep: return "keep"
        case .fixed(let n, let d): return d == 1 ? "\(n)" : "\(n)/\(d)"
        }
    }
}

public enum VideoCodecChoice: String, CaseIterable, Sendable {
    case h264, hevc
    var encoderName: String { self == .h264 ? "libx264" : "libx265" }
}

/// A picture size.
public struct PictureSize: Sendable, Hashable, CustomStringConvertible {
    public var width: Int
    public var height: Int
    public init(width: Int, height: Int) {
        self.width = width
        self.height = height
    }
    /// Parses "WxH" with positive even numbers; nil otherwise (`problem(parsing:)` says why).
    public init?(parsing s: String) {
        guard Self.problem(parsing: s) == nil else { return nil }
        let p = s.lowercased().split(separator: "x")
        self.init(width: Int(p[0])!, height: Int(p[1])!)
    }
    /// Why `s` is not a usable output size, or nil.
    public static func problem(parsing s: String) -> String? {
        let p = s.lowercased().split(separator: "x", omittingEmptySubsequences: false)
        guard p.count == 2, let w = Int(p[0]), let h = Int(p[1]) else { return "expected WxH, e.g. 1280x720 (got '\(s)')" }
        guard w >= 16, h >= 16, w <= 8192, h <= 8192 else { return "\(s): each side must be 16 to 8192 pixels" }
        guard w % 2 == 0, h % 2 == 0 else { return "\(s): width and height must be even (4:2:0 video halves them for colour)" }
        return nil
    }
    public var description: String { "\(width)x\(height)" }
    var swapped: PictureSize { PictureSize(width: height, height: width) }
}

/// Everything a transcode decides: the output frame, timing and encoders. Presets fill it;
/// command-line options then override single fields.
public struct TranscodeSettings: Sendable, Equatable {
    /// The output frame, exactly (`--size`); pictures of other shapes go in by `fit`.
    public var frame: PictureSize?
    /// The output keeps the source's shape and fits within this, turned to match the source's
    /// orientation (the web presets: Apple's 1920x1080 preset makes 1080x1920 of a portrait video).
    public var limit: PictureSize?
    /// The output's height (`--height`); the width follows the source's shape.
    public var height: Int?
    public var fit = Fit.contain
    /// Pictures are never made larger than the source unless this is set.
    public var upscale = false
    public var frameRate = FrameRatePolicy.keep
    public var videoCodec = VideoCodecChoice.h264
    /// Constant rate factor (quality); nil when a bit rate is set.
    public var crf: Int? = 23
    /// Average video bits per second (nil: quality-based, `crf`).
    public var videoBitRate: Int?
    /// Peak video bits per second over a 2-second buffer (nil: no cap).
    public var maxRate: Int?
    /// The encoder's speed/efficiency preset (x264/x265 names).
    public var encoderPreset = "medium"
    /// H.264 profile (nil: the encoder's choice).
    public var profile: String? = "high"
    /// A keyframe exactly every this many seconds, each starting a closed GOP (no scene-cut
    /// keyframes in between, so every segment of an HLS ladder starts on one). nil: the
    /// encoder's own placement (x264: at scene cuts, at most 250 frames apart), as the ffmpeg CLI.
    public var keyframeSeconds: Double? = nil
    public var audioBitRate = 128_000
    /// Pictures turned by a display matrix are turned in their pixels (the output has none).
    public var upright = false
    /// The output's display matrix, clockwise degrees; the pixels are turned so that it shows them
    /// the right way up (`merge --conform`: a re-encoded clip takes the copied clips'
    /// orientation). nil: the inputs' own, or none with `upright`.
    var outputRotation: Int?
    /// The output's audio, whatever the inputs have (silence when none): `merge --conform`.
    var audioFormat: AudioFormat?
    /// The output has no audio track, whatever the inputs have.
    var noAudio = false
    /// The H.264 level to declare (x264 `level`, e.g. "3.1"); nil: the encoder's choice.
    var level: String?

    struct AudioFormat: Equatable {
        var rate: Int
        var channels: Int
    }

    public init() {}

    public static let encoderPresets = ["ultrafast", "superfast", "veryfast", "faster", "fast", "medium", "slow", "slower", "veryslow"]

    /// Why these settings cannot be used (naming the option), or nil.
    public var problem: TranscodeChoices.Problem? {
        func p(_ o: String, _ m: String) -> TranscodeChoices.Problem { TranscodeChoices.Problem(option: o, message: m) }
        if let c = crf, !(0...51).contains(c) { return p("crf", "\(c) is out of range (0 to 51)") }
        if let b = videoBitRate, b < 16_000 { return p("video-bitrate", "\(b) bits per second is too low (at least 16k)") }
        if let m = maxRate, m < 16_000 { return p("maxrate", "\(m) bits per second is too low (at least 16k)") }
        if let m = maxRate, let b = videoBitRate, m < b { return p("maxrate", "\(m) is below the video bit rate \(b)") }
        if !Self.encoderPresets.contains(encoderPreset) {
            return p("encoder-preset", "'\(encoderPreset)' is not one of \(Self.encoderPresets.joined(separator: ", "))")
        }
        if let h = height, h < 16 || h > 8192 || h % 2 != 0 { return p("height", "\(h) must be an even number from 16 to 8192") }
        if !(8_000...512_000).contains(audioBitRate) { return p("audio-bitrate", "\(audioBitRate) must be 8k to 512k") }
        return nil
    }
}

/// A named set of settings (`clipflow presets`).
public struct TranscodePreset: Sendable {
    public let name: String
    public let summary: String
    public let settings: TranscodeSettings

    public static let all: [TranscodePreset] = [
        web("web-1080p", 1920, 1080, maxRate: 6_000_000, audio: 128_000),
        web("web-720p", 1280, 720, maxRate: 3_500_000, audio: 128_000),
        web("web-540p", 960, 540, maxRate: 2_000_000, audio: 96_000),
        web("web-360p", 640, 360, maxRate: 1_000_000, audio: 64_000),
        framed("vertical-1080x1920", PictureSize(width: 1080, height: 1920), "a 9:16 frame for vertical feeds"),
        framed("square-1080", PictureSize(width: 1080, height: 1080), "a 1:1 frame"),
        {
            var s = TranscodeSettings()
            s.limit = PictureSize(width: 1920, height: 1080)
            s.videoCodec = .hevc
            s.crf = 26
            s.maxRate = 4_000_000
            s.profile = nil
            s.keyframeSeconds = 2
            return TranscodePreset(name: "hevc-1080p", summary: "HEVC (hvc1) up to 1080p, about half the bits of H.264", settings: s)
        }(),
        {
            var s = TranscodeSettings()
            s.crf = 16
            s.encoderPreset = "slow"
            s.audioBitRate = 256_000
            s.keyframeSeconds = 2
            return TranscodePreset(name: "archive", summary: "source size and rate, H.264 at near-transparent quality", settings: s)
        }()
    ]

    public static func named(_ name: String) -> TranscodePreset? { all.first { $0.name == name } }

    /// The settings' line for `clipflow presets`.
    public var details: String {
        let s = settings
        var parts: [String] = []
        if let l = s.limit {
            parts.append("up to \(l) (\(l.swapped) for portrait)")
        } else if let f = s.frame {
            parts.append("\(f) frame, picture \(s.fit == .contain ? "contained" : s.fit == .cover ? "cropped to cover" : "stretched")")
        } else {
            parts.append("source size")
        }
        parts.append(s.videoCodec == .h264 ? "H.264 \(s.profile.map { $0.capitalized } ?? "")".trimmingCharacters(in: .whitespaces) : "HEVC hvc1")
        if let c = s.crf { parts.append("CRF \(c)") }
        if let m = s.maxRate { parts.append("capped at \(m / 1000)k") }
        parts.append("preset \(s.encoderPreset)")
        if let k = s.keyframeSeconds { parts.append("closed \(Int(k)) s GOP") }
        parts.append("AAC \(s.audioBitRate / 1000)k")
        parts.append("fast start")
        return parts.joined(separator: ", ")
    }

    private static func web(_ name: String, _ w: Int, _ h: Int, maxRate: Int, audio: Int) -> TranscodePreset {
        var s = TranscodeSettings()
        s.limit = PictureSize(width: w, height: h)
        s.crf = 21
        s.maxRate = maxRate
        s.audioBitRate = audio
        s.keyframeSeconds = 2
        return TranscodePreset(name: name, summary: "H.264 for the web, up to \(h)p (never above the source)", settings: s)
    }

    private static func framed(_ name: String, _ size: PictureSize, _ what: String) -> TranscodePreset {
        var s = TranscodeSettings()
        s.frame = size
        s.crf = 21
        s.maxRate = 6_000_000
        s.keyframeSeconds = 2
        return TranscodePreset(name: name, summary: "H.264 in \(what), the picture contained (letterboxed)", settings: s)
    }
}

/// Parses bit rates as people write them: "128k", "2.5M", "800000".
public func parseBitRate(_ s: String) -> Int? {
    let t = s.trimmingCharacters(in: .whitespaces).lowercased()
    var mult = 1.0
    var num = Substring(t)
    if t.hasSuffix("k") { mult = 1e3; num = num.dropLast() } else if t.hasSuffix("m") { mult = 1e6; num = num.dropLast() }
    guard let v = Double(num), v > 0, v.isFinite else { return nil }
    return Int((v * mult).rounded())
}

/// A transcode's options as a person gives them (command-line flags, or a pipeline stage's
/// fields of the same names), resolved against a preset into `TranscodeSettings`.
public struct TranscodeChoices: Sendable, Equatable {
    public var preset: String?
    public var size: String?
    public var height: Int?
    public var fit: String?
    public var fps: String?
    public var videoCodec: String?
    public var crf: Int?
    public var videoBitRate: String?
    public var maxRate: String?
    public var encoderPreset: String?
    public var audioBitRate: String?
    public var upright = false
    public var upscale = false

    public init() {}

    /// One problem with an option: its name (a flag without "--", or a stage field) and why.
    public struct Problem: Error, Sendable, Equatable, CustomStringConvertible {
        public var option: String
        public var message: String
        /// As the command line shows it.
        public var description: String { "--\(option): \(message)" }
    }

    /// The settings, or the first problem with the options.
    public func resolve() -> Result<TranscodeSettings, Problem> {
        func fail(_ option: String, _ message: String) -> Result<TranscodeSettings, Problem> { .failure(Problem(option: option, message: message)) }
        var s = TranscodeSettings()
        if let name = preset {
            guard let p = TranscodePreset.named(name) else {
                return fail("preset", "unknown preset '\(name)' (one of \(TranscodePreset.all.map(\.name).joined(separator: ", ")); see `clipflow presets`)")
            }
            s = p.settings
        }
        if size != nil, height != nil { return fail("size", "give --size or --height, not both") }
        if let z = size {
            if let why = PictureSize.problem(parsing: z) { return fail("size", why) }
            s.frame = PictureSize(parsing: z)
            s.limit = nil
            s.height = nil
        }
        if let h = height {
            s.height = h
            s.frame = nil
            s.limit = nil
        }
        if let f = fit {
            guard let v = Fit(rawValue: f) else { return fail("fit", "'\(f)' is not one of contain, cover, stretch") }
            s.fit = v
        }
        if let f = fps {
            guard let v = FrameRatePolicy(parsing: f) else {
                return fail("fps", "'\(f)' is not keep, a rate above 0 up to 240 (30, 29.97) or a fraction (30000/1001)")
            }
            s.frameRate = v
        }
        if let c = videoCodec {
            guard let v = VideoCodecChoice(rawValue: c) else { return fail("video-codec", "'\(c)' is not one of h264, hevc") }
            if v != s.videoCodec { s.profile = v == .h264 ? "high" : nil }
            s.videoCodec = v
        }
        if crf != nil, videoBitRate != nil { return fail("crf", "give --crf or --video-bitrate, not both") }
        if let c = crf {
            s.crf = c
            s.videoBitRate = nil
        }
        if let b = videoBitRate {
            guard let v = parseBitRate(b) else { return fail("video-bitrate", "'\(b)' is not a bit rate (e.g. 2500k, 2.5M)") }
            s.videoBitRate = v
            s.crf = nil
        }
        if let m = maxRate {
            guard let v = parseBitRate(m) else { return fail("maxrate", "'\(m)' is not a bit rate (e.g. 4M)") }
            s.maxRate = v
        }
        if let p = encoderPreset { s.encoderPreset = p }
        if let a = audioBitRate {
            guard let v = parseBitRate(a) else { return fail("audio-bitrate", "'\(a)' is not a bit rate (e.g. 128k)") }
            s.audioBitRate = v
        }
        if upright { s.upright = true }
        if upscale { s.upscale = true }
        if let problem = s.problem { return .failure(problem) }
        return .success(s)
    }
}
