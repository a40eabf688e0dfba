import ClipFlowCore
import Foundation
import Synchronization

/// `merge --conform`: joins clips that differ. Plans first (`ConformPlan`), re-encodes the clips
/// that differ from the target into temporary MP4s made to join the others (same size,
/// orientation, frame rate, H.264 profile and level, audio rate and channels), then merges
/// everything by copy, each clip's H.264 parameter sets in-band where they differ
/// (`MergeOptions.parameterSetsInBand`). The temporary clips live in a folder next to the
/// output, removed at the end whatever happens. `progress` hears one progress for all that work
/// (`ConformProgress`), never moving back. Not thread-safe: `run` once, from one thread.
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
        let phases = ConformProgress(progress, plan: plan, joinsAll: plan.reencodesAll && preset != nil)
        if plan.reencodesAll, let preset {
            // Nothing to copy: everything is transcoded with the preset into one clip, which the
            // merge then only copies (turning it if asked).
            let joined = folder.appendingPathComponent("all.mp4")
            _ = try Transcoder(inputs: inputs, output: joined, settings: preset.settings, progress: phases.next(), cancel: cancel).run()
            paths = [joined.path]
        } else {
            let settings = try Self.settings(toJoin: plan)
            for i in plan.reencoded {
                try cancel.check()
                let out = folder.appendingPathComponent(String(format: "clip-%04d.mp4", i + 1))
                _ = try Transcoder(inputs: [inputs[i]], output: out, settings: settings, progress: phases.next(), cancel: cancel).run()
                paths[i] = out.path
            }
        }
        var o = options
        o.parameterSetsInBand = true
        // The clips copied as they are were probed by the plan; the re-encoded ones are new files.
        let probed = paths.indices.map { i in paths[i] == inputs[i] && i < plan.probes.count ? plan.probes[i] : nil }
        var result = try Merger(inputs: paths, options: o, progress: phases.next(), cancel: cancel, threads: threads, probed: probed).run()
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

/// One progress for all of a conform's work: the re-encodes, then the copy, each weighted by the
/// plan's estimate of its work (`ConformPlan.Clip.estimate`), in milliseconds of estimated work
/// (the `--plan`'s "estimated work", to the millisecond). Each phase's own progress, from 0 to its
/// end, moves the whole forward through that phase's share; the whole never moves back (a phase
/// that starts again, as a merge's second pass does, holds it where it is). Thread-safe.
final class ConformProgress: Sendable {
    private let reporter: ProgressReporter
    /// Each phase's share, in order: the re-encodes, then the copy.
    private let weights: [Int64]
    private let total: Int64
    private struct State {
        /// Phases handed out so far (`next`).
        var started = 0
        /// The most reported so far.
        var reported: Int64 = 0
    }
    private let state = Mutex(State())

    /// The phases of `plan`'s work: one transcode of every clip when `joinsAll` (a preset no clip
    /// is in), or one per re-encoded clip; then the copy of every clip.
    init(_ reporter: ProgressReporter, plan: ConformPlan, joinsAll: Bool) {
        self.reporter = reporter
        let reencodes = joinsAll ? [plan.clips.reduce(0) { $0 + $1.estimate }] : plan.reencoded.map { plan.clips[$0].estimate }
        // A copy reads every clip once: a copied clip's estimate is that reading; a re-encoded
        // clip, not yet written, is counted as a copy of about a megabyte per second.
        let copy = plan.clips.reduce(0.0) { $0 + ($1.action == .reencode ? $1.seconds / 1000 : $1.estimate) }
        weights = (reencodes + [copy]).map { max(1, Int64(($0 * 1000).rounded())) }
        total = weights.reduce(0, +)
    }

    /// The reporter of the next phase, in the order of the work.
    func next() -> ProgressReporter {
        let phase = state.withLock { s -> Int in
            defer { s.started += 1 }
            return s.started
        }
        return Phase(whole: self, index: min(phase, weights.count - 1))
    }

    fileprivate func report(_ e: ProgressEvent, phase: Int) {
        let before = weights[..<phase].reduce(0, +)
        let now = before + Int64((e.fraction * Double(weights[phase])).rounded(.down))
        let completed = state.withLock { s -> Int64 in
            s.reported = max(s.reported, min(now, total))
            return s.reported
        }
        reporter.report(ProgressEvent(phase: e.phase, completed: completed, total: total, unit: "ms", speed: e.speed))
    }

    fileprivate func notice(_ message: String) { reporter.notice(message) }

    /// One phase's reporter: its events become the whole's.
    private struct Phase: ProgressReporter {
        let whole: ConformProgress
        let index: Int
        func report(_ event: ProgressEvent) { whole.report(event, phase: index) }
        func notice(_ message: String) { whole.notice(message) }
    }
}
