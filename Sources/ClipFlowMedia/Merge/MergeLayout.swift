internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

extension Merger {
    /// Timing of every clip in the output, computed before anything is written.
    struct Layout {
        let clips: [ClipInfo]
        let rotation: Int
        let videoTB: AVRational
        /// Added to each clip's video timestamps (after rescaling to videoTB).
        let videoOffsets: [Int64]
        /// Output time (videoTB) of each clip's first picture: the clip before it ends at its
        /// pictures' end, or later where its sound outlasts them (`hold`: its last picture is
        /// shown until its sound ends, so the next clip starts after all of it, in sync).
        let starts: [Int64]
        let videoEnd: Int64
        let audio: AudioJoinPlan?
        let sampleRate: Int32
        /// Output audio pts of raw sample 0 (1/sampleRate).
        let audioBase: Int64

        /// A time base in which every clip's timestamps are exact (1 / the least common multiple
        /// of the timescales), or else the finest of them: rescaling a finer time base to a
        /// coarser one rounds neighbouring frames together (decode times that no longer increase).
        static func commonTimeBase(_ bases: [AVRational]) -> AVRational {
            func gcd(_ a: Int64, _ b: Int64) -> Int64 { b == 0 ? a : gcd(b, a % b) }
            var lcm: Int64 = 1
            for b in bases {
                guard b.num == 1, b.den > 0 else { lcm = 0; break }
                lcm = lcm / gcd(lcm, Int64(b.den)) * Int64(b.den)
                if lcm > Int64(Int32.max) { lcm = 0; break }
            }
            if lcm > 0 { return AVRational(num: 1, den: Int32(lcm)) }
            return bases.min { $0.double < $1.double } ?? AVRational(num: 1, den: 1)
        }

        /// The longest a clip's last picture is held for sound that outlasts it: a phone's
        /// variable-rate fragment ends its sound up to a few picture intervals after its last
        /// picture. Sound that runs on longer than this is not its pictures' (a track of another
        /// length): the next clip starts with its pictures and that sound's end is cut.
        static let longestHold = 0.25
        /// Sound this much (samples) or less past the last picture is not held for: it is cut at
        /// the join and the next clip starts at its predecessor's pictures' end. One AAC frame:
        /// encoders and muxers that end the sound on whole AAC frames leave up to that much past
        /// the pictures; more is sound of the clip's own, kept.
        static let shortestHold = AudioJoinPlan.frameSize

        /// Output ticks (videoTB) to hold the last picture of `c` for its sound to play out: the
        /// time its audible sound ends after its pictures (rounded up), when that is more than
        /// `shortestHold` and at most `longestHold`; else 0 (the next clip starts with its
        /// pictures and cuts that sound).
        static func hold(_ c: ClipInfo, videoTB: AVRational) -> Int64 {
            guard let a = c.audio, a.sampleRate > 0, videoTB.num > 0 else { return 0 }
            let sr = AVRational(num: 1, den: a.sampleRate)
            let vtb = c.video.timeBase.av
            let soundEnd = rescale(a.start, a.timeBase.av, sr) - rescale(c.video.start, vtb, sr) + c.audioSamples
            let excess = soundEnd - rescale(c.video.duration, vtb, sr)
            guard excess > shortestHold, Double(excess) <= longestHold * Double(a.sampleRate) else { return 0 }
            return ceilDiv(excess * Int64(videoTB.den), Int64(a.sampleRate) * Int64(videoTB.num))
        }

        init(clips: [ClipInfo], rotate: Int, setRotation: Int? = nil) throws {
            self.clips = clips
            let first = clips[0]
            rotation = setRotation ?? (first.video.rotation + rotate) % 360
            videoTB = Self.commonTimeBase(clips.map(\.video.timeBase.av))
            var offsets: [Int64] = []
            var v: Int64 = 0  // V_c, output time of clip c's first frame
            var starts: [Int64] = []
            for (i, c) in clips.enumerated() {
                let tb = c.video.timeBase.av
                offsets.append(v - rescale(c.video.start, tb, videoTB))
                starts.append(v)
                v += rescale(c.video.duration, tb, videoTB)
                // The last clip's sound is never cut: nothing follows it.
                if i + 1 < clips.count { v += Self.hold(c, videoTB: videoTB) }
            }
            videoOffsets = offsets
            self.starts = starts
            videoEnd = v
            guard let a0 = first.audio else {
                audio = nil; sampleRate = 0; audioBase = 0
                return
            }
            sampleRate = a0.sampleRate
            let sr = AVRational(num: 1, den: a0.sampleRate)
            // X_c: timeline position of each clip's first audible sample, relative to clip 0's.
            var xs: [Int64] = []
            for (i, c) in clips.enumerated() {
                guard let a = c.audio else { throw ClipFlowError.failure("internal: clip without audio") }
                let videoAt = rescale(starts[i], videoTB, sr)
                let audioVsVideo = rescale(a.start, a.timeBase.av, sr) - rescale(c.video.start, c.video.timeBase.av, sr)
                xs.append(videoAt + audioVsVideo)
            }
            let x0 = xs[0]
            if a0.objectType != 2 && clips.count > 1 {
                throw ClipFlowError.incompatible(
                    "'\(first.path)': \(Compatibility.aacProfileName(a0.objectType)) audio cannot be joined sample-accurately yet; only AAC LC is supported for joins"
                )
            }
            let planClips = clips.enumerated().map { i, c in
                AudioJoinPlan.Clip(
                    start: xs[i] - x0, length: c.audioSamples, priming: c.audio!.priming,
                    frames: Int64(c.audio!.packets))
            }
            audio = try AudioJoinPlan(clips: planClips)
            audioBase = x0 - audio!.priming
        }
    }
}
