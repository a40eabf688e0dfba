import ClipFlowCore
import Foundation

/// A playlist as lines of tags and URIs (RFC 8216 4.1): enough to check one, not to play it.
struct M3U8 {
    struct Entry {
        var tag: String
        /// What follows the colon: attributes (`KEY=VALUE,...`) or a plain value.
        var value: String
        /// The URI line after EXTINF or EXT-X-STREAM-INF.
        var uri: String?
        var attributes: [String: String] { M3U8.attributes(value) }
    }
    var entries: [Entry] = []

    init?(_ text: String) {
        let lines = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard lines.first == "#EXTM3U" else { return nil }
        var pendingURI = false
        for line in lines.dropFirst() {
            if line.hasPrefix("#EXT") {
                let parts = line.split(separator: ":", maxSplits: 1)
                entries.append(Entry(tag: String(parts[0]), value: parts.count > 1 ? String(parts[1]) : ""))
                pendingURI = entries.last!.tag == "#EXTINF" || entries.last!.tag == "#EXT-X-STREAM-INF"
            } else if !line.hasPrefix("#"), pendingURI {
                entries[entries.count - 1].uri = line
                pendingURI = false
            }
        }
    }

    func all(_ tag: String) -> [Entry] { entries.filter { $0.tag == tag } }
    func first(_ tag: String) -> Entry? { entries.first { $0.tag == tag } }

    static func attributes(_ s: String) -> [String: String] {
        var out: [String: String] = [:]
        var key = "", value = "", inKey = true, quoted = false
        func flush() {
            if !key.isEmpty { out[key] = value }
            key = ""
            value = ""
            inKey = true
        }
        for ch in s {
            if inKey {
                if ch == "=" { inKey = false } else if ch != "," { key.append(ch) }
            } else if ch == "\"" {
                quoted.toggle()
            } else if ch == ",", !quoted {
                flush()
            } else {
                value.append(ch)
            }
        }
        flush()
        return out
    }
}

/// A problem `clipflow hls lint` reports.
public struct LintFinding: Sendable, Equatable {
    public enum Severity: String, Sendable { case error, warning }
    public var severity: Severity
    public var code: String
    public var file: String
    public var message: String
}

