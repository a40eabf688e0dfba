import Foundation
import ClipFlowCore
import Synchronization

/// One file waiting for, going through, or done with an upload.
public struct QueueEntry: Codable, Sendable, Equatable {
    public enum State: String, Codable, Sendable {
        /// Waiting for a worker (also: stopped by SIGINT/stop-all, to continue on the next run).
        case queued
        case running
        /// Held by the user; not picked until resumed.
        case paused
        case finished
        /// Gave up (the error says why); `resume` puts it back in the queue.
        case failed
        case cancelled
    }

    public var id: String
    public var file: String
    public var destination: UploadDestination
    public var metadata: [String: String]
    public var state: State
    /// A request from another process for a running entry: "pause" or "cancel".
    public var request: String?
    /// The process running it (a dead owner's entry is put back in the queue).
    public var owner: Int32?
    public var added: Date
    public var updated: Date
    public var acknowledged: Int64
    public var total: Int64
    public var errorCode: String?
    public var errorMessage: String?
    public var result: UploadResult?

    public var isDone: Bool { state == .finished || state == .cancelled }
}

/// A persistent upload queue: add, list, cancel, pause, resume files; pause/resume/stop all; at
/// most `concurrency` uploads at once. The queue lives in `directory/queue.json` (with the resume
/// store beside it), rewritten atomically under an advisory lock on `directory/queue.lock`, so
/// other processes (`clipflow upload list/pause/cancel`) can read and change it while a runner
/// works; the runner re-reads it every `pollInterval`.
///
/// Threads: `run` blocks its caller and starts one thread per running upload. All other methods are
/// thread-safe and may be called from any thread or process.
public final class UploadQueue: Sendable {
    public let directory: String
    public let concurrency: Int
    public let resumeStore: ResumeStore
    private let makeUploader: @Sendable (UploadDestination, ResumeStore) throws -> FileUploader
    private let observer: UploadObserver
    private let pollInterval: Double
    private let stopFlag = Atomic<Bool>(false)
    private let external: CancellationFlag?

    /// Controls of the uploads this process is running, by entry id.
    private let controls = Mutex<[String: UploadControl]>([:])
    /// Ends `run`'s poll wait early when something changed. A wake signal, not a hand-off: the
    /// work is the entries in `queue.json` (which other processes change too), read on every pass.
    private let wake = Doorbell()

    private var queuePath: String { directory + "/queue.json" }
    private let file: SharedJSONFile<QueueFile>

    /// The default directory: `$XDG_STATE_HOME/clipflow/uploads` (or `~/.local/state/...`).
    public static var defaultDirectory: String {
        let env = ProcessInfo.processInfo.environment
        let base =
            env["XDG_STATE_HOME"].map { URL(fileURLWithPath: $0) }
            ?? URL(fileURLWithPath: NSHomeDirectory()).appendingPathComponent(".local/state")
        return base.appendingPathComponent("clipflow/uploads").path
    }

    /// - Parameters:
    ///   - makeUploader: builds the uploader for a destination (`UploadDestination.makeUploader`).
    ///   - cancellation: the process's stop flag (SIGINT): running uploads stop at once and go back
    ///     to `queued`, resumable by the next run.
    public init(
        directory: String, concurrency: Int = 2,
        observer: UploadObserver = NoUploadObserver(), cancellation: CancellationFlag? = nil,
        pollInterval: Double = 0.2,
        makeUploader: @escaping @Sendable (UploadDestination, ResumeStore) throws -> FileUploader
    ) throws {
        self.directory = directory
        self.concurrency = max(1, concurrency)
        self.observer = observer
        self.external = cancellation
        self.pollInterval = pollInterval
        self.makeUploader = makeUploader
        file = try SharedJSONFile(path: directory + "/queue.json", what: "the upload queue", empty: QueueFile(version: 1, uploads: []))
        resumeStore = try ResumeStore(path: directory + "/resume.json")
    }

    // MARK: - Changing the queue

