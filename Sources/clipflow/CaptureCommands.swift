import ArgumentParser
import ClipFlowCapture
import ClipFlowCore
import ClipFlowMedia
import ClipFlowMicrophone
import ClipFlowUpload
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
            each a complete MP4 the moment it is closed. --audio records a microphone (an ALSA capture \
            device) beside the camera, in sync: the recording starts with its first sound (pictures \
            before it are left out), both on one clock, a microphone running fast or slow followed, \
            audio it loses filled with silence of the same length. --segment starts a new \
            fragment every N seconds (on a keyframe); --max-duration caps the total over every clip in \
            DIR. SIGINT/SIGTERM (or the camera being unplugged) finalises the open fragment; earlier ones \
            are untouched. A microphone that goes away (unplugged, its sound server ended or hung) leaves \
            the pictures with silence: the clips are kept, the summary names the seconds without sound \
            and record exits 1. On a terminal one status line shows the open fragment, its time and the \
            total, drops and the audio level. With --interactive, press a key (on a terminal no Enter is \
            needed; otherwise one command a line on standard input): p pause (closes the clip), r resume \
            (starts a new one), s split, d delete the last clip, l list, q stop.
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
    @Option(
        name: .customLong("encoder-preset"),
        help:
            "libx264 speed preset (ultrafast ... veryslow; default veryfast, which keeps 720p30 in real time on 2 cores; use ultrafast for 1080p30)."
    )
    var encoderPreset: String?
    /// The old spelling of --encoder-preset, still accepted.
    @Option(name: .customLong("preset"), help: .hidden)
    var oldPreset: String?
    @Option(help: "libx264 quality, 0-51 (lower: better and bigger).")
    var crf = 23
    @Option(help: "Fragment name prefix.")
    var prefix = "clip"
    @Flag(help: "Test pattern: produce as fast as the encoder takes it instead of in real time.")
    var fast = false
    @Flag(help: "Test pattern: no audio.")
    var noAudio = false
    @Flag(help: "Test pattern: a row of blocks with the wall-clock time each picture was captured, to read delays off the picture.")
    var clock = false
    @Option(
        help: ArgumentHelp(
            "Microphone: an ALSA capture device (default, hw:1,0, plughw:CARD=C920,DEV=0, pulse; 'clipflow devices' lists them), or none. With the test pattern, in place of its tone.",
            valueName: "device"))
    var audio = "none"
    @Option(help: "Microphone sample rate to ask for (the device may offer another).")
    var audioRate = 48000
    @Option(help: "Microphone channels to ask for (the device may offer another count).")
    var audioChannels = 2
    @Flag(
        help: "Take commands while recording: p pause, r resume, s split, d delete the last clip, l list, q stop (key presses on a terminal, lines otherwise).")
    var interactive = false
    @Option(
        help: ArgumentHelp(
            "Publish while recording on a clipflow serve (http://HOST:PORT): each fragment is uploaded as it closes, the video plays live, and is in the feed as soon as the recording stops.",
            valueName: "url"))
    var publish: String?
    @Option(help: "With --publish: the video's name (default: the first fragment's file name).")
    var publishName: String?
    @Flag(help: "With --publish: remove each local fragment once the server has it.")
    var removePublished = false
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
        guard (8000...192_000).contains(audioRate) else { throw ValidationError("--audio-rate expects 8000 to 192000 samples per second (got \(audioRate))") }
        guard (1...32).contains(audioChannels) else { throw ValidationError("--audio-channels expects 1 to 32 (got \(audioChannels))") }
        if audio.isEmpty { throw ValidationError("--audio expects an ALSA device name or none") }
        if encoderPreset != nil && oldPreset != nil {
            throw ValidationError("--preset is the old name of --encoder-preset; give --encoder-preset only")
        }
        if clock && source != .testpattern { throw ValidationError("--clock draws on the test pattern; a camera's pictures are its own") }
        if let publish, !(publish.hasPrefix("http://") || publish.hasPrefix("https://")) {
            throw ValidationError("--publish expects the URL of a clipflow serve, http://HOST:PORT (got '\(publish)')")
        }
        if publish == nil && (publishName != nil || removePublished) { throw ValidationError("--publish-name and --remove-published go with --publish") }
        if publish != nil && segment == 0 {
            throw ValidationError("--publish sends each fragment as it closes: give --segment (seconds per fragment, such as 1)")
        }
    }

    func run() throws {
        MediaProcess.tuneAllocator()
        // The summary tells every picture lost and why: the stages' drop lines would tell it again.
        let door = FrontDoor(flags, tellsDrops: true)
        try ErrorReport.run {
            guard let (w, h) = parseSize(size) else { throw ClipFlowError.badInput("--size '\(size)': expected WxH") }
            var o = RecordOptions(directory: output)
            o.prefix = prefix
            o.segmentSeconds = segment
            o.maxSeconds = maxDuration
            o.preset = encoderPreset ?? oldPreset ?? o.preset
            o.crf = crf
            if let p = o.problem { throw ClipFlowError.badInput(p) }
            // Handed to the runner; read again for the summary once the run has returned.
            let control = RecordControl()
            let status = RecordStatus()
            let src = try makeSource(width: w, height: h)
            let rec = RecordStage(id: "record", options: o, control: control, status: status)
            let mic = audio == "none" ? nil : MicrophoneSource(id: "microphone", device: audio, sampleRate: audioRate, channels: audioChannels)
            var nodes = [StageNode(handing: src), StageNode(handing: rec)]
            var edges = [Edge(from: "camera", to: "record", limits: RecordStage.kind.queue)]
            if let mic {
                // Prepared first: the microphone is open and capturing before the camera starts,
                // and the recording starts with its first sound.
                nodes.insert(StageNode(handing: mic), at: 0)
                edges.append(Edge(from: "microphone", to: "record", limits: RecordStage.kind.queue))
            }
            if let publish {
                let stage = PublishStage(id: "publish", endpoint: publish, name: publishName, removeFragments: removePublished)
                nodes.append(StageNode(handing: stage))
                edges.append(Edge(from: "record", to: "publish", limits: PublishStage.kind.queue))
            }
            let store = ClipStore(directory: output, prefix: prefix)
            let reader = RecordCommandReader(control: control, store: store, status: status)
            let keys = interactive && TerminalKeys.enterRawMode()
            defer { if keys { TerminalKeys.restore() } }
            let (outcome, runner) = try door.run(
                // Publishing sends what the recording closed after it stopped: a second stop gives up.
                nodes: nodes, edges: edges, grace: publish == nil ? 10 : 3600
            ) { runner in
                let prefix = prefix, log = door.log
                let shown = door.renderer.showStatusLine {
                    RecordStatusLine(status: status.snapshot, prefix: prefix, queueDrops: log.dropped("record")).text
                }
                guard interactive else { return }
                // Answers go above the status line where there is one; otherwise to standard
                // output, unless that carries JSON events.
                let reply: @Sendable (String) -> Void
                if shown {
                    reply = { door.say($0) }
                } else if flags.events == .json {
                    reply = { FileHandle.standardError.write(Data(($0 + "\n").utf8)) }
                } else {
                    // Written straight to the descriptor: flushing C streams (`fflush(nil)`) would
                    // wait for standard input's lock, which the command reader holds while it
                    // waits for a line.
                    reply = { FileHandle.standardOutput.write(Data(($0 + "\n").utf8)) }
                }
                if keys { reply(RecordCommand.keys) }
                reader.start(keys: keys, runner: runner, reply: reply)
            }
            reader.close()
            // What exists at the end: a fragment deleted while recording is not counted.
            let clips = (rec.recorder?.clips ?? []).filter { FileManager.default.fileExists(atPath: $0.path) }
            let total = clips.reduce(0) { $0 + $1.seconds }
            var summary = String(format: "recorded %d clip%@, %.2f s, into %@", clips.count, clips.count == 1 ? "" : "s", total, output)
            let camera = src as? V4L2Source
            if let lost = Self.lostPictures(
                camera: camera?.droppedFrames ?? 0, broken: camera?.brokenFrames ?? 0, late: Int((src as? TestPatternSource)?.skipped ?? 0),
                queue: runner.linkStats.reduce(0) { $0 + $1.stats.dropped })
            {
                summary += "; " + lost
            }
            if let r = rec.recorder, r.audioOverruns > 0 {
                summary += String(
                    format: "; audio lost %d time%@ (%.3f s, filled with silence)", r.audioOverruns, r.audioOverruns == 1 ? "" : "s",
                    r.audioLostSeconds)
            }
            // Pictures recorded without the microphone's sound (it went away, or sent nothing in
            // time); at most what exists, when clips were deleted.
            let muteSeconds = min(rec.recorder?.muteSeconds ?? 0, total)
            if mic != nil, muteSeconds >= 0.005 {
                summary += String(format: "; %.2f s without sound", muteSeconds)
            }
            switch outcome {
            case .completed:
                if let v = src as? V4L2Source, v.deviceLost {
                    throw ClipFlowError.failure("\(device): the camera went away (unplugged?); \(summary); the open clip was finalised")
                }
                // A microphone gone before the pictures ended: a mute recording is not a good one.
                if let mic, mic.deviceLost, muteSeconds >= 0.005 {
                    throw ClipFlowError.failure("\(mic.lossReason ?? "microphone '\(audio)' went away"); \(summary); the clips were kept")
                }
                door.say(summary)
            case .interrupted where reader.quit:
                door.say(summary)
            case .interrupted:
                // Paused, no clip was open.
                let open = rec.recorder?.paused == true ? "" : "; the open clip was finalised"
                throw ClipFlowError(.interrupted, "stopped: \(summary)\(open)")
            case .failed(_, let e):
                throw clips.isEmpty ? e : ClipFlowError(e.kind, "\(e.message)\nkept: \(summary)")
            }
        }
    }

    /// The summary's account of every picture lost on the way, each count with its one cause:
    /// the camera's (not read in time: gaps in its sequence), the broken pictures it delivered,
    /// the test pattern's late pictures, and those the queue to the encoder shed; nil when none.
    static func lostPictures(camera: Int, broken: Int, late: Int, queue: Int) -> String? {
        let parts = [
            (camera, "by the camera (it was not read in time)"), (broken, "broken (flagged by the driver, or MJPEG that did not decode)"),
            (late, "by the test pattern (they could not be made and delivered in real time)"), (queue, "in the queue to the encoder (it was full)")
        ].filter { $0.0 > 0 }
        guard !parts.isEmpty else { return nil }
        let total = parts.reduce(0) { $0 + $1.0 }
        return "\(total) picture\(total == 1 ? "" : "s") dropped: " + parts.map { "\($0.0) \($0.1)" }.joined(separator: ", ")
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
            if noAudio || audio != "none" { s.sampleRate = 0 }
            s.clock = clock
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
}

