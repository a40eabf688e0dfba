import Foundation

/// A time base or rate as a fraction (`num / den`).
public struct Rational: Sendable, Hashable, CustomStringConvertible {
    public var num: Int
    public var den: Int
    public init(_ num: Int, _ den: Int) {
        self.num = num
        self.den = den
    }
    /// `ticks` of this time base, in seconds.
    public func seconds(_ ticks: Int64) -> Double { den == 0 ? 0 : Double(ticks) * Double(num) / Double(den) }
    public var description: String { "\(num)/\(den)" }
}

/// Parameters of a video stream.
public struct VideoParameters: Sendable, Equatable {
    /// "rawvideo" for raw pictures, else the codec's name ("h264", "mjpeg").
    public var codec: String
    public var width: Int
    public var height: Int
    /// Layout of raw pictures (nil for a compressed stream).
    public var pixelFormat: PixelFormat?
    /// Nominal frames per second, if the source has a rate.
    public var frameRate: Double?
    /// Unit of the stream's timestamps (nil: seconds, as `VideoFrame.time`).
    public var timeBase: Rational?
    /// Degrees the picture is turned clockwise when displayed (0, 90, 180, 270).
    public var rotation: Int

    public init(
        codec: String = "rawvideo", width: Int, height: Int, pixelFormat: PixelFormat? = nil, frameRate: Double? = nil,
        timeBase: Rational? = nil, rotation: Int = 0
    ) {
        self.codec = codec
        self.width = width
        self.height = height
        self.pixelFormat = pixelFormat
        self.frameRate = frameRate
        self.timeBase = timeBase
        self.rotation = rotation
    }
}

/// Parameters of an audio stream.
public struct AudioParameters: Sendable, Equatable {
    /// "pcm_f32" for raw interleaved 32-bit float samples (`AudioChunk`), else the codec's name ("aac").
    public var codec: String
    public var sampleRate: Int
    public var channels: Int
    /// The channel layout's name ("mono", "stereo"), if known.
    public var channelLayout: String?
    /// Unit of the stream's timestamps (nil: samples at `sampleRate`).
    public var timeBase: Rational?

    public init(codec: String = "pcm_f32", sampleRate: Int, channels: Int, channelLayout: String? = nil, timeBase: Rational? = nil) {
        self.codec = codec
        self.sampleRate = sampleRate
        self.channels = channels
        self.channelLayout = channelLayout ?? (channels == 1 ? "mono" : channels == 2 ? "stereo" : nil)
        self.timeBase = timeBase
    }
}

/// What a link carries, as its producer announces it (GStreamer's caps): the port type, and for
/// media its streams' parameters; for files, their container. The runner hands each stage what
/// its producers announced before any data moves (`Stage.negotiate`), and a producer whose
/// parameters change mid-stream pushes `Item.parameters(_:)` in band, ahead of the data that has
/// them. `nil` fields are "not known", never "anything".
public struct StreamParameters: Sendable, Equatable, CustomStringConvertible {
    public var port: PortType
    /// File streams: the container ("mp4", "jpeg"), if known.
    public var container: String?
    public var video: VideoParameters?
    public var audio: AudioParameters?
    /// How long the stream lasts (seconds), if known ahead: a decode of files knows it; a live
    /// source does not. A consumer reports its progress against it.
    public var duration: Double?

    public init(port: PortType, container: String? = nil, video: VideoParameters? = nil, audio: AudioParameters? = nil, duration: Double? = nil) {
        self.port = port
        self.container = container
        self.video = video
        self.audio = audio
        self.duration = duration
    }

    /// One line, for messages: "frames: video rawvideo 1280x720 yuv420p 30 fps, audio pcm_f32 48000 Hz x1".
    public var description: String {
        var parts: [String] = []
        if let c = container { parts.append(c) }
        if let v = video {
            var s = "video \(v.codec) \(v.width)x\(v.height)"
            if let f = v.pixelFormat { s += " \(f.rawValue)" }
            if let r = v.frameRate { s += " \(r == r.rounded() ? String(Int(r)) : String(format: "%.2f", r)) fps" }
            if v.rotation != 0 { s += " rotated \(v.rotation)" }
            parts.append(s)
        }
        if let a = audio { parts.append("audio \(a.codec) \(a.sampleRate) Hz x\(a.channels)") }
        return parts.isEmpty ? port.rawValue : "\(port.rawValue): " + parts.joined(separator: ", ")
    }
}

/// A stage refusing what one of its inputs carries (`Stage.negotiate`, or an in-band change):
/// which input, which parameter, and why. The runner names both stages in the message.
public struct StreamMismatch: Error, Sendable, Equatable {
    public var input: Int
    /// The parameter, as a person names it ("pixel format", "port type").
    public var parameter: String
    /// What was offered and what the stage takes instead.
    public var reason: String
    public init(input: Int, parameter: String, reason: String) {
        self.input = input
        self.parameter = parameter
        self.reason = reason
    }
}
