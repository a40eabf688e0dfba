import ClipFlowCore

/// Plans a sample-accurate AAC join without re-encoding most of the audio.
///
/// Model. Every AAC frame decodes to 1024 samples and overlaps its neighbours (MDCT), and each clip
/// starts with `priming` samples of encoder delay and ends with padding. The output audio track has
/// one frame grid: output frame k covers output "raw" samples [k*1024, (k+1)*1024), and raw sample
/// `priming` of the output is timeline sample 0 (the edit list hides the rest).
///
/// Each clip c owns the timeline range [start, end) (its sync position, clipped so that a clip's
/// audio never runs into the next clip's video). Its packets are copied onto the output grid at the
/// frame offset that puts them at, or at most 1023 samples before, their exact position
/// (`shift` in (-1024, 0]); copying never accumulates error because each clip is placed against
/// its exact position, not against the previous clip.
///
/// Around every join a few frames are re-encoded from decoded, trimmed PCM. Inside such a region
/// the map from output samples to timeline samples slides linearly from the left clip's shift to
/// the right clip's shift, so the re-encoded audio is continuous (no gap, no repeated or dropped
/// samples, no click) and meets the copied frames on both sides with identical content where
/// their MDCT windows overlap. The slide is a tiny, brief change of speed (at most `maxRateChange`).
public struct AudioJoinPlan: Equatable, Sendable {
    public static let frameSize: Int64 = 1024
    /// Samples of the slide zone kept on each side of a join, where damaged fragment edges are
    /// repaired (`EdgeRepair`: up to 80 ms, 3840 samples at 48 kHz, and a margin).
    public static let repairRoom: Int64 = 4096

    public struct Clip: Equatable, Sendable {
        /// Timeline position of the clip's first audible sample (samples).
        public var start: Int64
        /// Audible samples in the clip (after its edit list).
        public var length: Int64
        /// Encoder priming: raw samples before the first audible one.
        public var priming: Int64
        /// Number of AAC frames (packets) in the clip.
        public var frames: Int64
        public init(start: Int64, length: Int64, priming: Int64, frames: Int64) {
            self.start = start; self.length = length; self.priming = priming; self.frames = frames
        }
    }

    /// Output frames copied from one clip: output frame k holds clip packet k - offset.
    public struct Copy: Equatable, Sendable {
        public var clip: Int
        public var frames: Range<Int64>
        public var offset: Int64
    }

    /// Output frames re-encoded from PCM. Output raw sample r shows timeline sample
    /// r - priming - shift(r), where shift is `leftShift` before raw `(frames.lowerBound+1)*1024`,
    /// `rightShift` from raw `(frames.upperBound-1)*1024`, and moves between the two in the rest
    /// (the renderer splices where the waveform matches and slides only the remainder). The
    /// re-encoded frames next to each seam overlap the copied frames' MDCT windows; keeping the
    /// copied clips' own shifts over one frame each side of a seam makes the aliasing cancel
    /// (sliding within those frames leaves a loudness ripple at the seam; benchmarks/README.md).
    ///
    /// `least` are the frames that must be re-encoded; the renderer may re-encode more, up to
    /// `frames` (room to repair the fragments' damaged edges at a join of two clips), and the
    /// frames of `frames` it leaves are copied from the clip on their side (`optionalCopy`).
    public struct Region: Equatable, Sendable {
        public var frames: Range<Int64>
        public var least: Range<Int64>
        public var leftShift: Int64
        public var rightShift: Int64
        /// Clips whose audio appears in the region.
        public var clips: ClosedRange<Int>

        public init(frames: Range<Int64>, least: Range<Int64>? = nil, leftShift: Int64, rightShift: Int64, clips: ClosedRange<Int>) {
            self.frames = frames
            self.least = least ?? frames
            self.leftShift = leftShift
            self.rightShift = rightShift
            self.clips = clips
        }

