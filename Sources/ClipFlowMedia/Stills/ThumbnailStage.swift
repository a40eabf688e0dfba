import ClipFlowCore
import Foundation

/// Writes a JPEG cover of each video it receives: a representative (not black, blank or fading)
/// frame, upright, at display size or limited by `size`.
/// Belongs to its stage queue; a cancel reaches it through `cancelFlag` (thread-safe).
public final class ThumbnailStage: Stage {
    public let id: String
    public let output: String
    public let size: ThumbnailSize?
    /// An existing file at `output` is replaced (otherwise refused).
    public let overwrite: Bool
    private let cancelFlag = CancellationFlag()
    public var inputTypes: Set<PortType> { [.video] }
    public var outputType: PortType? { .image }

    public static let kind = StageKind(
        name: "thumbnail", summary: "write a JPEG cover of a representative frame, upright",
        inputs: [.video], minInputs: 1, maxInputs: 1, output: .image,
        params: [
            ParamSpec("output", .path, required: true, role: .writes, help: "the JPEG to write"),
            ParamSpec("size", .string, help: "limit: N pixels on the longer side, or WxH to fit within (default: display size)"),
            .overwrite
        ],
        check: { p, path in
            if let s = p.string("size"), ThumbnailSize(parsing: s) == nil {
                return [PipelineIssue("\(path).size", "expected N or WxH with positive numbers, got \"\(s)\"")]
            }
            return []
        },
        files: { p in StageFiles(writes: p.string("output").map { [FileField("output", $0)] } ?? []) },
        make: { id, p in
            ThumbnailStage(
                id: id, output: p.string("output")!, size: p.string("size").flatMap { ThumbnailSize(parsing: $0) }, overwrite: p.bool("overwrite") ?? false)
        })

    public init(id: String, output: String, size: ThumbnailSize? = nil, overwrite: Bool = false) {
        self.id = id
        self.output = output
        self.size = size
        self.overwrite = overwrite
    }

    public func prepare(_ context: StageContext) throws {
        context.onCancel { [cancelFlag] in cancelFlag.cancel() }
    }

    public func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        try checkPorts(inputs)
        return StreamParameters(port: .image, container: "jpeg")
    }

    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        guard let video = item.path else { return .ok }
        let dir = (output as NSString).deletingLastPathComponent
        if !dir.isEmpty { try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        let r = try Thumbnailer(path: video, sources: item.facts[FileOrigins.self]?.stretches ?? [], cancel: cancelFlag).write(
            to: URL(fileURLWithPath: output), limit: size, replacing: overwrite)
        context.emit(.output(path: output))
        context.emit(ThumbnailSummary(width: r.width, height: r.height, time: r.time))
        return context.push(.file(output, type: .image)) == .flushing ? .flushing : .ok
    }
}

/// The cover a thumbnail stage wrote: its `result` event.
public struct ThumbnailSummary: StageResult, Equatable {
    public var width: Int
    public var height: Int
    /// Seconds into the video of the picture chosen.
    public var time: Double

    public init(width: Int, height: Int, time: Double) {
        self.width = width
        self.height = height
        self.time = time
    }

    public var fields: [EventField] { [.init("width", .integer(Int64(width))), .init("height", .integer(Int64(height))), .init("time", .number(time))] }

    public init(fields f: [EventField]) { self.init(width: f.int("width"), height: f.int("height"), time: f.double("time")) }
}
