import ClipFlowCore
import Foundation
import Synchronization

/// Runs one `clipflow serve-worker` process (this server's own binary) and waits for it:
/// its stdout's lines go to `line` as they come, its stderr (the last 4 KiB) is the reason of a
/// failure. A worker that writes no line for `stall` seconds is taken to hang and killed. The
/// worker's stdin is a pipe this side writes nothing to but a spare's step (`WorkerSpares`):
/// when the server dies, the kernel closes it and the worker ends itself. Cancelling the waiting
/// task stops the worker: SIGTERM, which cancels its graph (its stages remove what they were
/// writing), then SIGKILL if it still runs `stopGrace` seconds later.
/// The worker's environment is the server's without its `CLIPFLOW_` variables (the API key and
/// other settings of the server; a worker reads none of them).
/// Blocking waits run on their own threads, never on Swift's cooperative pool.
enum WorkerProcess {
    /// How a worker ended.
    enum Outcome: Equatable, Sendable {
        case finished
        /// It reported that its input cannot be processed (the reason is its stderr).
        case failed(String)
        /// It reported that the disk was full.
        case diskFull(String)
        /// It ended in a way no worker chooses: a signal or an unexpected status ("killed by
        /// SIGSEGV", "exited with status 134").
        case died(String)
    }

    /// The executable that holds the worker command: the image this process runs, through the
    /// kernel's link to it (which works when the file it came from has been replaced or removed
    /// since, as an upgrade in place does; a path read once would name a file that is gone).
    static let executable = "/proc/self/exe"

