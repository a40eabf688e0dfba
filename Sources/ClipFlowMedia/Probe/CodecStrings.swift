import Foundation

/// RFC 6381 `codecs` strings (HLS `CODECS`, MSE `isTypeSupported`) from a track's own decoder
/// configuration, never from a table of assumptions. Pure; table-tested.
enum CodecStrings {
    /// `avc1.PPCCLL`: profile_idc, the constraint-flags byte and level_idc of an `avcC` record
    /// (bytes 1 to 3), in hex. `sampleEntry`: "avc1" or "avc3".
    static func avc(_ avcC: [UInt8], sampleEntry: String = "avc1") -> String? {
        guard avcC.count >= 4, avcC[0] == 1 else { return nil }
        return sampleEntry + "." + avcC[1...3].map { String(format: "%02x", $0) }.joined()
    }

    /// `hvc1.[A-C]?profile.compat.Ttier-level.constraints` from an `hvcC` record (ISO/IEC 14496-15
    /// Annex E): profile space as a letter (none for 0), profile_idc in decimal, the 32
    /// compatibility flags bit-reversed in hex, L or H and general_level_idc in decimal, then the
    /// six constraint bytes in hex, trailing zero bytes left out.
    static func hevc(_ hvcC: [UInt8], sampleEntry: String = "hvc1") -> String? {
        guard hvcC.count >= 13, hvcC[0] == 1 else { return nil }
        let space = Int(hvcC[1] >> 6), tier = (hvcC[1] >> 5) & 1, profile = Int(hvcC[1] & 0x1f)
        let flags = UInt32(hvcC[2]) << 24 | UInt32(hvcC[3]) << 16 | UInt32(hvcC[4]) << 8 | UInt32(hvcC[5])
        var constraints = Array(hvcC[6...11])
        while constraints.last == 0 { constraints.removeLast() }
        var s = "\(sampleEntry).\(space == 0 ? "" : String(UnicodeScalar(UInt8(64 + space))))\(profile)"
        s += "." + String(flags.bitReversed, radix: 16)
        s += ".\(tier == 0 ? "L" : "H")\(hvcC[12])"
        for c in constraints { s += "." + String(c, radix: 16) }
        return s
    }

    /// `av01.P.LLT.DD` from an `av1C` record (AV1 Codec ISOBMFF binding, Codecs Parameter
    /// String): seq_profile, seq_level_idx_0 in two digits and seq_tier_0 as M or H, and the bit
    /// depth in two digits, as the sequence header the record carries says.
    static func av1(_ av1C: [UInt8]) -> String? {
        guard av1C.count >= 4, av1C[0] == 0x81 else { return nil }
        let profile = av1C[1] >> 5, level = av1C[1] & 0x1f
        let tier = av1C[2] >> 7, high = (av1C[2] >> 6) & 1, twelve = (av1C[2] >> 5) & 1
        let depth = high == 0 ? 8 : twelve == 0 ? 10 : 12
        return "av01.\(profile)." + String(format: "%02d", level) + (tier == 0 ? "M" : "H") + "." + String(format: "%02d", depth)
    }

    /// `mp4a.40.N`: N is the audio object type of an AudioSpecificConfig (its first 5 bits, or
    /// 32 + the next 6 when those are 31), in decimal.
    static func aac(_ asc: [UInt8]) -> String? {
        guard let first = asc.first else { return nil }
        var type = Int(first >> 3)
        if type == 31 {
            guard asc.count >= 2 else { return nil }
            type = 32 + Int((first & 0x07) << 3 | asc[1] >> 5)
        }
        return type == 0 ? nil : "mp4a.40.\(type)"
    }
}

extension UInt32 {
    /// The 32 bits in reverse order (bit 0 becomes bit 31).
    var bitReversed: UInt32 {
        var v = self, r: UInt32 = 0
        for _ in 0..<32 {
            r = r << 1 | (v & 1)
            v >>= 1
        }
        return r
    }
}

/// The bit rates HLS declares (RFC 8216 4.1, 4.3.4.2), measured from the segments as written.
enum SegmentRates {
    /// The peak segment bit rate: the largest 8 x bytes / seconds over any run of contiguous
    /// segments lasting 0.5 to 1.5 target durations (a segment longer than 1.5 targets counts
    /// alone).
    static func peak(bytes: [Int], seconds: [Double], target: Double) -> Double {
        precondition(bytes.count == seconds.count)
        var best = 0.0
        for i in bytes.indices {
            var b = 0, d = 0.0
            for j in i..<bytes.count {
                b += bytes[j]
                d += seconds[j]
                if d > 1.5 * target {
                    if j == i, d > 0 { best = max(best, 8 * Double(b) / d) }
                    break
                }
                if d >= 0.5 * target, d > 0 { best = max(best, 8 * Double(b) / d) }
            }
        }
        return best
    }

    /// The average segment bit rate: 8 x all bytes / all seconds.
    static func average(bytes: [Int], seconds: [Double]) -> Double {
        let d = seconds.reduce(0, +)
        return d > 0 ? 8 * Double(bytes.reduce(0, +)) / d : 0
    }
}
