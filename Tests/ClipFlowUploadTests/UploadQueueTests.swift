import XCTest
import Synchronization
import ClipFlowCore
import ClipFlowTestSupport
@testable import ClipFlowUpload

/// The queue's own logic (ordering, concurrency bound, persistence, pause/resume/cancel/stop,
/// crash recovery) with an uploader that copies files into a folder in steps. The real protocols
/// run under the queue in the CLI tests against real servers.
final class UploadQueueTests: XCTestCase {
    /// Copies the file into `target` in 64 KiB steps (`stepDelay` apart), checking the control
    /// between steps, resuming from what is already there; counts concurrent uploads.
    final class StepUploader: FileUploader, @unchecked Sendable {
        let target: URL
        let stepDelay: Double
        let failFirst: Bool
        static let active = Mutex<(now: Int, peak: Int, discarded: [String], failed: Set<String>)>((0, 0, [], []))
        init(target: URL, stepDelay: Double = 0.01, failFirst: Bool = false) {
            self.target = target
            self.stepDelay = stepDelay
            self.failFirst = failFirst
        }
        var destination: String { "step \(target.path)" }
        func upload(file: String, id: String, metadata: [String: String], control: UploadControl, observer: UploadObserver) throws -> UploadResult {
            StepUploader.active.withLock {
                $0.now += 1; $0.peak = max($0.peak, $0.now)
            }
            defer { StepUploader.active.withLock { $0.now -= 1 } }
            let data = try Data(contentsOf: URL(fileURLWithPath: file))
            let out = target.appendingPathComponent((file as NSString).lastPathComponent)
            var have = (try? Data(contentsOf: out)) ?? Data()
            observer.upload(.started(id: id, file: file, bytes: Int64(data.count), resumedAt: Int64(have.count)))
            if failFirst, StepUploader.active.withLock({ $0.failed.insert(file).inserted }) {
                throw UploadError(.http(500), message: "\(file): server error", retryable: true)
            }
            while have.count < data.count {
                try control.check()
                Thread.sleep(forTimeInterval: stepDelay)
                have.append(data[have.count..<min(data.count, have.count + 65536)])
                try have.write(to: out)
                observer.upload(.progress(id: id, UploadProgress(acknowledged: Int64(have.count), total: Int64(data.count))))
            }
            let result = UploadResult(method: "step", bytes: Int64(data.count), url: out.path)
            observer.upload(.finished(id: id, result))
            return result
        }
        func discard(file: String) throws {
            StepUploader.active.withLock { $0.discarded.append(file) }
            try? FileManager.default.removeItem(at: target.appendingPathComponent((file as NSString).lastPathComponent))
        }
    }

    var dir: URL!
    var target: URL!
    var files: [String] = []
    let destination = UploadDestination(method: .tus, endpoint: "http://127.0.0.1:1/files")

    override func setUpWithError() throws {
        dir = Fixtures.shared.scratch("queue-\(name.filter(\.isLetter))")
        target = dir.appendingPathComponent("server")
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        files = try (0..<5).map { i in
            let f = dir.appendingPathComponent("clip\(i).mp4")
            try Data((0..<(300_000 + i * 1000)).map { UInt8(truncatingIfNeeded: $0 &+ i) }).write(to: f)
            return f.path
        }
        StepUploader.active.withLock { $0 = (0, 0, [], []) }
    }

    func makeQueue(
        _ concurrency: Int = 2, step: Double = 0.01, failFirst: Bool = false, observer: UploadObserver = NoUploadObserver(),
        flag: CancellationFlag? = nil, pollInterval: Double = 0.02
    ) throws -> UploadQueue {
        let t = target!
        return try UploadQueue(
            directory: dir.appendingPathComponent("state").path, concurrency: concurrency, observer: observer,
            cancellation: flag, pollInterval: pollInterval
        ) { _, _ in StepUploader(target: t, stepDelay: step, failFirst: failFirst) }
    }

    /// When each upload started and finished, by file.
    final class Times: UploadObserver, Sendable {
        let seen = Mutex<(started: [String: Date], finished: [String: Date], files: [String: String])>(([:], [:], [:]))
        func upload(_ event: UploadEvent) {
            seen.withLock {
                switch event {
                case .started(let id, let file, _, _): $0.started[file] = Date(); $0.files[id] = file
                case .finished(let id, _): if let f = $0.files[id] { $0.finished[f] = Date() }
                default: break
                }
            }
        }
    }

