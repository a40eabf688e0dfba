import Foundation
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The test microphone's sound and clock: writes 48 kHz stereo s16le into a `PulseAudioServer`'s
/// pipe source (or into another FIFO, `init(fifo:ppm:)`), paced by CLOCK_MONOTONIC at `48000 x (1 + ppm / 1e6)` frames per second (so the
/// microphone runs `ppm` fast or slow against the clock the camera's timestamps are on).
///
/// Sound: a quiet 440 Hz tone, plus a loud 1 kHz beep of `beepFrames` frames whose first frame is
/// due at every whole second of CLOCK_MONOTONIC (the instants the emulated camera flashes at).
/// Frame `k` is due at `startTime + k / rate` and written once the last frame of its 10 ms chunk
/// is due. `gap(at:milliseconds:)` skips the frames due in an interval: the microphone delivers
/// nothing then, as after an overrun. `stop()` stops writing (the microphone then stalls).
///
/// With a server, a permanent reader (`parec`, discarding) keeps the server consuming the pipe,
/// so audio never waits in it: a recorder that connects gets the audio of now, not of when it
/// was written.
/// `@unchecked Sendable`: `thread` and `reader` belong to the thread that calls `start` and
/// `stop` (the test's); the writing thread shares only `state` (a mutex) and `running` (atomic).
public final class MicrophoneFeeder: @unchecked Sendable {
    /// A beep written: its frame index in the feeder's stream and the CLOCK_MONOTONIC time its
    /// first frame was due (within one frame after the whole second).
    public struct Beep: Sendable, Equatable {
        public let frame: Int64
        public let time: Double
    }

    public static let labelledRate = 48000
    public static let beepFrames = 2400
    public static let chunkFrames = 480
    public let ppm: Double
    /// Frames per CLOCK_MONOTONIC second.
    public var rate: Double { Double(Self.labelledRate) * (1 + ppm / 1e6) }

    private let server: PulseAudioServer?
    private let fifoPath: String
    private let state = Mutex(State())
    private let running = Atomic<Bool>(false)
    private var thread: Thread?
    private let finished = DispatchSemaphore(value: 0)
    private var reader: SpawnedProcess?

    private struct State {
        var startTime = 0.0
        var beeps: [Beep] = []
        var gaps: [(from: Double, to: Double)] = []
        var framesWritten: Int64 = 0
        var framesSkipped: Int64 = 0
        var framesDropped: Int64 = 0
    }

    public init(server: PulseAudioServer, ppm: Double = 0) {
        self.server = server
        fifoPath = server.fifoPath
        self.ppm = ppm
    }

    /// Writes into `fifo`, which something else reads (and holds open for reading before `start`).
    public init(fifo: String, ppm: Double = 0) {
        server = nil
        fifoPath = fifo
        self.ppm = ppm
    }

    deinit { stop() }

    /// CLOCK_MONOTONIC time frame 0 was due.
    public var startTime: Double { state.withLock { $0.startTime } }
    /// The beeps written so far, in order.
    public var beeps: [Beep] { state.withLock { $0.beeps } }
    public var framesWritten: Int64 { state.withLock { $0.framesWritten } }
    /// Frames not written because they fell in a gap.
    public var framesSkipped: Int64 { state.withLock { $0.framesSkipped } }
    /// Frames not written because the pipe was full (the server stopped reading it).
    public var framesDropped: Int64 { state.withLock { $0.framesDropped } }

    /// Writes nothing for the frames due from CLOCK_MONOTONIC `at` for `milliseconds`.
    public func gap(at: Double, milliseconds: Double) {
        state.withLock { $0.gaps.append((at, at + milliseconds / 1000)) }
    }

    /// Ends the gaps still open at CLOCK_MONOTONIC `at`: the frames due from then on are written.
    public func endGaps(at: Double) {
        state.withLock { s in s.gaps = s.gaps.map { g in (g.from, g.from < at ? min(g.to, at) : g.to) } }
    }

    /// Starts the discarding reader (with a server) and the writing thread (frame 0 is due now).
    public func start() throws {
        if let server {
            var env = ProcessInfo.processInfo.environment
            env.removeValue(forKey: "PULSE_SERVER")
            let p = try SpawnedProcess(
                [
                    "parec", "--server=unix:\(server.socketPath)", "--device=\(PulseAudioServer.pipeSourceName)", "--raw", "--format=s16le",
                    "--rate=48000", "--channels=2", "--latency-msec=20"
                ], environment: env)
            reader = p
        }
        let fd = open(fifoPath, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw ServerError("cannot open \(fifoPath) for writing: \(String(cString: strerror(errno)))") }
        // Wait until the reader is recording, so the pipe is consumed from the first frame.
        for _ in 0..<200 {
            guard let server else { break }
            if ((try? server.pactl(["list", "short", "source-outputs"])) ?? "").contains("\t") { break }
            usleep(10_000)
        }
        running.store(true, ordering: .releasing)
        state.withLock { $0.startTime = Self.now() }
        let t = Thread { [self] in
            write(to: fd)
            close(fd)
            finished.signal()
        }
        thread = t
        t.start()
    }

    /// Stops writing (waits for the writing thread) and kills the reader.
    public func stop() {
        if running.exchange(false, ordering: .acquiringAndReleasing) { finished.wait() }
        thread = nil
        reader?.kill()
        reader = nil
    }

    public static func now() -> Double {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Double(ts.tv_sec) + Double(ts.tv_nsec) / 1e9
    }

    private func write(to fd: Int32) {
        let rate = self.rate, t0 = startTime
        let ch = Self.chunkFrames
        var k: Int64 = 0
        var nextSecond = (t0 + 0.5).rounded(.up)
        var beepStart = Int64(((nextSecond - t0) * rate).rounded(.up))
        var beepEnd: Int64 = 0
        var chunk = [Int16](repeating: 0, count: ch * 2)
        while running.load(ordering: .acquiring) {
            var due = timespec()
            let dueTime = t0 + Double(k + Int64(ch)) / rate
            due.tv_sec = Int(dueTime.rounded(.down))
            due.tv_nsec = Int((dueTime - dueTime.rounded(.down)) * 1e9)
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &due, nil)
            let chunkTime = t0 + Double(k) / rate
            let skipped = state.withLock { s in s.gaps.contains { chunkTime >= $0.from && chunkTime < $0.to } }
            var newBeep: Beep?
            for i in 0..<ch {
                let f = k + Int64(i)
                if f == beepStart {
                    newBeep = Beep(frame: f, time: t0 + Double(f) / rate)
                    beepEnd = f + Int64(Self.beepFrames)
                    nextSecond += 1
                    beepStart = Int64(((nextSecond - t0) * rate).rounded(.up))
                }
                let phase = Double(f) / Double(Self.labelledRate)
                let v = f < beepEnd ? 0.5 * sin(2 * Double.pi * 1000 * phase) : 0.03 * sin(2 * Double.pi * 440 * phase)
                let s = Int16(v * 32767)
                chunk[2 * i] = s
                chunk[2 * i + 1] = s
            }
            if skipped {
                state.withLock { $0.framesSkipped += Int64(ch) }
            } else {
                let n = chunk.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
                state.withLock { s in
                    if n == ch * 4 {
                        s.framesWritten += Int64(ch)
                        if let b = newBeep { s.beeps.append(b) }
                    } else {
                        s.framesDropped += Int64(ch)
                    }
                }
            }
            k += Int64(ch)
        }
    }
}
