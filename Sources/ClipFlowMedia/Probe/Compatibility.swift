import ClipFlowCore

/// Decides whether clips can be joined by packet copy: every parameter a decoder is configured
/// with once per track must be identical, otherwise the joined file decodes wrongly (a 440 Hz
/// tone played at 404 Hz, a green picture) while looking fine to a muxer.
public enum Compatibility {
    /// Returns nil if `b` can follow `a` in a copy-join, else the reason (naming the parameter).
    /// `parameterSetsInBand`: H.264/H.265 clips of one size and pixel format may differ in their
    /// parameter sets (the merge then sends them in-band, `MergeOptions.parameterSetsInBand`).
    public static func difference(_ a: ClipInfo, _ b: ClipInfo, parameterSetsInBand: Bool = false) -> String? {
        differences(a, b, parameterSetsInBand: parameterSetsInBand).first
    }

    /// Every reason `b` cannot follow `a` in a copy-join, most fundamental first (empty: it can).
    public static func differences(_ a: ClipInfo, _ b: ClipInfo, parameterSetsInBand: Bool = false) -> [String] {
        var found: [String] = []
        let va = a.video, vb = b.video
        if va.codec != vb.codec { found.append("video codec differs (\(va.codec) vs \(vb.codec))") }
        if va.width != vb.width || va.height != vb.height {
            found.append("video size differs (\(va.width)x\(va.height) vs \(vb.width)x\(vb.height))")
        }
        if let pa = va.pixelFormat, let pb = vb.pixelFormat, pa != pb { found.append("pixel format differs (\(pa) vs \(pb))") }
        if va.codec == vb.codec, va.extradata != vb.extradata {
            let ca = DecoderConfiguration(codec: va.codec, extradata: va.extradata)
            let cb = DecoderConfiguration(codec: vb.codec, extradata: vb.extradata)
            let inBand = parameterSetsInBand && ca != nil && ca?.lengthSize == cb?.lengthSize
            // A size or pixel format of its own implies parameter sets of their own: only a
            // profile or level is worth naming beside it.
            let why = videoConfigDifference(codec: va.codec, va.extradata, vb.extradata)
            if !inBand, found.isEmpty || !why.hasSuffix(") differs") { found.append(why) }
        }
        if va.sampleAspect.num * vb.sampleAspect.den != vb.sampleAspect.num * va.sampleAspect.den,
            va.sampleAspect.num != 0, vb.sampleAspect.num != 0
        {
            found.append("pixel aspect ratio differs (\(va.sampleAspect) vs \(vb.sampleAspect))")
        }
        if va.rotation != vb.rotation {
            found.append(
                "orientation differs (the first turns the picture \(va.rotation) degrees, the second \(vb.rotation)); join clips recorded the same way up")
        }
        switch (a.audio, b.audio) {
        case (nil, nil): break
        case (.some, nil): found.append("the second has no audio track while the first has")
        case (nil, .some): found.append("the second has an audio track while the first has none")
        case let (.some(x), .some(y)):
            if x.sampleRate != y.sampleRate { found.append("audio sample rate differs (\(x.sampleRate) Hz vs \(y.sampleRate) Hz)") }
            if x.channels != y.channels { found.append("audio channel count differs (\(x.channels) vs \(y.channels))") }
            if x.objectType != y.objectType {
                found.append("AAC profile differs (\(aacProfileName(x.objectType)) vs \(aacProfileName(y.objectType)))")
            } else if x.extradata != y.extradata, x.sampleRate == y.sampleRate, x.channels == y.channels {
                found.append("AAC configuration differs (AudioSpecificConfig \(hex(x.extradata)) vs \(hex(y.extradata)))")
            }
        }
        return found
    }

    /// Checks a whole list in order; throws naming both files and the parameter.
    public static func check(_ clips: [ClipInfo], parameterSetsInBand: Bool = false) throws {
        guard let first = clips.first else { return }
        for c in clips.dropFirst() {
            if let why = difference(first, c, parameterSetsInBand: parameterSetsInBand) {
                throw ClipFlowError.incompatible(
                    "cannot join '\(first.path)' and '\(c.path)' without re-encoding: \(why)")
            }
        }
    }

    static func aacProfileName(_ t: Int) -> String {
        switch t {
        case 1: return "AAC Main"
        case 2: return "AAC LC"
        case 5: return "HE-AAC (SBR)"
        case 29: return "HE-AAC v2 (PS)"
        default: return "AAC object type \(t)"
        }
    }

    static func videoConfigDifference(codec: String, _ a: [UInt8], _ b: [UInt8]) -> String {
        if codec == "h264", a.count > 3, b.count > 3, a[0] == 1, b[0] == 1 {
            if a[1] != b[1] { return "H.264 profile differs (\(h264Profile(a[1])) vs \(h264Profile(b[1])))" }
            if a[3] != b[3] { return "H.264 level differs (\(Double(a[3]) / 10) vs \(Double(b[3]) / 10))" }
            return "H.264 codec configuration (SPS/PPS) differs"
        }
        if codec == "hevc", a.count > 12, b.count > 12, a[0] == 1, b[0] == 1 {
            if (a[1] & 0x1f) != (b[1] & 0x1f) { return "H.265 profile differs (profile_idc \(a[1] & 0x1f) vs \(b[1] & 0x1f))" }
            if a[12] != b[12] { return "H.265 level differs (\(Double(a[12]) / 30) vs \(Double(b[12]) / 30))" }
            return "H.265 codec configuration (VPS/SPS/PPS) differs"
        }
        return "\(codec) codec configuration (extradata) differs"
    }

    static func h264Profile(_ idc: UInt8) -> String {
        switch idc {
        case 66: return "Baseline"
        case 77: return "Main"
        case 88: return "Extended"
        case 100: return "High"
        case 110: return "High 10"
        case 122: return "High 4:2:2"
        case 244: return "High 4:4:4"
        default: return "profile_idc \(idc)"
        }
    }

    static func hex(_ b: [UInt8]) -> String { b.map { String(format: "%02x", $0) }.joined() }
}
