import ArgumentParser
import ClipFlowCaptureEmulation
import ClipFlowCore
import ClipFlowMedia
import Foundation
#if canImport(Glibc)
    import Glibc
#endif

@main
struct ClipFlow: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "clipflow",
        abstract: "Turn camera recordings and clip fragments into upload-ready videos.",
        version: "0.1.0",
        subcommands: [
            Merge.self, Transcode.self, Presets.self, HLS.self, Record.self, Clips.self, Devices.self, Upload.self, Serve.self, ServeWorkerCommand.self,
            Run.self, Batch.self, Validate.self,
            Stages.self,
            Schema.self
        ]
    )

    static func main() async {
        V4L2Emulation.installFromProcessEnvironment()  // "no camera here": CLIPFLOW_V4L2_EMULATE (docs/record.md, "No camera here")
        // SVT-AV1 (an AV1 ladder's encoder) prints its settings on stderr for every encoder it
        // opens; its errors only, unless SVT_LOG says otherwise. Set before any thread starts.
        setenv("SVT_LOG", "1", 0)
        let arguments = Array(CommandLine.arguments.dropFirst())
        do {
            var command = try parseAsRoot(arguments)
            // CLIPFLOW_PARSE_ONLY=1: the command line is checked as a run would check it (options,
            // values, what goes together), and nothing runs (docs/events.md, "Checking a command line").
            if ProcessInfo.processInfo.environment["CLIPFLOW_PARSE_ONLY"] == "1" {
                print("would run: clipflow \(arguments.map(Self.shellQuoted).joined(separator: " "))")
                return
            }
            if var served = command as? any AsyncParsableCommand {
                try await served.run()
            } else {
                try command.run()
            }
        } catch {
            ErrorReport.exit(error, arguments: arguments)
        }
    }

    /// `word` as a shell would need it written (single quotes where it has anything special).
    static func shellQuoted(_ word: String) -> String {
        let plain = word.allSatisfy { $0.isLetter || $0.isNumber || "-_./=:,+@%".contains($0) }
        return plain && !word.isEmpty ? word : "'" + word.replacingOccurrences(of: "'", with: "'\\''") + "'"
    }
}