    /// A file added while the queue runs starts at once (a free slot is there), not at the
    /// runner's next poll nor when the upload already running ends.
    func testAFileAddedWhileTheQueueRunsStartsAtOnce() throws {
        let times = Times()
        let q = try makeQueue(2, step: 0.2, observer: times, pollInterval: 60)
        try q.add(file: files[0], destination: destination)
        let ran = Mutex<[QueueEntry]?>(nil)
        let runner = Thread { ran.withLock { $0 = try? q.run() } }
        runner.start()
        let deadline = Date().addingTimeInterval(10)
        while times.seen.withLock({ $0.started[files[0]] }) == nil, Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        let added = Date()
        try q.add(file: files[1], destination: destination)
        while ran.withLock({ $0 }) == nil, Date() < deadline.addingTimeInterval(10) { Thread.sleep(forTimeInterval: 0.01) }
        XCTAssertEqual(ran.withLock { $0 }?.map(\.state), [.finished, .finished])
        let seen = times.seen.withLock { $0 }
        let started = try XCTUnwrap(seen.started[files[1]]), firstDone = try XCTUnwrap(seen.finished[files[0]])
        XCTAssertLessThan(started, firstDone, "the added file started beside the running one")
        XCTAssertLessThan(started.timeIntervalSince(added), 0.5, "started at once, not at a poll 60 s later")
    }

    func testRunsEverythingWithAtMostTheConcurrencyBoundAndPersists() throws {
        let log = UploadEventLog()
        let q = try makeQueue(2, observer: log)
        let ids = try files.map { try q.add(file: $0, destination: destination, metadata: ["title": "t"]).id }
        XCTAssertEqual(try q.add(file: files[0], destination: destination).id, ids[0], "adding a queued file again returns its entry")
        // Another instance (another process) sees the same queue.
        XCTAssertEqual(try makeQueue().list().map(\.state), Array(repeating: .queued, count: 5))
        let done = try q.run()
        XCTAssertEqual(done.map(\.state), Array(repeating: .finished, count: 5))
        XCTAssertEqual(StepUploader.active.withLock { $0.peak }, 2)
        for f in files {
            XCTAssertEqual(
                try Data(contentsOf: target.appendingPathComponent((f as NSString).lastPathComponent)), try Data(contentsOf: URL(fileURLWithPath: f)))
        }
        XCTAssertEqual(log.named("finished").count, 5)
        XCTAssertEqual(try makeQueue().list().map(\.acknowledged), done.map(\.total))
        try q.prune()
        XCTAssertTrue(try q.list().isEmpty)
    }

    func testPauseHoldsAnUploadUntilResumedAndItContinues() throws {
        let q = try makeQueue(1, step: 0.1)
        let a = try q.add(file: files[0], destination: destination)
        let b = try q.add(file: files[1], destination: destination)
        try q.pause(b.id)
        let runner = Thread { _ = try? q.run() }
        runner.start()
        // Pause a running upload from "another process" (a second queue object on the same files).
        let other = try makeQueue()
        try waitUntil { try other.entry(a.id).state == .running && other.entry(a.id).acknowledged == 0 }
        Thread.sleep(forTimeInterval: 0.1)
        try other.pause(a.id)
        try waitUntil { try other.entry(a.id).state == .paused }
        let partial = (try? Data(contentsOf: target.appendingPathComponent("clip0.mp4")).count) ?? 0
        XCTAssertGreaterThan(partial, 0)
        XCTAssertLessThan(partial, 300_000)
        XCTAssertEqual(try other.entry(b.id).state, .paused)
        try other.resumeAll()
        let final = try q.run()
        XCTAssertEqual(final.map(\.state), [.finished, .finished])
        XCTAssertEqual(try Data(contentsOf: target.appendingPathComponent("clip0.mp4")), try Data(contentsOf: URL(fileURLWithPath: files[0])))
    }

