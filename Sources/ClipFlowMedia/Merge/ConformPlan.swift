import ClipFlowCore
import Foundation

/// What `merge --conform` does with each clip: copy it, copy it after harmonising its parameter
/// sets (differences that do not change decoding: H.264 level, VUI timing), or re-encode it to
/// join the others. The target is the format of the majority of the duration: the clip whose
/// format the most seconds can be copied into.
public struct ConformPlan: Sendable {
    public enum Action: String, Sendable {
        case copy
        case harmonise = "copy-harmonised"
        case reencode = "re-encode"
    }
    public struct Clip: Sendable {
        public var path: String
        public var action: Action
        /// Which parameter differs from the target that decides the action (nil for a plain copy).
        public var reason: String?
        /// Every way the clip differs from the target (size, orientation, frame rate, audio,
        /// codec, parameter sets), the deciding one first; empty when it is the target's format.
        public var differences: [String] = []
        public var seconds: Double
        /// Rough seconds of work (copies: reading; re-encodes: decoding and encoding).
        public var estimate: Double
    }
    /// The clip whose format the output takes.
    public var target: ClipInfo
    /// The target as the decoder sees it (pixel format, frame rate).
    public var targetSource: SourceInfo
    public var targetFrameRate: Double { targetSource.video.frameRate ?? 30 }
    public var clips: [Clip]
    /// The preset whose settings the re-encodes use (`merge --conform --preset`).
    public var preset: TranscodePreset?
    /// Each input's probe as the plan read it (a failure: not a clip that can be copied), in input
    /// order, so the merge that follows does not read the clips it copies again.
    public var probes: [Result<ClipInfo, Error>] = []
    /// Nothing can be copied into the preset's format: every clip is re-encoded (a transcode).
    public var reencodesAll: Bool { !clips.isEmpty && reencoded.count == clips.count }

    public var reencoded: [Int] { clips.indices.filter { clips[$0].action == .reencode } }
    public var harmonised: [Int] { clips.indices.filter { clips[$0].action == .harmonise } }

    /// Plans the join of `paths` (read-only: probes the files). With a `preset`, the target is
    /// the preset's output for the majority's clips: clips already in that format (size, codec)
    /// are copied, the others re-encoded with the preset's settings; if the majority's clips are
    /// not in it (the preset makes them smaller, or another codec), every clip is re-encoded.
    /// `probed`: probes made already, by index (the others are made here).
    public static func make(_ paths: [String], preset: TranscodePreset? = nil, probed known: [Result<ClipInfo, Error>?] = []) throws -> ConformPlan {
        // The sample tables of every clip, on every core; FFmpeg's stream probe (which decodes a
        // little) only where the plan needs it: clips that cannot be copied, and the target.
        let infos = Merger.ProbeResults.probing(paths, known: known).outcomes()
        var cache: [Int: SourceInfo] = [:]
        func source(_ i: Int) throws -> SourceInfo {
            if let s = cache[i] { return s }
            let s = try Transcoder.probe(paths[i])
            cache[i] = s
            return s
        }
        var plan = try make(infos, source)
        plan.probes = infos
        if let preset {
            plan.preset = preset
            let v = plan.targetSource.video
            let made = TranscodeGeometry.frame(for: v.displaySize, preset.settings)
            let codec = preset.settings.videoCodec == .h264 ? "h264" : "hevc"
            if made != v.displaySize || codec != v.codec {
                let why = "the preset \(preset.name) makes \(made) \(codec), the clips are \(v.displaySize) \(v.codec)"
                for i in plan.clips.indices {
                    plan.clips[i].action = .reencode
                    plan.clips[i].reason = why
                    plan.clips[i].estimate = reencodeSeconds(try source(i))
                }
            }
        }
        return plan
    }

