import ClipFlowCore
import ClipFlowMedia
import Foundation
import Synchronization

/// Turns uploaded videos into published HLS ladders, at most `workers` at once, from the job
/// queue in the database (so a job survives a restart; one interrupted by a crash runs again).
///
/// Every step that reads the upload runs in a worker process (`WorkerProcess`), never in the
/// server: a `ladder` video is probed (a file FFmpeg cannot read as a video, or one beyond
/// `limits`, ends in `error` with the reason), then published twice: first its smallest rendition
/// alone (`viewable`: it plays while the rest is made), then the whole feed ladder (`ready`); a
/// `copy` video is remuxed only. Each ladder is written into its own new folder under
/// `DATA/media/ID`, named afresh by each try (`aN-XXXXXXXX-first`, never the name of a folder the
/// video has), and published by switching the video's `published` folder in the database; older
/// folders are removed after the switch.
///
/// A worker that dies (a signal, an unexpected exit) sends its job back to the queue; a job
/// started `limits.attempts` times (counted in the database, so restarts of the server count
/// too) ends in `error` with the reason. A full disk sends the job back without counting, and
/// the worker waits before it takes another. `stop(video:)` holds a video's job until
/// `release(video:)` (its worker is killed, no other step starts, and the job goes back to the
/// queue without counting, to run again once released). Thread-safe; `Sendable`.
final class Processor: Sendable {
    let database: any ServeStore
    let uploads: UploadFiles
    let media: URL
    let workers: Int
    let limits: ProcessingLimits
    /// This server, as jobs name their owner.
    let owner: String
    /// Seconds without a heartbeat after which a running job is taken to be cut short by a crash.
    let lease: Double
    /// Only this server uses the store (SQLite, behind the data folder's lock): a job found running
    /// when it starts was cut short, whatever its heartbeat says.
    let alone: Bool
    /// How a failure's reason is shown without the data folder (`media`'s parent).
    let dataPaths: DataPaths
    /// Told of every job's state changes (the server's log and metrics).
    let observer: any ProcessingObserver
    /// Seconds a worker waits after a job found the disk full.
    static let diskFullPause: Double = 5
    /// Seconds a worker waits after handing back the job of a stopped video (being removed).
    static let stoppedPause: Double = 0.25
    /// Media seconds decoded / total, per video being processed (for `GET /videos`).
    private let progress = Mutex<[Int64: Double]>([:])
    private let jobs = Mutex(RunningJobs())

    /// The jobs this server runs now: by video, the worker process of the step in progress.
    private struct RunningJobs {
        var active: Set<Int64> = []
        var workers: [Int64: Int32] = [:]
        /// Videos whose jobs must stop (being removed).
        var stopped: Set<Int64> = []

        /// Takes `video`'s job in, unless its video is stopped or its job runs here already.
        mutating func admit(_ video: Int64) -> Admission {
            if stopped.contains(video) { return .stopped }
            return active.insert(video).inserted ? .admitted : .runningAlready
        }
    }

    private enum Admission { case admitted, runningAlready, stopped }

    /// Why a step did not end with a result.
    private enum StepFault: Error {
        /// The worker died (the reason names the signal or status).
        case died(String)
        case diskFull(String)
        /// The server is stopping, or the video is being removed.
        case stopped
    }