    /// Adds a file. The file must exist and be readable now (it is uploaded later). Adding a file
    /// that is already queued, running or paused for the same destination returns that entry. A
    /// `run` of this queue in this process takes a new entry at once, not at its next poll.
    @discardableResult
    public func add(file: String, destination: UploadDestination, metadata: [String: String] = [:]) throws -> QueueEntry {
        defer { wake.ring() }
        let absolute = URL(fileURLWithPath: file).standardizedFileURL.path
        let stamp = try FileStamp.of(absolute)
        for p in destination.problems() {
            throw UploadError(.badInput, message: "upload destination: \(p.field): \(p.message)")
        }
        return try modify { entries in
            if let existing = entries.first(where: { $0.file == absolute && $0.destination == destination && [.queued, .running, .paused].contains($0.state) })
            {
                return existing
            }
            let now = Date()
            var id: String
            repeat { id = String(format: "%08x", UInt32.random(in: 0...UInt32.max)) } while entries.contains { $0.id == id }
            let entry = QueueEntry(
                id: id, file: absolute, destination: destination, metadata: metadata, state: .queued,
                request: nil, owner: nil, added: now, updated: now, acknowledged: 0, total: stamp.size,
                errorCode: nil, errorMessage: nil, result: nil)
            entries.append(entry)
            return entry
        }
    }

    public func list() throws -> [QueueEntry] {
        try load()
    }

    public func entry(_ id: String) throws -> QueueEntry {
        guard let e = try list().first(where: { $0.id == id }) else {
            throw UploadError(.badInput, message: "no upload with id \(id) in \(queuePath) (see `clipflow upload list`)")
        }
        return e
    }

    /// Cancels an upload: a running one stops and is deleted on the server; a waiting one is
    /// deleted on the server (if it was started) and never runs.
    public func cancel(_ id: String) throws {
        let (entry, runningElsewhere) = try modify { entries -> (QueueEntry, Bool) in
            guard let i = entries.firstIndex(where: { $0.id == id }) else {
                throw UploadError(.badInput, message: "no upload with id \(id) (see `clipflow upload list`)")
            }
            let e = entries[i]
            if e.state == .running {
                // The runner (this process or another) applies the request on its next pass.
                entries[i].request = "cancel"
                return (e, true)
            }
            if e.state != .finished { entries[i].state = .cancelled; entries[i].updated = Date() }
            return (entries[i], false)
        }
        if entry.state == .running {
            controls.withLock { $0[id] }?.cancel()
        } else if entry.state == .cancelled && !runningElsewhere {
            if let uploader = try? makeUploader(entry.destination, resumeStore) { try? uploader.discard(file: entry.file) }
            observer.upload(.cancelled(id: id))
        }
        wake.ring()
    }

    /// Holds an upload: a running one stops (resumable), a waiting one is not picked.
    public func pause(_ id: String) throws {
        let entry = try modify { entries -> QueueEntry in
            guard let i = entries.firstIndex(where: { $0.id == id }) else {
                throw UploadError(.badInput, message: "no upload with id \(id) (see `clipflow upload list`)")
            }
            switch entries[i].state {
            case .running: entries[i].request = "pause"
            case .queued, .failed: entries[i].state = .paused; entries[i].updated = Date()
            default: break
            }
            return entries[i]
        }
        if entry.state == .running, entry.owner == getpid() { controls.withLock { $0[id] }?.pause() }
        wake.ring()
    }

    /// Puts a paused or failed upload back in the queue (it continues where the server stopped).
    public func resume(_ id: String) throws {
        try modify { entries in
            guard let i = entries.firstIndex(where: { $0.id == id }) else {
                throw UploadError(.badInput, message: "no upload with id \(id) (see `clipflow upload list`)")
            }
            if [.paused, .failed].contains(entries[i].state) {
                entries[i].state = .queued
                entries[i].errorCode = nil
                entries[i].errorMessage = nil
                entries[i].updated = Date()
            }
        }
        wake.ring()
    }

    public func pauseAll() throws {
        for e in try list() where [.queued, .running, .failed].contains(e.state) { try pause(e.id) }
    }

    public func resumeAll() throws {
        for e in try list() where [.paused, .failed].contains(e.state) { try resume(e.id) }
    }

