import ClipFlowCore
import ClipFlowMedia
import ClipFlowUpload
import Foundation
import Tracing
import Subprocess
import Synchronization

/// Turns uploaded videos into published HLS ladders, from the job queue in the database (so a
/// job survives a restart; one interrupted by a crash runs again).
///
/// Every step that reads the upload runs in a worker process (`WorkerProcess`), never in the
/// server. A job has two steps (`JobRow.Step`). `playable`: the upload is probed (a file FFmpeg
/// cannot read as a video, or one beyond `limits`, ends in `error` with the reason) and the first
/// thing that plays is published (`PlayableFirst`: a copy of the upload, else the smallest rung;
/// `viewable`). `ladder`: the encoded rungs from one decode, joined by what the first step made
/// that the ladder needs (`ready`). A `copy` video is remuxed only. `workers` workers take either
/// step, a `playable` one first; `playableLanes` more take `playable` steps only, so a video never
/// waits for another's ladder to become playable, nor, when uploads come in a row, for the
/// playable step of the one before.
///
/// Each ladder is written into its own new folder of the video's work folder (`MediaStorage`:
/// `DATA/media/ID`, or local scratch for a bucket), named afresh by each try
/// (`aN-XXXXXXXX-first`, never the name of a folder the video has), put where it is served, and
/// published by switching the video's `published` folder in the database. A superseded folder
/// stays for `limits.supersededGrace` seconds (players in the middle of its playlists keep
/// working), then goes. A step that could not reach the object storage goes back to the queue
/// without counting.
///
/// A worker that dies (a signal, an unexpected exit) sends its job back to the queue; a step
/// started `limits.attempts` times (counted in the database, so restarts of the server count
/// too) ends in `error` with the reason. A full disk sends the job back without counting, and
/// the worker waits before it takes another. `stop(video:)` holds a video's job until
/// `release(video:)` (its worker is killed, no other step starts, and the job goes back to the
/// queue without counting, to run again once released). Every change of a job's state goes to
/// `observer`. Thread-safe; `Sendable`.
final class Processor: Sendable {
    let database: any ServeStore
    let uploads: any UploadStorage
    let media: any MediaStorage
    let workers: Int
    let limits: ProcessingLimits
    /// This server, as jobs name their owner.
    let owner: String
    /// Seconds without a heartbeat after which a running job is taken to be cut short by a crash.
    let lease: Double
    /// Only this server uses the store (SQLite, behind the data folder's lock): a job found running
    /// when it starts was cut short, whatever its heartbeat says.
    let alone: Bool
    /// How a failure's reason is shown without the data folder.
    let dataPaths: DataPaths
    /// Told of every job's state changes (the server's log and metrics).
    let observer: any ProcessingObserver
    /// Lanes that take `playable` steps only, beside the `workers` that take either: a copy reads
    /// and writes more than it computes, so two run side by side on any machine.
    static let playableLanes = 2
    /// Seconds a worker waits after a job found the disk full, or the object storage unreachable.
    static let diskFullPause: Double = 5
    /// Seconds a worker waits after handing back the job of a stopped video (being removed).
    static let stoppedPause: Double = 0.25
    /// Media seconds decoded / total, per video being processed (for `GET /videos`).
    private let progress = Mutex<[Int64: Double]>([:])
    /// Per video being processed: the moments its step reached (`PublishMark`), for the timeline
    /// of its first publishing.
    private let marks = Mutex<[Int64: [(name: PublishMark.Name, at: Date)]]>([:])
    private let jobs = Mutex(RunningJobs())
    /// The worker started before the next remux needs one.
    private let spares: WorkerSpares
    /// Rung by `wake()`: an idle worker looks for a job as soon as it rings.
    private let queued = JobSignal()
    /// Seconds an idle worker waits for a ring before it asks the database again: the fallback
    /// for a job nobody rang for (this server rings when it queues one; with PostgreSQL, any
    /// server's queued job rings through `JobNotifications`).
    static let idlePoll: Double = 2
    /// Seconds between records of a running job's progress (with its heartbeat), which the API
    /// servers answer from.
    static let progressEvery: Double = 2

