import ClipFlowCore
import Foundation

/// Source with no output: uploads what the persistent upload queue holds (the entries named by
/// `ids`, or everything queued), at most `concurrency` at once, resumably, reporting each upload
/// as item events (see `StageUploadObserver`). A graceful stop pauses the running uploads at once;
/// they stay queued for the next run. At the end it emits a `result` (finished, paused, failed,
/// cancelled counts) and fails, naming each failed file, if any upload failed.
public final class UploadQueueStage: Stage {
    public let id: String
    public let directory: String
    public let concurrency: Int
    /// The entries to upload; empty: everything queued or running when the stage starts.
    public let ids: [String]
    private let makeUploader: @Sendable (UploadDestination, ResumeStore) throws -> FileUploader
    private var queue: UploadQueue?
    public var inputTypes: Set<PortType> { [] }
    public var outputType: PortType? { nil }

    public static let kind = StageKind(
        name: "upload-queue",
        summary: "source and sink: upload what the upload queue holds (the given ids, or everything queued), resumably; a stop pauses the uploads",
        output: nil,
        params: StageUploads.queueParams + [
            ParamSpec("ids", .stringList, help: "the uploads to run (see `clipflow upload list`; default: everything queued)")
        ],
        make: { id, p in
            UploadQueueStage(
                id: id, directory: StageUploads.directory(p), concurrency: StageUploads.concurrency(p), ids: p.strings("ids") ?? [])
        })

    public init(
        id: String, directory: String = UploadQueue.defaultDirectory, concurrency: Int = 2, ids: [String] = [],
        makeUploader: @escaping @Sendable (UploadDestination, ResumeStore) throws -> FileUploader = { try $0.makeUploader(store: $1) }
    ) {
        self.id = id
        self.directory = directory
        self.concurrency = concurrency
        self.ids = ids
        self.makeUploader = makeUploader
    }

    public func prepare(_ context: StageContext) throws {
        queue = try StageUploads.openQueue(directory, concurrency: concurrency, makeUploader: makeUploader, context)
    }

    public func produce(_ context: StageContext) throws {
        guard let q = queue, !context.stopRequested else { return }
        try StageUploads.run(q, ids: ids.isEmpty ? nil : Set(ids), directory: directory, context)
    }
}

/// What both upload stages do the same way: their queue parameters, open the queue, run it,
/// report how it ended.
enum StageUploads {
    /// The queue parameters both stage kinds take.
    static let queueParams = [
        ParamSpec("queue-dir", .path, help: "upload queue directory (default $XDG_STATE_HOME/clipflow/uploads)"),
        ParamSpec("concurrency", .integer(min: 1, max: 16), default: .number(2), help: "uploads at once")
    ]
    static func directory(_ p: StageParams) -> String { p.string("queue-dir") ?? UploadQueue.defaultDirectory }
    static func concurrency(_ p: StageParams) -> Int { p.int("concurrency") ?? 2 }

    /// The upload queue in `directory`, reporting to `context`'s events. A cancel, and a stop
    /// when `stopPauses()` says so when it comes, pauses what runs at once (it stays queued,
    /// resumable) and starts nothing more.
    static func openQueue(
        _ directory: String, concurrency: Int, makeUploader: @escaping @Sendable (UploadDestination, ResumeStore) throws -> FileUploader,
        _ context: StageContext, stopPauses: @escaping @Sendable () -> Bool = { true }
    ) throws -> UploadQueue {
        let halt = CancellationFlag()
        let queue: UploadQueue
        do {
            queue = try UploadQueue(
                directory: directory, concurrency: concurrency, observer: StageUploadObserver(context: context), cancellation: halt,
                makeUploader: makeUploader)
        } catch let e as UploadError {
            throw ClipFlowError.output(e.message)
        }
        let pause: @Sendable () -> Void = {
            halt.cancel()
            queue.stopAll()
        }
        context.onStop { if stopPauses() { pause() } }
        context.onCancel(pause)
        return queue
    }

    /// Runs the entries `ids` names (nil: everything queued or running now) through `queue`, then
    /// emits an `output` per finished upload (its watch page, else its URL, else its file) and a
    /// `result` with the counts (finished, paused, failed, cancelled). Stopped: the unfinished
    /// uploads stay queued, paused. Throws when an upload failed, naming each failed file with the
    /// command that retries it (messages already starting with the file name it once).
    static func run(_ queue: UploadQueue, ids: Set<String>?, directory: String, _ context: StageContext) throws {
        let ended: [QueueEntry]
        do {
            if let ids {
                ended = try queue.run(ids: ids)
            } else {
                let before = Set(try queue.list().filter { [.queued, .running].contains($0.state) }.map(\.id))
                ended = try queue.run().filter { before.contains($0.id) }
            }
        } catch let e as UploadError {
            throw e.asClipFlowError
        }
        for e in ended where e.state == .finished {
            context.emit(.output(path: e.result?.watchURL ?? e.result?.url ?? e.file))
        }
        func count(_ states: [QueueEntry.State]) -> Int { ended.filter { states.contains($0.state) }.count }
        context.emit(
            UploadQueueSummary(
                finished: count([.finished]), paused: count([.queued, .running, .paused]), failed: count([.failed]), cancelled: count([.cancelled]),
                failedIDs: ended.filter { $0.state == .failed }.map(\.id)))
        if context.stopRequested { return }
        let failed = ended.filter { $0.state == .failed }
        guard !failed.isEmpty else { return }
        let lines = failed.map { e -> String in
            let message = e.errorMessage ?? "upload failed"
            let text = message.hasPrefix(e.file + ":") ? message : "\(e.file): \(message)"
            return "\(text) (id \(e.id); `clipflow upload resume \(e.id) --queue \(directory)` retries)"
        }
        throw ClipFlowError.failure(lines.joined(separator: "\n"))
    }
}

/// How a queue's run ended: its `result` event.
public struct UploadQueueSummary: StageResult, Equatable {
    public var finished: Int
    /// Left in the queue (queued, running or paused when the run stopped).
    public var paused: Int
    public var failed: Int
    public var cancelled: Int
    /// The entries that failed.
    public var failedIDs: [String]

    public init(finished: Int, paused: Int, failed: Int, cancelled: Int, failedIDs: [String]) {
        self.finished = finished
        self.paused = paused
        self.failed = failed
        self.cancelled = cancelled
        self.failedIDs = failedIDs
    }

    public var fields: [EventField] {
        [
            EventField("finished", .integer(Int64(finished))), EventField("paused", .integer(Int64(paused))),
            EventField("failed", .integer(Int64(failed))), EventField("cancelled", .integer(Int64(cancelled))),
            EventField("failed_ids", .string(failedIDs.joined(separator: " ")))
        ]
    }

    public init(fields f: [EventField]) {
        self.init(
            finished: f.int("finished"), paused: f.int("paused"), failed: f.int("failed"), cancelled: f.int("cancelled"),
            failedIDs: f.text("failed_ids").split(separator: " ").map(String.init))
    }
}
