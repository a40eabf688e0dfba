import ClipFlowCore
import Foundation

/// Decodes every clip it receives (inputs in order, clips in arrival order), joins them and
/// encodes one fast-start MP4, then passes the file on. Runs as a graph of two stages: the
/// `decode` kind's stage (`ID.decode`: probes every input, plans one picture size and timeline,
/// decodes and converts) and `EncodeStage` (`ID`: encodes and muxes what the decode announces in
/// band, and reports the transcode's progress). A transcode is all or nothing: a stop, a cancel or a failure leaves no output.
public enum TranscodeStage {
    /// The stage's fields are the `clipflow transcode` flags of the same names.
    public static let kind = StageKind(
        name: "transcode", summary: "decode, convert and re-encode clips (any format) into one fast-start H.264/HEVC MP4",
        inputs: [.clips, .video], minInputs: 1, output: .video,
        params: [
            ParamSpec("output", .path, required: true, role: .writes, help: "the MP4 to write (under a temporary name, renamed when complete)"),
            ParamSpec("preset", .choice(TranscodePreset.all.map(\.name)), help: "named settings (`clipflow presets`); the other fields override them"),
            ParamSpec("size", .string, help: "output frame WxH (even numbers); pictures of other shapes go in by `fit`"),
            ParamSpec("height", .integer(min: 16, max: 8192), help: "output height (even); the width follows the source's shape"),
            ParamSpec("fit", .choice(Fit.allCases.map(\.rawValue)), help: "contain (pad), cover (crop) or stretch; default contain"),
            ParamSpec("fps", .string, help: "keep (default; variable rates stay variable) or a fixed rate: 30, 29.97, 30000/1001"),
            ParamSpec("video-codec", .choice(VideoCodecChoice.allCases.map(\.rawValue)), help: "h264 (default) or hevc (tagged hvc1)"),
            ParamSpec("crf", .integer(min: 0, max: 51), help: "constant quality (lower: better, bigger); default 23"),
            ParamSpec("video-bitrate", .string, help: "average video bit rate instead of crf (2500k, 2.5M)"),
            ParamSpec("maxrate", .string, help: "peak video bit rate over a 2 s buffer (4M)"),
            ParamSpec("encoder-preset", .choice(TranscodeSettings.encoderPresets), help: "x264/x265 speed preset; default medium"),
            ParamSpec("audio-bitrate", .string, help: "AAC bit rate; default 128k"),
            ParamSpec("upright", .boolean, default: .bool(false), help: "turn rotated pictures in their pixels (no display matrix)"),
            ParamSpec("upscale", .boolean, default: .bool(false), help: "allow pictures larger than the source"),
            .overwrite
        ],
        queue: LinkLimits(maxItems: 1024, maxBytes: LinkLimits.noByteLimit),
        check: { p, path in
            if case .failure(let problem) = choices(p).resolve() { return [PipelineIssue("\(path).\(problem.option)", problem.message)] }
            return []
        },
        files: { p in StageFiles(writes: p.string("output").map { [FileField("output", $0)] } ?? []) },
        graph: { id, p in
            switch choices(p).resolve() {
            case .success(let s): return graph(id: id, output: p.string("output")!, settings: s, overwrite: p.bool("overwrite") ?? false)
            case .failure(let problem): throw ClipFlowError.badInput("stage '\(id)': \(problem.option): \(problem.message)")
            }
        })

    private static func choices(_ p: StageParams) -> TranscodeChoices {
        var c = TranscodeChoices()
        c.preset = p.string("preset")
        c.size = p.string("size")
        c.height = p.int("height")
        c.fit = p.string("fit")
        c.fps = p.string("fps")
        c.videoCodec = p.string("video-codec")
        c.crf = p.int("crf")
        c.videoBitRate = p.string("video-bitrate")
        c.maxRate = p.string("maxrate")
        c.encoderPreset = p.string("encoder-preset")
        c.audioBitRate = p.string("audio-bitrate")
        c.upright = p.bool("upright") ?? false
        c.upscale = p.bool("upscale") ?? false
        return c
    }

    /// `ID.decode -> ID`, entered at the decode; `ID` passes the written file on.
    public static func graph(id: String, output: String, settings: TranscodeSettings, overwrite: Bool) -> StageGraph {
        let decodeID = "\(id).decode"
        return StageGraph(
            nodes: [
                StageNode(decodeID) { DecodeStage(id: decodeID, settings: settings, reportsProgress: false) },
                StageNode(id) { EncodeStage(id: id, output: output, settings: settings, overwrite: overwrite) }
            ],
            edges: [Edge(from: decodeID, to: id, limits: framesLink)],
            entries: [decodeID])
    }

    /// Between the decode and the encoder: a few pictures (memory stays bounded whatever the
    /// input's length) and the audio that goes with them.
    static let framesLink = LinkLimits(maxItems: 6, maxBytes: 48 << 20)
}