/// What the person recording can ask for with `--interactive`: a key press on a terminal, or a
/// line (a key or its word) on standard input otherwise.
enum RecordCommand: Equatable {
    case pause, resume, split, deleteLast, list, quit
    /// Anything else: the keys are shown.
    case help
    /// Enter, an empty line, a control or non-ASCII byte: nothing to do.
    case none

    static let keys = "keys: p pause, r resume, s split, d delete the last clip, l list, q stop"

    init(key: UInt8) {
        switch key {
        case 0..<0x20, 0x7F...: self = .none
        default: self.init(word: String(decoding: [key], as: UTF8.self))
        }
    }

    init(line: String) { self.init(word: line.trimmingCharacters(in: .whitespaces)) }

    private init(word: String) {
        switch word.lowercased() {
        case "p", "pause": self = .pause
        case "r", "resume", "record": self = .resume
        case "s", "split": self = .split
        case "d", "delete": self = .deleteLast
        case "l", "list": self = .list
        case "q", "quit", "stop": self = .quit
        case "": self = .none
        default: self = .help
        }
    }
}

/// Carries out `RecordCommand`s on a thread of its own (it waits on standard input) while the
/// recording runs: pause, resume, split and d (delete the last clip) go to the record stage
/// (`RecordControl`), which carries them out on its queue, d through its recorder, so the
/// deleted clip's seconds leave the total `--max-duration` counts; d's answer names the clip it
/// deleted and, during a take, the one still being recorded; q stops the graph; l lists the
/// directory and the clip being recorded. The stage's answers are shown in the order given, from
/// a queue of the reader's own, so the stage never waits on the terminal. Remembers whether q
/// ended the recording, for the summary. Once `close()`d (the run is over and the summary is
/// being made) it does nothing more. Thread-safe.
final class RecordCommandReader: Sendable {
    let control: RecordControl
    let store: ClipStore
    /// The recording as it stands: the clip being recorded, for d's answer and l's listing.
    let status: RecordStatus
    /// Where the stage's answers are shown (`reply`), in order.
    private let answers = DispatchQueue(label: "record answers")
    private struct State {
        var quit = false
        var closed = false
    }
    private let state = Mutex(State())

