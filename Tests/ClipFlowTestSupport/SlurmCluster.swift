import Foundation

/// A real one-node Slurm (Debian's slurm-wlm: munged, slurmctld, slurmd) on 127.0.0.1, started by
/// `deploy/slurm/local-cluster.sh` into its own temporary folder and stopped by `stop()` (or
/// deinit). A watchdog stops it too when the test process dies or after `maxSeconds`, so the
/// daemons (which detach from the test process) never outlive the tests.
///
/// Without an accounting database there is no `sacct`: task states come from `scontrol show job`
/// (finished jobs stay visible for an hour), and `completions` reads the cluster's jobcomp log
/// (one line each time a task ends, requeues included). Not thread-safe: one test drives it.
public final class SlurmCluster: @unchecked Sendable {
    /// The repository's root, three folders above this file.
    public static let repositoryRoot: URL = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    public static let controlScript = repositoryRoot.appendingPathComponent("deploy/slurm/local-cluster.sh").path
    /// The array-job script users submit: `sbatch --array=0-(N-1) clipflow-batch.sbatch PIPELINE ROWS`.
    public static let clipflowBatchScript = repositoryRoot.appendingPathComponent("deploy/slurm/clipflow-batch.sbatch")

    /// Everything of this cluster: slurm.conf, state, spool, log/ (slurmctld.log, slurmd.log,
    /// munged.log, jobcomp.log), and jobs/ (the scripts submitted and the tasks' output).
    public let directory: URL
    /// SLURM_CONF, for every Slurm command aimed at this cluster.
    public let environment: [String: String]
    private let watchdog: Process
    private var stopped = false

    /// Whether this machine can run the cluster: root, and the Slurm and munge daemons installed.
    public static var isAvailable: Bool {
        getuid() == 0 && ["/usr/sbin/slurmctld", "/usr/sbin/slurmd", "/usr/sbin/munged"].allSatisfy { FileManager.default.isExecutableFile(atPath: $0) }
    }

    /// Starts the daemons and returns once the node is idle. `requeueDelay`: seconds a requeued
    /// task waits before it may start again (Slurm's AuthInfo cred_expire).
    public static func start(requeueDelay: Int = 20, maxSeconds: Int = 1200) throws -> SlurmCluster {
        let directory = URL(fileURLWithPath: "/tmp").appendingPathComponent("clipflow-slurm-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: directory.appendingPathComponent("jobs"), withIntermediateDirectories: true)
        let control = ["CLIPFLOW_SLURM_DIR": directory.path, "CLIPFLOW_SLURM_CRED_EXPIRE": String(requeueDelay)]
        // Started before the daemons, so that a start failing half-way is cleaned up too.
        let watchdog = try startWatchdog(directory: directory, maxSeconds: maxSeconds)
        let started = try Run.run([controlScript, "start"], env: control, check: false)
        let cluster = SlurmCluster(directory: directory, watchdog: watchdog)
        guard started.status == 0 else {
            cluster.stop()
            throw ServerError("local-cluster.sh start exited \(started.status): \(started.stderr.suffix(3000))")
        }
        return cluster
    }

    /// `bash` polling the test process: once it is gone, or after `maxSeconds`, it runs
    /// `local-cluster.sh stop` and deletes the folder. It ignores SIGHUP/SIGINT so that it survives the test run's end.
    private static func startWatchdog(directory: URL, maxSeconds: Int) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/bin/bash")
        let script = """
            trap '' HUP INT
            trap 'exit 0' TERM
            end=$((SECONDS + \(maxSeconds)))
            while kill -0 \(getpid()) 2>/dev/null && [ $SECONDS -lt $end ]; do sleep 1; done
            CLIPFLOW_SLURM_DIR='\(directory.path)' '\(controlScript)' stop
            rm -rf '\(directory.path)'
            """
        p.arguments = ["-c", script]
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        return p
    }

    private init(directory: URL, watchdog: Process) {
        self.directory = directory
        self.watchdog = watchdog
        self.environment = ["SLURM_CONF": directory.appendingPathComponent("slurm.conf").path]
    }

    deinit { stop() }