        /// The same region re-encoding exactly `frames` (within `self.frames`, around `least`).
        public func rendering(_ frames: Range<Int64>) -> Region {
            Region(frames: frames, least: frames, leftShift: leftShift, rightShift: rightShift, clips: clips)
        }

        /// Raw range over which the shift may change.
        public var slideZone: Range<Int64> {
            (frames.lowerBound + 1) * AudioJoinPlan.frameSize..<(frames.upperBound - 1) * AudioJoinPlan.frameSize
        }
    }

    public var priming: Int64
    public var clips: [Clip]
    /// Timeline end of each clip's audio (exclusive).
    public var ends: [Int64]
    public var copies: [Copy]
    public var regions: [Region]
    /// Total output frames and the duration of the last one (the rest of it is padding).
    public var frameCount: Int64
    public var lastFrameDuration: Int64

    /// Sum of the audible samples the plan puts on the timeline.
    public var timelineEnd: Int64 { ends.last ?? 0 }

    /// - Parameters:
    ///   - clips: in order; `start` must be non-decreasing and the first must be 0.
    ///   - regionFrames: frames re-encoded around a join (at least 4: two seam frames and a slide zone).
    public init(clips: [Clip], regionFrames: Int64 = 6) throws {
        let F = Self.frameSize
        guard let first = clips.first else { throw ClipFlowError.failure("no audio to plan") }
        self.clips = clips
        priming = first.priming
        var ends: [Int64] = []
        for (i, c) in clips.enumerated() {
            var e = c.start + c.length
            if i + 1 < clips.count { e = min(e, clips[i + 1].start) }
            ends.append(max(e, c.start))
        }
        self.ends = ends

        // Placement: out frame = clip packet + offset; clip raw 0 sits at out raw z = P + start - priming_c.
        var offsets: [Int64] = []
        var shifts: [Int64] = []
        for c in clips {
            let z = priming + c.start - c.priming
            let f = floorDiv(z, F)
            offsets.append(f)
            shifts.append(f * F - z)  // in (-1024, 0]
        }
        // Copyable packets per clip (clip packet indices, inclusive range; may be empty).
        var lo: [Int64] = [], hi: [Int64] = []
        for (i, c) in clips.enumerated() {
            let jmin: Int64 = i == 0 ? 0 : 1 + ceilDiv(c.priming, F)
            var jmax: Int64
            if i == clips.count - 1 {
                jmax = c.frames - 1
            } else {
                jmax = floorDiv(c.priming + ends[i] - c.start, F) - 1
                jmax = min(jmax, c.frames - 1)
            }
            lo.append(jmin + offsets[i]); hi.append(jmax + offsets[i])
        }
        // Output length from the last clip's end.
        let lastIdx = clips.count - 1
        let endRaw = offsets[lastIdx] * F + clips[lastIdx].priming + (ends[lastIdx] - clips[lastIdx].start)
        frameCount = max(1, ceilDiv(endRaw, F))
        lastFrameDuration = endRaw - (frameCount - 1) * F
        if lastFrameDuration <= 0 { lastFrameDuration = F }

        // One region per join, then merge regions that touch or swallow a clip.
        var regions: [Region] = []
        for i in 1..<max(1, clips.count) where clips.count > 1 {
            let A = hi[i - 1] + 1  // first out frame not copied from the left clip
            let B = lo[i]  // first out frame copied from the right clip
            let need = max(4, regionFrames)
            var a = min(A, B), b = max(A, B)
            if b - a < need {
                let extra = need - (b - a)
                a -= extra / 2
                b += extra - extra / 2
            }
            a = max(a, 0)
            b = min(b, frameCount)
            // Room for `EdgeRepair` inside the slide zone on both sides of the join, in frames the
            // clips on either side could give by copy.
            let roomA = floorDiv(priming + ends[i - 1] + shifts[i - 1] - Self.repairRoom, F) - 1
            let roomB = ceilDiv(priming + clips[i].start + shifts[i] + Self.repairRoom, F) + 1
            let most = max(0, min(a, max(roomA, lo[i - 1])))..<min(frameCount, max(b, min(roomB, hi[i] + 1)))
            regions.append(Region(frames: most, least: a..<b, leftShift: shifts[i - 1], rightShift: shifts[i], clips: (i - 1)...i))
        }
        // Merge overlapping/adjacent regions, and regions that leave a clip without copyable frames.
        var merged: [Region] = []
        for r in regions {
            if var last = merged.last {
                let gapClip = r.clips.lowerBound  // the clip between last and r
                let copyLo = max(last.frames.upperBound, lo[gapClip])
                let copyHi = min(r.frames.lowerBound - 1, hi[gapClip])
                if copyHi < copyLo {
                    // Several joins in one region: no repair, the region is what it must be.
                    last.frames = last.least.lowerBound..<max(last.least.upperBound, r.least.upperBound)
                    last.least = last.frames
                    last.rightShift = r.rightShift
                    last.clips = last.clips.lowerBound...r.clips.upperBound
                    merged[merged.count - 1] = last
                    continue
                }
            }
            merged.append(r)
        }
        // A region must start after the first clip's copy start, and may reach the stream's ends.
        self.regions = merged

        // Copies: each clip's copyable frames minus the frames regions must re-encode (a copy may
        // reach into a region's optional frames; the renderer says which it took).
        var copies: [Copy] = []
        for i in clips.indices {
            var from = lo[i], to = hi[i] + 1
            for r in merged {
                if r.clips.contains(i) {
                    if r.clips.upperBound == i { from = max(from, r.least.upperBound) }
                    if r.clips.lowerBound == i { to = min(to, r.least.lowerBound) }
                    if r.clips.lowerBound < i && i < r.clips.upperBound { to = from }
                }
            }
            to = min(to, frameCount)
            if from < to { copies.append(Copy(clip: i, frames: from..<to, offset: offsets[i])) }
        }
        self.copies = copies
        try validate()
    }