    init(control: RecordControl, store: ClipStore, status: RecordStatus) {
        self.control = control
        self.store = store
        self.status = status
    }

    /// The clip being recorded (its file name and seconds so far), nil while paused or before a
    /// take.
    func recording() -> (name: String, seconds: Double)? {
        let now = status.snapshot
        guard !now.paused, let n = now.fragment else { return nil }
        return (String(format: "%@-%04d.mp4", store.prefix, n), now.fragmentSeconds)
    }

    /// True once q ended the recording.
    var quit: Bool { state.withLock { $0.quit } }

    /// Ignores every command from now on, once the answers given so far are shown.
    func close() {
        state.withLock { $0.closed = true }
        answers.sync {}
    }

    /// Reads commands until standard input ends: key presses (`keys`: the terminal is in raw
    /// mode) or lines. `reply` shows what a command answers.
    func start(keys: Bool, runner: GraphRunner, reply: @escaping @Sendable (String) -> Void) {
        HelperThreads().start("record commands") { [self] in
            while true {
                let command: RecordCommand
                if keys {
                    guard let k = TerminalKeys.nextKey() else { return }
                    command = RecordCommand(key: k)
                } else {
                    guard let line = readLine() else { return }
                    command = RecordCommand(line: line)
                }
                perform(command, runner: runner, reply: reply)
            }
        }
    }