    /// `source(i)`: FFmpeg's view of input i (asked only for clips to re-encode and the target).
    static func make(_ infos: [Result<ClipInfo, Error>], _ source: (Int) throws -> SourceInfo) throws -> ConformPlan {
        let copyable = infos.indices.compactMap { i -> (Int, ClipInfo)? in (try? infos[i].get()).map { (i, $0) } }
        guard !copyable.isEmpty else {
            throw ClipFlowError.badInput("none of the inputs is an MP4/MOV clip that can be copied; use `clipflow transcode` to re-encode them all")
        }
        // The target: the copyable clip whose format covers the most seconds.
        func joins(_ t: ClipInfo, _ c: ClipInfo) -> Action? {
            if Compatibility.difference(t, c) == nil { return .copy }
            return harmonisable(t, c) ? .harmonise : nil
        }
        var best = copyable[0].1, bestSeconds = -1.0
        for (_, t) in copyable {
            let covered = copyable.reduce(0.0) { $0 + (joins(t, $1.1) != nil ? $1.1.videoSeconds : 0) }
            if covered > bestSeconds + 1e-9 {
                best = t
                bestSeconds = covered
            }
        }
        var clips: [Clip] = []
        for i in infos.indices {
            switch infos[i] {
            case .failure(let e):
                let s = try source(i)  // it must at least decode
                let why =
                    s.container.contains("mp4") || s.container.contains("mov")
                    ? (e as? ClipFlowError)?.message ?? "\(e)" : "a \(s.container) file (only MP4/MOV clips are copied)"
                clips.append(Clip(path: s.path, action: .reencode, reason: why, differences: [why], seconds: s.duration, estimate: reencodeSeconds(s)))
            case .success(let c):
                let copied = Double(c.mediaBytes) / 1e9
                let differences = Compatibility.differences(best, c) + frameRateDifference(best, c)
                switch joins(best, c) {
                case .copy?:
                    clips.append(Clip(path: c.path, action: .copy, reason: nil, differences: differences, seconds: c.videoSeconds, estimate: copied))
                case .harmonise?:
                    let why = differences.first ?? "parameter sets differ"
                    clips.append(
                        Clip(path: c.path, action: .harmonise, reason: why, differences: differences, seconds: c.videoSeconds, estimate: copied))
                default:
                    let s = try source(i)
                    clips.append(
                        Clip(
                            path: c.path, action: .reencode, reason: differences.first, differences: differences, seconds: s.duration,
                            estimate: reencodeSeconds(s)))
                }
            }
        }
        let targetIndex = copyable.first { $0.1.path == best.path }?.0 ?? 0
        return ConformPlan(target: best, targetSource: try source(targetIndex), clips: clips)
    }

    /// Clips that differ only where decoding does not look: same everything but the H.264 level
    /// and the VUI (timing, colour description), and the same PPS.
    static func harmonisable(_ a: ClipInfo, _ b: ClipInfo) -> Bool {
        guard a.video.codec == "h264", b.video.codec == "h264", Compatibility.difference(a, b, parameterSetsInBand: true) == nil,
            let ka = AVCConfiguration(a.video.extradata)?.decodingKey, let kb = AVCConfiguration(b.video.extradata)?.decodingKey
        else { return false }
        return ka == kb
    }

    /// The frame rates, where they differ by more than 1 %: copies keep their own timing, a
    /// re-encode takes the target's rate.
    static func frameRateDifference(_ target: ClipInfo, _ c: ClipInfo) -> [String] {
        let a = target.video.frameRate, b = c.video.frameRate
        guard a > 0, b > 0, abs(a - b) > 0.01 * a else { return [] }
        return ["frame rate differs (\(fps(a)) vs \(fps(b)) fps)"]
    }

    static func fps(_ r: Double) -> String { abs(r - r.rounded()) < 0.005 ? String(Int(r.rounded())) : String(format: "%.2f", r) }

    /// A rough time to decode and re-encode (x264 veryfast, 2 cores: about 6x real time at 720p30).
    static func reencodeSeconds(_ s: SourceInfo) -> Double {
        let pixels = Double(s.video.width * s.video.height) * (s.video.frameRate ?? 30)
        return s.duration * pixels / (1280 * 720 * 30) / 6
    }

    /// The plan as one line per clip, for messages.
    public var summary: String {
        clips.enumerated().map { i, c in
            "  \(i + 1). \(c.path): \(c.action.rawValue)" + (c.reason.map { " (\($0))" } ?? "")
        }.joined(separator: "\n")
    }