    init(
        database: any ServeStore, uploads: UploadFiles, media: URL, workers: Int, limits: ProcessingLimits = ProcessingLimits(), lease: Double = 60,
        alone: Bool, observer: any ProcessingObserver = NoProcessingObserver()
    ) throws {
        self.database = database
        self.uploads = uploads
        self.media = media
        self.workers = max(1, workers)
        self.limits = limits
        self.lease = lease
        self.alone = alone
        self.observer = observer
        dataPaths = DataPaths(media.deletingLastPathComponent())
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
                        guard let job = try? await self.database.takeJob(owner: self.owner, now: now()), let jobID = job.id else {
                            try? await Task.sleep(for: .milliseconds(250))
                            continue
                        }
                        let beating = Task {
                            while !Task.isCancelled {
                                try? await Task.sleep(for: .seconds(self.lease / 4))
                                try? await self.database.heartbeat(job: jobID, now: now())
                            }
                        }
                        let pause = await self.process(job, jobID)
                        beating.cancel()
                        if pause > 0 { try? await Task.sleep(for: .seconds(pause)) }
                    }
                }
            }
        }
    }

    /// Stops `video`'s job on this server: its worker is killed, no other step starts, the job
    /// goes back to the queue without counting, and this returns once the job has let go of the
    /// video (within `seconds`). The video stays stopped until `release(video:)`: a job taken
    /// meanwhile goes back at once.
    func stop(video: Int64, within seconds: Double = 15) async {
        let pid = jobs.withLock { j -> Int32? in
            j.stopped.insert(video)
            return j.workers[video]
        }
        if let pid { kill(pid, SIGKILL) }
        let deadline = Date().addingTimeInterval(seconds)
        while jobs.withLock({ $0.active.contains(video) }), Date() < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Forgets that `video` was stopped: its job runs again (unless its removal deleted it).
    func release(video: Int64) {
        jobs.withLock { _ = $0.stopped.remove(video) }
    }

    /// Processes one job; returns the seconds the worker waits before it takes the next (the disk
    /// is full, or the job went back because its video is stopped), or 0.
    private func process(_ job: JobRow, _ jobID: Int64) async -> Double {
        let id = job.videoID
        switch jobs.withLock({ $0.admit(id) }) {
        case .admitted: break
        case .runningAlready: return 0
        case .stopped: return await handBack(jobID)
        }
        defer {
            jobs.withLock { _ = $0.active.remove(id) }
            _ = progress.withLock { $0.removeValue(forKey: id) }
        }
        guard var video = try? await database.video(id) else { return 0 }
        if job.attempts > limits.attempts {
            await fail(&video, jobID, "processing was cut short \(limits.attempts) times (the server stopped while it ran)")
            return 0
        }
        let folder = media.appendingPathComponent(String(id))
        do {
            guard let upload = video.uploadID else { throw ClipFlowError.badInput("the video has no upload") }
            let input = uploads.path(upload)
            removeUnpublished(in: folder, keeping: video.published)
            let probe = try await self.probe(id, input)
            if let refusal = limits.refusal(probe) { throw ClipFlowError.badInput(refusal) }
            video.duration = probe.duration
            try await database.update(video)
            let prefix = Self.folderPrefix(attempt: job.attempts, besides: video.published)
            switch video.mode {
            case .copy:
                try await ladder(id, input, LadderChoice(rungs: [], copy: true), into: folder.appendingPathComponent("\(prefix)-copy"))
                try await publish(&video, "\(prefix)-copy", status: .ready, renditions: ["copy"])
            case .ladder:
                let short = min(probe.width, probe.height)
                let rungs = LadderRung.standard.filter { $0.height <= short }
                let smallest = LadderRung.standard[LadderRung.standard.count - 1]
                try await ladder(id, input, LadderChoice(rungs: [smallest]), into: folder.appendingPathComponent("\(prefix)-first"))
                if rungs.count > 1 {
                    try await publish(&video, "\(prefix)-first", status: .viewable, renditions: [smallest.name])
                    try await ladder(id, input, LadderChoice(rungs: rungs), into: folder.appendingPathComponent("\(prefix)-full"))
                    try await publish(&video, "\(prefix)-full", status: .ready, renditions: rungs.map(\.name))
                } else {
                    try await publish(&video, "\(prefix)-first", status: .ready, renditions: [smallest.name])
                }
            }
            removeUnpublished(in: folder, keeping: video.published)
            try await database.finishJob(jobID, failed: false)
        } catch StepFault.stopped {
            return await handBack(jobID)
        } catch StepFault.died(let reason) {
            if job.attempts < limits.attempts {
                try? await database.retryJob(jobID, counted: true)
            } else {
                await fail(&video, jobID, "\(reason) (attempt \(job.attempts) of \(limits.attempts))")
            }
        } catch StepFault.diskFull {
            try? await database.retryJob(jobID, counted: false)
            return Self.diskFullPause
        } catch {
            if isStopped(id) { return await handBack(jobID) }
            if database.isFull(error) {
                // The server's own store, not the video, failed: try again once there is space.
                try? await database.retryJob(jobID, counted: false)
                return Self.diskFullPause
            }
            await fail(&video, jobID, dataPaths.scrub((error as? ClipFlowError)?.message ?? "\(error)"))
        }
        return 0
    }

    /// Hands back a job that a stop cut short; returns the pause before the next take. When the
    /// server is stopping, it hands its jobs back itself (`releaseJobs`); when the video is
    /// stopped, the job goes back to the queue without counting (its removal deletes it; a
    /// removal that fails releases the video, and the job runs again).
    private func handBack(_ jobID: Int64) async -> Double {
        guard !Task.isCancelled else { return 0 }
        try? await database.retryJob(jobID, counted: false)
        return Self.stoppedPause
    }

    private func isStopped(_ video: Int64) -> Bool { Task.isCancelled || jobs.withLock { $0.stopped.contains(video) } }

    private func fail(_ video: inout VideoRow, _ jobID: Int64, _ reason: String) async {
        video.status = .error
        video.error = reason
        try? await database.update(video)
        try? await database.finishJob(jobID, failed: true)
    }

    private func publish(_ video: inout VideoRow, _ folder: String, status: VideoRow.Status, renditions: [String]) async throws {
        video.published = folder
        video.status = status
        video.renditions = renditions.joined(separator: ",")
        try await database.update(video)
    }

    private func probe(_ id: Int64, _ input: String) async throws -> WorkerProbe {
        let answer = Mutex<WorkerProbe?>(nil)
        try await step(id, ["--step", "probe", "--input", input]) { line in
            if let p = try? JSONDecoder().decode(WorkerProbe.self, from: Data(line.utf8)) { answer.withLock { $0 = p } }
        }
        guard let probe = answer.withLock({ $0 }) else { throw StepFault.died("the processing worker's probe gave no answer") }
        return probe
    }

    /// One ladder of `input` (feed profile) into `output`.
    private func ladder(_ id: Int64, _ input: String, _ choice: LadderChoice, into output: URL) async throws {
        try await step(id, ["--step", "ladder", "--input", input, "--output", output.path, "--rungs", WorkerLadder.argument(choice)]) { line in
            if let p = try? JSONDecoder().decode([String: Double].self, from: Data(line.utf8)), let fraction = p["progress"] {
                self.progress.withLock { $0[id] = fraction }
            }
        }
    }

    /// Runs one worker process for `video`; throws the worker's reason (`ClipFlowError`) or a
    /// `StepFault`.
    private func step(_ video: Int64, _ arguments: [String], line: @escaping @Sendable (String) -> Void) async throws {
        if isStopped(video) { throw StepFault.stopped }
        let outcome = try await WorkerProcess.run(arguments, memoryLimit: limits.workerMemory, stall: limits.workerStall, line: line) { pid in
            let stopped = self.jobs.withLock { j -> Bool in
                j.workers[video] = pid
                return j.stopped.contains(video)
            }
            if stopped { kill(pid, SIGKILL) }
        }
        jobs.withLock { _ = $0.workers.removeValue(forKey: video) }
        if isStopped(video) { throw StepFault.stopped }
        switch outcome {
        case .finished: return
        case .failed(let message): throw ClipFlowError.badInput(message)
        case .diskFull(let message): throw StepFault.diskFull(message)
        case .died(let reason): throw StepFault.died(reason)
        }
    }

    /// The start of this try's ladder folder names: `aN-` and 8 random hex digits, unlike the
    /// published folder's (the only one left once `removeUnpublished` ran). A try never writes into
    /// a folder already published, whatever the attempt count says (a clean stop or a full disk
    /// gives the attempt back, so a later try may run with the same N).
    static func folderPrefix(attempt: Int, besides published: String) -> String {
        var prefix: String
        repeat {
            let random = String(UInt32.random(in: 0...UInt32.max), radix: 16)
            prefix = "a\(attempt)-" + String(repeating: "0", count: 8 - random.count) + random
        } while published.hasPrefix(prefix + "-")
        return prefix
    }

    /// Everything in a video's media folder but the published ladder (earlier or unfinished ones).
    private func removeUnpublished(in folder: URL, keeping published: String) {
        let fm = FileManager.default
        for name in (try? fm.contentsOfDirectory(atPath: folder.path)) ?? [] where name != published {
            try? fm.removeItem(at: folder.appendingPathComponent(name))
        }
    }

}
