import ArgumentParser
import ClipFlowCapture
import ClipFlowCore
import ClipFlowMedia
import Foundation
import Synchronization
#if canImport(Glibc)
    import Glibc
#endif

/// `clipflow record`: a camera (or the test pattern) into clip fragments.
struct Record: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Record clip fragments from a camera (V4L2) or the test pattern.",
        discussion: """
            Pictures are encoded to H.264 (libx264) and audio to AAC, into fragments DIR/<prefix>-NNNN.mp4, \
            each a complete MP4 the moment it is closed. --segment starts a new fragment every N seconds \
            (on a keyframe); --max-duration caps the total over every clip in DIR. SIGINT/SIGTERM (or \
            the camera being unplugged) finalises the open fragment; earlier ones are untouched. With \
            --interactive, type on standard input: p pause (closes the clip), r resume (starts a new one), \
            s split, d delete the last clip, l list, q stop.
            """)

    enum Source: String, ExpressibleByArgument { case testpattern, v4l2 }

    @Option(name: .shortAndLong, help: "Directory for the fragments (created if missing).")
    var output: String
    @Option(help: "Where pictures come from: testpattern or v4l2.")
    var source: Source = .testpattern
    @Option(help: "V4L2 device (--source v4l2).")
    var device = "/dev/video0"
    @Option(help: "Picture size WxH.")
    var size = "1280x720"
    @Option(help: "Frames per second.")
    var fps: Double = 30
    @Option(help: "Pixel format: testpattern yuv420p|nv12|yuyv422; v4l2 auto|yuyv|nv12|yuv420|mjpeg.")
    var format: String?
    @Option(help: "Seconds to record (0: until stopped).")
    var duration: Double = 0
    @Option(help: "Seconds per fragment (0: one fragment until stopped or paused).")
    var segment: Double = 0
    @Option(help: "Stop when the clips in the directory reach this many seconds (0: no cap).")
    var maxDuration: Double = 0
    @Option(help: "libx264 preset (ultrafast ... veryslow). veryfast keeps 720p30 in real time on 2 cores; use ultrafast for 1080p30.")
    var preset = "veryfast"
    @Option(help: "libx264 quality, 0-51 (lower: better and bigger).")
    var crf = 23
    @Option(help: "Fragment name prefix.")
    var prefix = "clip"
    @Flag(help: "Test pattern: produce as fast as the encoder takes it instead of in real time.")
    var fast = false
    @Flag(help: "Test pattern: no audio.")
    var noAudio = false
    @Flag(help: "Read commands from standard input (p, r, s, d, l, q).")
    var interactive = false
    @OptionGroup var flags: OutputFlags

    /// A year: longer than any recording, small enough that frame counts stay exact.
    static let longestSeconds = 366.0 * 86400

    func validate() throws {
        guard parseSize(size) != nil else { throw ValidationError("--size expects WxH with positive even numbers (got '\(size)')") }
        // Checked before any conversion to a frame count: `inf`, `nan` and 1e19 parse as Doubles.
        guard fps.isFinite, fps >= 1, fps <= 240 else { throw ValidationError("--fps expects a number from 1 to 240 (got \(fps))") }
        for (name, v) in [("--duration", duration), ("--segment", segment), ("--max-duration", maxDuration)]
        where !(v.isFinite && v >= 0 && v <= Self.longestSeconds) {
            throw ValidationError("\(name) expects seconds from 0 to \(Int(Self.longestSeconds)) (got \(v))")
        }
        if fast && duration == 0 && source == .testpattern { throw ValidationError("--fast needs --duration (an unpaced test pattern would never end)") }
    }

    func run() throws {
        MediaProcess.tuneAllocator()
        let door = FrontDoor(flags)
        try ErrorReport.run {
            guard let (w, h) = parseSize(size) else { throw ClipFlowError.badInput("--size '\(size)': expected WxH") }
            var o = RecordOptions(directory: output)
            o.prefix = prefix
            o.segmentSeconds = segment
            o.maxSeconds = maxDuration
            o.preset = preset
            o.crf = crf
            if let p = o.problem { throw ClipFlowError.badInput(p) }
            // Handed to the runner; read again for the summary once the run has returned.
            let control = RecordControl()
            let src = try makeSource(width: w, height: h)
            let rec = RecordStage(id: "record", options: o, control: control)
            let nodes = [StageNode(handing: src), StageNode(handing: rec)]
            let quit = QuitFlag()
            let store = ClipStore(directory: output, prefix: prefix)
            let (outcome, runner) = try door.run(
                nodes: nodes, edges: [Edge(from: "camera", to: "record", limits: RecordStage.kind.queue)], grace: 10
            ) { runner in
                if interactive { startCommandReader(control, store: store, runner: runner, quit: quit) }
            }
            let clips = rec.recorder?.clips ?? []
            let total = clips.reduce(0) { $0 + $1.seconds }
            var summary = String(format: "recorded %d clip%@, %.2f s, into %@", clips.count, clips.count == 1 ? "" : "s", total, output)
            // Every picture lost on the way: by the camera (sequence gaps: no buffer was free in
            // time; broken pictures skipped) or the test pattern (late pictures skipped), and on
            // the queue to the encoder.
            let atSource = (src as? V4L2Source).map { $0.droppedFrames + $0.brokenFrames } ?? Int((src as? TestPatternSource)?.skipped ?? 0)
            let inQueue = runner.linkStats.reduce(0) { $0 + $1.stats.dropped }
            if atSource + inQueue > 0 {
                summary +=
                    "; \(atSource + inQueue) picture\(atSource + inQueue == 1 ? "" : "s") dropped (\(atSource) by the \(source == .v4l2 ? "camera" : "test pattern"), \(inQueue) in the queue)"
            }
            switch outcome {
            case .completed:
                if let v = src as? V4L2Source, v.deviceLost {
                    throw ClipFlowError.failure("\(device): the camera went away (unplugged?); \(summary); the open clip was finalised")
                }
                door.say(summary)
            case .interrupted where quit.isSet:
                door.say(summary)
            case .interrupted:
                throw ClipFlowError(.interrupted, "stopped: \(summary); the open clip was finalised")
            case .failed(_, let e):
                throw clips.isEmpty ? e : ClipFlowError(e.kind, "\(e.message)\nkept: \(summary)")
            }
        }
    }

    /// The source stage the options name.
    private func makeSource(width w: Int, height h: Int) throws -> any Stage {
        switch source {
        case .testpattern:
            let fmt = PixelFormat(rawValue: format ?? "yuv420p")
            guard let fmt, fmt != .mjpeg else {
                throw ClipFlowError.badInput("--format '\(format ?? "")': the test pattern makes yuv420p, nv12 or yuyv422")
            }
            var s = TestPatternSettings(width: w, height: h, fps: fps, format: fmt)
            if noAudio { s.sampleRate = 0 }
            return TestPatternSource(id: "camera", settings: s, realtime: !fast, duration: duration)
        case .v4l2:
            let f = format ?? "auto"
            guard f == "auto" || CameraFormat(rawValue: f) != nil else {
                throw ClipFlowError.badInput("--format '\(f)': a V4L2 camera takes auto, yuyv, nv12, yuv420 or mjpeg")
            }
            let request = CaptureRequest(width: w, height: h, fps: fps, format: CameraFormat(rawValue: f))
            return V4L2Source(id: "camera", device: device, request: request, duration: duration)
        }
    }

    /// Reads commands from standard input on a background thread.
    private func startCommandReader(_ control: RecordControl, store: ClipStore, runner: GraphRunner, quit: QuitFlag) {
        let t = Thread {
            while let line = readLine() {
                switch line.trimmingCharacters(in: .whitespaces).lowercased() {
                case "p", "pause": control.send(.pause)
                case "r", "resume", "record": control.send(.resume)
                case "s", "split": control.send(.split)
                case "d", "delete":
                    do {
                        if let p = try store.deleteLast() { print("deleted \(p)") } else { print("no clip to delete") }
                    } catch { print("error: \(error)") }
                case "l", "list": printClips(store)
                case "q", "quit", "stop": quit.set(); runner.stop(deadline: 10)
                case "": continue
                default: print("commands: p pause, r resume, s split, d delete last clip, l list, q stop")
                }
                fflush(nil)
            }
        }
        t.start()
    }
}

