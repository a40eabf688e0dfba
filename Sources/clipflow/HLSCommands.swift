import ArgumentParser
import ClipFlowCore
import ClipFlowMedia
import Foundation

struct HLS: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "hls",
        abstract: "Write an HLS ladder of fMP4 renditions from one decode.",
        subcommands: [HLSWrite.self, HLSLintCommand.self],
        defaultSubcommand: HLSWrite.self
    )
}

struct HLSWrite: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "write",
        abstract: "Write an HLS ladder (the default: `clipflow hls INPUT... -o DIR`).",
        discussion: """
            The inputs are decoded once (joined in order) and every rendition is encoded from the same \\
            pictures, keyframes forced at the same instants, so every segment of every rendition starts \\
            with an IDR on shared boundaries. The folder gets master.m3u8 (BANDWIDTH measured from the \\
            segments, CODECS from the streams), one playlist, init segment and .m4s segments per \\
            rendition, I-frame playlists, one AAC rendition and poster.jpg. It must not exist yet.
            """
    )

    @Option(name: .shortAndLong, help: "The folder to create.")
    var output: String

    @Option(help: "auto (Apple's ladder, never above the source) or heights: 1080,720,540,360.")
    var ladder: String = "auto"

    @Option(help: "vod (6 s segments) or feed (a 1 s first segment, then 2 s).")
    var profile: String = "vod"

    @Option(help: "Segment length in seconds (overrides the profile's).")
    var segment: Double?

    @Option(name: .customLong("encoder-preset"), help: "x264 speed preset.")
    var encoderPreset: String = "veryfast"

    @OptionGroup var flags: OutputFlags

    @Argument(help: "Input videos (any format FFmpeg reads).")
    var inputs: [String] = []

    func validate() throws {
        if inputs.isEmpty { throw ValidationError("give at least one input video") }
        if ladder != "auto", LadderRung.parse(ladder) == nil {
            throw ValidationError("--ladder: expected auto or even heights such as 1080,720,360 (got '\(ladder)')")
        }
        if !["vod", "feed"].contains(profile) { throw ValidationError("--profile must be vod or feed (got '\(profile)')") }
        if let s = segment, !(1...30).contains(s) { throw ValidationError("--segment must be 1 to 30 seconds (got \(s))") }
        if !TranscodeSettings.encoderPresets.contains(encoderPreset) { throw ValidationError("--encoder-preset: unknown preset '\(encoderPreset)'") }
    }

    func run() throws {
        let door = FrontDoor(flags)
        try ErrorReport.run {
            let inputs = inputs, output = output, ladder = ladder, encoderPreset = encoderPreset
            let schedule = SegmentSchedule(profile: profile, segment: segment)
            let nodes = [
                StageNode("files") { FilesStage(id: "files", paths: inputs, glob: nil) },
                StageNode("hls") { HLSStage(id: "hls", output: output, rungs: LadderRung.parse(ladder), schedule: schedule, encoderPreset: encoderPreset) }
            ]
            let (outcome, _) = try door.run(nodes: nodes, edges: [Edge(from: "files", to: "hls", limits: HLSStage.kind.queue)], grace: 5)
            if let e = ErrorReport.error(outcome) { throw e }
            if let r = door.log.result("hls") {
                door.say("wrote \(r["renditions"]?.integer ?? 0) renditions of \(r["segments"]?.integer ?? 0) segments: \(r["master"]?.string ?? output)")
            }
        }
    }
}

struct HLSLintCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lint",
        abstract: "Check an HLS folder: bandwidths against the measured segments, CODECS against the streams, keyframes, alignment, tags.",
        discussion: "Prints the findings as JSON on stdout; exits 1 when there is an error (warnings alone: 0)."
    )

    @Argument(help: "The folder holding master.m3u8.")
    var directory: String

    func run() throws {
        var findings: [LintFinding] = []
        try ErrorReport.run { findings = try HLSLint.lint(directory: URL(fileURLWithPath: directory)) }
        let rows = findings.map { f -> JSONNode in
            JSONNode(
                .object([
                    (key: "severity", value: JSONNode(.string(f.severity.rawValue))), (key: "code", value: JSONNode(.string(f.code))),
                    (key: "file", value: JSONNode(.string(f.file))), (key: "message", value: JSONNode(.string(f.message)))
                ]))
        }
        let errors = findings.filter { $0.severity == .error }.count
        print(
            JSONValue.object([
                (key: "findings", value: JSONNode(.array(rows))), (key: "errors", value: JSONNode(.number(Double(errors)))),
                (key: "warnings", value: JSONNode(.number(Double(findings.count - errors))))
            ]).serialized)
        if errors > 0 { throw ExitCode(1) }
    }
}