    /// The plan as a person reads it on a terminal (`merge --conform --plan`): the target, then
    /// each clip's action and every way it differs from the target.
    public var table: String {
        let v = target.video
        var t = "target: \(target.path)\n  \(v.codec)"
        if let p = AVCConfiguration(v.extradata).map({ Compatibility.h264Profile($0.profile) }) ?? v.profile { t += " \(p)" }
        t += " \(v.width)x\(v.height) \(targetSource.video.pixelFormat), \(Self.fps(targetFrameRate)) fps"
        if v.rotation != 0 { t += ", turned \(v.rotation) degrees" }
        if let a = target.audio { t += "; audio \(a.sampleRate) Hz, \(a.channels) channel\(a.channels == 1 ? "" : "s")" }
        if let p = preset { t += "; preset \(p.name)" }
        t += "\n\n"
        let width = max(6, clips.map(\.action.rawValue.count).max() ?? 0)
        for (i, c) in clips.enumerated() {
            let action = c.action.rawValue.padding(toLength: width, withPad: " ", startingAt: 0)
            t += String(format: "%3d  %@  %7.2f s  %@\n", i + 1, action, c.seconds, c.path)
            for d in c.differences { t += "     \(String(repeating: " ", count: width))  \(String(repeating: " ", count: 9))  - \(d)\n" }
        }
        t += String(
            format: "\nestimated work: %.1f s (%d copied, %d copied with their own parameter sets, %d re-encoded)",
            clips.reduce(0.0) { $0 + $1.estimate }, clips.filter { $0.action == .copy }.count, harmonised.count, reencoded.count)
        return t
    }

    /// The plan as JSON (`merge --conform --plan --events json`).
    public var json: String {
        let v = target.video
        var targetFields: [(key: String, value: JSONNode)] = [
            (key: "path", value: JSONNode(.string(target.path))), (key: "codec", value: JSONNode(.string(v.codec))),
            (key: "width", value: JSONNode(.number(Double(v.width)))), (key: "height", value: JSONNode(.number(Double(v.height)))),
            (key: "profile", value: JSONNode(.string(AVCConfiguration(v.extradata).map { Compatibility.h264Profile($0.profile) } ?? v.profile ?? ""))),
            (key: "pixel_format", value: JSONNode(.string(targetSource.video.pixelFormat))),
            (key: "frame_rate", value: JSONNode(.number((targetFrameRate * 1000).rounded() / 1000))),
            (key: "rotation", value: JSONNode(.number(Double(v.rotation))))
        ]
        if let a = target.audio {
            targetFields.append((key: "audio_sample_rate", value: JSONNode(.number(Double(a.sampleRate)))))
            targetFields.append((key: "audio_channels", value: JSONNode(.number(Double(a.channels)))))
        }
        let clipNodes = clips.map { c -> JSONNode in
            var f: [(key: String, value: JSONNode)] = [
                (key: "path", value: JSONNode(.string(c.path))), (key: "action", value: JSONNode(.string(c.action.rawValue)))
            ]
            if let r = c.reason { f.append((key: "reason", value: JSONNode(.string(r)))) }
            f.append((key: "differences", value: JSONNode(.array(c.differences.map { JSONNode(.string($0)) }))))
            f.append((key: "seconds", value: JSONNode(.number((c.seconds * 1000).rounded() / 1000))))
            f.append((key: "estimated_work_seconds", value: JSONNode(.number((c.estimate * 100).rounded() / 100))))
            return JSONNode(.object(f))
        }
        let total = clips.reduce(0.0) { $0 + $1.estimate }
        if let p = preset { targetFields.append((key: "preset", value: JSONNode(.string(p.name)))) }
        return JSONValue.object([
            (key: "target", value: JSONNode(.object(targetFields))), (key: "clips", value: JSONNode(.array(clipNodes))),
            (key: "estimated_work_seconds", value: JSONNode(.number((total * 100).rounded() / 100)))
        ]).serialized
    }
}
