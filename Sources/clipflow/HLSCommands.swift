import ArgumentParser
import ClipFlowCore
import ClipFlowMedia
import ClipFlowUpload
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
            The inputs are decoded once (joined in order) and every rendition is encoded from the same \
            pictures, keyframes forced at the same instants, so every segment of every rendition starts \
            with an IDR on shared boundaries. A source that fits the top rung is that rung as it is \
            (--passthrough): its packets are cut at its own keyframes and the other rungs force theirs \
            there; why a source does not fit is said as a notice. The folder gets master.m3u8 (BANDWIDTH measured from the \
            segments, CODECS from the streams), one playlist, init segment and .m4s segments per \
            rendition, I-frame playlists, one AAC rendition and poster.jpg. An existing folder is refused, \
            or with -y replaced once the new ladder is complete.
            """
    )

    @Option(name: .shortAndLong, help: "The folder to create.")
    var output: String

    @Option(
        help:
            "auto (Apple's ladder, never above the source) or heights: 1080,720,540,360; add copy to pass a compliant source through (copy,auto); copy alone remuxes."
    )
    var ladder: String = "auto"

    @Option(
        help: ArgumentHelp(
            "auto: a source that fits the top rung (H.264, upright, keyframes at most a segment apart, bit rate within --passthrough-rate) is that rung, its packets as they are (HEVC: a rendition beside it); off: every rung is encoded.",
            valueName: "auto|off"))
    var passthrough: String = "auto"

    @Option(name: .customLong("passthrough-rate"), help: "The highest average bit rate of a source passed through, as a multiple of its rung's cap.")
    var passthroughRate: Double = Passthrough.defaultMaxRate

    @Option(help: "h264, or h264,av1: every rung up to 720 lines again in AV1 (SVT-AV1), for players that decode it.")
    var codecs: String = "h264"

    @Option(help: "vod (6 s segments) or feed (a 1 s first segment, then 2 s).")
    var profile: String = "vod"

    @Option(help: "Segment length in seconds (overrides the profile's).")
    var segment: Double?

    @Option(name: .customLong("encoder-preset"), help: "x264 speed preset.")
    var encoderPreset: String = "veryfast"

    @Flag(name: .customLong("single-file"), help: "One file per rendition, segments addressed by byte ranges.")
    var singleFile = false

    @OptionGroup var overwrite: OverwriteFlag

    @OptionGroup var flags: OutputFlags

    @Argument(help: "Input videos (any format FFmpeg reads).")
    var inputs: [String] = []

    func validate() throws {
        if inputs.isEmpty { throw ValidationError("give at least one input video") }
        if LadderChoice.parse(ladder) == nil { throw ValidationError("--ladder: expected \(LadderChoice.expected) (got '\(ladder)')") }
        if VideoCodec.parse(codecs) == nil { throw ValidationError("--codecs: expected \(VideoCodec.expected) (got '\(codecs)')") }
        if !["auto", "off"].contains(passthrough) { throw ValidationError("--passthrough must be auto or off (got '\(passthrough)')") }
        if !(passthroughRate > 0 && passthroughRate <= 100) {
            throw ValidationError("--passthrough-rate must be above 0 and at most 100 (got \(passthroughRate))")
        }
        if !["vod", "feed"].contains(profile) { throw ValidationError("--profile must be vod or feed (got '\(profile)')") }
        if let s = segment, !(1...30).contains(s) { throw ValidationError("--segment must be 1 to 30 seconds (got \(s))") }
        if !TranscodeSettings.encoderPresets.contains(encoderPreset) { throw ValidationError("--encoder-preset: unknown preset '\(encoderPreset)'") }
    }

    func run() throws {
        let door = FrontDoor(flags, namesOutputs: true)
        try ErrorReport.run {
            let inputs = inputs, output = output, ladder = ladder, encoderPreset = encoderPreset, singleFile = singleFile
            try checkBeforeWork(inputs: inputs, outputs: [OutputSafety.Use(path: output, label: "-o")], overwrite: overwrite.overwrite, makesFolder: true)
            let schedule = SegmentSchedule(profile: profile, segment: segment)
            let graph = HLSLadder(
                output: output, ladder: LadderChoice.parse(ladder)!, schedule: schedule, encoderPreset: encoderPreset, singleFile: singleFile,
                overwrite: overwrite.overwrite, passthrough: passthrough == "auto" ? Passthrough(maxRate: passthroughRate) : nil,
                codecs: VideoCodec.parse(codecs)!
            ).graph(of: inputs)
            let (outcome, _) = try door.run(nodes: graph.nodes, edges: graph.edges, grace: 5)
            if let e = ErrorReport.error(outcome) { throw e }
            if let r = door.log.result(HLSSummary.self, of: "hls") {
                door.say("wrote \(r.renditions) renditions of \(r.segments) segments: \(r.master.isEmpty ? output : r.master)")
            }
        }
    }
}

struct HLSLintCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "lint",
        abstract: "Check an HLS ladder: bandwidths against the measured segments, CODECS against the streams, keyframes, alignment, tags.",
        discussion: """
            Reads a folder holding master.m3u8, a master playlist file, or a master playlist's http(s) \
            address (every playlist and segment is fetched, byte ranges with Range requests). Prints \
            the findings as JSON on stdout; exits 1 when there is an error (warnings alone: 0).
            """
    )

    @Argument(help: "A folder holding master.m3u8, a master playlist, or its http(s) URL.")
    var ladder: String

    func run() throws {
        var findings: [LintFinding] = []
        try ErrorReport.run {
            if let url = URL(string: ladder), ["http", "https"].contains(url.scheme?.lowercased() ?? "") {
                findings = try HLSLint.lint(master: url, read: try webReader())
            } else {
                var isFolder: ObjCBool = false
                let exists = FileManager.default.fileExists(atPath: ladder, isDirectory: &isFolder)
                guard exists else { throw ClipFlowError.badInput("'\(ladder)': no such folder or file") }
                let local = URL(fileURLWithPath: ladder)
                findings = try isFolder.boolValue ? HLSLint.lint(directory: local) : HLSLint.lint(master: local, read: HLSLint.readFile)
            }
        }
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

/// Reads a ladder over HTTP (libcurl): a whole resource, or a byte range with a Range request
/// (a server that ignores Range and answers 200 with the whole file is sliced here).
private func webReader() throws -> HLSReader {
    var settings = TransportSettings()
    settings.maxResponseBody = 512 << 20
    let transport = try CurlTransport(settings: settings)
    return { url, range in
        var headers: [(name: String, value: String)] = []
        if let r = range { headers.append((name: "Range", value: "bytes=\(r.lowerBound)-\(r.upperBound - 1)")) }
        let answer = try transport.perform(HTTPRequest(method: "GET", url: url.absoluteString, headers: headers), onSent: nil)
        switch (answer.status, range) {
        case (206, .some(let r)) where answer.body.count == r.count: return [UInt8](answer.body)
        case (200, .some(let r)) where answer.body.count >= r.upperBound: return [UInt8](answer.body[r])
        case (200, nil): return [UInt8](answer.body)
        default: throw ClipFlowError.badInput("HTTP \(answer.status) (\(answer.body.count) bytes)")
        }
    }
}
