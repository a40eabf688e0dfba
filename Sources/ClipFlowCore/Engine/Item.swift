import Foundation

/// The kind of data on a port, checked when a pipeline is validated.
public enum PortType: String, Sendable, CaseIterable, Codable {
    /// Clip fragments to be joined (MP4/MOV files).
    case clips
    /// A finished video file.
    case video
    /// An image file (cover, contact sheet).
    case image
    /// Raw media buffers (synthetic data).
    case buffers
    /// Raw pictures and audio samples from a capture source (see `MediaFrame`).
    case frames
    /// One rendition of an HLS ladder, written into the ladder's folder and described in
    /// process (`Item.Payload.value`).
    case rendition
}

/// One compressed packet of a stream, as plain data: the core knows no codec library. Times are
/// in `timeBase` units of the stream `stream` (the producer's stream index).
public struct EncodedPacket: Sendable {
    public var data: Data
    public var pts: Int64?
    public var dts: Int64?
    public var duration: Int64
    public var keyframe: Bool
    public var timeBase: Rational
    public var stream: Int

    public init(data: Data, pts: Int64?, dts: Int64?, duration: Int64, keyframe: Bool, timeBase: Rational, stream: Int = 0) {
        self.data = data
        self.pts = pts
        self.dts = dts
        self.duration = duration
        self.keyframe = keyframe
        self.timeBase = timeBase
        self.stream = stream
    }

    /// Presentation time in seconds, if the packet has one.
    public var time: Double? { pts.map { timeBase.seconds($0) } }
}

/// A stretch of a file that came from another file (a merged video's clips; see `FileOrigins`).
public struct FileOrigin: Sendable, Equatable {
    public var path: String
    /// Where the stretch starts and ends, in seconds from the start of the file made from it.
    public var start: Double
    public var end: Double
    public init(path: String, start: Double, end: Double) { self.path = path; self.start = start; self.end = end }
}

/// One unit travelling over a link: a typed payload and the port type it travels as.
///
/// A link accounts for `bytes` and `time`, both derived from the payload: a raw picture counts
/// its pixels, audio its samples, a packet or buffer its bytes, and a file its size on disk
/// (so a byte limit bounds the data waiting downstream); a change of stream parameters counts 0.
public struct Item: Sendable {
    public enum Payload: Sendable {
        /// A file on disk (a clip, a merged video, a cover) of `size` bytes.
        case file(path: String, size: Int64)
        /// A compressed packet.
        case packet(EncodedPacket)
        /// A raw picture.
        case video(VideoFrame)
        /// A run of raw audio samples.
        case audio(AudioChunk)
        /// An opaque buffer (synthetic sources), numbered from 0, time-stamped when live.
        case buffer(sequence: Int64, data: Data, time: Double?)
        /// The stream's parameters changed: what follows on this link has these (in band, in
        /// order with the data; see `StreamParameters`).
        case parameters(StreamParameters)
        /// A description a producer hands a consumer of its own family, in process (an HLS
        /// rendition's segments to the ladder that lists them); the core does not look inside.
        case value(any Sendable)
    }

    public var payload: Payload
    public var type: PortType
    /// Items were dropped just before this one (set by the link).
    public var discontinuity = false
    /// What stages learned about the payload, handed on with it (see `ItemFact`).
    public var facts = ItemFacts()

    public init(_ payload: Payload, type: PortType) {
        self.payload = payload
        self.type = type
    }

    /// Size the link accounts for (see the type's contract).
    public var bytes: Int64 {
        switch payload {
        case .file(_, let size): return size
        case .packet(let p): return Int64(p.data.count)
        case .video(let v): return Int64(v.data.count)
        case .audio(let a): return Int64(a.samples.count * MemoryLayout<Float>.size)
        case .buffer(_, let data, _): return Int64(data.count)
        case .parameters, .value: return 0
        }
    }

    /// Presentation time in seconds, for links limited by time (nil: untimed).
    public var time: Double? {
        switch payload {
        case .file, .parameters, .value: return nil
        case .packet(let p): return p.time
        case .video(let v): return v.time
        case .audio(let a): return a.time
        case .buffer(_, _, let t): return t
        }
    }

    /// A file item, accounted by its size on disk (0 if it cannot be read now: the consumer
    /// reports that, naming the file).
    public static func file(_ path: String, type: PortType) -> Item {
        let size = ((try? FileManager.default.attributesOfItem(atPath: path))?[.size] as? NSNumber)?.int64Value ?? 0
        return Item(.file(path: path, size: size), type: type)
    }

    /// An in-band change of stream parameters, travelling as `p.port`.
    public static func parameters(_ p: StreamParameters) -> Item {
        Item(.parameters(p), type: p.port)
    }

    public var path: String? {
        if case .file(let p, _) = payload { return p }
        return nil
    }

    /// The new stream parameters, if this item announces them.
    public var parameters: StreamParameters? {
        if case .parameters(let p) = payload { return p }
        return nil
    }
}
