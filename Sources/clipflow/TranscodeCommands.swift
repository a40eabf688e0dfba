import ArgumentParser
import ClipFlowCore
import ClipFlowMedia
import Foundation

struct Transcode: ParsableCommand {
    static let configuration = CommandConfiguration(
        abstract: "Decode, convert and re-encode videos (any format FFmpeg reads) into one fast-start MP4.",
        discussion: """
            Several inputs are joined in the order given; each is scaled into the output frame (the \
            longest input sets its shape unless --size or a preset does) and its audio kept in sync \
            at every join. Pictures are never enlarged unless --upscale. Without --preset: H.264 \
            High, CRF 23, x264 preset medium with its own keyframe placement, AAC 128k (the ffmpeg \
            CLI's defaults); every preset has a keyframe exactly every 2 s. `clipflow presets` lists \
            the presets.
            """
    )

    @Option(name: .shortAndLong, help: "Output file.")
    var output: String = "transcoded.mp4"

    @Option(help: "Named settings (see `clipflow presets`); other options override them.")
    var preset: String?

    @Option(help: "Output frame WxH (even numbers); pictures of other shapes go in by --fit.")
    var size: String?

    @Option(help: "Output height (even); the width follows the source's shape.")
    var height: Int?

    @Option(help: "contain (pad), cover (crop) or stretch.")
    var fit: String?

    @Option(help: "keep (variable rates stay variable) or a fixed rate: 30, 29.97, 30000/1001.")
    var fps: String?

    @Option(name: .customLong("video-codec"), help: "h264 or hevc (tagged hvc1).")
    var videoCodec: String?

    @Option(help: "Constant quality, 0-51 (lower: better and bigger).")
    var crf: Int?

    @Option(name: .customLong("video-bitrate"), help: "Average video bit rate instead of --crf (2500k, 2.5M).")
    var videoBitRate: String?

    @Option(help: "Peak video bit rate over a 2 s buffer (4M).")
    var maxrate: String?

    @Option(name: .customLong("encoder-preset"), help: "x264/x265 speed preset (ultrafast ... veryslow).")
    var encoderPreset: String?

    @Option(name: .customLong("audio-bitrate"), help: "AAC bit rate (128k).")
    var audioBitRate: String?

    @Flag(help: "Turn rotated pictures in their pixels instead of writing a display matrix (done anyway when the inputs are turned differently).")
    var upright = false

    @Flag(help: "Allow pictures larger than the source.")
    var upscale = false

    @OptionGroup var overwrite: OverwriteFlag

    @OptionGroup var flags: OutputFlags

    @Argument(help: "Input videos (MP4/MOV, MKV/WebM, MPEG-TS, AVI, ...).")
    var inputs: [String] = []

    var choices: TranscodeChoices {
        var c = TranscodeChoices()
        c.preset = preset
        c.size = size
        c.height = height
        c.fit = fit
        c.fps = fps
        c.videoCodec = videoCodec
        c.crf = crf
        c.videoBitRate = videoBitRate
        c.maxRate = maxrate
        c.encoderPreset = encoderPreset
        c.audioBitRate = audioBitRate
        c.upright = upright
        c.upscale = upscale
        return c
    }

    func validate() throws {
        if inputs.isEmpty { throw ValidationError("give at least one input video") }
        if case .failure(let problem) = choices.resolve() { throw ValidationError(problem.description) }
    }

    func run() throws {
        let door = FrontDoor(flags, namesOutputs: true)
        let started = Date()
        try ErrorReport.run {
            let settings = try choices.resolve().get()
            try checkBeforeWork(inputs: inputs, outputs: [OutputSafety.Use(path: output, label: "-o")], overwrite: overwrite.overwrite)
            let inputs = inputs, output = output, replacing = overwrite.overwrite
            let graph = TranscodeStage.graph(id: "transcode", output: output, settings: settings, overwrite: replacing)
            let files = StageNode("files") { FilesStage(id: "files", paths: inputs, glob: nil) }
            let (outcome, _) = try door.run(
                nodes: [files] + graph.nodes, edges: graph.entries.map { Edge(from: "files", to: $0, limits: TranscodeStage.kind.queue) } + graph.edges,
                grace: 5)
            if let e = ErrorReport.error(outcome) { throw e }
            if let r = door.log.result(TranscodeSummary.self, of: "transcode") {
                let wall = Date().timeIntervalSince(started)
                door.say(
                    String(
                        format: "transcoded %d input%@ into %@ (%dx%d, %d frames, %.1f s, %.1f MB) in %.2f s (%.2fx)",
                        inputs.count, inputs.count == 1 ? "" : "s", output, r.width, r.height, r.videoFrames, r.seconds, Double(r.bytes) / 1e6, wall,
                        wall > 0 ? r.seconds / wall : 0))
            }
        }
    }
}

struct Presets: ParsableCommand {
    static let configuration = CommandConfiguration(abstract: "List the transcode presets and their settings.")

    @Flag(help: "Print JSON.")
    var json = false

    func run() throws {
        if json {
            let items = TranscodePreset.all.map { p -> JSONValue in
                .object([
                    (key: "name", value: JSONNode(.string(p.name))), (key: "summary", value: JSONNode(.string(p.summary))),
                    (key: "settings", value: JSONNode(.string(p.details)))
                ])
            }
            print(JSONValue.array(items.map { JSONNode($0) }).serialized)
            return
        }
        let width = TranscodePreset.all.map(\.name.count).max() ?? 0
        for p in TranscodePreset.all {
            print(p.name.padding(toLength: width + 2, withPad: " ", startingAt: 0) + p.summary)
            print(String(repeating: " ", count: width + 2) + p.details)
        }
    }
}