struct Merge: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Join MP4/MOV clips into one fast-start MP4 without re-encoding video.",
        discussion: """
            Clips are joined in the order given. Video is copied; audio is copied except for a few \
            frames around each join, which are re-encoded so the joins are sample-accurate and click-free. \
            Clips must share codec parameters (size, profile, audio rate and channels); with \
            --conform, clips that differ are joined too: those that differ only in H.264 level or \
            VUI timing are copied with their own parameter sets, the others re-encoded to match the \
            format of most of the duration. --conform --plan prints what would be done: a table, or \
            JSON with --events json.
            """
    )

    @Option(name: .shortAndLong, help: "Output file.")
    var output: String = "merged.mp4"

    @Option(
        help: ArgumentHelp(
            "Turn the displayed picture clockwise by this many degrees more than the clips' own turn (0, 90, 180, 270).",
            discussion:
                "Adds to the rotation the clips carry: clips tagged 90 with --rotate 90 show turned 180. Written as the track's display matrix; pixels are not touched."
        ))
    var rotate: Int = 0

    @Option(
        name: .customLong("set-rotation"),
        help: ArgumentHelp(
            "Show the picture turned clockwise by exactly this many degrees (0, 90, 180, 270), whatever the clips carry.",
            discussion: "Replaces the clips' own rotation, as the ffmpeg CLI's -display_rotation does (which counts counter-clockwise)."))
    var setRotation: Int?

    @Option(help: "Also write a JPEG cover image of a representative frame to this path.")
    var thumbnail: String?

    @Option(
        name: .customLong("thumbnail-size"),
        help: "Limit the cover to N pixels on its longer side, or to fit within WxH.")
    var thumbnailSize: String?

    @Flag(help: "Join clips that differ: copy what matches most of the duration, re-encode only the clips that differ.")
    var conform = false

    @Option(help: "With --conform: the target format and the re-encodes' settings (see `clipflow presets`).")
    var preset: String?

    @Flag(
        help:
            "With --conform: print the plan (each clip: copy, copy-harmonised or re-encode, and every way it differs) and write nothing; a table, or JSON with --events json."
    )
    var plan = false

    @OptionGroup var overwrite: OverwriteFlag

    @OptionGroup var flags: OutputFlags

    @Argument(help: "Input clips (MP4/MOV, H.264/H.265 video, AAC or no audio; with --conform, any video).")
    var inputs: [String] = []

    func validate() throws {
        if inputs.isEmpty { throw ValidationError("give at least one input clip") }
        if ![0, 90, 180, 270].contains(rotate) { throw ValidationError("--rotate must be 0, 90, 180 or 270 (got \(rotate))") }
        if let r = setRotation {
            if ![0, 90, 180, 270].contains(r) { throw ValidationError("--set-rotation must be 0, 90, 180 or 270 (got \(r))") }
            if rotate != 0 { throw ValidationError("give --rotate (a turn added to the clips' own) or --set-rotation (the turn itself), not both") }
        }
        if let s = thumbnailSize, ThumbnailSize(parsing: s) == nil {
            throw ValidationError("--thumbnail-size must be N or WxH with positive numbers (got '\(s)')")
        }
        if thumbnailSize != nil && thumbnail == nil { throw ValidationError("--thumbnail-size needs --thumbnail PATH") }
        if plan && !conform { throw ValidationError("--plan goes with --conform") }
        if let p = preset {
            if !conform { throw ValidationError("--preset goes with --conform (it sets what the clips that differ are re-encoded to)") }
            if TranscodePreset.named(p) == nil {
                throw ValidationError(
                    "--preset: unknown preset '\(p)' (one of \(TranscodePreset.all.map(\.name).joined(separator: ", ")); see `clipflow presets`)")
            }
        }
    }

    func run() throws {
        // No MediaProcess.tuneAllocator() here: merge allocates nothing per packet (packets point
        // into the mapped clips), so a kept heap would only raise peak RSS.
        if plan {
            try ErrorReport.run {
                let made = try ConformPlan.make(inputs, preset: preset.flatMap { TranscodePreset.named($0) })
                print(flags.events == .json ? made.json : made.table)
            }
            return
        }
        let door = FrontDoor(flags, namesOutputs: true)
        let started = Date()
        try ErrorReport.run {
            try checkOutputs()
            let graph = graph()
            let (outcome, _) = try door.run(nodes: graph.nodes, edges: graph.edges, grace: 30)
            if let e = ErrorReport.error(outcome) { throw e }
            if let r = door.log.result(MergeSummary.self, of: "merge") {
                var line = String(
                    format: "merged %d clip%@ into %@ (%d video frames, %.1f MB) in %.2f s",
                    r.clips, r.clips == 1 ? "" : "s", output, r.videoFrames, Double(r.bytes) / 1e6, Date().timeIntervalSince(started))
                if r.rotation != 0 { line += ", turned \(r.rotation) degrees" }
                if let n = r.reencodedClips, n > 0 { line += ", \(n) re-encoded to match" }
                if r.ownParameterSets > 0 { line += ", \(r.ownParameterSets) with their own parameter sets" }
                door.say(line)
            }
            if let thumb = thumbnail, let t = door.log.result(ThumbnailSummary.self, of: "thumbnail") {
                door.say("cover \(thumb): \(t.width)x\(t.height) from \(String(format: "%.2f", t.time)) s")
            }
        }
    }

    private func checkOutputs() throws {
        var outputs = [OutputSafety.Use(path: output, label: "-o")]
        if let thumb = thumbnail { outputs.append(OutputSafety.Use(path: thumb, label: "--thumbnail")) }
        try checkBeforeWork(inputs: inputs, outputs: outputs, overwrite: overwrite.overwrite)
    }

    /// files → merge.probe → merge → thumbnail (when `--thumbnail`).
    private func graph() -> (nodes: [StageNode], edges: [Edge]) {
        let output = output, rotate = rotate, setRotation = setRotation, conform = conform
        let replacing = overwrite.overwrite
        let preset = preset.flatMap { TranscodePreset.named($0) }
        let reserve = ProcessInfo.processInfo.environment["CLIPFLOW_MOOV_RESERVE"].flatMap { Int($0) }
        let merge = MergeStage.graph(id: "merge") {
            let m = MergeStage(id: "merge", output: output, rotate: rotate, setRotation: setRotation, overwrite: replacing, conform: conform, preset: preset)
            m.moovReserveOverride = reserve
            return m
        }
        let inputs = inputs
        var nodes = [StageNode("files") { FilesStage(id: "files", paths: inputs, glob: nil) }] + merge.nodes
        var edges = merge.entries.map { Edge(from: "files", to: $0, limits: MergeStage.kind.queue) } + merge.edges
        if let thumbnail {
            let size = thumbnailSize.flatMap { ThumbnailSize(parsing: $0) }
            nodes.append(StageNode("thumbnail") { ThumbnailStage(id: "thumbnail", output: thumbnail, size: size, overwrite: replacing) })
            edges.append(Edge(from: "merge", to: "thumbnail", limits: ThumbnailStage.kind.queue))
        }
        return (nodes, edges)
    }
}

/// Before any work, inputs first (an output's problem is worth fixing only once the inputs are
/// there): every input must be a readable file that is not empty; no output may be an input or
/// another output, none may exist unless `overwrite` (`-y`; every one that does is named), and
/// the first output's folder must exist unless the command makes it (`makesFolder`: a ladder's;
/// a pipeline's stages make theirs).
func checkBeforeWork(inputs: [String], outputs: [OutputSafety.Use], overwrite: Bool, makesFolder: Bool = false) throws {
    for input in inputs { try ClipProbe.checkReadableFile(input) }
    let inputUses = inputs.enumerated().map { OutputSafety.Use(path: $1, label: "input \($0 + 1)") }
    if let clash = OutputSafety.clashes(inputs: inputUses, outputs: outputs).first {
        throw ClipFlowError.badInput(clash.description)
    }
    if !overwrite {
        let existing = OutputSafety.existing(outputs).map { OutputSafety.existsMessage(outputs[$0]) }
        if !existing.isEmpty { throw ClipFlowError.output(existing.joined(separator: "\n")) }
    }
    guard let main = outputs.first, !makesFolder else { return }
    let target = URL(fileURLWithPath: main.path)
    let dir = target.deletingLastPathComponent()
    var isDir: ObjCBool = false
    guard FileManager.default.fileExists(atPath: dir.path, isDirectory: &isDir), isDir.boolValue else {
        throw ClipFlowError.output("\(main.label) '\(target.path)': folder '\(dir.path)' does not exist")
    }
}
