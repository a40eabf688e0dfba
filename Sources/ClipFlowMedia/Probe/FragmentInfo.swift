import Foundation

/// What one fMP4 media segment (moof + mdat, ISO/IEC 14496-12 8.8) says about itself, read from
/// its boxes: where it starts on the track's timeline, how long it lasts, whether its first
/// sample is a sync sample, and the bytes an I-frame playlist points at for that sample. Pure
/// parsing (the ladder writer's playlists and the linter use it); one track per segment.
struct FragmentInfo: Equatable {
    /// tfdt baseMediaDecodeTime, in the track's timescale.
    var baseDecodeTime: UInt64
    /// Sum of the sample durations, in the track's timescale.
    var duration: UInt64
    var sampleCount: Int
    /// The first sample is a sync sample (sample_is_non_sync_sample clear).
    var startsWithSyncSample: Bool
    /// Offset and length, from the segment's start, of its moof up to the end of the first
    /// sample's data: an I-frame playlist's EXT-X-BYTERANGE (the init segment excluded).
    var firstSampleRange: (offset: Int, length: Int)

    static func == (a: FragmentInfo, b: FragmentInfo) -> Bool {
        a.baseDecodeTime == b.baseDecodeTime && a.duration == b.duration && a.sampleCount == b.sampleCount
            && a.startsWithSyncSample == b.startsWithSyncSample && a.firstSampleRange == b.firstSampleRange
    }

    /// Reads the first moof of `b` (segments may start with styp/sidx). nil when it is not one
    /// track's fragment with default-base-is-moof offsets.
    init?(_ b: [UInt8]) {
        let r = BoxReader(b)
        guard let moof = r.find("moof", in: 0..<b.count), let traf = r.find("traf", in: moof.payload),
            let tfhd = r.find("tfhd", in: traf.payload), let trun = r.find("trun", in: traf.payload)
        else { return nil }
        // tfhd: version/flags, track_ID, then the optional fields in flag order.
        let tfhdFlags = r.u32(tfhd.payload.lowerBound) & 0xffffff
        var p = tfhd.payload.lowerBound + 8
        if tfhdFlags & 0x1 != 0 { return nil }  // base_data_offset: not relocatable
        if tfhdFlags & 0x2 != 0 { p += 4 }
        var defaultDuration: UInt32 = 0, defaultSize: UInt32 = 0, defaultFlags: UInt32 = 0
        if tfhdFlags & 0x8 != 0 { defaultDuration = r.u32(p); p += 4 }
        if tfhdFlags & 0x10 != 0 { defaultSize = r.u32(p); p += 4 }
        if tfhdFlags & 0x20 != 0 { defaultFlags = r.u32(p); p += 4 }
        guard tfhdFlags & 0x020000 != 0 else { return nil }  // default-base-is-moof
        baseDecodeTime = 0
        if let tfdt = r.find("tfdt", in: traf.payload) {
            let v = r.u8(tfdt.payload.lowerBound)
            baseDecodeTime =
                v == 1
                ? UInt64(r.u32(tfdt.payload.lowerBound + 4)) << 32 | UInt64(r.u32(tfdt.payload.lowerBound + 8)) : UInt64(r.u32(tfdt.payload.lowerBound + 4))
        }
        let trunFlags = r.u32(trun.payload.lowerBound) & 0xffffff
        let count = Int(r.u32(trun.payload.lowerBound + 4))
        p = trun.payload.lowerBound + 8
        var dataOffset = 0
        if trunFlags & 0x1 != 0 { dataOffset = Int(Int32(bitPattern: r.u32(p))); p += 4 }
        var firstFlags: UInt32? = nil
        if trunFlags & 0x4 != 0 { firstFlags = r.u32(p); p += 4 }
        let fields = [0x100, 0x200, 0x400, 0x800].filter { trunFlags & $0 != 0 }.count
        guard count > 0, p + count * fields * 4 <= trun.payload.upperBound, trunFlags & 0x1 != 0 else { return nil }
        var total: UInt64 = 0, firstSize: UInt32 = defaultSize, firstSampleFlags = firstFlags ?? defaultFlags
        for i in 0..<count {
            var q = p + i * fields * 4
            var duration = defaultDuration
            if trunFlags & 0x100 != 0 { duration = r.u32(q); q += 4 }
            if trunFlags & 0x200 != 0 { if i == 0 { firstSize = r.u32(q) }; q += 4 }
            if trunFlags & 0x400 != 0 { if i == 0 && firstFlags == nil { firstSampleFlags = r.u32(q) }; q += 4 }
            total += UInt64(duration)
        }
        duration = total
        sampleCount = count
        startsWithSyncSample = firstSampleFlags & 0x0001_0000 == 0
        firstSampleRange = (moof.start, dataOffset + Int(firstSize))
    }
}

/// Reads ISO BMFF boxes out of bytes (big-endian, 32- or 64-bit sizes).
struct BoxReader {
    struct Box {
        var start: Int
        var payload: Range<Int>
    }
    let b: [UInt8]
    init(_ b: [UInt8]) { self.b = b }

    func u8(_ i: Int) -> UInt8 { i < b.count ? b[i] : 0 }
    func u32(_ i: Int) -> UInt32 {
        guard i + 4 <= b.count else { return 0 }
        return UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3])
    }

    /// The first box of `type` directly inside `range`.
    func find(_ type: String, in range: Range<Int>) -> Box? {
        let want = Array(type.utf8)
        var i = range.lowerBound
        while i + 8 <= range.upperBound {
            var size = Int(u32(i)), header = 8
            if size == 1 {
                guard i + 16 <= range.upperBound else { return nil }
                size = Int(UInt64(u32(i + 8)) << 32 | UInt64(u32(i + 12)))
                header = 16
            } else if size == 0 {
                size = range.upperBound - i
            }
            guard size >= header, i + size <= range.upperBound else { return nil }
            if Array(b[(i + 4)..<(i + 8)]) == want { return Box(start: i, payload: (i + header)..<(i + size)) }
            i += size
        }
        return nil
    }
}