    /// Cancels every job, stops the daemons and every job process (`local-cluster.sh stop`),
    /// ends the watchdog and deletes the folder.
    public func stop() {
        guard !stopped else { return }
        stopped = true
        _ = try? Run.run([Self.controlScript, "stop"], env: ["CLIPFLOW_SLURM_DIR": directory.path], check: false)
        if watchdog.isRunning {
            watchdog.terminate()
            watchdog.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: directory)
    }

    /// A Slurm command (`squeue`, `scontrol`, ...) aimed at this cluster.
    @discardableResult
    public func command(_ args: [String], check: Bool = true) throws -> Run {
        try Run.run(args, env: environment, check: check)
    }

    // MARK: Jobs

    /// Submits `script` (a file) as an array job of `tasks`, with `arguments` after the script, run
    /// in `workingDirectory`. The tasks see the test process's environment plus `environment`
    /// (sbatch's default --export=ALL). Each task's output goes to `output(job:task:)`. Returns the
    /// array's job id.
    public func submitArray(
        script: URL, arguments: [String] = [], tasks: ClosedRange<Int>, environment: [String: String] = [:],
        workingDirectory: URL, options: [String] = []
    ) throws -> Int {
        let outputPattern = directory.appendingPathComponent("jobs/%A_%a.out").path
        let r = try Run.run(
            ["sbatch", "--parsable", "--array=\(tasks.lowerBound)-\(tasks.upperBound)", "--chdir=\(workingDirectory.path)", "--output=\(outputPattern)"]
                + options + [script.path] + arguments,
            env: self.environment.merging(environment) { _, given in given }, check: false)
        guard r.status == 0, let id = Int(r.out.split(separator: ";").first?.trimmingCharacters(in: .whitespacesAndNewlines) ?? "") else {
            throw ServerError("sbatch of \(script.lastPathComponent) exited \(r.status): \(r.stderr) \(r.out)")
        }
        return id
    }

    /// Submits a script given as text (written to jobs/NAME.sh), as `submitArray(script:...)`.
    public func submitArray(
        scriptText: String, name: String, arguments: [String] = [], tasks: ClosedRange<Int>, environment: [String: String] = [:],
        workingDirectory: URL, options: [String] = []
    ) throws -> Int {
        let file = directory.appendingPathComponent("jobs/\(name).sh")
        try scriptText.write(to: file, atomically: true, encoding: .utf8)
        chmod(file.path, 0o755)
        return try submitArray(
            script: file, arguments: arguments, tasks: tasks, environment: environment, workingDirectory: workingDirectory, options: options)
    }

    /// What one array task printed (stdout and stderr), every attempt of it.
    public func output(job: Int, task: Int) -> String {
        (try? String(contentsOf: directory.appendingPathComponent("jobs/\(job)_\(task).out"), encoding: .utf8)) ?? ""
    }

    /// One array task as `scontrol show job` reports it.
    public struct Task: Equatable, CustomStringConvertible {
        public var task: Int
        /// PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ...
        public var state: String
        /// The batch script's exit status (the first half of Slurm's ExitCode=status:signal).
        public var exitStatus: Int
        /// The signal that ended it, if any (the second half).
        public var signal: Int
        /// How many times it was requeued.
        public var restarts: Int
        public var reason: String

        public static let endStates: Set<String> = [
            "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"
        ]
        public var hasEnded: Bool { Self.endStates.contains(state) }
        public var description: String { "task \(task): \(state) exit \(exitStatus):\(signal) restarts \(restarts) (\(reason))" }
    }

    /// Every task of array `job`, by task index. Tasks not yet started may be listed by Slurm as
    /// one range ("ArrayTaskId=4-7"): each gets that record.
    public func tasks(job: Int) throws -> [Int: Task] {
        let r = try command(["scontrol", "show", "job", String(job), "--oneliner"], check: false)
        guard r.status == 0 else { throw ServerError("scontrol show job \(job) exited \(r.status): \(r.stderr)") }
        var tasks: [Int: Task] = [:]
        for line in r.out.split(separator: "\n") {
            let fields = Self.fields(String(line))
            guard let ids = fields["ArrayTaskId"], let state = fields["JobState"] else { continue }
            let exit = (fields["ExitCode"] ?? "0:0").split(separator: ":").map { Int($0) ?? -1 }
            for id in Self.taskIndexes(ids) {
                tasks[id] = Task(
                    task: id, state: state, exitStatus: exit.first ?? -1, signal: exit.count > 1 ? exit[1] : 0,
                    restarts: Int(fields["Restarts"] ?? "") ?? 0, reason: fields["Reason"] ?? "")
            }
        }
        return tasks
    }