    func perform(_ command: RecordCommand, runner: GraphRunner, reply: @escaping @Sendable (String) -> Void) {
        if state.withLock({ $0.closed }) { return }
        switch command {
        case .pause: control.send(.pause)
        case .resume: control.send(.resume)
        case .split: control.send(.split)
        case .deleteLast:
            let answers = answers
            control.deleteLast { [self] answer in
                let text: String
                switch answer {
                case .deleted(let path, let seconds):
                    text =
                        String(format: "deleted %@ (%.1f s)", (path as NSString).lastPathComponent, seconds)
                        + (recording().map { "; still recording \($0.name)" } ?? "")
                case .nothingToDelete: text = "no clip to delete"
                case .failed(let why): text = "cannot delete the last clip: \(why)"
                case .recordingEnded: text = "the recording has ended; no clip was deleted"
                }
                answers.async { reply(text) }
            }
        case .list: clipListing(store, recording: recording()).forEach(reply)
        case .quit:
            state.withLock { $0.quit = true }
            runner.stop(deadline: 10)
        case .help: reply(RecordCommand.keys)
        case .none: break
        }
    }
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
            guard deleteLast else { return clipListing(store).forEach { print($0) } }
            guard let p = try store.deleteLast() else { throw ClipFlowError.badInput("no clips (\(prefix)-NNNN.mp4) in '\(directory)'") }
            print("deleted \(p)")
        }
    }
}

/// The `clips` listing: a line per fragment (name, seconds, size, frames), then the count and
/// total. `recording`: the clip being recorded (not yet in the directory), listed last and counted.
func clipListing(_ store: ClipStore, recording: (name: String, seconds: Double)? = nil) -> [String] {
    var total = 0.0
    let files = store.clipFiles()
    var lines: [String] = []
    for e in files {
        let name = (e.path as NSString).lastPathComponent
        if let info = try? ClipProbe.probe(e.path) {
            total += info.videoSeconds
            lines.append(
                String(
                    format: "%@  %7.2f s  %dx%d  %d frames%@", name, info.videoSeconds, info.video.width, info.video.height,
                    info.video.packets, info.audio == nil ? "  no audio" : ""))
        } else {
            lines.append("\(name)  unreadable")
        }
    }
    let count = files.count + (recording == nil ? 0 : 1)
    var summary = String(format: "%d clip%@, %.2f s", count, count == 1 ? "" : "s", total + (recording?.seconds ?? 0))
    if let recording {
        lines.append(String(format: "%@  %7.2f s  being recorded", recording.name, recording.seconds))
        summary += ", one being recorded"
    }
    lines.append(summary)
    return lines
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
