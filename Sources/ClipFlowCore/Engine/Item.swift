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
}

/// One unit travelling over a link.
public struct Item: Sendable {
    public enum Payload: Sendable, Equatable {
        /// A file on disk (a clip, a merged video, a cover).
        case file(path: String)
        /// An opaque buffer of `bytes` bytes (synthetic sources, raw frames).
        case buffer(sequence: Int64, bytes: Int)
    }
    public var payload: Payload
    public var type: PortType
    /// Size the link accounts for (a file item counts its path, not its contents).
    public var bytes: Int64
    /// Presentation time in seconds, for links limited by time.
    public var time: Double?
    /// Items were dropped just before this one (set by the link).
    public var discontinuity = false
    /// Keeps a buffer's memory alive while it is queued (benchmarks measure that it is bounded).
    public var storage: Data?
    /// A raw picture or audio run (port type `frames`); released with the item.
    public var media: MediaFrame?

    public init(payload: Payload, type: PortType, bytes: Int64 = 0, time: Double? = nil, storage: Data? = nil) {
        self.payload = payload
        self.type = type
        self.bytes = bytes
        self.time = time
        self.storage = storage
    }

    public static func file(_ path: String, type: PortType) -> Item {
        Item(payload: .file(path: path), type: type, bytes: Int64(path.utf8.count))
    }

    public var path: String? {
        if case .file(let p) = payload { return p }
        return nil
    }
}