    /// The server's environment without its `CLIPFLOW_` variables.
    static var environment: [String: String] {
        ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("CLIPFLOW_") }
    }

    /// Seconds a stopped worker has to end by itself before it is killed.
    static let stopGrace: Double = 2

    private static let waits = DispatchQueue(label: "clipflow.serve.workers", attributes: .concurrent)

    /// Runs the step `pipeline` in a `clipflow serve-worker` at CPU priority `nice`, bounded to
    /// `memoryLimit` bytes (0: no bound): the spare of `spares` when given and the step runs at
    /// the server's priority (the next spare is started then), else a worker started for it.
    /// `started` gets the worker's pid once it has the step (to kill it from elsewhere).
    static func run(
        pipeline: String, nice: Int32, memoryLimit: Int64, spares: WorkerSpares?, stall: Double, line: @escaping @Sendable (String) -> Void,
        started: @escaping @Sendable (Int32) -> Void = { _ in }
    ) async throws -> Outcome {
        let spares = nice == 0 ? spares : nil
        let worker: StartedWorker
        if let spare = spares?.take()?.handed(pipeline) {
            worker = spare
        } else {
            do {
                worker = try StartedWorker([pipeline] + (nice != 0 ? ["--nice", String(nice)] : []), memoryLimit: memoryLimit)
            } catch {
                return .died("cannot start a processing worker: \(error.localizedDescription)")
            }
        }
        spares?.refill()
        let pid = worker.process.processIdentifier
        started(pid)
        let box = ProcessBox(worker.process)
        let (input, output, errors) = (worker.input, worker.output, worker.errors)
        let heard = LastHeard()
        let ended = try await withThrowingTaskGroup(of: Void.self, returning: Outcome.self) { watchdog in
            // Kills the worker once it has been silent for `stall` seconds.
            watchdog.addTask {
                while !Task.isCancelled {
                    try? await Task.sleep(for: .seconds(min(1, stall / 4)))
                    let hung = heard.time.withLock { last -> Bool in
                        guard let at = last, at >= 0, Date().timeIntervalSince1970 - at > stall else { return false }
                        last = -1
                        return true
                    }
                    if hung { kill(pid, SIGKILL) }
                }
            }
            defer { watchdog.cancelAll() }
            return try await Self.wait(for: box, pid: pid, input: input, output: output, errors: errors, heard: heard, memoryLimit: memoryLimit, line: line)
        }
        let killedAsHung = heard.time.withLock { last -> Bool in
            defer { last = nil }
            return last == -1
        }
        return killedAsHung ? .died("the processing worker made no progress for \(Int(stall)) s") : ended
    }

    /// Reads the worker's stdout (each line to `line`) and stderr until they close, and waits for it
    /// to end; cancelling the task stops it (SIGTERM, then SIGKILL after `stopGrace`).
    private static func wait(
        for box: ProcessBox, pid: Int32, input: Pipe, output: Pipe, errors: Pipe, heard: LastHeard, memoryLimit: Int64,
        line: @escaping @Sendable (String) -> Void
    ) async throws -> Outcome {
        try await withTaskCancellationHandler {
            // Its stderr (the last 4 KiB) is read beside its stdout, each on a thread of `waits`.
            async let message = waits.perform { () -> String in
                var tail = Data()
                let handle = errors.fileHandleForReading
                while true {
                    let chunk = handle.availableData
                    if chunk.isEmpty { break }
                    tail.append(chunk)
                    if tail.count > 4096 { tail = tail.suffix(4096) }
                }
                return String(decoding: tail, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            }
            try await waits.perform {
                var pending = Data()
                let handle = output.fileHandleForReading
                while true {
                    let chunk = handle.availableData
                    if chunk.isEmpty { break }
                    pending.append(chunk)
                    heard.time.withLock { if let at = $0, at >= 0 { $0 = Date().timeIntervalSince1970 } }
                    while let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                        line(String(decoding: pending[pending.startIndex..<newline], as: UTF8.self))
                        pending = Data(pending[(newline + 1)...])
                    }
                }
                box.process.waitUntilExit()
            }
            let reason = try await message
            try? input.fileHandleForWriting.close()
            return outcome(box.process.terminationReason, box.process.terminationStatus, reason, memoryLimit: memoryLimit)
        } onCancel: {
            kill(pid, SIGTERM)
            DispatchQueue.global().asyncAfter(deadline: .now() + stopGrace) { if box.process.isRunning { kill(pid, SIGKILL) } }
        }
    }

    /// How a worker that ended with `status` (a signal when `reason` says so) and wrote `message`
    /// ended. Under a memory bound, an end that running out of memory makes (one of
    /// `outOfMemorySignals`, or a message with one of `outOfMemoryTexts`) says that it may have
    /// been the bound.
    static func outcome(_ reason: Process.TerminationReason, _ status: Int32, _ message: String, memoryLimit: Int64) -> Outcome {
        let bound = memoryLimit > 0 ? " (it may have exceeded --worker-memory \(memoryLimit >> 20) MiB)" : ""
        if reason == .uncaughtSignal {
            return .died("the processing worker was killed by \(signalName(status))" + (outOfMemorySignals.contains(status) ? bound : ""))
        }
        switch WorkerExit(rawValue: status) {
        case .finished: return .finished
        case .failed:
            if message.isEmpty { return .failed("the processing worker failed without a reason") }
            return .failed(message + (outOfMemoryTexts.contains { message.contains($0) } ? bound : ""))
        case .diskFull: return .diskFull(message)
        case .stopped: return .died("the processing worker was stopped")
        case .orphaned, nil: return .died("the processing worker exited with status \(status)")
        }
    }

    /// How a process that runs out of memory ends: killed by the kernel (SIGKILL), a Swift
    /// runtime trap (SIGTRAP, SIGILL), an abort, or a use of an allocation that failed.
    static let outOfMemorySignals: Set<Int32> = [SIGKILL, SIGTRAP, SIGILL, SIGABRT, SIGSEGV, SIGBUS]
    /// How a failed allocation reads in a worker's reason: ENOMEM's text (the C library, FFmpeg's
    /// own allocations) and AVERROR_EXTERNAL's (what FFmpeg reports when an external encoder such
    /// as libx264 cannot open, which with the worker's fixed settings means it could not allocate).
    static let outOfMemoryTexts = [String(cString: strerror(ENOMEM)), "Generic error in an external library"]

    static func signalName(_ signal: Int32) -> String {
        let names: [Int32: String] = [
            SIGSEGV: "SIGSEGV", SIGABRT: "SIGABRT", SIGKILL: "SIGKILL", SIGBUS: "SIGBUS", SIGILL: "SIGILL", SIGFPE: "SIGFPE", SIGTRAP: "SIGTRAP",
            SIGTERM: "SIGTERM", SIGXCPU: "SIGXCPU", SIGXFSZ: "SIGXFSZ", SIGPIPE: "SIGPIPE"
        ]
        return names[signal] ?? "signal \(signal)"
    }
}

