import ClipFlowCore
import Foundation
import Subprocess
import Synchronization
import SystemPackage

/// Runs one `clipflow serve-worker` process (this server's own binary) and waits for it:
/// its stdout's lines go to `line` as they come, its stderr (the last 4 KiB) is the reason of a
/// failure. A worker that writes no line for `stall` seconds is taken to hang and killed. The
/// worker's stdin is a pipe this side writes nothing to but a spare's step (`WorkerSpares`):
/// when the server dies, the kernel closes it and the worker ends itself. Cancelling the waiting
/// task stops the worker: SIGTERM, which cancels its graph (its stages remove what they were
/// writing), then SIGKILL if it still runs `stopGrace` seconds later.
/// The worker's environment is the server's without its `CLIPFLOW_` variables (the API key and
/// other settings of the server; a worker reads none of them).
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

    /// Runs the step `pipeline` in a `clipflow serve-worker` at CPU priority `nice`, bounded to
    /// `memoryLimit` bytes (0: no bound): the spare of `spares` when given and the step runs at
    /// the server's priority (the next spare is started then), else a worker started for it.
    /// `started` gets the worker once it has the step (to kill it from elsewhere).
    static func run(
        pipeline: String, nice: Int32, memoryLimit: Int64, spares: WorkerSpares?, stall: Double, line: @escaping @Sendable (String) -> Void,
        started: @escaping @Sendable (StartedWorker) -> Void = { _ in }
    ) async throws -> Outcome {
        let spares = nice == 0 ? spares : nil
        let heard = LastHeard()
        var worker: StartedWorker?
        if let spare = spares?.take(), await spare.assign(WorkerAssignment(pipeline: pipeline, line: line, heard: heard)) { worker = spare }
        if worker == nil {
            let own = StartedWorker([pipeline] + (nice != 0 ? ["--nice", String(nice)] : []), memoryLimit: memoryLimit)
            _ = await own.assign(WorkerAssignment(pipeline: nil, line: line, heard: heard))
            worker = own
        }
        guard let worker else { return .died("no processing worker") }
        spares?.refill()
        started(worker)
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
                    if hung { worker.signal(.kill) }
                }
            }
            defer { watchdog.cancelAll() }
            return await Self.wait(for: worker, memoryLimit: memoryLimit)
        }
        let killedAsHung = heard.time.withLock { last -> Bool in
            defer { last = nil }
            return last == -1
        }
        return killedAsHung ? .died("the processing worker made no progress for \(Int(stall)) s") : ended
    }

    /// Waits for `worker` to end; cancelling the task stops it (SIGTERM, then SIGKILL after
    /// `stopGrace`).
    private static func wait(for worker: StartedWorker, memoryLimit: Int64) async -> Outcome {
        let ended = await withTaskCancellationHandler {
            await worker.ended
        } onCancel: {
            worker.signal(.terminate)
            Task {
                try? await Task.sleep(for: .seconds(stopGrace))
                worker.signal(.kill)
            }
        }
        switch ended {
        case .notStarted(let why): return .died("cannot start a processing worker: \(why)")
        case .lost(let why): return .died("the processing worker could not be followed: \(why)")
        case .exited(let status, let message): return outcome(status, message, memoryLimit: memoryLimit)
        }
    }

    /// How a worker that ended with `status` and wrote `message` ended. Under a memory bound, an
    /// end that running out of memory makes (one of `outOfMemorySignals`, or a message with one of
    /// `outOfMemoryTexts`) says that it may have been the bound.
    static func outcome(_ status: TerminationStatus, _ message: String, memoryLimit: Int64) -> Outcome {
        let bound = memoryLimit > 0 ? " (it may have exceeded --worker-memory \(memoryLimit >> 20) MiB)" : ""
        let code: Int32
        switch status {
        case .signaled(let signal):
            return .died("the processing worker was killed by \(signalName(signal))" + (outOfMemorySignals.contains(signal) ? bound : ""))
        case .exited(let c): code = c
        }
        switch WorkerExit(rawValue: code) {
        case .finished: return .finished
        case .failed:
            if message.isEmpty { return .failed("the processing worker failed without a reason") }
            return .failed(message + (outOfMemoryTexts.contains { message.contains($0) } ? bound : ""))
        case .diskFull: return .diskFull(message)
        case .stopped: return .died("the processing worker was stopped")
        case .orphaned, nil: return .died("the processing worker exited with status \(code)")
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
final class LastHeard: Sendable {
    let time = Mutex<Double?>(Date().timeIntervalSince1970)
}

/// What a worker is given: its step (`pipeline`, to write on a spare's stdin; nil when it was
/// started with it), where its stdout's lines go, and the clock of the last one.
struct WorkerAssignment: Sendable {
    var pipeline: String?
    var line: @Sendable (String) -> Void
    var heard: LastHeard
}

/// A `clipflow serve-worker` process (this server's own binary) from its start to its end,
/// through swift-subprocess: spawned with three pipes, its end and status awaited, and signalled
/// through its pidfd (never a pid the kernel may have given to another process since). Its task
/// waits for its assignment (`assign`: at once for a worker started for its step; a spare's when a
/// step takes it, `WorkerSpares`), writes a spare's step on its stdin, then hands on its stdout's
/// lines and keeps the last 4 KiB of its stderr (the reason of a failure) until both close. Its
/// stdin stays open until then: when the server dies, the kernel closes it and the worker ends
/// itself. Thread-safe.
final class StartedWorker: Sendable {
    /// How it ended.
    enum End: Sendable {
        case notStarted(String)
        case exited(TerminationStatus, String)
        /// It started, then could not be followed (its pipes or its end failed); it was ended.
        case lost(String)
    }

    typealias Given = (assignment: WorkerAssignment, accepted: CheckedContinuation<Bool, Never>)

    private enum HandOff {
        /// No assignment yet; the process's task waits for one (or not yet).
        case waiting(CheckedContinuation<Given?, Never>?)
        /// Given before the process's task asked for it.
        case given(Given)
        /// Taken by the process's task, or the worker was dismissed.
        case over
    }

    private let handOff = Mutex<HandOff>(.waiting(nil))
    /// Sends a signal while the process runs (through swift-subprocess's `Execution`); nil before
    /// it started and once it ended.
    private let signaller = Mutex<(@Sendable (Signal) -> Void)?>(nil)
    private let task = Mutex<Task<End, Never>?>(nil)

    /// Starts `clipflow serve-worker ARGUMENTS --memory-limit N`.
    init(_ arguments: [String], memoryLimit: Int64) {
        let environment = WorkerProcess.environment.map { Array("\($0.key)=\($0.value)\0".utf8) }
        let arguments = Arguments(["serve-worker"] + arguments + ["--memory-limit", String(memoryLimit)])
        let started = Task { [self] () -> End in
            do {
                let result = try await Subprocess.run(
                    .path(FilePath(WorkerProcess.executable)), arguments: arguments, environment: .custom(environment), input: .inputWriter,
                    output: .sequence, error: .sequence
                ) { execution -> String in
                    signaller.withLock { $0 = { signal in try? execution.send(signal: signal) } }
                    defer { signaller.withLock { $0 = nil } }
                    guard let given = await assignment() else {
                        try? await execution.standardInputWriter.finish()
                        return try await Self.drain(execution.standardOutput, execution.standardError, to: nil)
                    }
                    if let pipeline = given.assignment.pipeline {
                        let line = pipeline + "\n"
                        let sent = (try? await execution.standardInputWriter.write(line)) ?? 0
                        given.accepted.resume(returning: sent == line.utf8.count)
                        if sent != line.utf8.count {
                            // The spare did not take its step: its stdin closes, and it ends.
                            try? await execution.standardInputWriter.finish()
                            return try await Self.drain(execution.standardOutput, execution.standardError, to: nil)
                        }
                    } else {
                        given.accepted.resume(returning: true)
                    }
                    let message = try await Self.drain(execution.standardOutput, execution.standardError, to: given.assignment)
                    try? await execution.standardInputWriter.finish()
                    return message
                }
                return .exited(result.terminationStatus, result.closureResult)
            } catch {
                // An assignment never taken: the process did not start. It is answered (a step
                // started for it then waits for this end, which says why; a spare's step starts
                // its own).
                if let given = self.takeBack() {
                    given.accepted.resume(returning: given.assignment.pipeline == nil)
                    return .notStarted("\(error)")
                }
                // Started, then its pipes or its end could not be followed (swift-subprocess ends it).
                return .lost("\(error)")
            }
        }
        task.withLock { $0 = started }
    }

    /// How it ended, once it has.
    var ended: End {
        get async { await task.withLock { $0 }!.value }
    }

    /// Sends `signal` if it still runs: under the lock the process's task clears the sender with
    /// before its pidfd is closed, so a signal never reaches a descriptor reused since.
    func signal(_ signal: Signal) { signaller.withLock { $0?(signal) } }

    /// Gives it its step; whether it took it (false: a spare that ended, or whose stdin would not
    /// take the step, which then ends; or one already given or dismissed).
    func assign(_ assignment: WorkerAssignment) async -> Bool {
        await withCheckedContinuation { (accepted: CheckedContinuation<Bool, Never>) in
            let given: Given = (assignment, accepted)
            let outcome = handOff.withLock { h -> (taken: Bool, waiter: CheckedContinuation<Given?, Never>?) in
                guard case .waiting(let waiter) = h else { return (false, nil) }
                h = waiter == nil ? .given(given) : .over
                return (true, waiter)
            }
            if !outcome.taken { accepted.resume(returning: false) }
            outcome.waiter?.resume(returning: given)
        }
    }

    /// Ends a spare that never got a step: its stdin closes, and a waiting spare exits.
    func dismiss() {
        let waiter = handOff.withLock { h -> CheckedContinuation<Given?, Never>? in
            guard case .waiting(let w) = h else { return nil }
            h = .over
            return w
        }
        waiter?.resume(returning: nil)
    }

    /// The assignment, once given (nil: dismissed).
    private func assignment() async -> Given? {
        await withCheckedContinuation { (waiter: CheckedContinuation<Given?, Never>) in
            let ready = handOff.withLock { h -> Given?? in
                switch h {
                case .waiting:
                    h = .waiting(waiter)
                    return .none
                case .given(let given):
                    h = .over
                    return .some(given)
                case .over: return .some(nil)
                }
            }
            if case .some(let given) = ready { waiter.resume(returning: given) }
        }
    }

    /// An assignment given that the process's task never took (it could not start).
    private func takeBack() -> Given? {
        handOff.withLock { h in
            defer { h = .over }
            if case .given(let given) = h { return given }
            return nil
        }
    }

    /// Reads `output` (each line to the assignment's `line`, when there is one) and `errors` (its
    /// last 4 KiB, returned) until both close.
    private static func drain(_ output: SubprocessOutputSequence, _ errors: SubprocessOutputSequence, to assignment: WorkerAssignment?) async throws
        -> String
    {
        async let message = { () async throws -> String in
            var tail: [UInt8] = []
            for try await chunk in errors {
                chunk.withUnsafeBytes { tail.append(contentsOf: $0) }
                if tail.count > 4096 { tail.removeFirst(tail.count - 4096) }
            }
            return String(decoding: tail, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        }()
        // Lines end at "\n" only (a JSON event may hold a U+2028 in a name); a line of over 16 MiB
        // (no event is) ends the reading, and the worker.
        for try await text in output.strings(separatedBy: .unicodeScalarSequence(["\n"]), bufferingPolicy: .maxLineLength(16 << 20)) {
            guard let assignment else { continue }
            assignment.heard.time.withLock { if let at = $0, at >= 0 { $0 = Date().timeIntervalSince1970 } }
            assignment.line(text)
        }
        return try await message
    }
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
        guard wanted else { return }
        let started = StartedWorker(["--spare"], memoryLimit: memoryLimit)
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
