import ArgumentParser
import ClipFlowCaptureEmulation
import ClipFlowCore
import ClipFlowMedia
import Foundation
#if canImport(Glibc)
    import Glibc
#endif

@main
struct ClipFlow: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "clipflow",
        abstract: "Turn camera recordings and clip fragments into upload-ready videos.",
        version: "0.1.0",
        subcommands: [Merge.self, Record.self, Clips.self, Devices.self, Upload.self, Run.self, Validate.self, Stages.self, Schema.self]
    )

    static func main() {
        V4L2Emulation.installFromProcessEnvironment()  // "no camera here": CLIPFLOW_V4L2_EMULATE (README, Capture)
        main(nil)
    }
}

/// Flags shared by commands that do long work.
struct OutputFlags: ParsableArguments {
    @Flag(name: .shortAndLong, help: "Print no progress (errors are still printed).")
    var quiet = false
}

struct Merge: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Join MP4/MOV clips into one fast-start MP4 without re-encoding video.",
        discussion: """
            Clips are joined in the order given. Video is copied; audio is copied except for a few \
            frames around each join, which are re-encoded so the joins are sample-accurate and click-free. \
            Clips must share codec parameters (size, profile, audio rate and channels).
            """
    )

    @Option(name: .shortAndLong, help: "Output file.")
    var output: String = "merged.mp4"

    @Option(
        help: ArgumentHelp(
            "Turn the displayed picture clockwise by this many degrees (0, 90, 180, 270).",
            discussion: "Written as the track's display matrix; pixels are not touched."))
    var rotate: Int = 0

    @Option(help: "Also write a JPEG cover image of a representative frame to this path.")
    var thumbnail: String?

    @Option(
        name: .customLong("thumbnail-size"),
        help: "Limit the cover to N pixels on its longer side, or to fit within WxH.")
    var thumbnailSize: String?

    @OptionGroup var flags: OutputFlags

    @Argument(help: "Input clips (MP4/MOV, H.264/H.265 video, AAC or no audio).")
    var inputs: [String] = []

    func validate() throws {
        if inputs.isEmpty { throw ValidationError("give at least one input clip") }
        if ![0, 90, 180, 270].contains(rotate) { throw ValidationError("--rotate must be 0, 90, 180 or 270 (got \(rotate))") }
        if let s = thumbnailSize, ThumbnailSize(parsing: s) == nil {
            throw ValidationError("--thumbnail-size must be N or WxH with positive numbers (got '\(s)')")
        }
        if thumbnailSize != nil && thumbnail == nil { throw ValidationError("--thumbnail-size needs --thumbnail PATH") }
    }

    func run() throws {
        // No MediaProcess.tuneAllocator() here: merge allocates nothing per packet (packets point
        // into the mapped clips), so a kept heap would only raise peak RSS.
        let ui = Terminal(quiet: flags.quiet)
        let cancel = SignalHandling.install()
        var opts = MergeOptions(output: URL(fileURLWithPath: output), rotate: rotate)
        if let s = ProcessInfo.processInfo.environment["CLIPFLOW_MOOV_RESERVE"], let n = Int(s) { opts.moovReserveOverride = n }
        let started = Date()
        try ui.runReportingErrors {
            // Before any work: no output may be an input or the other output.
            var outputs = [OutputSafety.Use(path: output, label: "-o")]
            if let thumb = thumbnail { outputs.append(OutputSafety.Use(path: thumb, label: "--thumbnail")) }
            let inputUses = inputs.enumerated().map { OutputSafety.Use(path: $1, label: "input \($0 + 1)") }
            if let clash = OutputSafety.clashes(inputs: inputUses, outputs: outputs).first {
                throw ClipFlowError.badInput(clash.description)
            }
            let merger = Merger(inputs: inputs, options: opts, progress: ui, cancel: cancel)
            let r = try merger.run()
            ui.finish()
            let secs = Date().timeIntervalSince(started)
            var line = String(
                format: "merged %d clips into %@ (%d video frames, %.1f MB) in %.2f s",
                r.clips, output, r.videoFrames, Double(r.bytes) / 1e6, secs)
            if r.rotation != 0 { line += ", turned \(r.rotation) degrees" }
            ui.say(line)
            if let thumb = thumbnail {
                let size = thumbnailSize.flatMap { ThumbnailSize(parsing: $0) }
                let t = try Thumbnailer(path: r.output.path, sources: r.sources, cancel: cancel).write(to: URL(fileURLWithPath: thumb), limit: size)
                ui.say("cover \(thumb): \(t.width)x\(t.height) from \(String(format: "%.2f", t.time)) s")
            }
        }
    }
}

/// Progress and messages on stderr: a redrawn bar on a terminal, plain lines otherwise.
/// `@unchecked Sendable`: the merge reports from several threads; every mutable field is touched
/// only under `lock`.
final class Terminal: ProgressReporter, @unchecked Sendable {
    let quiet: Bool
    let isTTY = isatty(2) == 1
    private let lock = NSLock()
    private var lastPercent = -1
    private var drewBar = false

    init(quiet: Bool) { self.quiet = quiet }

    func report(_ e: ProgressEvent) {
        guard !quiet else { return }
        lock.lock(); defer { lock.unlock() }
        let pct = Int(e.fraction * 100)
        if isTTY {
            let width = 30
            let filled = Int(e.fraction * Double(width))
            let bar = String(repeating: "#", count: filled) + String(repeating: "-", count: width - filled)
            let mb = String(format: "%.1f/%.1f MB", Double(e.completed) / 1e6, Double(e.total) / 1e6)
            FileHandle.standardError.write("\r\(e.phase) [\(bar)] \(pct)% \(mb)".data(using: .utf8)!)
            drewBar = true
        } else if pct / 10 != lastPercent / 10 || (pct == 100 && lastPercent != 100) {
            FileHandle.standardError.write("\(e.phase): \(pct)% (\(e.completed) of \(e.total) \(e.unit))\n".data(using: .utf8)!)
        }
        lastPercent = pct
    }

    func notice(_ message: String) {
        lock.lock(); defer { lock.unlock() }
        endBar()
        FileHandle.standardError.write("note: \(message)\n".data(using: .utf8)!)
    }

    func finish() { lock.lock(); endBar(); lock.unlock() }

    private func endBar() {
        if drewBar { FileHandle.standardError.write("\n".data(using: .utf8)!); drewBar = false }
    }

    func say(_ s: String) {
        guard !quiet else { return }
        finish()
        FileHandle.standardError.write("\(s)\n".data(using: .utf8)!)
    }

    /// Runs work; a ClipFlowError is printed as "error: ..." and exits with its code.
    func runReportingErrors(_ body: () throws -> Void) throws {
        do {
            try body()
        } catch let e as ClipFlowError {
            finish()
            FileHandle.standardError.write("error: \(e.description)\n".data(using: .utf8)!)
            throw ExitCode(e.exitCode)
        }
    }
}