/// Set when the user typed q (from the command reader's thread; read after the run).
final class QuitFlag: Sendable {
    private let value = Atomic(false)
    func set() { value.store(true, ordering: .releasing) }
    var isSet: Bool { value.load(ordering: .acquiring) }
}

/// `clipflow clips DIR`: the fragments of a recording; `--delete-last` removes the last one.
struct Clips: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the recorded clips in a directory, or delete the last one.")

    @Argument(help: "Recording directory.") var directory: String
    @Option(help: "Fragment name prefix.") var prefix = "clip"
    @Flag(help: "Delete the last clip (the app's \"delete last clip\").") var deleteLast = false

    func run() throws {
        try ErrorReport.run {
            var isDir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDir), isDir.boolValue else {
                throw ClipFlowError.badInput("'\(directory)' is not a directory")
            }
            let store = ClipStore(directory: directory, prefix: prefix)
            guard deleteLast else { return printClips(store) }
            guard let p = try store.deleteLast() else { throw ClipFlowError.badInput("no clips (\(prefix)-NNNN.mp4) in '\(directory)'") }
            print("deleted \(p)")
        }
    }
}

func printClips(_ store: ClipStore) {
    var total = 0.0
    let files = store.clipFiles()
    for e in files {
        let name = (e.path as NSString).lastPathComponent
        if let info = try? ClipProbe.probe(e.path) {
            total += info.videoSeconds
            print(
                String(
                    format: "%@  %7.2f s  %dx%d  %d frames%@", name, info.videoSeconds, info.video.width, info.video.height,
                    info.video.packets, info.audio == nil ? "  no audio" : ""))
        } else {
            print("\(name)  unreadable")
        }
    }
    print(String(format: "%d clip%@, %.2f s", files.count, files.count == 1 ? "" : "s", total))
}

func parseSize(_ s: String) -> (Int, Int)? {
    let p = s.lowercased().split(separator: "x").compactMap { Int($0) }
    guard p.count == 2, p[0] > 0, p[1] > 0, p[0] % 2 == 0, p[1] % 2 == 0 else { return nil }
    return (p[0], p[1])
}

/// `clipflow devices`: the cameras, their formats, sizes and rates.
struct Devices: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "List V4L2 cameras and ALSA microphones with their formats, sizes, rates and channels.",
        discussion: "No camera here? CLIPFLOW_V4L2_EMULATE=1 puts an emulated vivid camera at /dev/video0 for every command.")

    func run() throws {
        try ErrorReport.run {
            let cams = V4L2Devices.list(syscalls: try V4L2System.defaultSyscalls())
            if cams.isEmpty { print("no cameras found (/dev/video*)") }
            for c in cams { print(c.description) }
            print("")
            for line in MicrophoneListingText.lines() { print(line) }
        }
    }
}
