internal import CClipFlowV4L2
import ClipFlowCore
import ClipFlowMedia
import Foundation

// What a camera offers, what is asked of it and what it agreed to: plain values, no kernel calls.

/// Pixel formats clipflow can read from a camera.
public enum CameraFormat: String, Sendable, CaseIterable {
    case yuyv, nv12, yuv420, mjpeg

    /// The V4L2 pixel format code (package: the emulated camera answers with the same codes).
    package var fourcc: UInt32 {
        switch self {
        case .yuyv: return cf_V4L2_PIX_FMT_YUYV
        case .nv12: return cf_V4L2_PIX_FMT_NV12
        case .yuv420: return cf_V4L2_PIX_FMT_YUV420
        case .mjpeg: return cf_V4L2_PIX_FMT_MJPEG
        }
    }
    init?(fourcc: UInt32) {
        guard let f = Self.allCases.first(where: { $0.fourcc == fourcc }) else { return nil }
        self = f
    }
    /// The layout of the `VideoFrame`s delivered (MJPEG is decoded to yuv420p).
    public var output: PixelFormat {
        switch self {
        case .yuyv: return .yuyv422
        case .nv12: return .nv12
        case .yuv420, .mjpeg: return .yuv420p
        }
    }
}

/// A discrete frame size and the frame rates offered at it.
public struct CameraSize: Sendable, Equatable {
    public var width: Int
    public var height: Int
    /// Frames per second, fastest first (for a continuous range: its two ends).
    public var frameRates: [Double]
    public init(width: Int, height: Int, frameRates: [Double]) {
        self.width = width
        self.height = height
        self.frameRates = frameRates
    }
}

/// Sizes a camera accepts in steps (V4L2_FRMSIZE_TYPE_STEPWISE/CONTINUOUS).
public struct CameraSizeRange: Sendable, Equatable {
    public var minWidth, maxWidth, stepWidth, minHeight, maxHeight, stepHeight: Int
    public func contains(width: Int, height: Int) -> Bool {
        (minWidth...maxWidth).contains(width) && (minHeight...maxHeight).contains(height)
            && (width - minWidth) % max(stepWidth, 1) == 0 && (height - minHeight) % max(stepHeight, 1) == 0
    }
}

/// One pixel format a camera offers (VIDIOC_ENUM_FMT) with its sizes and rates.
public struct CameraFormatInfo: Sendable, Equatable {
    /// The four-character code, e.g. "YUYV", "MJPG".
    public var fourcc: String
    /// The format as clipflow knows it (nil: one clipflow cannot read).
    public var format: CameraFormat?
    public var description: String
    public var compressed: Bool
    public var sizes: [CameraSize]
    public var sizeRange: CameraSizeRange?

    public func offers(width: Int, height: Int) -> Bool {
        sizes.contains { $0.width == width && $0.height == height } || sizeRange?.contains(width: width, height: height) == true
    }
    /// Whether `fps` is offered at that size (unknown rates count as offered).
    func offers(width: Int, height: Int, fps: Double) -> Bool {
        guard let s = sizes.first(where: { $0.width == width && $0.height == height }) else { return offers(width: width, height: height) }
        return s.frameRates.isEmpty || s.frameRates.contains { abs($0 - fps) < 0.01 }
    }
    /// "YUYV: 320x240 (60, 30, 15 fps), 640x480 (...)".
    public var summary: String {
        var parts = sizes.map { s in "\(s.width)x\(s.height)" + (s.frameRates.isEmpty ? "" : " (\(s.frameRates.map(formatRate).joined(separator: ", ")) fps)") }
        if let r = sizeRange { parts.append("\(r.minWidth)x\(r.minHeight) to \(r.maxWidth)x\(r.maxHeight) in steps of \(r.stepWidth)x\(r.stepHeight)") }
        return "\(fourcc)" + (format.map { " [\($0.rawValue)]" } ?? "") + ": " + (parts.isEmpty ? "no sizes listed" : parts.joined(separator: ", "))
    }
}

func formatRate(_ r: Double) -> String { r == r.rounded() ? String(Int(r)) : String(format: "%.2f", r) }

/// What to ask a camera for. `format` nil is "auto": the best raw format offering the size
/// (yuv420, then nv12, then yuyv), else MJPEG.
public struct CaptureRequest: Sendable, Equatable {
    public var width: Int
    public var height: Int
    public var fps: Double
    public var format: CameraFormat?
    public init(width: Int = 1280, height: Int = 720, fps: Double = 30, format: CameraFormat? = nil) {
        self.width = width
        self.height = height
        self.fps = fps
        self.format = format
    }
}

/// What the camera agreed to (after the driver adjusted the request).
public struct NegotiatedFormat: Sendable, Equatable {
    public var format: CameraFormat
    public var width: Int
    public var height: Int
    /// Frames per second the driver reports (0: it does not say).
    public var fps: Double
    public var requested: CaptureRequest
    public var sizeAdjusted: Bool { width != requested.width || height != requested.height }
    /// One line for a notice: "/dev/video0: MJPEG 1280x720 at 30 fps (asked 1000x700)".
    public var summary: String {
        var s = "\(format.rawValue) \(width)x\(height) at \(fps > 0 ? formatRate(fps) : "an unknown rate of") fps"
        if sizeAdjusted { s += " (asked for \(requested.width)x\(requested.height); the camera adjusted it)" }
        if fps > 0, abs(fps - requested.fps) > 0.01 { s += " (asked for \(formatRate(requested.fps)) fps)" }
        return s
    }
}

/// A camera as `clipflow devices` lists it.
public struct CameraInfo: Sendable, Equatable {
    public var path: String
    public var card: String
    public var driver: String
    public var busInfo: String
    public var formats: [CameraFormatInfo]
    /// Why the device could not be queried (permission denied, busy, ...), or nil.
    public var problem: String?
    public var description: String {
        if let problem { return "\(path): \(problem)" }
        return (["\(path): \(card) (driver \(driver), \(busInfo))"] + formats.map { "  " + $0.summary }).joined(separator: "\n")
    }
}