/// Checks an HLS folder as a player and an encoder engineer would (RFC 8216 and Apple's HLS
/// authoring rules): every variant declares BANDWIDTH at least its measured peak, AVERAGE-
/// BANDWIDTH near its average, CODECS matching its init segment, RESOLUTION and FRAME-RATE;
/// EXT-X-INDEPENDENT-SEGMENTS in the master; I-frame playlists; media playlists with EXT-X-MAP,
/// VOD, ENDLIST and a target duration no segment exceeds; every segment starting with a sync
/// sample; video renditions cut at the same instants.
public enum HLSLint {
    public static func lint(directory: URL) throws -> [LintFinding] {
        var findings: [LintFinding] = []
        func add(_ s: LintFinding.Severity, _ code: String, _ file: String, _ message: String) {
            findings.append(LintFinding(severity: s, code: code, file: file, message: message))
        }
        let masterURL = directory.appendingPathComponent("master.m3u8")
        guard let text = try? String(contentsOf: masterURL, encoding: .utf8), let master = M3U8(text) else {
            throw ClipFlowError.badInput("'\(masterURL.path)': no master playlist there (or not an M3U8 file)")
        }
        if master.first("#EXT-X-INDEPENDENT-SEGMENTS") == nil {
            add(.warning, "independent-segments", "master.m3u8", "no EXT-X-INDEPENDENT-SEGMENTS in the master (it applies to every rendition only there)")
        }
        if master.first("#EXT-X-I-FRAME-STREAM-INF") == nil {
            add(.warning, "no-iframe-playlists", "master.m3u8", "no EXT-X-I-FRAME-STREAM-INF: players cannot show trick play or scrub thumbnails")
        }
        // Audio renditions, by group: their measured rates and codecs.
        var audioGroups: [String: (peak: Double, average: Double, codecs: [String])] = [:]
        for m in master.all("#EXT-X-MEDIA") where m.attributes["TYPE"] == "AUDIO" {
            guard let uri = m.attributes["URI"], let group = m.attributes["GROUP-ID"] else { continue }
            guard let r = try? rendition(directory, uri, &findings) else { continue }
            let g = audioGroups[group] ?? (0, 0, [])
            audioGroups[group] = (max(g.peak, r.peak), max(g.average, r.average), g.codecs + [r.codecs].compactMap { $0 })
        }
        var cuts: [(String, [Double])] = []
        for v in master.all("#EXT-X-STREAM-INF") {
            guard let uri = v.uri else { continue }
            let a = v.attributes
            guard let r = try? rendition(directory, uri, &findings) else { continue }
            var required = [("CODECS", LintFinding.Severity.error), ("AVERAGE-BANDWIDTH", .warning)]
            if r.isVideo {
                required += [("RESOLUTION", .warning), ("FRAME-RATE", .warning)]
                cuts.append((uri, r.starts))
            }
            for (key, severity) in required where a[key] == nil {
                add(severity, "missing-\(key.lowercased())", "master.m3u8", "\(uri): EXT-X-STREAM-INF has no \(key)")
            }
            let group = a["AUDIO"].flatMap { audioGroups[$0] }
            let peak = r.peak + (group?.peak ?? 0), average = r.average + (group?.average ?? 0)
            if let b = a["BANDWIDTH"].flatMap(Double.init), b + 1 < peak {
                add(
                    .error, "bandwidth-below-peak", "master.m3u8",
                    "\(uri): BANDWIDTH \(Int(b)) is below the measured peak \(Int(peak.rounded(.up))) (segments with their audio)")
            }
            if let b = a["AVERAGE-BANDWIDTH"].flatMap(Double.init), abs(b - average) > 0.1 * average {
                add(
                    .warning, "average-bandwidth", "master.m3u8",
                    "\(uri): AVERAGE-BANDWIDTH \(Int(b)) is more than 10 % off the measured \(Int(average.rounded()))")
            }
            if let declared = a["CODECS"] {
                let want = ([r.codecs].compactMap { $0 } + (group?.codecs ?? [])).sorted()
                let have = declared.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.sorted()
                if !want.isEmpty, have != want {
                    add(.error, "codecs-mismatch", "master.m3u8", "\(uri): CODECS \"\(declared)\" but the streams are \(want.joined(separator: ","))")
                }
            }
        }
        // Renditions must be cut at the same instants (players switch at segment boundaries).
        if let (firstURI, ref) = cuts.first {
            for (uri, starts) in cuts.dropFirst() where starts.count != ref.count || zip(starts, ref).contains(where: { abs($0 - $1) > 0.001 }) {
                add(.error, "misaligned", uri, "segments start at \(fmt(starts)) s, those of \(firstURI) at \(fmt(ref)) s")
            }
        }
        return findings
    }

    struct Rendition {
        var peak: Double
        var average: Double
        var codecs: String?
        var isVideo: Bool
        /// Segment start times in seconds (from the segments' own decode times).
        var starts: [Double]
    }

    /// Checks one media playlist and its segments; returns what the master is checked against.
    static func rendition(_ dir: URL, _ uri: String, _ findings: inout [LintFinding]) throws -> Rendition {
        func add(_ s: LintFinding.Severity, _ code: String, _ message: String) {
            findings.append(LintFinding(severity: s, code: code, file: uri, message: message))
        }
        let url = dir.appendingPathComponent(uri)
        guard let text = try? String(contentsOf: url, encoding: .utf8), let p = M3U8(text) else {
            add(.error, "missing-playlist", "cannot read the media playlist")
            throw ClipFlowError.badInput(uri)
        }
        let base = url.deletingLastPathComponent()
        let target = p.first("#EXT-X-TARGETDURATION").flatMap { Int($0.value) } ?? 0
        if p.first("#EXT-X-ENDLIST") == nil { add(.warning, "no-endlist", "no EXT-X-ENDLIST") }
        if p.first("#EXT-X-PLAYLIST-TYPE") == nil { add(.warning, "no-playlist-type", "no EXT-X-PLAYLIST-TYPE") }
        var initInfo: InitSegmentInfo?
        if let map = p.first("#EXT-X-MAP")?.attributes["URI"] {
            initInfo = InitSegmentInfo([UInt8]((try? Data(contentsOf: base.appendingPathComponent(map))) ?? Data()))
        }
        var sizes: [Int] = [], seconds: [Double] = [], starts: [Double] = []
        for (k, e) in p.all("#EXTINF").enumerated() {
            let d = Double(e.value.split(separator: ",").first ?? "") ?? 0
            if target > 0, Int(d.rounded()) > target {
                add(.error, "segment-too-long", "segment \(k) lasts \(d) s, above the target duration \(target) s")
            }
            guard let s = e.uri, let bytes = try? Data(contentsOf: base.appendingPathComponent(s)) else {
                add(.error, "missing-segment", "segment \(k) cannot be read")
                continue
            }
            sizes.append(bytes.count)
            seconds.append(d)
            if let f = FragmentInfo([UInt8](bytes)) {
                if initInfo?.isVideo == true, !f.startsWithSyncSample {
                    add(.error, "segment-not-keyframe", "segment \(k) (\(s)) does not start with a keyframe")
                }
                starts.append(Double(f.baseDecodeTime) / Double(max(1, initInfo?.timescale ?? 1)))
            }
        }
        let measuredTarget = Double(max(target, 1))
        return Rendition(
            peak: SegmentRates.peak(bytes: sizes, seconds: seconds, target: measuredTarget), average: SegmentRates.average(bytes: sizes, seconds: seconds),
            codecs: initInfo?.codecs, isVideo: initInfo?.isVideo ?? true, starts: starts)
    }