/// When a worker last wrote a line: seconds since 1970; nil once it ended, -1 once it was killed
/// as hung. Thread-safe.
private final class LastHeard: Sendable {
    let time = Mutex<Double?>(Date().timeIntervalSince1970)
}

/// A started `Process`, handed to the thread that waits for it (Foundation's `Process` is not
/// `Sendable`; only that thread touches it once it runs).
private final class ProcessBox: @unchecked Sendable {
    let process: Process
    init(_ process: Process) { self.process = process }
}

/// A `clipflow serve-worker` process and its three pipes. Owned by one holder at a time: the
/// spares (under their lock), then the step that takes it; the claim is checked by that hand-over,
/// which the compiler cannot follow out of a lock.
final class StartedWorker: @unchecked Sendable {
    let process: Process
    let input = Pipe(), output = Pipe(), errors = Pipe()

    /// Starts `clipflow serve-worker ARGUMENTS --memory-limit N` (this server's own binary).
    init(_ arguments: [String], memoryLimit: Int64) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: WorkerProcess.executable)
        process.arguments = ["serve-worker"] + arguments + ["--memory-limit", String(memoryLimit)]
        process.environment = WorkerProcess.environment
        process.standardInput = input
        process.standardOutput = output
        process.standardError = errors
        try process.run()
    }

    /// Gives a spare its step: the pipeline's path, a line on its stdin. Nil when it cannot be
    /// given (the spare ended: the write fails with EPIPE, as the server ignores SIGPIPE).
    func handed(_ pipeline: String) -> StartedWorker? {
        guard process.isRunning else { return nil }
        let line = Array((pipeline + "\n").utf8)
        let fd = input.fileHandleForWriting.fileDescriptor
        let sent = line.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        return sent == line.count ? self : nil
    }

    /// Ends a spare that never got a step: its stdin closes, and a waiting spare exits.
    func dismiss() { try? input.fileHandleForWriting.close() }
}

/// The spare of a server's processing: one `clipflow serve-worker --spare` started before any
/// step needs it, its libraries loaded, waiting on its stdin for a step's pipeline (the step
/// that takes it, `WorkerProcess.run`, starts the next). The step is then not kept waiting for a
/// process to start, about 50 ms on a quiet machine and more on a busy one. `close` ends the spare and starts none again. Thread-safe.
final class WorkerSpares: Sendable {
    private let memoryLimit: Int64
    private let state = Mutex<(spare: StartedWorker?, closed: Bool)>((nil, false))

    init(memoryLimit: Int64) { self.memoryLimit = memoryLimit }

    /// The spare, if there is one (it is then no longer the spares').
    func take() -> StartedWorker? {
        state.withLock { s in
            defer { s.spare = nil }
            return s.spare
        }
    }

    /// Starts a spare when there is none (and the spares are not closed). A spare that cannot
    /// start is not retried here: the next step starts its own worker, and tries again.
    func refill() {
        let wanted = state.withLock { !$0.closed && $0.spare == nil }
        guard wanted, let started = try? StartedWorker(["--spare"], memoryLimit: memoryLimit) else { return }
        let extra = state.withLock { s -> StartedWorker? in
            if s.closed || s.spare != nil { return started }
            s.spare = started
            return nil
        }
        extra?.dismiss()
    }

    /// Ends the spare; none is started again.
    func close() {
        state.withLock { s -> StartedWorker? in
            s.closed = true
            defer { s.spare = nil }
            return s.spare
        }?.dismiss()
    }
}
