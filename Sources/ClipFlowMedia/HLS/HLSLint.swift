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
        /// The EXT-X-BYTERANGE between an EXTINF and its URI (`length[@offset]`).
        var byteRange: String?
        var attributes: [String: String] { M3U8.attributes(value) }
    }
    var entries: [Entry] = []

    init?(_ text: String) {
        let lines = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
        guard lines.first == "#EXTM3U" else { return nil }
        // The entry waiting for its URI line (tags such as EXT-X-BYTERANGE may come between).
        var waiting: Int?
        for line in lines.dropFirst() {
            if line.hasPrefix("#EXT") {
                let parts = line.split(separator: ":", maxSplits: 1)
                let entry = Entry(tag: String(parts[0]), value: parts.count > 1 ? String(parts[1]) : "")
                if entry.tag == "#EXT-X-BYTERANGE", let w = waiting {
                    entries[w].byteRange = entry.value
                    continue
                }
                entries.append(entry)
                if entry.tag == "#EXTINF" || entry.tag == "#EXT-X-STREAM-INF" { waiting = entries.count - 1 }
            } else if !line.hasPrefix("#"), let w = waiting {
                entries[w].uri = line
                waiting = nil
            }
        }
    }

    func all(_ tag: String) -> [Entry] { entries.filter { $0.tag == tag } }

    /// `length[@offset]` (EXT-X-BYTERANGE, EXT-X-MAP's BYTERANGE); without an offset the range
    /// follows `previousEnd`. nil when malformed.
    static func range(_ s: String, previousEnd: Int) -> Range<Int>? {
        let parts = s.split(separator: "@")
        guard let n = Int(parts[0]), n >= 0, parts.count <= 2 else { return nil }
        let o = parts.count == 2 ? Int(parts[1]) : previousEnd
        guard let o, o >= 0 else { return nil }
        return o..<(o + n)
    }
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

/// Reads one resource of a ladder by its absolute URL, all of it or a byte range: files (a
/// folder) or HTTP (`hls lint URL`). Throws when it cannot.
public typealias HLSReader = (_ url: URL, _ range: Range<Int>?) throws -> [UInt8]

/// Checks an HLS ladder as a player and an encoder engineer would (RFC 8216 and Apple's HLS
/// authoring rules): every variant declares BANDWIDTH at least its measured peak, AVERAGE-
/// BANDWIDTH near its average, CODECS matching its init segment, RESOLUTION and FRAME-RATE;
/// EXT-X-INDEPENDENT-SEGMENTS in the master; I-frame playlists; media playlists with EXT-X-MAP,
/// VOD, ENDLIST and a target duration no segment exceeds; every segment starting with a sync
/// sample; video renditions cut at the same instants (on the same picture: within half a frame at
/// the highest FRAME-RATE, as a source with millisecond timestamps, Matroska's, rounds them). Segments
/// may be files of their own or byte ranges of one file.
public enum HLSLint {
    /// A folder's `master.m3u8`.
    public static func lint(directory: URL) throws -> [LintFinding] {
        try lint(master: directory.appendingPathComponent("master.m3u8"), read: readFile)
    }