    /// Every output frame is produced exactly once, in order (a region's optional frames by copy
    /// unless the renderer takes them), and a region's optional frames lie in copies.
    private func validate() throws {
        for r in regions where r.frames != r.least {
            let left = r.frames.lowerBound..<r.least.lowerBound, right = r.least.upperBound..<r.frames.upperBound
            let copied = { (part: Range<Int64>, clip: Int) in
                part.isEmpty || copies.contains { $0.clip == clip && $0.frames.contains(part.lowerBound) && $0.frames.contains(part.upperBound - 1) }
            }
            guard r.least.lowerBound >= r.frames.lowerBound, r.least.upperBound <= r.frames.upperBound,
                copied(left, r.clips.lowerBound), copied(right, r.clips.upperBound)
            else {
                throw ClipFlowError.failure("internal: audio join region \(r.frames) has optional frames no clip copies (\(r.least))")
            }
        }
        var pieces: [Range<Int64>] = copies.map(\.frames) + regions.map(\.least)
        pieces.sort { $0.lowerBound < $1.lowerBound }
        var next: Int64 = 0
        for p in pieces {
            guard p.lowerBound == next else {
                throw ClipFlowError.failure("internal: audio join plan has a gap or overlap at frame \(next) (\(pieces))")
            }
            next = p.upperBound
        }
        guard next == frameCount else {
            throw ClipFlowError.failure("internal: audio join plan covers \(next) of \(frameCount) frames")
        }
    }

    /// Shift of output raw sample r outside regions (copied frames of the clip that owns it).
    public func copyShift(clip: Int) -> Int64 {
        let c = clips[clip]
        let z = priming + c.start - c.priming
        return floorDiv(z, Self.frameSize) * Self.frameSize - z
    }
}

@inline(__always) func floorDiv(_ a: Int64, _ b: Int64) -> Int64 {
    let q = a / b
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q
}
@inline(__always) func ceilDiv(_ a: Int64, _ b: Int64) -> Int64 { -floorDiv(-a, b) }
