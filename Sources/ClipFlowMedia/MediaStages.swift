import ClipFlowCore
import Foundation

/// Stage kinds backed by FFmpeg: `merge` and `thumbnail`.
public enum MediaStages {
    public static func register(into r: StageRegistry) {
        r.register(MergeStage.kind)
        r.register(ThumbnailStage.kind)
    }
}

/// Forwards a merge's progress to the stage's events.
private struct StageProgress: ProgressReporter, @unchecked Sendable {
    let context: StageContext
    func report(_ e: ProgressEvent) { context.progress(e.completed, of: e.total, unit: e.unit) }
    func notice(_ message: String) { context.emit(.notice(message)) }
}

/// Joins every clip it receives (inputs in order, clips in arrival order) into one fast-start
/// MP4 at end of stream, then passes the file on. On a graceful stop before or during the merge
/// it writes nothing (a merge is all or nothing); the output never exists half-written.
public final class MergeStage: StoppableStage, @unchecked Sendable {
    public let id: String
    public let output: String
    public let rotate: Int
    private var clips: [String] = []
    private let cancelFlag = CancellationFlag()
    public var inputTypes: Set<PortType> { [.clips] }
    public var outputType: PortType? { .video }

    public static let kind = StageKind(
        name: "merge", summary: "join clips losslessly into one fast-start MP4 (sample-accurate audio joins)",
        inputs: [.clips], minInputs: 1, output: .video,
        params: [
            ParamSpec("output", .path, required: true, help: "the merged MP4 (written under a temporary name, renamed when complete)"),
            ParamSpec("rotate", .integerChoice([0, 90, 180, 270]), default: .number(0),
                      help: "turn the displayed picture clockwise (display matrix; pixels untouched)"),
        ],
        // Clips are small items (paths): a queue of 1024 never holds the files themselves.
        queue: LinkLimits(maxItems: 1024, maxBytes: 1 << 20),
        check: { p, path in
            guard let o = p.string("output") else { return [] }
            let dir = (o as NSString).deletingLastPathComponent
            let d = dir.isEmpty ? "." : dir
            var isDir: ObjCBool = false
            if FileManager.default.fileExists(atPath: d, isDirectory: &isDir), !isDir.boolValue {
                return [PipelineIssue("\(path).output", "'\(d)' is not a directory")]
            }
            if FileManager.default.fileExists(atPath: d), !FileManager.default.isWritableFile(atPath: d) {
                return [PipelineIssue("\(path).output", "cannot write into '\(d)' (permission denied)")]
            }
            return []
        },
        make: { id, p in MergeStage(id: id, output: p.string("output")!, rotate: p.int("rotate") ?? 0) })

    public init(id: String, output: String, rotate: Int = 0) {
        self.id = id
        self.output = output
        self.rotate = rotate
    }

    public func prepare(_ context: StageContext) throws {
        let dir = (output as NSString).deletingLastPathComponent
        if !dir.isEmpty {
            do { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) } catch {
                throw ClipFlowError.output("cannot create the directory of '\(output)': \(error.localizedDescription)")
            }
        }
    }

    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        if let p = item.path { clips.append(p) }
        return .ok
    }

    public func drain(_ context: StageContext) throws {
        if context.stopRequested {
            context.emit(.notice("stopped before merging; no output written"))
            return
        }
        guard !clips.isEmpty else { throw ClipFlowError.badInput("no clips reached the merge") }
        let merger = Merger(inputs: clips, options: MergeOptions(output: URL(fileURLWithPath: output), rotate: rotate),
                            progress: StageProgress(context: context), cancel: cancelFlag)
        do {
            let r = try merger.run()
            context.emit(.output(path: r.output.path))
            context.emit(.notice("merged \(r.clips) clips, \(r.videoFrames) video frames, \(r.bytes) bytes"))
        } catch let e as ClipFlowError where e.kind == .interrupted && context.stopRequested && !context.cancellation.isCancelled {
            context.emit(.notice("stopped during the merge; no output written"))
            return
        }
        context.push(.file(output, type: .video))
    }

    public func stop() { cancelFlag.cancel() }
    public func cancel() { cancelFlag.cancel() }
}

/// Writes a JPEG cover of each video it receives: a representative (not black, blank or fading)
/// frame, upright, at display size or limited by `size`.
public final class ThumbnailStage: Stage, @unchecked Sendable {
    public let id: String
    public let output: String
    public let size: ThumbnailSize?
    private let cancelFlag = CancellationFlag()
    public var inputTypes: Set<PortType> { [.video] }
    public var outputType: PortType? { .image }

    public static let kind = StageKind(
        name: "thumbnail", summary: "write a JPEG cover of a representative frame, upright",
        inputs: [.video], minInputs: 1, maxInputs: 1, output: .image,
        params: [
            ParamSpec("output", .path, required: true, help: "the JPEG to write"),
            ParamSpec("size", .string, help: "limit: N pixels on the longer side, or WxH to fit within (default: display size)"),
        ],
        check: { p, path in
            if let s = p.string("size"), ThumbnailSize(parsing: s) == nil {
                return [PipelineIssue("\(path).size", "expected N or WxH with positive numbers, got \"\(s)\"")]
            }
            return []
        },
        make: { id, p in
            ThumbnailStage(id: id, output: p.string("output")!, size: p.string("size").flatMap { ThumbnailSize(parsing: $0) })
        })

    public init(id: String, output: String, size: ThumbnailSize? = nil) {
        self.id = id
        self.output = output
        self.size = size
    }

    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        guard let video = item.path else { return .ok }
        let dir = (output as NSString).deletingLastPathComponent
        if !dir.isEmpty { try? FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        let r = try Thumbnailer(path: video, cancel: cancelFlag).write(to: URL(fileURLWithPath: output), limit: size)
        context.emit(.output(path: output))
        context.emit(.notice("cover \(r.width)x\(r.height) from \(String(format: "%.2f", r.time)) s"))
        return context.push(.file(output, type: .image)) == .flushing ? .flushing : .ok
    }

    public func cancel() { cancelFlag.cancel() }
}