    func testCancelStopsARunningUploadAndDiscardsIt() throws {
        let log = UploadEventLog()
        let q = try makeQueue(1, step: 0.1, observer: log)
        let a = try q.add(file: files[0], destination: destination)
        let b = try q.add(file: files[1], destination: destination)
        try q.cancel(b.id)  // waiting: never runs
        XCTAssertEqual(StepUploader.active.withLock { $0.discarded }, [files[1]])
        let runner = Thread { _ = try? q.run() }
        runner.start()
        try waitUntil { try q.entry(a.id).state == .running }
        Thread.sleep(forTimeInterval: 0.05)
        try q.cancel(a.id)
        try waitUntil { try q.entry(a.id).state == .cancelled && log.named("cancelled").count == 2 }
        XCTAssertEqual(StepUploader.active.withLock { $0.discarded }, [files[1], files[0]], "a cancelled upload is deleted on the server")
        XCTAssertFalse(FileManager.default.fileExists(atPath: target.appendingPathComponent("clip1.mp4").path))
        XCTAssertEqual(log.named("finished").count, 0)
    }

    func testStopAllAndSIGINTLeaveUploadsQueuedForTheNextRun() throws {
        let flag = CancellationFlag()
        let q = try makeQueue(2, step: 0.02, flag: flag)
        for f in files { try q.add(file: f, destination: destination) }
        let finished = Mutex<[QueueEntry]>([])
        let runner = Thread { finished.withLock { $0 = (try? q.run()) ?? [] } }
        runner.start()
        try waitUntil { try q.list().filter { $0.state == .running }.count == 2 }
        flag.cancel()
        try waitUntil { finished.withLock { !$0.isEmpty } }
        XCTAssertEqual(try q.list().filter { $0.state == .queued }.count, 5, "stopped uploads are queued, none lost")
        // The next process (no flag) finishes them, continuing the partial ones.
        XCTAssertEqual(try makeQueue().run().map(\.state), Array(repeating: .finished, count: 5))
    }

    func testAFailedUploadIsKeptWithItsErrorAndResumable() throws {
        let q = try makeQueue(1, failFirst: true)
        let a = try q.add(file: files[0], destination: destination)
        let r = try q.run()
        XCTAssertEqual(r[0].state, .failed)
        XCTAssertEqual(r[0].errorCode, "http-500")
        XCTAssertTrue(r[0].errorMessage!.contains("clip0.mp4"))
        try q.resume(a.id)
        XCTAssertEqual(try q.run().map(\.state), [.finished])
    }

    func testEntriesOfADeadRunnerAreRequeued() throws {
        let q = try makeQueue()
        let a = try q.add(file: files[0], destination: destination)
        // Fake a crash: the entry is running, owned by a process that no longer exists.
        let state = dir.appendingPathComponent("state/queue.json")
        var text = try String(contentsOf: state, encoding: .utf8)
        text = text.replacingOccurrences(of: "\"state\" : \"queued\"", with: "\"owner\" : 999999, \"state\" : \"running\"")
        try text.write(to: state, atomically: true, encoding: .utf8)
        XCTAssertEqual(try q.entry(a.id).state, .running)
        XCTAssertEqual(try q.run().map(\.state), [.finished])
    }

    func testBadInputIsRefusedAtAdd() throws {
        let q = try makeQueue()
        XCTAssertThrowsError(try q.add(file: dir.appendingPathComponent("missing.mp4").path, destination: destination)) {
            XCTAssertTrue("\($0)".contains("missing.mp4"))
        }
        XCTAssertThrowsError(try q.add(file: files[0], destination: UploadDestination(method: .s3, endpoint: "http://x:1"))) {
            XCTAssertTrue("\($0)".contains("bucket"), "\($0)")
        }
        XCTAssertThrowsError(try q.entry("nope")) { XCTAssertTrue("\($0)".contains("nope")) }
    }

    private func waitUntil(_ condition: () throws -> Bool, timeout: Double = 10, file: StaticString = #filePath, line: UInt = #line) throws {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            if try condition() { return }
            Thread.sleep(forTimeInterval: 0.01)
        }
        XCTFail("condition not met within \(timeout) s", file: file, line: line)
        throw UploadError(.internal, message: "timed out")
    }
}
