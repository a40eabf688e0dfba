internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// How far apart a video's keyframes are, from its samples' flags: nothing is decoded. An MP4 or
/// MOV holds them all in its sample tables (read when it is opened); from any other container
/// its video packets are read (the other streams' skipped).
public struct KeyframeSpacing: Sendable, Equatable {
    /// Whether the video's first packet is a keyframe.
    public var startsWithKeyframe: Bool
    /// Seconds: the longest stretch from a keyframe to the next one (or to the video's end).
    public var longestGap: Double

    /// Measures the best video stream of `path`.
    public static func measure(_ path: String) throws -> KeyframeSpacing { try measure(Demuxer(path: path)) }

    /// Measures the best video stream of `source`, an open demuxer (a probe's: the file is not
    /// opened again). From an MP4 or MOV nothing is read; from another container its packets are,
    /// so `source` is at its end afterwards.
    static func measure(_ source: Demuxer) throws -> KeyframeSpacing {
        let path = source.path
        let v = av_find_best_stream(source.ctx, AVMEDIA_TYPE_VIDEO, -1, -1, nil, 0)
        guard v >= 0 else { throw ClipFlowError.badInput("input '\(path)' has no video stream") }
        let stream = source.stream(Int(v))
        let base = stream.pointee.time_base
        let seconds = { (ticks: Int64) in Double(ticks) * Double(base.num) / Double(max(1, base.den)) }
        if source.formatName.hasPrefix("mov,"), let fromTables = fromSampleTables(stream, seconds: seconds) { return fromTables }
        for i in 0..<Int(source.ctx.pointee.nb_streams) where i != Int(v) { source.stream(i).pointee.discard = AVDISCARD_ALL }
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

    /// From the index the MP4 demuxer builds of every sample (decoding times; a keyframe flag
    /// each); nil when it holds none.
    private static func fromSampleTables(_ stream: UnsafeMutablePointer<AVStream>, seconds: (Int64) -> Double) -> KeyframeSpacing? {
        let count = avformat_index_get_entries_count(stream)
        guard count > 0, let first = avformat_index_get_entry(stream, 0) else { return nil }
        var lastKey: Int64?, longest: Int64 = 0, end: Int64 = first.pointee.timestamp
        for i in 0..<count {
            guard let e = avformat_index_get_entry(stream, i) else { continue }
            let t = e.pointee.timestamp
            end = max(end, t)
            if Int32(e.pointee.flags) & AVINDEX_KEYFRAME != 0 {
                if let k = lastKey, t > k { longest = max(longest, t - k) }
                if lastKey == nil || t > lastKey! { lastKey = t }
            }
        }
        // The video ends where its stream says (else at its last sample).
        let duration = stream.pointee.duration > 0 ? stream.pointee.duration : end - first.pointee.timestamp
        end = max(end, first.pointee.timestamp + duration)
        if let k = lastKey { longest = max(longest, end - k) }
        return KeyframeSpacing(
            startsWithKeyframe: Int32(first.pointee.flags) & AVINDEX_KEYFRAME != 0, longestGap: lastKey == nil ? .infinity : seconds(longest))
    }
}
