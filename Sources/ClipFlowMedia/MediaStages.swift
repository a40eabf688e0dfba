import ClipFlowCore
import Foundation

/// Stage kinds backed by FFmpeg: `merge`, `transcode`, `decode`, `hls`, `thumbnail`, `record` and `inspect`.
public enum MediaStages {
    public static func register(into r: StageRegistry) {
        r.register(MergeStage.kind)
        r.register(TranscodeStage.kind)
        r.register(DecodeStage.kind)
        r.register(HLSStage.kind)
        r.register(ThumbnailStage.kind)
        r.register(RecordStage.kind)
        r.register(InspectStage.kind)
    }
}

/// Creates the folder an output goes in (a pipeline's stages do; the commands check it exists).
func createFolder(of output: String) throws {
    let dir = (output as NSString).deletingLastPathComponent
    guard !dir.isEmpty else { return }
    do { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) } catch {
        throw ClipFlowError.output("cannot create the directory of '\(output)'", writing: error)
    }
}

/// Forwards a merge's progress to the stage's events.
struct StageProgress: ProgressReporter {
    let context: StageContext
    func report(_ e: ProgressEvent) { context.progress(e.completed, of: e.total, unit: e.unit, speed: e.speed) }
    func notice(_ message: String) { context.emit(.notice(message)) }
}