    /// The jobs this server runs now: by video, the worker process of the step in progress.
    private struct RunningJobs {
        var active: Set<Int64> = []
        var workers: [Int64: StartedWorker] = [:]
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
        database: any ServeStore, uploads: any UploadStorage, media: any MediaStorage, data: URL, workers: Int,
        limits: ProcessingLimits = ProcessingLimits(), lease: Double = 60, alone: Bool, observer: any ProcessingObserver = NoProcessingObserver()
    ) {
        self.database = database
        self.uploads = uploads
        self.media = media
        self.workers = max(1, workers)
        self.limits = limits
        self.lease = lease
        self.alone = alone
        self.observer = observer
        dataPaths = DataPaths(data)
        spares = WorkerSpares(memoryLimit: limits.workerMemory)
        owner = "\(ProcessInfo.processInfo.hostName)-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    }

    func progress(of video: Int64) -> Double? { progress.withLock { $0[video] } }

    /// Runs the workers until cancelled. Jobs a crash left running are queued again: at once when
    /// this server is alone, else once their heartbeat is older than `lease` (checked all along).
    func run() async {
        spares.refill()
        defer { spares.close() }
        let now: @Sendable () -> Double = { Date().timeIntervalSince1970 }
        if alone, (try? await database.requeueStale(before: .infinity)) ?? 0 > 0 { wake() }
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                while !Task.isCancelled {
                    if (try? await self.database.requeueStale(before: now() - self.lease)) ?? 0 > 0 { self.wake() }
                    try? await Task.sleep(for: .seconds(self.lease / 4))
                }
            }
            group.addTask {
                while !Task.isCancelled {
                    // A video still being processed is left alone: a step on another server sharing
                    // the folder may have written a folder it has not published yet.
                    await self.media.sweepSuperseded(
                        grace: self.limits.supersededGrace, skip: { video in self.jobs.withLock { $0.active.contains(video) } },
                        published: { video in
                            guard let row = try? await self.database.video(video), row.status == .ready || row.status == .error else { return nil }
                            return row.published
                        })
                    try? await Task.sleep(for: .seconds(min(60, max(1, self.limits.supersededGrace / 4))))
                }
            }
            let lanes: [Set<JobRow.Step>] = Array(repeating: [.playable, .ladder], count: workers) + Array(repeating: [.playable], count: Self.playableLanes)
            for steps in lanes {
                group.addTask {
                    while !Task.isCancelled {
                        let seen = self.queued.rings
                        guard let job = try? await self.database.takeJob(owner: self.owner, now: now(), steps: steps, perClient: self.limits.jobsPerClient),
                            let jobID = job.id
                        else {
                            await self.idle(since: seen)
                            continue
                        }
                        // The job's heartbeat beats while its step runs.
                        let pause = await withTaskGroup(of: Void.self, returning: Double.self) { beating in
                            beating.addTask {
                                while !Task.isCancelled {
                                    try? await Task.sleep(for: .seconds(min(self.lease / 4, Self.progressEvery)))
                                    try? await self.database.heartbeat(job: jobID, now: now(), progress: self.progress(of: job.videoID) ?? 0)
                                }
                            }
                            defer { beating.cancelAll() }
                            // The step continues its upload's trace, on whichever server takes it.
                            let pause = await withSpan("clipflow.job", context: ServeTracing.context(carrying: job.trace), ofKind: .consumer) { span in
                                span.attributes["clipflow.video"] = job.videoID
                                span.attributes["clipflow.job.step"] = job.step.rawValue
                                span.attributes["clipflow.job.attempt"] = job.attempts
                                return await self.process(job, jobID)
                            }
                            await self.media.release(self.workFolder(job))
                            return pause
                        }
                        if pause > 0 { try? await Task.sleep(for: .seconds(pause)) }
                    }
                }
            }
        }
    }

    /// Where step `job` (as taken: its step and attempt) writes its ladders.
    private func workFolder(_ job: JobRow) -> URL {
        media.workFolder(job.videoID, step: "\(job.id ?? 0)-\(job.step.rawValue)-\(job.attempts)")
    }

    /// Tells the idle workers that a job was queued (an upload completed): one takes it at once
    /// rather than at its next look at the database.
    func wake() { queued.ring() }

    /// Returns after `idlePoll` seconds, or at a `wake()` (one since `seen`).
    private func idle(since seen: UInt64) async { await queued.wait(after: seen, atMost: Self.idlePoll) }

    /// Stops `video`'s job on this server: its worker is killed, no other step starts, the job
    /// goes back to the queue without counting, and this returns once the job has let go of the
    /// video (within `seconds`). The video stays stopped until `release(video:)`: a job taken
    /// meanwhile goes back at once.
    func stop(video: Int64, within seconds: Double = 15) async {
        let worker = jobs.withLock { j -> StartedWorker? in
            j.stopped.insert(video)
            return j.workers[video]
        }
        worker?.signal(.kill)
        let deadline = Date().addingTimeInterval(seconds)
        while jobs.withLock({ $0.active.contains(video) }), Date() < deadline {
            try? await Task.sleep(for: .milliseconds(20))
        }
    }

    /// Forgets that `video` was stopped: its job runs again (unless its removal deleted it).
    func release(video: Int64) {
        jobs.withLock { _ = $0.stopped.remove(video) }
        wake()
    }

    /// Processes one step of a job; returns the seconds the worker waits before it takes the next
    /// (the disk is full, or the job went back because its video is stopped), or 0.
    private func process(_ job: JobRow, _ jobID: Int64) async -> Double {
        let id = job.videoID
        switch jobs.withLock({ $0.admit(id) }) {
        case .admitted: break
        case .runningAlready:
            // Its other step is still ending on this server: back to the queue, uncounted (left
            // running, it would wait for the lease to run out).
            try? await database.retryJob(jobID, counted: false)
            return Self.stoppedPause
        case .stopped: return await handBack(jobID, job)
        }
        defer { jobs.withLock { _ = $0.active.remove(id) } }
        guard var video = try? await database.video(id) else { return 0 }
        let began = Date()
        let event = { (kind: JobEvent.Kind) in JobEvent(kind: kind, video: id, job: jobID, phase: job.step.rawValue) }
        if job.attempts > limits.attempts {
            await fail(&video, jobID, "processing was cut short \(limits.attempts) times (the server stopped while it ran)", event(.failed), began)
            return 0
        }
        observer.job(event(.started))
        marks.withLock { $0[id] = [(.taken, began)] }
        defer { marks.withLock { _ = $0.removeValue(forKey: id) } }
        let folder = workFolder(job)
        do {
            guard let upload = video.uploadID else { throw ClipFlowError.badInput("the video has no upload") }
            do { try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true) } catch {
                throw ClipFlowError.output("cannot create '\(folder.path)'", writing: error)
            }
            // A ladder step that runs where its playable step ran takes that step's folder over
            // (the upload, the published folder: nothing downloaded again).
            if job.step == .ladder { await media.resume(id, job: jobID, into: folder) }
            let input = try await uploads.localFile(upload, scratch: folder)
            await media.removeLeftovers(id, keeping: video.published, grace: limits.supersededGrace)
            if job.step == .ladder { try await media.prepare(id, published: video.published, in: folder) }
            let finished: Bool
            switch job.step {
            case .playable: finished = try await playable(&video, jobID, job, input: input, folder: folder)
            case .ladder: finished = try await ladder(&video, jobID, job, input: input, folder: folder)
            }
            if finished {
                try await database.finishJob(jobID, failed: false)
                progress.withLock { _ = $0.removeValue(forKey: id) }
                var done = event(.done)
                done.seconds = Date().timeIntervalSince(began)
                observer.job(done)
            }
        } catch StepFault.stopped {
            return await handBack(jobID, job)
        } catch StepFault.died(let reason) {
            if job.attempts < limits.attempts {
                try? await database.retryJob(jobID, counted: true)
                var e = event(.requeued)
                e.reason = reason
                observer.job(e)
            } else {
                await fail(&video, jobID, "\(reason) (attempt \(job.attempts) of \(limits.attempts))", event(.failed), began)
            }
        } catch StepFault.diskFull(let reason) {
            try? await database.retryJob(jobID, counted: false)
            var e = event(.requeued)
            e.reason = "the disk is full: \(dataPaths.scrub(reason))"
            observer.job(e)
            return Self.diskFullPause
        } catch let refused as StepRefusal {
            if isStopped(id) { return await handBack(jobID, job) }
            await fail(&video, jobID, dataPaths.scrub(refused.message), event(.failed), began)
        } catch {
            if isStopped(id) { return await handBack(jobID, job) }
            if database.isFull(error) {
                // The server's own store, not the video, failed: try again once there is space.
                try? await database.retryJob(jobID, counted: false)
                var e = event(.requeued)
                e.reason = "the database is full"
                observer.job(e)
                return Self.diskFullPause
            }
            if let e = error as? UploadError, e.kind != .badInput {
                // The object storage, not the video, failed: try again once it answers.
                try? await database.retryJob(jobID, counted: false)
                var requeued = event(.requeued)
                requeued.reason = "the object storage failed: \(e.message)"
                observer.job(requeued)
                return Self.diskFullPause
            }
            await fail(&video, jobID, dataPaths.scrub((error as? ClipFlowError)?.message ?? "\(error)"), event(.failed), began)
        }
        return 0
    }

    /// The `playable` step: probes, checks the limits and publishes what plays first (a `copy`
    /// video: its whole remux). Returns whether the job is finished (else its `ladder` step is
    /// queued).
    private func playable(_ video: inout VideoRow, _ jobID: Int64, _ job: JobRow, input: String, folder: URL) async throws -> Bool {
        let id = video.id!
        let prefix = Self.folderPrefix(attempt: job.attempts, besides: video.published)
        let copyFolder = "\(prefix)-copy"
        // Probed by an earlier try: not again.
        let kept = job.probe.flatMap(InspectSummary.init(json:))
        var probe = kept
        // The copy (a `copy` video's whole step), checked first by the step's `inspect` stage
        // when the job has no probe yet: one worker, nothing decoded. A ladder video whose probe
        // refuses a copy goes on to its smallest rung.
        var copyRefusal: String?
        if video.mode == .copy || kept.map({ $0.copyRefusal == nil && limits.media.refusal($0) == nil }) ?? true {
            let inspect = kept == nil ? StepPipeline.Inspection(limits: limits.media, copyable: video.mode == .ladder) : nil
            do {
                // A ladder video's storyboard comes with its ladder: the copy publishes sooner
                // without one (it decodes a picture of the source per segment).
                let seen = try await ladder(
                    id, input, LadderChoice(rungs: [], copy: true), into: folder.appendingPathComponent(copyFolder), inspect: inspect,
                    share: video.mode == .copy ? (0, 1) : (0, 0.1), storyboard: video.mode == .copy)
                probe = probe ?? seen
            } catch let refused as StepRefusal {
                guard let seen = probe ?? refused.probe else { throw ClipFlowError.badInput(refused.message) }
                probe = seen
                copyRefusal = seen.copyRefusal ?? refused.message
            }
        } else {
            copyRefusal = kept?.copyRefusal ?? "beyond this server's limits"
        }
        guard let probe else { throw StepFault.died("the processing worker's probe gave no answer") }
        // Kept in the job's row: no later step probes again.
        if kept == nil { try await database.recordProbe(jobID, probe: probe.json) }
        if let refusal = limits.media.refusal(probe) { throw ClipFlowError.badInput(refusal) }
        video.duration = probe.duration
        try await database.update(video)
        if video.mode == .copy {
            if let copyRefusal { throw ClipFlowError.badInput(copyRefusal) }
            try await publish(&video, jobID, .playable, from: folder, copyFolder, status: .ready, renditions: ["copy"])
            return true
        }
        // Not copied (it cannot be, or the copy refused what the probe let through): the
        // smallest rung.
        let copied = copyRefusal == nil
        let first = PlayableFirst.first(copyable: copied)
        let name = copied ? copyFolder : "\(prefix)-first"
        let plan = PlayableFirst.ladder(rungs: PlayableFirst.rungs(width: probe.width, height: probe.height), copyable: copied)
        if !copied {
            try await ladder(id, input, first, into: folder.appendingPathComponent(name), share: (0, 0.1), storyboard: plan == nil)
        }
        // The copy, or the smallest rung (or the source's packets standing in for it, or beside it).
        let renditions = try LadderTracks.videoRenditions(in: folder.appendingPathComponent(name))
        try await publish(&video, jobID, .playable, from: folder, name, status: plan == nil ? .ready : .viewable, renditions: renditions)
        guard let plan else { return true }
        // What the ladder step builds on stays here for it, should it run here.
        await media.keep(id, job: jobID, from: folder, published: name)
        // The step is over here before its ladder is queued: a lane of this server that takes
        // the ladder at once must not find the video still running.
        jobs.withLock { _ = $0.active.remove(id) }
        try await database.queueLadder(jobID, plan: plan.json)
        wake()
        return false
    }

    /// The `ladder` step: the plan's rungs from one decode, with the renditions it reuses from
    /// the published folder. Returns true (the job is finished).
    private func ladder(_ video: inout VideoRow, _ jobID: Int64, _ job: JobRow, input: String, folder: URL) async throws -> Bool {
        let id = video.id!
        guard let plan = LadderStepPlan(json: job.plan), !video.published.isEmpty else {
            throw ClipFlowError.failure("internal: the ladder step has no plan or nothing published to build on")
        }
        let rungs = plan.rungs.compactMap { name in LadderRung.standard.first { $0.name == name } }
        let name = "\(Self.folderPrefix(attempt: job.attempts, besides: video.published))-full"
        try await ladder(
            id, input, LadderChoice(rungs: rungs), into: folder.appendingPathComponent(name), share: (0.1, 1),
            reuse: (folder.appendingPathComponent(video.published).path, plan.reuse), background: true, codecs: limits.ladderCodecs)
        // The rungs and what was reused, or the copy standing in for the top rung: as the ladder says.
        let renditions = try LadderTracks.videoRenditions(in: folder.appendingPathComponent(name))
        try await publish(&video, jobID, .ladder, from: folder, name, status: .ready, renditions: renditions)
        return true
    }

    /// Hands back a job that a stop cut short; returns the pause before the next take. When the
    /// server is stopping, it hands its jobs back itself (`releaseJobs`); when the video is
    /// stopped, the job goes back to the queue without counting (its removal deletes it; a
    /// removal that fails releases the video, and the job runs again).
    private func handBack(_ jobID: Int64, _ job: JobRow) async -> Double {
        var e = JobEvent(kind: .requeued, video: job.videoID, job: jobID, phase: job.step.rawValue)
        e.reason = Task.isCancelled ? "the server is stopping" : "the video is being removed"
        observer.job(e)
        guard !Task.isCancelled else { return 0 }
        try? await database.retryJob(jobID, counted: false)
        return Self.stoppedPause
    }

    private func isStopped(_ video: Int64) -> Bool { Task.isCancelled || jobs.withLock { $0.stopped.contains(video) } }

    private func fail(_ video: inout VideoRow, _ jobID: Int64, _ reason: String, _ event: JobEvent, _ began: Date) async {
        video.status = .error
        video.error = reason
        try? await database.update(video)
        try? await database.finishJob(jobID, failed: true)
        if let id = video.id { progress.withLock { _ = $0.removeValue(forKey: id) } }
        var e = event
        e.reason = reason
        e.seconds = Date().timeIntervalSince(began)
        observer.job(e)
    }

    /// Switches the video to `folder`; the folder it had starts its grace period (`removeLeftovers`,
    /// `sweepSuperseded`). The first time a video plays, the observer hears how long after its
    /// upload's last byte.
    private func publish(
        _ video: inout VideoRow, _ jobID: Int64, _ step: JobRow.Step, from work: URL, _ folder: String, status: VideoRow.Status, renditions: [String]
    ) async throws {
        let wasPlayable = !video.published.isEmpty
        let span = startSpan("clipflow.publish", ofKind: .internal)
        defer { span.end() }
        span.attributes["clipflow.publish.renditions"] = renditions.joined(separator: ",")
        span.attributes["clipflow.publish.first_playable"] = !wasPlayable
        let superseded = video.published
        if let id = video.id {
            // A ladder's renditions taken over from the folder it supersedes are that folder's.
            try await media.put(id, folder, from: work, reusing: superseded)
            // Its grace starts now (before the switch: a sweep never sees it superseded and old).
            if !superseded.isEmpty { await media.superseded(id, superseded, grace: limits.supersededGrace) }
        }
        video.published = folder
        video.status = status
        video.renditions = renditions.joined(separator: ",")
        try await database.update(video)
        if let id = video.id, try await database.video(id) == nil {
            // Deleted meanwhile (by an API server, whose removal ran before this folder was put).
            try? await media.remove(id)
            throw StepFault.stopped
        }
        var e = JobEvent(kind: .published, video: video.id ?? 0, job: jobID, phase: step.rawValue)
        e.renditions = renditions
        e.status = status
        if !wasPlayable, let upload = video.uploadID, let row = try? await database.upload(upload), let last = row.completedAt {
            e.seconds = max(0, Date().timeIntervalSince1970 - last)
            mark(video.id ?? 0, .published)
            e.timeline = (marks.withLock { $0[video.id ?? 0] } ?? []).map { PublishMark(name: $0.name, seconds: $0.at.timeIntervalSince1970 - last) }
        }
        observer.job(e)
    }

    /// `video`'s step reached `name` now.
    private func mark(_ video: Int64, _ name: PublishMark.Name) {
        marks.withLock { $0[video]?.append((name, Date())) }
    }

    /// One ladder of `input` (feed profile, its rungs in `codecs`: a first step's in H.264 alone,
    /// what plays everywhere at once) into `output`, taking `reuse`'s renditions from a
    /// published folder, checked first by `inspect`: the step's pipeline (`StepPipeline`), written
    /// beside `output` (`.NAME.json`, for the step's time) and run by a worker. Its progress moves
    /// the video's from `share.0` to `share.1`, never back. A `background` ladder (a video that
    /// plays already) gives the CPU way to playable steps. Returns what `inspect` found; throws
    /// `StepRefusal` when the worker refused the input.
    @discardableResult
    private func ladder(
        _ id: Int64, _ input: String, _ choice: LadderChoice, into output: URL, inspect: StepPipeline.Inspection? = nil, share: (Double, Double),
        reuse: (folder: String, tracks: [String])? = nil, background: Bool = false, storyboard: Bool = true, codecs: Set<VideoCodec> = [.h264]
    ) async throws -> InspectSummary? {
        let pipeline = try writePipeline(
            StepPipeline.text(input: input, output: output.path, ladder: choice, inspect: inspect, reuse: reuse, storyboard: storyboard, codecs: codecs),
            for: output)
        defer { try? FileManager.default.removeItem(at: pipeline) }
        let nice = background ? ServeWorker.backgroundNice : 0
        // A remux is over in a fraction of a second, of which starting a process would be a
        // good part: it runs in the spare.
        let remux = choice.copy && choice.rungs?.isEmpty == true && !background
        // The ladder's progress is its decode's (its copy's, for a remux): the stage it declares.
        let following = StepPipeline.progressStage(choice)
        let found = Mutex<InspectSummary?>(nil)
        do {
            try await step(id, pipeline: pipeline.path, nice: nice, spare: remux) { event in
                if let probe = event.probe {
                    found.withLock { $0 = probe }
                    self.mark(id, .probed)
                } else if event.stage == following, let fraction = event.fraction {
                    let overall = share.0 + (share.1 - share.0) * fraction
                    self.progress.withLock { $0[id] = max($0[id] ?? 0, overall) }
                }
            }
        } catch let e as ClipFlowError where e.kind == .badInput {
            throw StepRefusal(message: e.message, probe: found.withLock { $0 })
        }
        mark(id, .written)
        return found.withLock { $0 }
    }

    /// Writes a step's pipeline `text` beside `output` (`.NAME.json`, for the step's time).
    private func writePipeline(_ text: String, for output: URL) throws -> URL {
        let pipeline = output.deletingLastPathComponent().appendingPathComponent(".\(output.lastPathComponent).json")
        do { try text.write(to: pipeline, atomically: true, encoding: .utf8) } catch {
            // A full disk is the server's, not the video's: the job goes back to the queue.
            let failed = ClipFlowError.output("cannot write the step's pipeline '\(pipeline.path)'", writing: error)
            throw failed.isDiskFull ? StepFault.diskFull(failed.message) : failed
        }
        return pipeline
    }

    /// Copies fragment `input` of recording `video` into the folder `output` (an `hls` copy
    /// alone, its timeline from `timelineStart`: `LiveLadder`), in the spare worker, checked
    /// first against `limits` and for what every browser plays.
    func copyFragment(_ video: Int64, input: String, into output: URL, timelineStart: Double) async throws {
        let text = StepPipeline.text(
            input: input, output: output.path, ladder: LadderChoice(rungs: [], copy: true),
            inspect: StepPipeline.Inspection(limits: limits.media, copyable: true), storyboard: false, timelineStart: timelineStart)
        let pipeline = try writePipeline(text, for: output)
        defer { try? FileManager.default.removeItem(at: pipeline) }
        try await step(video, pipeline: pipeline.path, nice: 0, spare: true) { _ in }
    }

    /// Merges recording `video`'s fragments (`inputs`, in order) losslessly into the MP4
    /// `output`, in a worker.
    func mergeFragments(_ video: Int64, inputs: [String], into output: URL) async throws {
        let pipeline = try writePipeline(StepPipeline.mergeText(inputs: inputs, output: output.path), for: output)
        defer { try? FileManager.default.removeItem(at: pipeline) }
        try await step(video, pipeline: pipeline.path, nice: 0, spare: false) { _ in }
    }

    /// A worker's refusal of its input (an answer, not a fault): its reason, and what its
    /// `inspect` stage found, if it ran.
    private struct StepRefusal: Error {
        let message: String
        let probe: InspectSummary?
    }

    /// Runs the step `pipeline` for `video` in a worker process at CPU priority `nice` (the spare,
    /// when `spare`), each of its events (`WorkerEventLine`) to `event`;
    /// throws the worker's reason (`ClipFlowError`) or a `StepFault`: a failure whose `failed`
    /// event says `disk_full` is a full disk.
    private func step(
        _ video: Int64, pipeline: String, nice: Int32, spare: Bool, event: @escaping @Sendable (WorkerEventLine) -> Void
    ) async throws {
        if isStopped(video) { throw StepFault.stopped }
        let failure = Mutex<FailureKind?>(nil)
        let line: @Sendable (String) -> Void = { text in
            guard let e = WorkerEventLine.read(text) else { return }
            if e.event == "failed", let kind = e.kind { failure.withLock { $0 = $0 ?? kind } }
            event(e)
        }
        let outcome = try await withSpan("clipflow.worker", ofKind: .internal) { span in
            span.attributes["clipflow.worker.spare"] = spare
            return try await WorkerProcess.run(
                pipeline: pipeline, nice: nice, memoryLimit: limits.workerMemory, spares: spare ? spares : nil, stall: limits.workerStall, line: line
            ) { worker in
                self.mark(video, .worker)
                let stopped = self.jobs.withLock { j -> Bool in
                    j.workers[video] = worker
                    return j.stopped.contains(video)
                }
                if stopped { worker.signal(.kill) }
            }
        }
        jobs.withLock { _ = $0.workers.removeValue(forKey: video) }
        if isStopped(video) { throw StepFault.stopped }
        switch outcome {
        case .finished: return
        case .failed(let message):
            if failure.withLock({ $0 }) == .diskFull { throw StepFault.diskFull(message) }
            throw ClipFlowError.badInput(message)
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
}
