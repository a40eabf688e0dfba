import Foundation

/// One media segment as written: its file, length in seconds, size, where it starts in that file
/// (nil: the file is the segment; a number: one file holds the rendition, `--single-file`), and
/// the I-frame byte range of its first (sync) sample, from the file's start.
struct HLSSegment: Equatable, Codable {
    var uri: String
    var seconds: Double
    var bytes: Int
    var offset: Int? = nil
    var iframe: ByteRange?
    /// A discontinuity before this segment, which starts with this init section (a live ladder's
    /// fragment whose codec parameters differ from the one before it); nil: none.
    var newInit: String? = nil
}

/// `length` bytes from `offset` (EXT-X-BYTERANGE).
struct ByteRange: Equatable, Codable {
    var offset: Int
    var length: Int
    var tag: String { "\(length)@\(offset)" }
}

/// One rendition's playlist inputs.
struct HLSTrack: Codable {
    var playlistURI: String
    var initURI: String
    /// Where the init section lies in `initURI` when that file holds more (`--single-file`).
    var initRange: ByteRange? = nil
    var segments: [HLSSegment]
    /// RFC 6381 string of this track's codec ("avc1.64001f", "mp4a.40.2").
    var codecs: String
    /// Video only.
    var width = 0, height = 0
    var frameRate = 0.0
    /// The I-frame playlist's file (video only; nil: none).
    var iframesURI: String?
    /// Audio only.
    var channels = 0

    /// Target duration: the longest segment, rounded to the nearest second (RFC 8216 4.3.3.1).
    var targetDuration: Int { max(1, Int((segments.map(\.seconds).max() ?? 1).rounded())) }
    var peak: Double { SegmentRates.peak(bytes: segments.map(\.bytes), seconds: segments.map(\.seconds), target: Double(targetDuration)) }
    var average: Double { SegmentRates.average(bytes: segments.map(\.bytes), seconds: segments.map(\.seconds)) }
    var iframePeak: Double {
        SegmentRates.peak(bytes: segments.map { $0.iframe?.length ?? 0 }, seconds: segments.map(\.seconds), target: Double(targetDuration))
    }
    var iframeAverage: Double { SegmentRates.average(bytes: segments.map { $0.iframe?.length ?? 0 }, seconds: segments.map(\.seconds)) }
}

/// HLS playlists written from what the segments measure (RFC 8216): BANDWIDTH is the peak
/// segment bit rate of a variant with its audio, AVERAGE-BANDWIDTH the average; CODECS, RESOLUTION,
/// FRAME-RATE on every variant; EXT-X-INDEPENDENT-SEGMENTS in the master (every segment starts
/// with a keyframe); media playlists with EXT-X-MAP, VOD and ENDLIST; I-frame playlists whose
/// byte ranges never include the init section. Pure; the ladder writer and its tests use them.
enum HLSPlaylists {
    static let version = 7

    /// What a media playlist is: a whole video (`VOD`), or one that grows at its end while it is
    /// recorded (`EVENT`), closed by `#EXT-X-ENDLIST` once it ended.
    enum PlaylistType {
        case vod, event, closedEvent
    }

    static func media(_ t: HLSTrack, type: PlaylistType = .vod) -> String {
        var s = header(t.targetDuration, type: type == .vod ? "VOD" : "EVENT") + map(t)
        for seg in t.segments {
            if let uri = seg.newInit { s += "#EXT-X-DISCONTINUITY\n#EXT-X-MAP:URI=\"\(uri)\"\n" }
            s += String(format: "#EXTINF:%.6f,\n", seg.seconds)
            if let o = seg.offset { s += "#EXT-X-BYTERANGE:\(ByteRange(offset: o, length: seg.bytes).tag)\n" }
            s += seg.uri + "\n"
        }
        return type == .event ? s : s + "#EXT-X-ENDLIST\n"
    }

    private static func map(_ t: HLSTrack) -> String {
        "#EXT-X-MAP:URI=\"\(t.initURI)\"" + (t.initRange.map { ",BYTERANGE=\"\($0.tag)\"" } ?? "") + "\n"
    }