    static func fmt(_ v: [Double]) -> String {
        "[" + v.prefix(6).map { String(format: "%.3f", $0) }.joined(separator: ", ") + (v.count > 6 ? ", ..." : "") + "]"
    }
}

/// The codec and timescale an fMP4 init segment declares (moov/trak/mdia: mdhd, stsd).
struct InitSegmentInfo {
    var timescale: UInt32
    var isVideo: Bool
    var codecs: String?

    init?(_ b: [UInt8]) {
        let r = BoxReader(b)
        guard let moov = r.find("moov", in: 0..<b.count), let trak = r.find("trak", in: moov.payload), let mdia = r.find("mdia", in: trak.payload),
            let mdhd = r.find("mdhd", in: mdia.payload), let minf = r.find("minf", in: mdia.payload), let stbl = r.find("stbl", in: minf.payload),
            let stsd = r.find("stsd", in: stbl.payload)
        else { return nil }
        timescale = r.u8(mdhd.payload.lowerBound) == 1 ? r.u32(mdhd.payload.lowerBound + 20) : r.u32(mdhd.payload.lowerBound + 12)
        let entries = (stsd.payload.lowerBound + 8)..<stsd.payload.upperBound
        isVideo = false
        codecs = nil
        for type in ["avc1", "avc3", "hvc1", "hev1"] {
            guard let e = r.find(type, in: entries) else { continue }
            isVideo = true
            let children = (e.payload.lowerBound + 78)..<e.payload.upperBound  // after the VisualSampleEntry fields
            if type.hasPrefix("avc"), let c = r.find("avcC", in: children) {
                codecs = CodecStrings.avc(Array(b[c.payload]), sampleEntry: type)
            } else if let c = r.find("hvcC", in: children) {
                codecs = CodecStrings.hevc(Array(b[c.payload]), sampleEntry: type)
            }
            return
        }
        if let e = r.find("mp4a", in: entries), let esds = r.find("esds", in: (e.payload.lowerBound + 28)..<e.payload.upperBound) {
            codecs = Self.audioSpecificConfig(Array(b[esds.payload].dropFirst(4))).flatMap { CodecStrings.aac($0) }
        }
    }

    /// The DecoderSpecificInfo (tag 5) inside an ES_Descriptor.
    static func audioSpecificConfig(_ d: [UInt8]) -> [UInt8]? {
        var i = 0
        func length() -> Int {
            var n = 0
            for _ in 0..<4 {
                guard i < d.count else { return 0 }
                let b = d[i]
                i += 1
                n = n << 7 | Int(b & 0x7f)
                if b & 0x80 == 0 { break }
            }
            return n
        }
        while i < d.count {
            let tag = d[i]
            i += 1
            let n = length()
            switch tag {
            case 3: i += 3  // ES_ID, flags (no optional fields in what muxers write)
            case 4: i += 13  // DecoderConfigDescriptor fields, then its sub-descriptors
            case 5: return i + n <= d.count ? Array(d[i..<(i + n)]) : nil
            default: i += n
            }
        }
        return nil
    }
}