    /// The ladder of the master playlist at `master`, read with `read`.
    public static func lint(master masterURL: URL, read: @escaping HLSReader) throws -> [LintFinding] {
        var findings: [LintFinding] = []
        func add(_ s: LintFinding.Severity, _ code: String, _ file: String, _ message: String) {
            findings.append(LintFinding(severity: s, code: code, file: file, message: message))
        }
        let masterName = masterURL.lastPathComponent
        let bytes: [UInt8]
        do { bytes = try read(masterURL, nil) } catch {
            throw ClipFlowError.badInput("'\(display(masterURL))': cannot read the master playlist (\(error))")
        }
        guard let text = String(bytes: bytes, encoding: .utf8), let master = M3U8(text) else {
            throw ClipFlowError.badInput("'\(display(masterURL))': not an M3U8 playlist")
        }
        if master.first("#EXT-X-INDEPENDENT-SEGMENTS") == nil {
            add(.warning, "independent-segments", masterName, "no EXT-X-INDEPENDENT-SEGMENTS in the master (it applies to every rendition only there)")
        }
        if master.first("#EXT-X-I-FRAME-STREAM-INF") == nil {
            add(.warning, "no-iframe-playlists", masterName, "no EXT-X-I-FRAME-STREAM-INF: players cannot show trick play or scrub thumbnails")
        }
        let checker = RenditionChecker(master: masterURL, read: read)
        // Audio renditions, by group: their measured rates and codecs.
        var audioGroups: [String: (peak: Double, average: Double, codecs: [String])] = [:]
        for m in master.all("#EXT-X-MEDIA") where m.attributes["TYPE"] == "AUDIO" {
            guard let uri = m.attributes["URI"], let group = m.attributes["GROUP-ID"] else { continue }
            guard let r = try? checker.rendition(uri, &findings) else { continue }
            let g = audioGroups[group] ?? (0, 0, [])
            audioGroups[group] = (max(g.peak, r.peak), max(g.average, r.average), g.codecs + [r.codecs].compactMap { $0 })
        }
        var cuts: [(String, [Double])] = []
        var fastest = 0.0
        for v in master.all("#EXT-X-STREAM-INF") {
            guard let uri = v.uri else { continue }
            let a = v.attributes
            fastest = max(fastest, a["FRAME-RATE"].flatMap(Double.init) ?? 0)
            guard let r = try? checker.rendition(uri, &findings) else { continue }
            var required = [("CODECS", LintFinding.Severity.error), ("AVERAGE-BANDWIDTH", .warning)]
            if r.isVideo {
                required += [("RESOLUTION", .warning), ("FRAME-RATE", .warning)]
                cuts.append((uri, r.starts))
            }
            for (key, severity) in required where a[key] == nil {
                add(severity, "missing-\(key.lowercased())", masterName, "\(uri): EXT-X-STREAM-INF has no \(key)")
            }
            let group = a["AUDIO"].flatMap { audioGroups[$0] }
            let peak = r.peak + (group?.peak ?? 0), average = r.average + (group?.average ?? 0)
            if let b = a["BANDWIDTH"].flatMap(Double.init), b + 1 < peak {
                add(
                    .error, "bandwidth-below-peak", masterName,
                    "\(uri): BANDWIDTH \(Int(b)) is below the measured peak \(Int(peak.rounded(.up))) (segments with their audio)")
            }
            if let b = a["AVERAGE-BANDWIDTH"].flatMap(Double.init), abs(b - average) > 0.1 * average {
                add(
                    .warning, "average-bandwidth", masterName,
                    "\(uri): AVERAGE-BANDWIDTH \(Int(b)) is more than 10 % off the measured \(Int(average.rounded()))")
            }
            if let declared = a["CODECS"] {
                let want = ([r.codecs].compactMap { $0 } + (group?.codecs ?? [])).sorted()
                let have = declared.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.sorted()
                if !want.isEmpty, have != want {
                    add(.error, "codecs-mismatch", masterName, "\(uri): CODECS \"\(declared)\" but the streams are \(want.joined(separator: ","))")
                }
            }
        }
        // Renditions must be cut at the same instants (players switch at segment boundaries): on
        // the same picture, so within half a frame (a millisecond when no rate is declared).
        let tolerance = fastest > 0 ? 0.5 / fastest : 0.001
        if let (firstURI, ref) = cuts.first {
            for (uri, starts) in cuts.dropFirst() where starts.count != ref.count || zip(starts, ref).contains(where: { abs($0 - $1) >= tolerance }) {
                add(.error, "misaligned", uri, "segments start at \(fmt(starts)) s, those of \(firstURI) at \(fmt(ref)) s")
            }
        }
        return findings
    }

    /// Files: all of one, or a byte range of it.
    public static func readFile(_ url: URL, _ range: Range<Int>?) throws -> [UInt8] {
        guard let r = range else { return [UInt8](try Data(contentsOf: url)) }
        let h = try FileHandle(forReadingFrom: url)
        defer { try? h.close() }
        try h.seek(toOffset: UInt64(r.lowerBound))
        let d = try h.read(upToCount: r.count) ?? Data()
        guard d.count == r.count else { throw ClipFlowError.badInput("'\(url.path)' ends before byte \(r.upperBound)") }
        return [UInt8](d)
    }

    /// A URL as errors show it: a file's path; a web address without its query (signed
    /// addresses carry tokens there).
    static func display(_ url: URL) -> String {
        if url.isFileURL { return url.path }
        var c = URLComponents(url: url, resolvingAgainstBaseURL: true)
        if c?.query != nil { c?.query = "..." }
        return c?.string ?? url.lastPathComponent
    }

    struct Rendition {
        var peak: Double
        var average: Double
        var codecs: String?
        var isVideo: Bool
        /// Segment start times in seconds (from the segments' own decode times).
        var starts: [Double]
    }

    /// Reads the media playlists of one master.
    struct RenditionChecker {
        let master: URL
        let read: HLSReader