    /// Stops this process's runner: running uploads stop at once (resumable) and go back to
    /// `queued`; `run` returns.
    public func stopAll() {
        stopFlag.store(true, ordering: .releasing)
        for c in controls.withLock({ Array($0.values) }) { c.pause() }
        wake.ring()
    }

    /// Removes finished and cancelled entries from the list, and failed ones when `failed`. What a
    /// failed upload left on its server stays there: uploading the same file to the same place
    /// again resumes it (`cancel` deletes it).
    public func prune(failed: Bool = false) throws {
        try modify { entries in entries.removeAll { $0.isDone || (failed && $0.state == .failed) } }
    }

    // MARK: - Running

    /// Runs queued uploads, at most `concurrency` at once, until none of `ids` (all entries when
    /// nil) is queued or running, or `stopAll`/the cancellation flag stops it. Returns the entries
    /// of `ids` as they ended.
    @discardableResult
    public func run(ids: Set<String>? = nil) throws -> [QueueEntry] {
        stopFlag.store(false, ordering: .releasing)
        let transfers = HelperThreads()
        while true {
            let seen = wake.count
            let stopping = stopFlag.load(ordering: .acquiring) || (external?.isCancelled ?? false)
            if stopping { for c in controls.withLock({ Array($0.values) }) { c.pause() } }
            let me = getpid()
            let running = controls.withLock { Set($0.keys) }
            let picked: [QueueEntry] = try modify { entries in
                var picked: [QueueEntry] = []
                for i in entries.indices {
                    // Requests from other processes for uploads this process runs.
                    if entries[i].state == .running, entries[i].owner == me, let r = entries[i].request {
                        let c = controls.withLock { $0[entries[i].id] }
                        if r == "cancel" { c?.cancel() } else { c?.pause() }
                    }
                    // A runner that died left its entries running: put them back.
                    if entries[i].state == .running, let o = entries[i].owner, o != me, kill(o, 0) != 0, errno == ESRCH {
                        // A request made while it ran still holds.
                        entries[i].state = entries[i].request == "cancel" ? .cancelled : entries[i].request == "pause" ? .paused : .queued
                        entries[i].owner = nil
                        entries[i].request = nil
                    }
                    if entries[i].state == .running, entries[i].owner == me, !running.contains(entries[i].id) {
                        entries[i].state = .queued
                        entries[i].owner = nil
                    }
                }
                guard !stopping else { return [] }
                var slots = concurrency - running.count
                for i in entries.indices where slots > 0 && entries[i].state == .queued && (ids?.contains(entries[i].id) ?? true) {
                    entries[i].state = .running
                    entries[i].owner = me
                    entries[i].request = nil
                    entries[i].updated = Date()
                    picked.append(entries[i])
                    slots -= 1
                }
                return picked
            }
            for entry in picked {
                let control = UploadControl(external: external)
                controls.withLock { $0[entry.id] = control }
                transfers.start("upload \(entry.id)", stackSize: 1 << 20) { [self] in
                    work(entry, control)
                    controls.withLock { _ = $0.removeValue(forKey: entry.id) }
                    wake.ring()
                }
            }
            let active = controls.withLock { $0.count }
            if active == 0 && picked.isEmpty {
                let entries = try load()
                let pending = entries.contains { ($0.state == .queued) && (ids?.contains($0.id) ?? true) }
                if stopping || !pending { break }
            }
            wake.wait(after: seen, atMost: pollInterval)
        }
        transfers.wait()
        let entries = try load()
        return entries.filter { ids?.contains($0.id) ?? true }
    }

