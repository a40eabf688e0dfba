import Foundation

/// An H.264 decoder configuration record (`avcC`, ISO 14496-15): the parameter sets a clip's
/// pictures are decoded with. Pure parsing; table-tested.
struct AVCConfiguration: Equatable {
    var profile: UInt8
    var compatibility: UInt8
    var level: UInt8
    /// Bytes of each NAL unit's length prefix in the samples (1, 2 or 4).
    var lengthSize: Int
    var sps: [[UInt8]]
    var pps: [[UInt8]]
    /// Bytes after the PPS list (High profiles: chroma format and bit depths), kept as they are.
    var tail: [UInt8]

    init?(_ b: [UInt8]) {
        guard b.count >= 7, b[0] == 1 else { return nil }
        profile = b[1]
        compatibility = b[2]
        level = b[3]
        lengthSize = Int(b[4] & 3) + 1
        var i = 5
        func sets(_ count: Int) -> [[UInt8]]? {
            var out: [[UInt8]] = []
            for _ in 0..<count {
                guard i + 2 <= b.count else { return nil }
                let n = Int(b[i]) << 8 | Int(b[i + 1])
                guard i + 2 + n <= b.count, n > 0 else { return nil }
                out.append(Array(b[(i + 2)..<(i + 2 + n)]))
                i += 2 + n
            }
            return out
        }
        let spsCount = Int(b[i] & 0x1f)
        i += 1
        guard let s = sets(spsCount) else { return nil }
        sps = s
        guard i < b.count else { return nil }
        let ppsCount = Int(b[i])
        i += 1
        guard let p = sets(ppsCount) else { return nil }
        pps = p
        tail = Array(b[i...])
    }

    var bytes: [UInt8] {
        var b: [UInt8] = [1, profile, compatibility, level, 0xfc | UInt8(lengthSize - 1), 0xe0 | UInt8(sps.count)]
        for s in sps { b += [UInt8(s.count >> 8), UInt8(s.count & 0xff)] + s }
        b.append(UInt8(pps.count))
        for p in pps { b += [UInt8(p.count >> 8), UInt8(p.count & 0xff)] + p }
        return b + tail
    }

    /// The same configuration declaring `level` (in the record and in every SPS, whose
    /// level_idc is its fourth byte). A level only bounds the decoder's resources.
    func withLevel(_ level: UInt8) -> AVCConfiguration {
        var c = self
        c.level = level
        c.sps = sps.map { s in
            var s = s
            if s.count > 3 { s[3] = level }
            return s
        }
        return c
    }

    /// What decoding depends on: the SPS from profile_idc to the VUI flag, without level_idc and
    /// without the VUI (timing, colour description and the like), and the PPS whole. Clips whose
    /// keys are equal decode with each other's parameter sets; nil when the SPS cannot be read
    /// (scaling matrices, more than one SPS).
    var decodingKey: [UInt8]? {
        guard sps.count == 1, let core = H264SPS.decodingBits(sps[0]) else { return nil }
        return core + [0xff] + pps.flatMap { $0 + [0xfe] }
    }
}

/// Reads just enough of an H.264 sequence parameter set (ITU-T H.264, 7.3.2.1.1).
enum H264SPS {
    /// The SPS's bits from profile_idc up to and including vui_parameters_present_flag, with
    /// level_idc zeroed, packed into bytes; nil if it uses scaling matrices or is malformed.
    static func decodingBits(_ nal: [UInt8]) -> [UInt8]? {
        var r = BitReader(unescaped(nal))
        guard r.bits(8) != nil else { return nil }  // NAL header
        guard let profile = r.bits(8), let constraints = r.bits(8), r.bits(8) != nil else { return nil }
        var out = BitWriter()
        out.put(profile, 8)
        out.put(constraints, 8)
        out.put(0, 8)  // level_idc: not part of decoding
        func ue() -> UInt32? {
            guard let v = r.ue() else { return nil }
            out.putUE(v)
            return v
        }
        func u(_ n: Int) -> UInt32? {
            guard let v = r.bits(n) else { return nil }
            out.put(v, n)
            return v
        }
        guard ue() != nil else { return nil }  // seq_parameter_set_id
        if [100, 110, 122, 244, 44, 83, 86, 118, 128, 138, 139, 134, 135].contains(profile) {
            guard let chroma = ue() else { return nil }
            if chroma == 3 { guard u(1) != nil else { return nil } }
            guard ue() != nil, ue() != nil, u(1) != nil, let scaling = u(1) else { return nil }
            if scaling == 1 { return nil }
        }
        guard ue() != nil, let pocType = ue() else { return nil }  // log2_max_frame_num_minus4, pic_order_cnt_type
        if pocType == 0 {
            guard ue() != nil else { return nil }
        } else if pocType == 1 {
            guard u(1) != nil, r.se() != nil, r.se() != nil, let n = ue() else { return nil }
            for _ in 0..<n { guard r.se() != nil else { return nil } }
        }
        guard ue() != nil, u(1) != nil, ue() != nil, ue() != nil, let frameMbsOnly = u(1) else { return nil }
        if frameMbsOnly == 0 { guard u(1) != nil else { return nil } }
        guard u(1) != nil, let crop = u(1) else { return nil }
        if crop == 1 { for _ in 0..<4 { guard ue() != nil else { return nil } } }
        guard u(1) != nil else { return nil }  // vui_parameters_present_flag
        return out.bytes
    }