    /// Each entry one sync sample: the segment's first, lasting to the next one.
    static func iframes(_ t: HLSTrack) -> String {
        var s = header(t.targetDuration) + "#EXT-X-I-FRAMES-ONLY\n" + map(t)
        for seg in t.segments {
            guard let r = seg.iframe else { continue }
            s += String(format: "#EXTINF:%.6f,\n", seg.seconds) + "#EXT-X-BYTERANGE:\(r.tag)\n" + seg.uri + "\n"
        }
        return s + "#EXT-X-ENDLIST\n"
    }

    /// Video renditions in the master's order: grouped by codec, H.264 first (every player
    /// decodes it, and a player without a bandwidth estimate starts on the first variant), then
    /// HEVC, then AV1; the richest first within each.
    static func ordered(_ video: [HLSTrack]) -> [HLSTrack] {
        func family(_ t: HLSTrack) -> Int { t.codecs.hasPrefix("avc") ? 0 : t.codecs.hasPrefix("hvc") || t.codecs.hasPrefix("hev") ? 1 : 2 }
        return video.sorted { (family($0), -$0.peak) < (family($1), -$1.peak) }
    }

    /// The smallest H.264 rendition of `ordered` video (else its last): where a player with no
    /// estimate yet starts, and what the storyboard is decoded from.
    static func smallest(of ordered: [HLSTrack]) -> HLSTrack? {
        ordered.last { $0.codecs.hasPrefix("avc") } ?? ordered.last
    }

    static func master(video: [HLSTrack], audio: HLSTrack?, audioGroup: String = "audio") -> String {
        var s = "#EXTM3U\n#EXT-X-VERSION:\(version)\n#EXT-X-INDEPENDENT-SEGMENTS\n"
        if let a = audio {
            s +=
                "#EXT-X-MEDIA:TYPE=AUDIO,GROUP-ID=\"\(audioGroup)\",NAME=\"audio\",DEFAULT=YES,AUTOSELECT=YES,CHANNELS=\"\(a.channels)\",URI=\"\(a.playlistURI)\"\n"
        }
        for v in video {
            let peak = v.peak + (audio?.peak ?? 0), average = v.average + (audio?.average ?? 0)
            var attrs = ["BANDWIDTH=\(Int(peak.rounded(.up)))", "AVERAGE-BANDWIDTH=\(Int(average.rounded(.up)))"]
            attrs.append("CODECS=\"\(([v.codecs] + (audio.map { [$0.codecs] } ?? [])).joined(separator: ","))\"")
            attrs.append("RESOLUTION=\(v.width)x\(v.height)")
            attrs.append(String(format: "FRAME-RATE=%.3f", v.frameRate))
            if audio != nil { attrs.append("AUDIO=\"\(audioGroup)\"") }
            s += "#EXT-X-STREAM-INF:" + attrs.joined(separator: ",") + "\n" + v.playlistURI + "\n"
        }
        for v in video {
            guard let uri = v.iframesURI else { continue }
            let attrs = [
                "BANDWIDTH=\(Int(v.iframePeak.rounded(.up)))", "AVERAGE-BANDWIDTH=\(Int(v.iframeAverage.rounded(.up)))",
                "CODECS=\"\(v.codecs)\"", "RESOLUTION=\(v.width)x\(v.height)", "URI=\"\(uri)\""
            ]
            s += "#EXT-X-I-FRAME-STREAM-INF:" + attrs.joined(separator: ",") + "\n"
        }
        return s
    }

    private static func header(_ target: Int, type: String = "VOD") -> String {
        "#EXTM3U\n#EXT-X-VERSION:\(version)\n#EXT-X-TARGETDURATION:\(target)\n#EXT-X-MEDIA-SEQUENCE:0\n#EXT-X-PLAYLIST-TYPE:\(type)\n#EXT-X-INDEPENDENT-SEGMENTS\n"
    }
}
