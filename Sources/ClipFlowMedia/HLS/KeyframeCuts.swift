internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// A source's video keyframes as its packets say (nothing decoded): their presentation times in
/// seconds from the video's first timestamp (the time zero a ladder's decode and copy share), the
/// video's end, and its packets' bytes.
struct SourceKeyframes: Sendable, Equatable {
    var times: [Double]
    var startsWithKeyframe: Bool
    /// Seconds: where the last picture ends.
    var end: Double
    /// Bytes of every video packet.
    var bytes: Int64
    /// A picture after a keyframe in decoding order is shown before it (an open GOP: a segment
    /// starting at that keyframe would need the one before).
    var leadingPictures = false

    /// Seconds: the longest stretch from a keyframe to the next one (or to the end).
    var longestGap: Double {
        guard let first = times.first else { return .infinity }
        var longest = 0.0, last = first
        for t in times.dropFirst() {
            longest = max(longest, t - last)
            last = t
        }
        return max(longest, end - last)
    }

    /// Bits per second of the video packets over the video's length.
    var averageRate: Double { end > 0 ? Double(bytes) * 8 / end : 0 }

    /// Reads the video packets of stream `stream` of `source` (the other streams skipped; the
    /// demuxer is at its end afterwards). Once `stopped()` (asked every few hundred packets)
    /// says so, throws `ClipFlowError.interrupted`.
    static func read(_ source: Demuxer, stream: Int, stopped: () -> Bool = { false }) throws -> SourceKeyframes {
        for i in 0..<source.streamCount where i != stream { source.stream(i).pointee.discard = AVDISCARD_ALL }
        defer { for i in 0..<source.streamCount { source.stream(i).pointee.discard = AVDISCARD_DEFAULT } }
        let st = source.stream(stream)
        let base = st.pointee.time_base
        let start = st.pointee.start_time == cf_nopts() ? 0 : st.pointee.start_time
        let seconds = { (ticks: Int64) in Double(ticks - start) * Double(base.num) / Double(max(1, base.den)) }
        let packet = try Packet()
        var keys: [Double] = []
        var first: Bool?
        var end = 0.0, bytes: Int64 = 0
        var lastKey: Int64?, leading = false
        var count = 0
        while try source.read(into: packet) {
            defer { packet.unref() }
            count += 1
            if count % 256 == 0, stopped() { throw ClipFlowError.interrupted }
            let p = packet.p.pointee
            guard Int(p.stream_index) == stream else { continue }
            bytes += Int64(p.size)
            let ticks = p.pts == cf_nopts() ? p.dts : p.pts
            guard ticks != cf_nopts() else { continue }
            if first == nil { first = packet.isKeyframe }
            if packet.isKeyframe {
                keys.append(seconds(ticks))
                lastKey = ticks
            } else if let k = lastKey, p.pts != cf_nopts(), p.pts < k {
                leading = true
            }
            end = max(end, seconds(ticks + max(0, p.duration)))
        }
        keys.sort()
        return SourceKeyframes(times: keys, startsWithKeyframe: first ?? false, end: end, bytes: bytes, leadingPictures: leading)
    }

    /// The keyframes a ladder's segments start at when one rendition is these packets as they are
    /// (the others force their keyframes at the same instants): the first keyframe, then for each
    /// next segment the keyframe nearest the schedule's length after the last cut (the first
    /// segment: `schedule.first`), never one less than half that length after the last cut nor
    /// one within half a frame of the end.
    func cuts(_ schedule: SegmentSchedule, halfFrame: Double) -> [Double] {
        guard let first = times.first else { return [] }
        var cuts = [first]
        var target = first + schedule.first
        var i = 1
        while i < times.count {
            let shortest = target - (target - cuts[cuts.count - 1]) / 2
            while i < times.count, times[i] < shortest { i += 1 }
            guard i < times.count, times[i] < end - halfFrame else { break }
            var j = i
            while j + 1 < times.count, times[j + 1] < end - halfFrame, abs(times[j + 1] - target) <= abs(times[j] - target) { j += 1 }
            cuts.append(times[j])
            target = times[j] + schedule.length
            i = j + 1
        }
        return cuts
    }
}
