import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// A private PulseAudio server for one test: its own temporary folder, a unix socket only
/// (anonymous clients, no network), no default modules. It has two microphones, each an ALSA PCM
/// through alsa-lib's `pulse` plugin, defined in `alsaConfigPath`:
/// - `pipePCM` (`cffifo`): a pipe source whose audio, and so whose clock, comes from a
///   `MicrophoneFeeder` writing into `fifoPath`;
/// - `monitorPCM` (`cfmic`): the monitor of a null sink, a plain microphone clocked by the server
///   (CLOCK_MONOTONIC; silent unless something plays into the sink).
/// Beside them, one that is not PulseAudio's: `stuckPCM` (`cfstuck`), alsa-lib's `file` plugin
/// over its `null` PCM, whose samples are read (read(2), blocking) from the FIFO `stuckFIFOPath`:
/// opening it waits for a writer, and while a writer holds the FIFO open with nothing in it, a
/// read never returns (a device whose driver hung). A `MicrophoneFeeder(fifo:)` paces it. It is
/// left out of alsa-lib's name hints, so listing the microphones does not open it.
/// Both are 48 kHz stereo s16le inside the server; a client may ask for any rate or channel count
/// (the server converts). `stop()` (or deinit) kills the server and removes the folder.
/// `@unchecked Sendable`: `process` is read and written under `lock`; the rest is immutable.
public final class PulseAudioServer: @unchecked Sendable {
    public static let pipePCM = "cffifo"
    public static let monitorPCM = "cfmic"
    public static let stuckPCM = "cfstuck"
    /// The pipe source's PulseAudio name (what `parec --device` takes).
    public static let pipeSourceName = "fifo"

    public let directory: URL
    public let socketPath: String
    public let fifoPath: String
    public let stuckFIFOPath: String
    public let alsaConfigPath: String
    private var process: SpawnedProcess?
    private let lock = NSLock()

    /// What a child process (or alsa-lib in this process, `useInThisProcess`) needs to see the
    /// test microphones: `ALSA_CONFIG_PATH` (the stock configuration plus the test PCMs) and
    /// `PULSE_SERVER` (for PulseAudio's own clients and ALSA's `pulse`/`default` PCMs).
    public var environment: [String: String] {
        ["ALSA_CONFIG_PATH": "/usr/share/alsa/alsa.conf:\(alsaConfigPath)", "PULSE_SERVER": "unix:\(socketPath)"]
    }

    /// Starts a server and waits until it answers (`pactl info`), at most `timeout` seconds.
    public static func start(timeout: Double = 10) throws -> PulseAudioServer {
        let s = try PulseAudioServer()
        do { try s.launch(timeout: timeout) } catch {
            s.stop()
            throw error
        }
        return s
    }

    private init() throws {
        directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("clipflow-pulse-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let run = directory.appendingPathComponent("run"), home = directory.appendingPathComponent("home")
        for d in [run, home] { try FileManager.default.createDirectory(at: d, withIntermediateDirectories: true) }
        socketPath = run.appendingPathComponent("native").path
        fifoPath = run.appendingPathComponent("fifo").path
        stuckFIFOPath = run.appendingPathComponent("stuck").path
        guard mkfifo(stuckFIFOPath, 0o600) == 0 else { throw ServerError("cannot make the FIFO \(stuckFIFOPath): \(String(cString: strerror(errno)))") }
        alsaConfigPath = directory.appendingPathComponent("asound.conf").path
        let script = """
            load-module module-native-protocol-unix socket=\(socketPath) auth-anonymous=1
            load-module module-null-sink sink_name=cf rate=48000 channels=2 format=s16le sink_properties=device.description=clipflow-null
            load-module module-pipe-source source_name=\(Self.pipeSourceName) file=\(fifoPath) rate=48000 channels=2 format=s16le
            set-default-sink cf
            set-default-source cf.monitor

            """
        try script.write(to: directory.appendingPathComponent("pa.pa"), atomically: true, encoding: .utf8)
        let alsa = """
            pcm.\(Self.monitorPCM) { type pulse server "unix:\(socketPath)" device "cf.monitor" hint { show on description "clipflow test mic (null sink monitor)" } }
            pcm.\(Self.pipePCM) { type pulse server "unix:\(socketPath)" device "\(Self.pipeSourceName)" hint { show on description "clipflow test mic (harness-clocked pipe)" } }
            pcm.\(Self.stuckPCM) { type file slave.pcm "null" file "/dev/null" infile "\(stuckFIFOPath)" format "raw" hint { show off } }

            """
        try alsa.write(toFile: alsaConfigPath, atomically: true, encoding: .utf8)
    }

    deinit { stop() }

    private func launch(timeout: Double) throws {
        var env = ProcessInfo.processInfo.environment
        env["HOME"] = directory.appendingPathComponent("home").path
        env["PULSE_RUNTIME_PATH"] = directory.appendingPathComponent("run").path
        env["PULSE_STATE_PATH"] = directory.appendingPathComponent("run").path
        env.removeValue(forKey: "PULSE_SERVER")
        let p = try SpawnedProcess(
            [
                "pulseaudio", "-n", "-F", directory.appendingPathComponent("pa.pa").path, "--daemonize=no", "--exit-idle-time=-1",
                "--use-pid-file=no", "--system=false", "--log-target=file:\(directory.appendingPathComponent("pa.log").path)",
                "--log-level=notice"
            ], environment: env)
        lock.withLock { process = p }
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if !p.isRunning { throw ServerError("pulseaudio exited before answering:\n\(log.suffix(3000))") }
            if FileManager.default.fileExists(atPath: socketPath), (try? pactl(["info"])) != nil { return }
            usleep(25_000)
        }
        throw ServerError("pulseaudio did not answer within \(timeout) s:\n\(log.suffix(3000))")
    }

    /// The server's log.
    public var log: String { (try? String(contentsOf: directory.appendingPathComponent("pa.log"), encoding: .utf8)) ?? "" }

    /// Runs `pactl` against this server; its standard output.
    @discardableResult
    public func pactl(_ args: [String]) throws -> String {
        let r = try Run.run(["pactl", "--server=unix:\(socketPath)"] + args)
        return r.out
    }

    /// Sets `environment` in this process, so that alsa-lib here sees the test microphones
    /// (alsa-lib rereads its configuration when `ALSA_CONFIG_PATH` names other files).
    public func useInThisProcess() {
        for (k, v) in environment { setenv(k, v, 1) }
    }

    /// SIGKILL now, as a crash ends it: its clients find their connections dropped mid-stream.
    /// The folder (and the log) stays until `stop()`.
    public func kill() {
        lock.withLock { process }?.kill()
    }

    /// SIGKILL (instant; PulseAudio's own shutdown takes about 2 s), then removes the folder.
    public func stop() {
        guard
            let p = lock.withLock({ () -> SpawnedProcess? in
                defer { process = nil }; return process
            })
        else { return }
        p.kill()
        try? FileManager.default.removeItem(at: directory)
    }
}