    /// The NAL unit's payload without emulation-prevention bytes (00 00 03 -> 00 00).
    static func unescaped(_ b: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(b.count)
        var zeros = 0
        for x in b {
            if zeros >= 2, x == 3 {
                zeros = 0
                continue
            }
            zeros = x == 0 ? zeros + 1 : 0
            out.append(x)
        }
        return out
    }
}

struct BitReader {
    let b: [UInt8]
    var pos = 0
    init(_ b: [UInt8]) { self.b = b }

    mutating func bits(_ n: Int) -> UInt32? {
        guard pos + n <= b.count * 8 else { return nil }
        var v: UInt32 = 0
        for _ in 0..<n {
            v = v << 1 | UInt32((b[pos >> 3] >> (7 - UInt8(pos & 7))) & 1)
            pos += 1
        }
        return v
    }
    /// Exp-Golomb unsigned.
    mutating func ue() -> UInt32? {
        var zeros = 0
        while true {
            guard let bit = bits(1) else { return nil }
            if bit == 1 { break }
            zeros += 1
            if zeros > 31 { return nil }
        }
        guard let rest = bits(zeros) else { return nil }
        return (UInt32(1) << zeros) - 1 + rest
    }
    mutating func se() -> Int32? {
        guard let k = ue() else { return nil }
        return k & 1 == 1 ? Int32((k + 1) / 2) : -Int32(k / 2)
    }
}

struct BitWriter {
    private(set) var bytes: [UInt8] = []
    private var used = 8

    mutating func put(_ v: UInt32, _ n: Int) {
        for k in (0..<n).reversed() {
            if used == 8 {
                bytes.append(0)
                used = 0
            }
            bytes[bytes.count - 1] |= UInt8((v >> k) & 1) << (7 - used)
            used += 1
        }
    }
    mutating func putUE(_ v: UInt32) {
        let x = UInt64(v) + 1
        let n = 64 - x.leadingZeroBitCount
        put(0, n - 1)
        put(UInt32(x), n)
    }
}

/// An H.265 decoder configuration record (`hvcC`, ISO 14496-15 8.3.3): its VPS, SPS and PPS.
/// Pure parsing; what the in-band join needs.
struct HEVCConfiguration: Equatable {
    var lengthSize: Int
    /// NAL units of the parameter-set arrays (VPS, SPS, PPS), in record order.
    var parameterSets: [[UInt8]]

    init?(_ b: [UInt8]) {
        guard b.count >= 23, b[0] == 1 else { return nil }
        lengthSize = Int(b[21] & 3) + 1
        var i = 23
        var sets: [[UInt8]] = []
        for _ in 0..<Int(b[22]) {
            guard i + 3 <= b.count else { return nil }
            let type = b[i] & 0x3f
            let count = Int(b[i + 1]) << 8 | Int(b[i + 2])
            i += 3
            for _ in 0..<count {
                guard i + 2 <= b.count else { return nil }
                let n = Int(b[i]) << 8 | Int(b[i + 1])
                guard n > 0, i + 2 + n <= b.count else { return nil }
                if (32...34).contains(type) { sets.append(Array(b[(i + 2)..<(i + 2 + n)])) }
                i += 2 + n
            }
        }
        guard !sets.isEmpty else { return nil }
        parameterSets = sets
    }
}

/// The parameter sets of an H.264 or H.265 track, as far as a join by copy with parameter sets
/// in-band needs them.
enum DecoderConfiguration {
    case avc(AVCConfiguration)
    case hevc(HEVCConfiguration)

    init?(codec: String, extradata: [UInt8]) {
        switch codec {
        case "h264": guard let c = AVCConfiguration(extradata) else { return nil }; self = .avc(c)
        case "hevc": guard let c = HEVCConfiguration(extradata) else { return nil }; self = .hevc(c)
        default: return nil
        }
    }

    var lengthSize: Int {
        switch self {
        case .avc(let c): return c.lengthSize
        case .hevc(let c): return c.lengthSize
        }
    }

    /// The parameter sets behind length prefixes, to put in front of a keyframe.
    var inBandPrefix: [UInt8] {
        let nals: [[UInt8]]
        switch self {
        case .avc(let c): nals = c.sps + c.pps
        case .hevc(let c): nals = c.parameterSets
        }
        var out: [UInt8] = []
        for nal in nals {
            for k in (0..<lengthSize).reversed() { out.append(UInt8(truncatingIfNeeded: nal.count >> (8 * k))) }
            out += nal
        }
        return out
    }
}