        /// Checks one media playlist and its segments; returns what the master is checked against.
        func rendition(_ uri: String, _ findings: inout [LintFinding]) throws -> Rendition {
            func add(_ s: LintFinding.Severity, _ code: String, _ message: String) {
                findings.append(LintFinding(severity: s, code: code, file: uri, message: message))
            }
            guard let url = URL(string: uri, relativeTo: master)?.absoluteURL, let bytes = try? read(url, nil),
                let text = String(bytes: bytes, encoding: .utf8),
                let p = M3U8(text)
            else {
                add(.error, "missing-playlist", "cannot read the media playlist")
                throw ClipFlowError.badInput(uri)
            }
            let target = p.first("#EXT-X-TARGETDURATION").flatMap { Int($0.value) } ?? 0
            if p.first("#EXT-X-ENDLIST") == nil { add(.warning, "no-endlist", "no EXT-X-ENDLIST") }
            if p.first("#EXT-X-PLAYLIST-TYPE") == nil { add(.warning, "no-playlist-type", "no EXT-X-PLAYLIST-TYPE") }
            var initInfo: InitSegmentInfo?
            if let map = p.first("#EXT-X-MAP")?.attributes {
                let range = map["BYTERANGE"].flatMap { M3U8.range($0, previousEnd: 0) }
                if map["BYTERANGE"] != nil, range == nil { add(.error, "bad-byterange", "EXT-X-MAP BYTERANGE \"\(map["BYTERANGE"]!)\" is not length@offset") }
                if let m = map["URI"], let u = URL(string: m, relativeTo: url)?.absoluteURL, let b = try? read(u, range) {
                    initInfo = InitSegmentInfo(b)
                } else {
                    add(.error, "missing-init", "the EXT-X-MAP init section cannot be read")
                }
            } else {
                add(.error, "no-map", "no EXT-X-MAP (fMP4 segments need their init section)")
            }
            var sizes: [Int] = [], seconds: [Double] = [], starts: [Double] = []
            var previousEnd: [String: Int] = [:]
            for (k, e) in p.all("#EXTINF").enumerated() {
                let d = Double(e.value.split(separator: ",").first ?? "") ?? 0
                if target > 0, Int(d.rounded()) > target {
                    add(.error, "segment-too-long", "segment \(k) lasts \(d) s, above the target duration \(target) s")
                }
                guard let s = e.uri, let u = URL(string: s, relativeTo: url)?.absoluteURL else {
                    add(.error, "missing-segment", "segment \(k) has no URI")
                    continue
                }
                var range: Range<Int>?
                if let r = e.byteRange {
                    range = M3U8.range(r, previousEnd: previousEnd[s] ?? 0)
                    guard let range else {
                        add(.error, "bad-byterange", "segment \(k): EXT-X-BYTERANGE \"\(r)\" is not length[@offset]")
                        continue
                    }
                    previousEnd[s] = range.upperBound
                }
                let bytes: [UInt8]
                do { bytes = try read(u, range) } catch {
                    add(.error, "missing-segment", "segment \(k) (\(s)) cannot be read: \(error)")
                    continue
                }
                sizes.append(bytes.count)
                seconds.append(d)
                if let f = FragmentInfo(bytes) {
                    if initInfo?.isVideo == true, !f.startsWithSyncSample {
                        add(.error, "segment-not-keyframe", "segment \(k) (\(s)) does not start with a keyframe")
                    }
                    starts.append(Double(f.baseDecodeTime) / Double(max(1, initInfo?.timescale ?? 1)))
                } else {
                    add(.error, "not-a-fragment", "segment \(k) (\(s)) is not one fMP4 fragment (moof + mdat)")
                }
            }
            let measuredTarget = Double(max(target, 1))
            return Rendition(
                peak: SegmentRates.peak(bytes: sizes, seconds: seconds, target: measuredTarget),
                average: SegmentRates.average(bytes: sizes, seconds: seconds), codecs: initInfo?.codecs, isVideo: initInfo?.isVideo ?? true, starts: starts)
        }
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
        for type in ["avc1", "avc3", "hvc1", "hev1", "av01"] {
            guard let e = r.find(type, in: entries) else { continue }
            isVideo = true
            let children = (e.payload.lowerBound + 78)..<e.payload.upperBound  // after the VisualSampleEntry fields
            if type.hasPrefix("avc"), let c = r.find("avcC", in: children) {
                codecs = CodecStrings.avc(Array(b[c.payload]), sampleEntry: type)
            } else if let c = r.find("hvcC", in: children) {
                codecs = CodecStrings.hevc(Array(b[c.payload]), sampleEntry: type)
            } else if let c = r.find("av1C", in: children) {
                codecs = CodecStrings.av1(Array(b[c.payload]))
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