    /// Waits (polling every `pollInterval` seconds, at most `timeout`) until `condition` holds for
    /// the array's tasks; returns them.
    public func wait(
        job: Int, timeout: TimeInterval, for what: String, pollInterval: TimeInterval = 0.25, until condition: ([Int: Task]) -> Bool
    ) throws -> [Int: Task] {
        let deadline = Date().addingTimeInterval(timeout)
        var last: [Int: Task] = [:]
        while Date() < deadline {
            last = try tasks(job: job)
            if condition(last) { return last }
            usleep(UInt32(pollInterval * 1_000_000))
        }
        throw ServerError("job \(job): not \(what) after \(Int(timeout)) s: \(last.values.sorted { $0.task < $1.task }.map(\.description))")
    }

    /// Waits until every task of the array has ended (completed, failed, cancelled, ...).
    public func waitUntilEnded(job: Int, timeout: TimeInterval) throws -> [Int: Task] {
        try wait(job: job, timeout: timeout, for: "ended") { !$0.isEmpty && $0.values.allSatisfy(\.hasEnded) }
    }

    /// Waits until some task runs and returns its index (the lowest one running).
    public func waitForRunningTask(job: Int, timeout: TimeInterval) throws -> Int {
        let tasks = try wait(job: job, timeout: timeout, for: "running") { $0.values.contains { $0.state == "RUNNING" } }
        guard let task = tasks.values.filter({ $0.state == "RUNNING" }).map(\.task).min() else { throw ServerError("job \(job): no task running") }
        return task
    }

    /// `scancel JOB_TASK`: Slurm sends SIGTERM to every process of the task, SIGKILL after KillWait
    /// (15 s); the task ends CANCELLED.
    public func cancel(job: Int, task: Int) throws {
        try command(["scancel", "\(job)_\(task)"])
    }

    /// `scontrol requeue JOB_TASK`: a running task is ended and put back to pending, an ended one
    /// (cancelled, failed, completed) is put back to pending; it starts again after the requeue delay.
    public func requeue(job: Int, task: Int) throws {
        try command(["scontrol", "requeue", "\(job)_\(task)"])
    }

    /// Each time a task of `job` ended, in order (requeued runs included): from jobcomp.log.
    public func completions(job: Int) -> [(task: Int, state: String, exitCode: String)] {
        let log = (try? String(contentsOf: directory.appendingPathComponent("log/jobcomp.log"), encoding: .utf8)) ?? ""
        return log.split(separator: "\n").compactMap { line in
            let f = Self.fields(String(line))
            guard f["ArrayJobId"] == String(job), let task = Int(f["ArrayTaskId"] ?? ""), let state = f["JobState"] else { return nil }
            return (task, state, f["ExitCode"] ?? "")
        }
    }

    /// The cluster's daemon logs, for failure messages.
    public var logs: String {
        ["slurmctld.log", "slurmd.log"].map { name in
            let text = (try? String(contentsOf: directory.appendingPathComponent("log/\(name)"), encoding: .utf8)) ?? ""
            return "== \(name)\n" + text.split(separator: "\n").suffix(40).joined(separator: "\n")
        }.joined(separator: "\n")
    }

    // MARK: Parsing Slurm's key=value lines

    /// `Key=Value` words of one line; a value runs to the next space.
    static func fields(_ line: String) -> [String: String] {
        var out: [String: String] = [:]
        for word in line.split(separator: " ") {
            guard let eq = word.firstIndex(of: "=") else { continue }
            out[String(word[..<eq])] = String(word[word.index(after: eq)...])
        }
        return out
    }

    /// "3", "4-7", "1,3-5", "0-9%2" (a throttle after %) -> the indexes.
    static func taskIndexes(_ text: String) -> [Int] {
        let list = text.split(separator: "%").first.map(String.init) ?? text
        return list.split(separator: ",").flatMap { part -> [Int] in
            let ends = part.split(separator: "-").compactMap { Int($0) }
            if ends.count == 2, ends[0] <= ends[1] { return Array(ends[0]...ends[1]) }
            return ends.count == 1 ? ends : []
        }
    }
}
