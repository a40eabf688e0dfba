import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A child process started with posix_spawn, its standard streams on /dev/null, ended with
/// SIGKILL (`kill()` or deinit). For daemons that close every inherited descriptor at start
/// (PulseAudio): Foundation's `Process` takes that for the child's exit and then blocks the
/// thread that reaps all its children.
final class SpawnedProcess {
    let pid: pid_t
    private var reaped = false

    init(_ arguments: [String], environment: [String: String]) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        for fd: Int32 in [0, 1, 2] { posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0) }
        let argv = arguments.map { strdup($0) } + [nil]
        let envp = environment.map { strdup("\($0.key)=\($0.value)") } + [nil]
        defer { for p in argv + envp { free(p) } }
        var pid: pid_t = 0
        let e = posix_spawnp(&pid, arguments[0], &actions, nil, argv, envp)
        guard e == 0 else { throw ServerError("cannot start \(arguments[0]): \(String(cString: strerror(e)))") }
        self.pid = pid
    }

    deinit { kill() }

    /// Still running (not exited).
    var isRunning: Bool {
        if reaped { return false }
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == pid { reaped = true }
        return !reaped
    }

    /// SIGKILL, then reaps it.
    func kill() {
        guard !reaped else { return }
        _ = Glibc.kill(pid, SIGKILL)
        var status: Int32 = 0
        _ = waitpid(pid, &status, 0)
        reaped = true
    }
}
