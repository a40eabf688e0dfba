import ClipFlowCore
import Foundation

/// `merge --conform`: joins clips that differ. Plans first (`ConformPlan`), re-encodes the clips
/// that differ from the target into temporary MP4s made to join the others (same size,
/// orientation, frame rate, H.264 profile and level, audio rate and channels), then merges
/// everything by copy, each clip's H.264 parameter sets in-band where they differ
/// (`MergeOptions.parameterSetsInBand`). The temporary clips live in a folder next to the
/// output, removed at the end whatever happens. Not thread-safe: `run` once, from one thread.
public final class ConformingMerger {
    public let inputs: [String]
    public let options: MergeOptions
    /// The re-encodes' settings, and with `ConformPlan.make(_:preset:)` the target.
    public let preset: TranscodePreset?
    private let progress: ProgressReporter
    private let cancel: CancellationFlag
    private let threads: HelperThreads
    /// Probes of `inputs` made already, by index (`Merger.probed`).
    private let probed: [Result<ClipInfo, Error>?]

    public init(
        inputs: [String], options: MergeOptions, preset: TranscodePreset? = nil, progress: ProgressReporter = SilentProgress(),
        cancel: CancellationFlag = CancellationFlag(), threads: HelperThreads = HelperThreads(), probed: [Result<ClipInfo, Error>?] = []
    ) {
        self.probed = probed
        self.inputs = inputs
        self.options = options
        self.preset = preset
        self.progress = progress
        self.cancel = cancel
        self.threads = threads
    }

    public func run() throws -> (MergeResult, ConformPlan) {
        let plan = try ConformPlan.make(inputs, preset: preset, probed: probed)
        let target = plan.target
        if plan.reencodesAll, preset != nil {
            progress.notice("re-encoding every clip: \(plan.clips.first?.reason ?? "")")
        } else {
            for i in plan.reencoded {
                progress.notice("re-encoding \(plan.clips[i].path): \(plan.clips[i].reason ?? "it differs from the target")")
            }
        }
        for i in plan.harmonised {
            progress.notice("copying \(plan.clips[i].path) with its own parameter sets: \(plan.clips[i].reason ?? "")")
        }
        var paths = inputs
        // The re-encoded clips go into a temporary folder next to the output (never committed:
        // removed when the merge ends, swept by a later run if this one is killed).
        let work =
            plan.reencoded.isEmpty
            ? nil : try AtomicOutput(folder: URL(fileURLWithPath: options.output.path + ".conform"), label: "a working folder", replacing: false)
        defer { work?.discard() }
        let folder = work?.temporary ?? options.output.deletingLastPathComponent()  // unused when nothing is re-encoded
        if plan.reencodesAll, let preset {
            // Nothing to copy: everything is transcoded with the preset into one clip, which the
            // merge then only copies (turning it if asked).
            let joined = folder.appendingPathComponent("all.mp4")
            _ = try Transcoder(inputs: inputs, output: joined, settings: preset.settings, progress: progress, cancel: cancel).run()
            paths = [joined.path]
        } else {
            let settings = try Self.settings(toJoin: plan)
            for i in plan.reencoded {
                try cancel.check()
                let out = folder.appendingPathComponent(String(format: "clip-%04d.mp4", i + 1))
                _ = try Transcoder(inputs: [inputs[i]], output: out, settings: settings, progress: progress, cancel: cancel).run()
                paths[i] = out.path
            }
        }
        var o = options
        o.parameterSetsInBand = true
        // The clips copied as they are were probed by the plan; the re-encoded ones are new files.
        let probed = paths.indices.map { i in paths[i] == inputs[i] && i < plan.probes.count ? plan.probes[i] : nil }
        var result = try Merger(inputs: paths, options: o, progress: progress, cancel: cancel, threads: threads, probed: probed).run()
        result.clips = inputs.count
        return (result, plan)
    }

    /// Transcode settings that make a clip join the plan's target by copy.
    static func settings(toJoin plan: ConformPlan) throws -> TranscodeSettings {
        let v = plan.target.video
        var s = TranscodeSettings()
        let stored = PictureSize(width: Int(v.width), height: Int(v.height))
        s.frame = v.rotation % 180 == 0 ? stored : stored.swapped
        s.fit = .contain
        s.upscale = true
        s.outputRotation = v.rotation
        s.frameRate = FrameRatePolicy(rate: plan.targetFrameRate)
        s.crf = 18
        s.encoderPreset = "veryfast"
        if let p = plan.preset?.settings {
            s.crf = p.crf
            s.videoBitRate = p.videoBitRate
            s.maxRate = p.maxRate
            s.encoderPreset = p.encoderPreset
            s.keyframeSeconds = p.keyframeSeconds
        }
        s.profile = encoderProfile(plan.target)
        if v.codec == "hevc" {
            s.videoCodec = .hevc
            if v.extradata.count > 12 { s.level = String(format: "%.1f", Double(v.extradata[12]) / 30) }
        } else if let c = AVCConfiguration(v.extradata) {
            s.level = String(format: "%.1f", Double(c.level) / 10)
        }
        if let a = plan.target.audio {
            s.audioFormat = .init(rate: Int(a.sampleRate), channels: Int(a.channels))
            s.audioBitRate = min(512_000, max(32_000, Int(a.bitRate > 0 ? a.bitRate : 128_000)))
        } else {
            s.noAudio = true
        }
        return s
    }
}

extension ConformingMerger {
    /// The encoder profile that makes clips join `target` (nil: none of ours can).
    static func encoderProfile(_ target: ClipInfo) -> String? {
        let v = target.video
        switch v.codec {
        case "h264":
            guard let c = AVCConfiguration(v.extradata) else { return nil }
            switch c.profile {
            case 66: return "baseline"
            case 77: return "main"
            case 100: return "high"
            default: return nil  // High 10, 4:2:2, 4:4:4: not 8-bit 4:2:0
            }
        case "hevc":
            return v.extradata.count > 1 && v.extradata[1] & 0x1f == 1 ? "main" : nil
        default: return nil
        }
    }
}

extension FrameRatePolicy {
    /// A fixed rate near `rate` frames per second, as a fraction (29.97 -> 30000/1001).
    init(rate: Double) {
        let ntsc = rate * 1.001
        if abs(ntsc - ntsc.rounded()) < 0.002, abs(rate - rate.rounded()) > 0.002 {
            self = .fixed(num: Int(ntsc.rounded()) * 1000, den: 1001)
        } else if abs(rate - rate.rounded()) < 0.002 {
            self = .fixed(num: Int(rate.rounded()), den: 1)
        } else {
            self = .fixed(num: Int((rate * 1000).rounded()), den: 1000)
        }
    }
}