    /// Uploads one entry on its own thread and records the outcome.
    private func work(_ entry: QueueEntry, _ control: UploadControl) {
        let progressSink = QueueProgress(queue: self, id: entry.id, observer: observer)
        let outcome: Result<UploadResult, UploadError>
        do {
            let uploader = try makeUploader(entry.destination, resumeStore)
            outcome = .success(
                try uploader.upload(
                    file: entry.file, id: entry.id, metadata: entry.metadata,
                    control: control, observer: progressSink))
        } catch let e as UploadError {
            outcome = .failure(e)
        } catch let e as ClipFlowError {
            outcome = .failure(UploadError(.failure, message: e.message))
        } catch {
            outcome = .failure(UploadError(.failure, message: "\(error)"))
        }
        let stopping = stopFlag.load(ordering: .acquiring) || (external?.isCancelled ?? false)
        _ = try? modify { entries in
            guard let i = entries.firstIndex(where: { $0.id == entry.id }) else { return }
            entries[i].owner = nil
            entries[i].request = nil
            entries[i].updated = Date()
            entries[i].acknowledged = max(entries[i].acknowledged, progressSink.acknowledged)
            switch outcome {
            case .success(let result):
                entries[i].state = .finished
                entries[i].result = result
                entries[i].acknowledged = result.bytes
                entries[i].errorCode = nil
                entries[i].errorMessage = nil
            case .failure(let e) where e.kind == .paused:
                entries[i].state = stopping ? .queued : .paused
            case .failure(let e) where e.kind == .cancelled:
                entries[i].state = .cancelled
            case .failure(let e):
                entries[i].state = .failed
                entries[i].errorCode = e.code
                entries[i].errorMessage = e.message
            }
        }
        if case .failure(let e) = outcome {
            if e.kind == .cancelled {
                // Uploaders delete a cancelled upload themselves; this also covers one cancelled
                // before it reached the server.
                if let uploader = try? makeUploader(entry.destination, resumeStore) { try? uploader.discard(file: entry.file) }
                if !progressSink.reported(.cancelled(id: entry.id)) { observer.upload(.cancelled(id: entry.id)) }
            } else if e.kind == .paused {
                // Uploaders report their own pause; this covers one stopped before it reached them.
                if !progressSink.reported(.paused(id: entry.id)) { observer.upload(.paused(id: entry.id)) }
            }
        }
    }

    fileprivate func recordProgress(_ id: String, acknowledged: Int64) {
        _ = try? modify { entries in
            if let i = entries.firstIndex(where: { $0.id == id }) {
                entries[i].acknowledged = max(entries[i].acknowledged, acknowledged)
            }
        }
    }

    // MARK: - Storage

    /// Loads, changes and saves the queue under its lock (`SharedJSONFile`).
    @discardableResult
    private func modify<T>(_ change: (inout [QueueEntry]) throws -> T) throws -> T {
        try file.modify { (doc: inout QueueFile) in try change(&doc.uploads) }
    }

    private func load() throws -> [QueueEntry] { try file.read().uploads }
}

struct QueueFile: Codable, Equatable, Sendable {
    var version: Int
    var uploads: [QueueEntry]
}

/// Forwards one upload's events to the queue's observer and keeps the queue file's progress
/// roughly current (written at most every 2 s).
private final class QueueProgress: UploadObserver, Sendable {
    private weak let queue: UploadQueue?
    private let id: String
    private let observer: UploadObserver
    private let state = Mutex<(ack: Int64, written: Double)>((0, 0))
    /// Names of the paused/cancelled events already forwarded (each is reported once).
    private let ends = Mutex<Set<String>>([])

    init(queue: UploadQueue, id: String, observer: UploadObserver) {
        self.queue = queue
        self.id = id
        self.observer = observer
    }

    var acknowledged: Int64 { state.withLock { $0.ack } }

    /// Whether an event like `event` (same name) was already forwarded.
    func reported(_ event: UploadEvent) -> Bool { ends.withLock { $0.contains(event.name) } }

    func upload(_ event: UploadEvent) {
        switch event {
        case .paused, .cancelled:
            guard ends.withLock({ $0.insert(event.name).inserted }) else { return }
        default: break
        }
        observer.upload(event)
        guard case .progress(_, let p) = event else { return }
        let now = ProcessInfo.processInfo.systemUptime
        let due = state.withLock { s -> Bool in
            s.ack = max(s.ack, p.acknowledged)
            if now - s.written >= 2 { s.written = now; return true }
            return false
        }
        if due { queue?.recordProgress(id, acknowledged: p.acknowledged) }
    }
}
