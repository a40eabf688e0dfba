internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// How far apart a video's keyframes are, from its packets' flags: nothing is decoded (the
/// other streams' packets are skipped), so it costs a read of the file's packet headers.
public struct KeyframeSpacing: Sendable, Equatable {
    /// Whether the video's first packet is a keyframe.
    public var startsWithKeyframe: Bool
    /// Seconds: the longest stretch from a keyframe to the next one (or to the video's end).
    public var longestGap: Double

    /// Measures the best video stream of `path`.
    public static func measure(_ path: String) throws -> KeyframeSpacing {
        let source = try Demuxer(path: path)
        let v = av_find_best_stream(source.ctx, AVMEDIA_TYPE_VIDEO, -1, -1, nil, 0)
        guard v >= 0 else { throw ClipFlowError.badInput("input '\(path)' has no video stream") }
        for i in 0..<Int(source.ctx.pointee.nb_streams) where i != Int(v) { source.stream(i).pointee.discard = AVDISCARD_ALL }
        let base = source.stream(Int(v)).pointee.time_base
        let seconds = { (ticks: Int64) in Double(ticks) * Double(base.num) / Double(max(1, base.den)) }
        let packet = try Packet()
        var first = true, starts = false
        var lastKey: Int64?, end: Int64 = 0, longest: Int64 = 0
        while try source.read(into: packet) {
            defer { packet.unref() }
            let p = packet.p.pointee
            guard p.stream_index == v else { continue }
            let t = p.pts == cf_nopts() ? p.dts : p.pts
            guard t != cf_nopts() else { continue }
            if first {
                starts = packet.isKeyframe
                first = false
            }
            if packet.isKeyframe {
                if let k = lastKey, t > k { longest = max(longest, t - k) }
                if lastKey == nil || t > lastKey! { lastKey = t }
            }
            end = max(end, t + max(0, p.duration))
        }
        if let k = lastKey { longest = max(longest, end - k) }
        return KeyframeSpacing(startsWithKeyframe: starts, longestGap: lastKey == nil ? .infinity : seconds(longest))
    }
}
