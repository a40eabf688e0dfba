import ClipFlowCore
import Foundation

/// Reads each file it receives (its container and stream headers, its keyframes' spacing; one
/// open, nothing decoded), reports what it found (`InspectSummary`, a `result` event per file),
/// refuses a file beyond `limits` or, when `copyable`, one that cannot be passed through as it
/// is (`BrowserCopy`), and passes the others on. The check a server makes before it spends any
/// decoding on an upload. Belongs to its stage queue.
public final class InspectStage: Stage {
    public let id: String
    public let limits: MediaLimits
    public let copyable: Bool
    public var inputTypes: Set<PortType> { [.clips] }
    public var outputType: PortType? { .clips }

    public static let kind = StageKind(
        name: "inspect", summary: "read each file's streams and keyframes (nothing decoded), report them, refuse what is beyond limits",
        inputs: [.clips], minInputs: 1, output: .clips,
        params: [
            ParamSpec("max-picture", .string, help: "the largest picture as displayed, WxH either way round"),
            ParamSpec("max-duration", .number(min: 0, max: nil), help: "the longest file, in seconds"),
            ParamSpec("max-frame-rate", .number(min: 0, max: nil), help: "the highest frame rate the container may state"),
            ParamSpec(
                "copyable", .boolean, default: .bool(false),
                help:
                    "refuse a file that cannot be passed through as it is to every browser "
                    + "(H.264 and AAC, starting with a keyframe, keyframes at most 4 s apart, not mirrored)")
        ],
        check: { p, path in
            if let s = p.string("max-picture"), let problem = PictureSize.problem(parsing: s) {
                return [PipelineIssue("\(path).max-picture", problem)]
            }
            return []
        },
        make: { id, p in
            var limits = MediaLimits()
            if let s = p.string("max-picture"), let size = PictureSize(parsing: s) { limits.maxPicture = size }
            if let d = p.double("max-duration") { limits.maxDuration = d }
            if let r = p.double("max-frame-rate") { limits.maxFrameRate = r }
            return InspectStage(id: id, limits: limits, copyable: p.bool("copyable") ?? false)
        })

    public init(id: String, limits: MediaLimits = MediaLimits(), copyable: Bool = false) {
        self.id = id
        self.limits = limits
        self.copyable = copyable
    }

    public func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        try checkPorts(inputs)
        return StreamParameters(port: .clips)
    }

    /// The result is reported before any refusal: whoever reads the events learns why.
    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        guard let path = item.path else { return context.push(item) }
        let (info, spacing) = try Transcoder.probeWithSpacing(path)
        let summary = InspectSummary(info, copyRefusal: BrowserCopy.refusal(info, spacing: spacing))
        context.emit(summary)
        if let refusal = limits.refusal(summary) { throw ClipFlowError.badInput("'\(path)': \(refusal)") }
        if copyable, let refusal = summary.copyRefusal { throw ClipFlowError.badInput("'\(path)' cannot be passed through: \(refusal)") }
        return context.push(item)
    }
}

/// What an inspect stage found in a file: its `result` event (fields `duration`, `width`,
/// `height`, `frame_rate`, `copy_refusal`), and what a server keeps of an upload (JSON, the
/// same names), so nothing probes it again.
public struct InspectSummary: Codable, Sendable, Equatable, StageResult {
    /// Seconds (0 when the container does not say).
    public var duration: Double
    /// Size as displayed.
    public var width: Int
    public var height: Int
    public var frameRate: Double?
    /// Why the file cannot be passed through as it is to every browser (nil: it can; `BrowserCopy`).
    public var copyRefusal: String?

    public init(duration: Double, width: Int, height: Int, frameRate: Double? = nil, copyRefusal: String? = nil) {
        self.duration = duration
        self.width = width
        self.height = height
        self.frameRate = frameRate
        self.copyRefusal = copyRefusal
    }

    init(_ info: SourceInfo, copyRefusal: String?) {
        self.init(
            duration: info.duration, width: info.video.displaySize.width, height: info.video.displaySize.height, frameRate: info.video.frameRate,
            copyRefusal: copyRefusal)
    }

    enum CodingKeys: String, CodingKey {
        case duration, width, height
        case frameRate = "frame_rate"
        case copyRefusal = "copy_refusal"
    }

    public var fields: [EventField] {
        var f = [EventField("duration", .number(duration)), EventField("width", .integer(Int64(width))), EventField("height", .integer(Int64(height)))]
        if let frameRate { f.append(EventField("frame_rate", .number(frameRate))) }
        if let copyRefusal { f.append(EventField("copy_refusal", .string(copyRefusal))) }
        return f
    }

    public init(fields: [EventField]) {
        self.init(
            duration: fields.double("duration"), width: fields.int("width"), height: fields.int("height"), frameRate: fields["frame_rate"]?.number,
            copyRefusal: fields["copy_refusal"]?.string)
    }
}

/// What a file may be, as displayed: its picture (either way round), its length and its frame
/// rate. The defaults are a server's (`clipflow serve --max-picture ...`).
public struct MediaLimits: Sendable, Equatable {
    /// The largest picture, as displayed, either way round (4096x4096: each side at most 4096).
    public var maxPicture = PictureSize(width: 4096, height: 4096)
    /// Seconds.
    public var maxDuration: Double = 4 * 3600
    /// Frames per second, as the container states it.
    public var maxFrameRate: Double = 120

    public init() {}

    /// Why a file `found` to be so is refused (nil: it is within the limits).
    public func refusal(_ found: InspectSummary) -> String? {
        let (long, short) = (max(found.width, found.height), min(found.width, found.height))
        let (maxLong, maxShort) = (max(maxPicture.width, maxPicture.height), min(maxPicture.width, maxPicture.height))
        if long > maxLong || short > maxShort {
            return "the picture is \(found.width)x\(found.height), above this server's limit of \(maxPicture.width)x\(maxPicture.height)"
        }
        if found.duration > maxDuration {
            return "the video lasts \(Int(found.duration)) s, above this server's limit of \(Int(maxDuration)) s"
        }
        if let rate = found.frameRate, rate > maxFrameRate {
            return "the video has \(String(format: "%.2f", rate)) frames per second, above this server's limit of \(String(format: "%g", maxFrameRate))"
        }
        return nil
    }
}

/// Whether a file can be passed through as it is (an HLS `copy`: its packets cut into fMP4
/// segments, nothing decoded) and play in every browser.
public enum BrowserCopy {
    /// The longest a copy may go without a keyframe: its segments start at its keyframes, and a
    /// player starts on a segment's first frame.
    public static let maxKeyframeGap: Double = 4

    /// Why `info` cannot be passed through (nil: it can). H.264 only: HEVC plays in Safari but in
    /// neither Chromium nor Firefox. A picture turned by a display matrix is copied with its
    /// matrix; a mirrored one is not.
    public static func refusal(_ info: SourceInfo, spacing: KeyframeSpacing) -> String? {
        if info.video.codec != "h264" { return "its video is \(info.video.codec), and only H.264 plays in every browser" }
        if let a = info.audio, a.codec != "aac" { return "its audio is \(a.codec), not AAC" }
        if info.video.mirrored { return "its pictures are mirrored by a display matrix" }
        if !spacing.startsWithKeyframe { return "its video does not start with a keyframe" }
        if spacing.longestGap > maxKeyframeGap {
            return "its keyframes are up to \(String(format: "%.1f", spacing.longestGap)) s apart (a copy needs at most \(Int(maxKeyframeGap)) s)"
        }
        return nil
    }
}
