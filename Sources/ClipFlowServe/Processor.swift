import ClipFlowCore
import ClipFlowMedia
import Foundation
import Synchronization

/// Turns uploaded videos into published HLS ladders, at most `workers` at once, from the job
/// queue in the database (so a job survives a restart; one interrupted by a crash runs again).
///
/// A `ladder` video is probed (a file FFmpeg cannot read as a video ends in `error` with the
/// reason), then published twice: first its smallest rendition alone (`viewable`: it plays while
/// the rest is made), then the whole feed ladder (`ready`); a `copy` video is remuxed only. Each
/// ladder is written into its own new folder under `DATA/media/ID` and published by switching the
/// video's `published` folder in the database; older folders are removed after the switch.
/// Thread-safe; `Sendable`.
final class Processor: Sendable {
    let database: any ServeStore
    let uploads: UploadFiles
    let media: URL
    let workers: Int
    /// This server, as jobs name their owner.
    let owner: String
    /// Seconds without a heartbeat after which a running job is taken to be cut short by a crash.
    let lease: Double
    /// Only this server uses the store (SQLite, behind the data folder's lock): a job found running
    /// when it starts was cut short, whatever its heartbeat says.
    let alone: Bool
    /// Media seconds decoded / total, per video being processed (for `GET /videos`).
    private let progress = Mutex<[Int64: Double]>([:])
    private let work = DispatchQueue(label: "clipflow.serve.processing", attributes: .concurrent)

    init(database: any ServeStore, uploads: UploadFiles, media: URL, workers: Int, lease: Double = 60, alone: Bool) throws {
        self.database = database
        self.uploads = uploads
        self.media = media
        self.workers = max(1, workers)
        self.lease = lease
        self.alone = alone
        owner = "\(ProcessInfo.processInfo.hostName)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        do { try FileManager.default.createDirectory(at: media, withIntermediateDirectories: true) } catch {
            throw ClipFlowError.output("cannot create '\(media.path)': \(error.localizedDescription)")
        }
    }

    func progress(of video: Int64) -> Double? { progress.withLock { $0[video] } }

    /// Runs the workers until cancelled. Jobs a crash left running are queued again: at once when
    /// this server is alone, else once their heartbeat is older than `lease` (checked all along).
    func run() async {
        let now: @Sendable () -> Double = { Date().timeIntervalSince1970 }
        if alone { _ = try? await database.requeueStale(before: .infinity) }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                while !Task.isCancelled {
                    _ = try? await self.database.requeueStale(before: now() - self.lease)
                    try? await Task.sleep(for: .seconds(self.lease / 4))
                }
            }
            for _ in 0..<workers {
                group.addTask {
                    while !Task.isCancelled {
                        if let job = try? await self.database.takeJob(owner: self.owner, now: now()) {
                            let beating = Task {
                                while !Task.isCancelled {
                                    try? await Task.sleep(for: .seconds(self.lease / 4))
                                    try? await self.database.heartbeat(job: job.id!, now: now())
                                }
                            }
                            await self.process(job)
                            beating.cancel()
                        } else {
                            try? await Task.sleep(for: .milliseconds(250))
                        }
                    }
                }
            }
        }
    }

    private func process(_ job: JobRow) async {
        guard var video = try? await database.video(job.videoID) else { return }
        do {
            guard let upload = video.uploadID else { throw ClipFlowError.badInput("the video has no upload") }
            let input = uploads.path(upload)
            let folder = media.appendingPathComponent(String(job.videoID))
            try? FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            removeUnpublished(in: folder, keeping: video.published)
            let info = try await work.perform { try Transcoder.probe(input) }
            video.duration = info.duration
            try await database.update(video)
            let attempt = "a\(job.attempts)"
            switch video.mode {
            case .copy:
                try await ladder(video.id!, input, LadderChoice(rungs: [], copy: true), into: folder.appendingPathComponent("\(attempt)-copy"))
                try await publish(&video, "\(attempt)-copy", status: .ready, renditions: ["copy"])
            case .ladder:
                let short = min(info.video.displaySize.width, info.video.displaySize.height)
                let rungs = LadderRung.standard.filter { $0.height <= short }
                let smallest = LadderRung.standard.last!
                try await ladder(video.id!, input, LadderChoice(rungs: [smallest]), into: folder.appendingPathComponent("\(attempt)-first"))
                if rungs.count > 1 {
                    try await publish(&video, "\(attempt)-first", status: .viewable, renditions: [smallest.name])
                    try await ladder(video.id!, input, LadderChoice(rungs: rungs), into: folder.appendingPathComponent("\(attempt)-full"))
                    try await publish(&video, "\(attempt)-full", status: .ready, renditions: rungs.map(\.name))
                } else {
                    try await publish(&video, "\(attempt)-first", status: .ready, renditions: [smallest.name])
                }
            }
            removeUnpublished(in: folder, keeping: video.published)
            try await database.finishJob(job.id!, failed: false)
        } catch {
            video.status = .error
            video.error = Self.reason(error)
            try? await database.update(video)
            try? await database.finishJob(job.id!, failed: true)
        }
        _ = progress.withLock { $0.removeValue(forKey: job.videoID) }
    }

    private func publish(_ video: inout VideoRow, _ folder: String, status: VideoRow.Status, renditions: [String]) async throws {
        video.published = folder
        video.status = status
        video.renditions = renditions.joined(separator: ",")
        try await database.update(video)
    }

    /// One ladder of `input` (feed profile) into `output`, off Swift's cooperative threads.
    private func ladder(_ id: Int64, _ input: String, _ choice: LadderChoice, into output: URL) async throws {
        let sink = ProgressSink { [self] fraction in self.progress.withLock { $0[id] = fraction } }
        _ = try await work.perform {
            try HLSLadder(output: output.path, ladder: choice, schedule: .feed).run(inputs: [input], events: sink)
        }
    }

    /// Everything in a video's media folder but the published ladder (earlier or unfinished ones).
    private func removeUnpublished(in folder: URL, keeping published: String) {
        let fm = FileManager.default
        for name in (try? fm.contentsOfDirectory(atPath: folder.path)) ?? [] where name != published {
            try? fm.removeItem(at: folder.appendingPathComponent(name))
        }
    }

    /// Why processing failed, for the video's `error` (no paths of the server's data folder).
    static func reason(_ error: Error) -> String {
        let text = (error as? ClipFlowError)?.message ?? "\(error)"
        return text.replacingOccurrences(of: #"'[^']*/uploads/[0-9a-f]{32}'"#, with: "the upload", options: .regularExpression)
    }
}

/// Decode progress of a ladder run, as a fraction, to a callback. Thread-safe.
private struct ProgressSink: EventSink {
    let report: @Sendable (Double) -> Void
    func emit(_ event: PipelineEvent) {
        if case .progress(let done, let total, _, _) = event.kind, total > 0, event.stage.hasSuffix(".decode") {
            report(min(1, Double(done) / Double(total)))
        }
    }
}
