import Foundation

// Raw media travelling between a capture source and an encoder (port type `frames`). Plain data:
// the core knows no codec library. Frames are immutable once pushed; the link that carries one
// owns it until the consumer takes it (an ownership transfer between stage queues).

/// Pixel layouts a source can deliver. Planes are stored one after another, without padding.
public enum PixelFormat: String, Sendable, CaseIterable, Codable {
    /// 8-bit Y plane, then U and V at half width and half height.
    case yuv420p
    /// 8-bit Y plane, then one interleaved UV plane at half width and half height.
    case nv12
    /// Packed 4:2:2, Y0 U Y1 V (V4L2 YUYV).
    case yuyv422
    /// One compressed JPEG picture (V4L2 MJPEG).
    case mjpeg

    /// Bytes of one uncompressed picture (nil for compressed formats).
    public func frameBytes(width: Int, height: Int) -> Int? {
        switch self {
        case .yuv420p, .nv12: return width * height + 2 * ((width + 1) / 2) * ((height + 1) / 2)
        case .yuyv422: return ((width + 1) / 2) * 4 * height
        case .mjpeg: return nil
        }
    }
}

/// One picture (immutable, hence checked `Sendable`). `time` is seconds since the stream started (from the source's clock or the
/// kernel's buffer timestamp); `sequence` counts frames the source delivered, so a gap means a
/// frame was lost before it reached us.
public final class VideoFrame: Sendable {
    public let width: Int
    public let height: Int
    public let format: PixelFormat
    public let data: Data
    public let time: Double
    public let sequence: Int64
    /// The rate the source was set to (frames per second), if it has one. Encoders use it, not
    /// measured intervals, so every fragment of a recording gets identical parameters.
    public let nominalRate: Double?
    /// When the picture was captured on the capture clock (CLOCK_MONOTONIC, seconds), if the
    /// source knows it: a live camera's buffer timestamp. A recorder places live audio
    /// (`AudioChunk.clockTime`) against the pictures by it; `time` stays relative to the stream.
    public let clockTime: Double?
    /// How long the picture shows (seconds), when the source knows it: a decoded file's picture
    /// (the last one's too, which no next picture ends). A live picture shows until the next.
    public let duration: Double?

    public init(
        width: Int, height: Int, format: PixelFormat, data: Data, time: Double, sequence: Int64, nominalRate: Double? = nil,
        clockTime: Double? = nil, duration: Double? = nil
    ) {
        self.width = width
        self.height = height
        self.format = format
        self.data = data
        self.time = time
        self.sequence = sequence
        self.nominalRate = nominalRate
        self.clockTime = clockTime
        self.duration = duration
    }
}

/// A run of interleaved 32-bit float samples (immutable, hence checked `Sendable`). `firstSample` is the index of the first sample
/// frame since the stream started (time = firstSample / sampleRate).
///
/// A live device's chunks also carry `clockTime`: when their first sample was captured, measured
/// on the capture clock (CLOCK_MONOTONIC, as `VideoFrame.clockTime`). Such a measure jitters
/// (late by up to tens of milliseconds), and the device's sample clock runs fast or slow against
/// the capture clock, so `firstSample` then counts the samples the device delivered (gaps it
/// lost are not in it) and the recorder places them (`LiveAudioAligner`). `readTime`, when
/// known, is when the chunk was read from the device on the same clock: its last sample was
/// captured before then, whatever a sound server's latency estimate says.
public final class AudioChunk: Sendable {
    public let sampleRate: Int
    public let channels: Int
    public let samples: [Float]
    public let firstSample: Int64
    public let clockTime: Double?
    public let readTime: Double?

    public init(sampleRate: Int, channels: Int, samples: [Float], firstSample: Int64, clockTime: Double? = nil, readTime: Double? = nil) {
        self.sampleRate = sampleRate
        self.channels = channels
        self.samples = samples
        self.firstSample = firstSample
        self.clockTime = clockTime
        self.readTime = readTime
    }
    public var frameCount: Int { channels > 0 ? samples.count / channels : 0 }
    public var time: Double { Double(firstSample) / Double(sampleRate) }
}

/// A raw picture or audio run (port type `frames`), as `FragmentRecorder` takes them.
public enum MediaFrame: Sendable {
    case video(VideoFrame)
    case audio(AudioChunk)

    public var time: Double {
        switch self {
        case .video(let v): return v.time
        case .audio(let a): return a.time
        }
    }
}

extension Item {
    /// An item carrying one raw frame (port type `frames`).
    public static func frame(_ f: MediaFrame) -> Item {
        switch f {
        case .video(let v): return Item(.video(v), type: .frames)
        case .audio(let a): return Item(.audio(a), type: .frames)
        }
    }

    /// The raw picture or audio run this item carries, if any.
    public var media: MediaFrame? {
        switch payload {
        case .video(let v): return .video(v)
        case .audio(let a): return .audio(a)
        default: return nil
        }
    }
}
