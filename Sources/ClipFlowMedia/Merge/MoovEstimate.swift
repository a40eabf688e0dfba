/// Upper bound of the size of the `moov` box the MP4 muxer will write, computed from the sample
/// tables before any data is written, so the box can be reserved at the front of the file (fast
/// start in one pass). Every table is counted at its largest possible encoding (one chunk per
/// sample, 64-bit chunk offsets, a composition offset per video sample), so the bound holds for any
/// interleaving; the muxer fills the rest with a `free` box. The writer still verifies the result
/// and falls back to a second pass if the bound were ever short.
public struct MoovEstimate: Sendable, Equatable {
    public struct Track: Sendable, Equatable {
        public var samples: Int
        public var keyframes: Int
        public var durationRuns: Int
        public var isVideo: Bool
        public var extradataBytes: Int
        public init(samples: Int, keyframes: Int, durationRuns: Int, isVideo: Bool, extradataBytes: Int) {
            self.samples = samples; self.keyframes = keyframes; self.durationRuns = durationRuns
            self.isVideo = isVideo; self.extradataBytes = extradataBytes
        }
    }

    public static func bytes(tracks: [Track]) -> Int {
        var total = 8 + 120 + 512  // moov header, mvhd, udta/meta (encoder name)
        for t in tracks {
            let n = t.samples
            var trak = 8 + 104 + 8 + 64  // trak, tkhd (v1), edts+elst (two v1 entries)
            trak += 8 + 44 + 80  // mdia, mdhd (v1), hdlr with name
            trak += 8 + 24 + 36  // minf, vmhd/smhd, dinf/dref
            trak += 8 + 16 + 200 + t.extradataBytes  // stbl, stsd, sample entry incl. colr/pasp/btrt/esds
            trak += 16 + 8 * (t.durationRuns + 4)  // stts (+ joins may add runs)
            if t.isVideo {
                trak += 16 + 8 * n  // ctts, worst case one entry per sample
                trak += 16 + 4 * t.keyframes  // stss
            } else {
                trak += 64  // sgpd/sbgp (AAC pre-roll)
            }
            trak += 20 + 4 * n  // stsz
            trak += 16 + 12 * n  // stsc, one entry per chunk at most
            trak += 16 + 8 * n  // co64, one chunk per sample at most
            total += trak
        }
        return total + 1024 + total / 100  // slack for muxer versions
    }
}
