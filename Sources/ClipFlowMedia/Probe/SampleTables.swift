import ClipFlowCore
import Foundation

/// One MP4/MOV track's sample tables as its file states them (`moov/trak/mdia/minf/stbl` and
/// `mdhd`), read from the `moov` box without touching any sample, and checked against each other
/// and the file size by `check`.
///
/// Why our own reading: FFmpeg's demuxer repairs or quietly cuts short what does not add up (a
/// timescale of 0xFFFFFFFF becomes 1; the index stops at a sample larger than 1 GiB; chunks the
/// sample-to-chunk table does not cover are dropped), so a damaged clip probes as a shorter,
/// different clip and the merge goes wrong later, blaming the join arithmetic or the next file.
/// Reading the tables as written lets the probe say which file and which table is wrong.
struct SampleTables {
    struct TimeRun: Equatable { var count: UInt32; var delta: UInt32 }
    struct ChunkRun: Equatable { var firstChunk: UInt32; var samplesPerChunk: UInt32; var descriptionIndex: UInt32 }

    var timescale: UInt32 = 0
    /// The track's id (tkhd), which FFmpeg's MOV demuxer gives its stream as `AVStream.id`.
    var trackID: UInt32 = 0
    /// Edits (edts/elst): segment durations in movie time, and where each starts in the media
    /// (-1: an empty edit, a delay before the media starts).
    struct Edit: Equatable { var duration: UInt64; var mediaTime: Int64 }
    var edits: [Edit] = []
    /// The file is fragmented (moov/mvex): the samples are in movie fragments, not these tables.
    var fragmented = false
    /// The track's length by its track header (tkhd), in the movie's timescale (mvhd); 0 if unset.
    var trackDuration: UInt64 = 0
    var movieTimescale: UInt32 = 0
    var descriptions = 0
    var timeToSample: [TimeRun] = []
    struct OffsetRun: Equatable { var count: UInt32; var offset: Int32 }
    /// Composition offsets (presentation minus decode time), if the track has them.
    var compositionOffsets: [OffsetRun]? = nil
    var syncSamples: [UInt32]? = nil
    var sampleToChunk: [ChunkRun] = []
    /// Every sample's size (expanded from a constant size).
    var sampleSizes: [UInt32] = []
    var chunkOffsets: [UInt64] = []
    /// Names of the tables present, for "has no X" messages.
    var present: Set<String> = []

    /// The tracks of a file's `moov`, in file order (FFmpeg's MOV demuxer makes one stream per
    /// `trak`, in the same order). Throws naming the file for a `moov` that cannot be walked.
    static func read(fd: Int32, fileSize: Int64, path: String) throws -> [SampleTables] {
        let moov = try findMoov(fd: fd, fileSize: fileSize, path: path)
        var movieTimescale: UInt32 = 0
        var tracks: [SampleTables] = []
        for box in children(moov) {
            if box.type == "mvhd", let version = box.payload.first {
                movieTimescale = be32(box.payload, at: version == 1 ? 20 : 12) ?? 0
            }
            if box.type == "trak" {
                var t = try readTrack(box, path: path, index: tracks.count, fileSize: fileSize)
                t.movieTimescale = movieTimescale
                tracks.append(t)
            }
        }
        if children(moov).contains(where: { $0.type == "mvex" }) {
            for i in tracks.indices { tracks[i].fragmented = true }
        }
        return tracks
    }

    /// Checks the tables against each other and against the file size. `kind` is "video" or
    /// "audio"; messages read "input 'PATH': video sample-size table (stsz) ...".
    func check(kind: String, fileSize: Int64, path: String) throws {
        func fail(_ what: String) -> ClipFlowError { .badInput("input '\(path)': \(kind) \(what)") }
        for name in ["mdhd", "stsd", "stts", "stsc", "stsz", "stco"] where !present.contains(name) {
            throw fail("track has no \(Self.tableName[name]!)")
        }
        if timescale == 0 || timescale > UInt32(Int32.max) {
            throw fail("media header (mdhd) gives a timescale of \(timescale) units per second; it must be 1 to \(Int32.max)")
        }
        if descriptions == 0 { throw fail("sample descriptions (stsd) list no format") }
        let samples = UInt64(sampleSizes.count)
        let timed = timeToSample.reduce(UInt64(0)) { $0 + UInt64($1.count) }
        if timed != samples {
            throw fail("time-to-sample table (stts) covers \(timed) samples but the sample-size table (stsz) lists \(samples)")
        }
        // Decode times must increase (a zero duration is allowed for the last sample only).
        var before: UInt64 = 0
        for run in timeToSample {
            if run.delta == 0 && run.count > 0 && before + UInt64(run.count) < samples {
                throw fail("time-to-sample table (stts) gives sample \(before + 1) a duration of 0, so decode times do not increase")
            }
            before += UInt64(run.count)
        }
        // The media timescale must agree with the track's own length in movie time (tkhd/mvhd):
        // media far shorter than the track it makes up means a wrong timescale (e.g. 42x too large
        // turns 25 fps into 1050 fps). A track longer than its media (edits that trim) is normal.
        let delay = edits.filter { $0.mediaTime == -1 }.reduce(UInt64(0)) { $0 &+ $1.duration }
        if trackDuration > delay, trackDuration < UInt64(UInt32.max), movieTimescale > 0 {
            let trackSeconds = Double(trackDuration - delay) / Double(movieTimescale)
            let mediaSeconds = Double(totalDuration) / Double(timescale)
            if mediaSeconds * 2 < trackSeconds {
                throw fail(
                    String(
                        format:
                            "media header (mdhd) gives a timescale of %u units per second, which makes the media %.3f s long, but its track header (tkhd) says %.3f s",
                        timescale, mediaSeconds, trackSeconds))
            }
        }
        if let runs = compositionOffsets {
            let c = runs.reduce(UInt64(0)) { $0 + UInt64($1.count) }
            if c != samples {
                throw fail("composition-offset table (ctts) covers \(c) samples but the sample-size table (stsz) lists \(samples)")
            }
            try checkPresentationTimes(runs, fail: fail)
        }
        if let sync = syncSamples {
            var last: UInt32 = 0
            for s in sync {
                if s == 0 || UInt64(s) > samples || s <= last {
                    throw fail("sync-sample table (stss) lists sample \(s) \(s <= last && s != 0 ? "out of order" : "but the track has \(samples) samples")")
                }
                last = s
            }
        }
        // Sample-to-chunk runs must start at chunk 1, increase, and stay within the chunk list.
        let chunks = UInt64(chunkOffsets.count)
        if samples > 0 && sampleToChunk.isEmpty { throw fail("sample-to-chunk table (stsc) is empty but the track has \(samples) samples") }
        var covered: UInt64 = 0
        for (i, run) in sampleToChunk.enumerated() {
            let first = UInt64(run.firstChunk)
            if i == 0 && first != 1 { throw fail("sample-to-chunk table (stsc) starts at chunk \(first), not 1") }
            if first == 0 || first > chunks {
                throw fail("sample-to-chunk table (stsc) entry \(i + 1) starts at chunk \(first) but the chunk-offset table (stco) lists \(chunks) chunks")
            }
            let next = i + 1 < sampleToChunk.count ? UInt64(sampleToChunk[i + 1].firstChunk) : chunks + 1
            if next <= first { throw fail("sample-to-chunk table (stsc) entry \(i + 2) starts at chunk \(next), not after chunk \(first)") }
            if run.samplesPerChunk == 0 { throw fail("sample-to-chunk table (stsc) entry \(i + 1) puts 0 samples in a chunk") }
            if run.descriptionIndex == 0 || Int(run.descriptionIndex) > descriptions {
                throw fail("sample-to-chunk table (stsc) entry \(i + 1) names sample description \(run.descriptionIndex) but there are \(descriptions) (stsd)")
            }
            covered += (min(next, chunks + 1) - first) * UInt64(run.samplesPerChunk)  // <= 2^32 * 2^32: no overflow
            if covered > samples { break }
        }
        if covered != samples {
            throw fail(
                "sample-to-chunk table (stsc) places \(covered > samples ? "more than \(samples)" : String(covered)) samples in its \(chunks) chunks but the sample-size table (stsz) lists \(samples)"
            )
        }
        // Every sample lies inside the file. Chunks in file order with no sample larger than the
        // file that still run past its end: the file was cut short (a copy or a recording that
        // stopped); otherwise the table with the impossible value is named.
        let size = UInt64(max(0, fileSize))
        let inOrder = zip(chunkOffsets, chunkOffsets.dropFirst()).allSatisfy { $0 <= $1 } && (sampleSizes.max() ?? 0) <= size
        func truncated(_ end: UInt64) -> ClipFlowError {
            .badInput("input '\(path)' is truncated: its \(kind) sample table points to byte \(end) but the file has \(fileSize) bytes")
        }
        var k = 0
        for (i, run) in sampleToChunk.enumerated() {
            let last = i + 1 < sampleToChunk.count ? Int(sampleToChunk[i + 1].firstChunk) - 1 : chunkOffsets.count
            for c in (Int(run.firstChunk) - 1)..<last {
                var at = chunkOffsets[c]
                if at >= size {
                    if inOrder { throw truncated(at + UInt64(sampleSizes[k])) }
                    throw fail("chunk-offset table (stco) puts chunk \(c + 1) at byte \(at), beyond the end of the file (\(Self.describe(bytes: fileSize)))")
                }
                for _ in 0..<Int(run.samplesPerChunk) {
                    let n = UInt64(sampleSizes[k])
                    if at + n > size {
                        if inOrder { throw truncated(at + n) }
                        throw fail(
                            "sample-size table (stsz) lists \(n) bytes for sample \(k + 1) at byte \(at), beyond the end of the file (\(Self.describe(bytes: fileSize)))"
                        )
                    }
                    at += n
                    k += 1
                }
            }
        }
    }

    /// Each sample is shown at a time of its own, no further from its decode time than the
    /// track is long (a composition offset that moves a picture outside the clip, or onto another
    /// picture's time, is damage: players drop or reorder such pictures).
    private func checkPresentationTimes(_ runs: [OffsetRun], fail: (String) -> ClipFlowError) throws {
        let total = Int64(clamping: totalDuration)
        var pts: [Int64] = []
        pts.reserveCapacity(sampleSizes.count)
        var dts: Int64 = 0
        var deltas = timeToSample.lazy.flatMap { repeatElement(Int64($0.delta), count: Int($0.count)) }.makeIterator()
        for run in runs {
            if Int64(run.offset.magnitude) > total {
                throw fail(
                    String(
                        format: "composition-offset table (ctts) moves sample %d by %.3f s, more than the whole track lasts (%.3f s)",
                        pts.count + 1, Double(run.offset) / Double(timescale), Double(total) / Double(timescale)))
            }
            for _ in 0..<run.count {
                pts.append(dts + Int64(run.offset))
                dts += deltas.next() ?? 0
            }
        }
        pts.sort()
        for i in pts.indices.dropFirst() where pts[i] == pts[i - 1] {
            throw fail(String(format: "composition-offset table (ctts) shows two samples at the same time (%.3f s)", Double(pts[i]) / Double(timescale)))
        }
    }

    /// For AAC LC audio, whose frames are 1024 samples each by the codec's rules: the table's
    /// times must be those frames' times, to within timestamp jitter.
    ///
    /// Jitter is not damage. Muxers that take sample durations from packet timestamps (the ffmpeg
    /// CLI re-encoding a source whose timestamps are coarser than a sample: MKV with PCM, WebM
    /// with Opus, `-ss`/`-t` cuts) write durations such as 1014-1039 around 1024, while the
    /// frames stay back to back; players and the merge (which places frames by index) ignore it.
    /// Damage is a table whose times drift away from the frames': frame k's decode time more
    /// than half a frame from k x 1024 samples (a timescale or durations that are simply wrong),
    /// where a frame's time lands nearer another frame's slot. The last frame's duration is free
    /// (it may be cut short).
    func checkAACFrames(sampleRate: Int32, path: String) throws {
        guard sampleRate > 0, timescale > 0 else { return }
        let rate = Int128(sampleRate), scale = Int128(timescale)
        let frames = UInt64(sampleSizes.count)
        // Drift is kept in samples x timescale (table units x rate): exact, and with 128 bits no
        // table can overflow it.
        let frame = 1024 * scale
        let jitter = 64 * scale  // within this (1/16 frame) the table is back on the frames' grid
        var k: UInt64 = 0
        var time: Int128 = 0  // decode time of frame k + 1, in table units
        // The first frame whose duration is off since the table was last on the grid: where a
        // run of wrong durations starts, named in the message.
        var firstOff: (frame: UInt64, delta: UInt32)? = nil
        for run in timeToSample where run.count > 0 {
            let off = (Int128(run.delta) * rate - frame).magnitude >= rate.magnitude
            for _ in 0..<run.count {
                if k + 1 >= frames { return }  // the last frame's duration is free
                if off && firstOff == nil { firstOff = (k + 1, run.delta) }
                time += Int128(run.delta)
                k += 1
                let drift = time * rate - Int128(k) * frame
                if drift.magnitude <= jitter.magnitude { firstOff = nil }
                if drift.magnitude * 2 > frame.magnitude {
                    let culprit = firstOff ?? (k, run.delta)
                    throw ClipFlowError.badInput(
                        String(
                            format:
                                "input '%@': audio time-to-sample table (stts) gives AAC frame %llu a duration of %u units at timescale %u (%.1f samples); by frame %llu its times are %.0f samples away from the frames' (an AAC frame lasts 1024 samples; timestamp jitter stays within half a frame)",
                            path, culprit.frame, culprit.delta, timescale, Double(culprit.delta) * Double(rate) / Double(scale), k + 1,
                            Double(drift) / Double(scale)))
                }
            }
        }
    }

    /// The most samples one track may list (2^24: 4 days of 48 kHz AAC, 3 days of 60 fps video).
    static let maxSamples = 1 << 24

    /// Presentation ticks of the track by its own time-to-sample table.
    var totalDuration: UInt64 { timeToSample.reduce(0) { $0 + UInt64($1.count) * UInt64($1.delta) } }

    static let tableName = [
        "mdhd": "media header (mdhd)", "stsd": "sample descriptions (stsd)", "stts": "time-to-sample table (stts)",
        "ctts": "composition-offset table (ctts)", "stss": "sync-sample table (stss)",
        "stsc": "sample-to-chunk table (stsc)", "stsz": "sample-size table (stsz)", "stco": "chunk-offset table (stco)"
    ]

    static func describe(bytes n: Int64) -> String {
        n < 1_000_000 ? "\(n) bytes" : String(format: "%.1f MB", Double(n) / 1e6)
    }

    // MARK: reading

    /// A box: its type and its payload (after the header).
    struct Box { var type: String; var payload: ArraySlice<UInt8>; var offset: Int }

    /// The largest `moov` read; a clip's index is far smaller (a 4 s 1080p clip: about 5 KB).
    static let moovLimit: Int64 = 256 << 20

    private static func findMoov(fd: Int32, fileSize: Int64, path: String) throws -> Box {
        var off: Int64 = 0
        while off + 8 <= fileSize {
            var head = [UInt8](repeating: 0, count: 16)
            let n = pread(fd, &head, 16, off_t(off))
            if n < 8 { break }
            var size = Int64(be32(head[0..<4]))
            var header: Int64 = 8
            let type = String(decoding: head[4..<8], as: UTF8.self)
            if size == 1 {
                guard n >= 16 else { break }
                let s = be64(head[8..<16])
                size = s > UInt64(Int64.max) ? Int64.max : Int64(s)
                header = 16
            } else if size == 0 {
                size = fileSize - off
            }
            if size < header { break }
            if type == "moov" {
                let length = min(size, fileSize - off) - header
                if length > moovLimit {
                    throw ClipFlowError.badInput("input '\(path)': its movie box (moov) is \(describe(bytes: length)), more than a clip's index can be")
                }
                var body = [UInt8](repeating: 0, count: Int(length))
                var got = 0
                while got < body.count {
                    let r = body.withUnsafeMutableBytes { pread(fd, $0.baseAddress! + got, $0.count - got, off_t(off + header) + off_t(got)) }
                    if r < 0 && errno == EINTR { continue }
                    if r <= 0 { break }
                    got += r
                }
                if got < body.count { throw ClipFlowError.badInput("input '\(path)': its movie box (moov) could not be read to its end") }
                return Box(type: "moov", payload: body[...], offset: Int(off + header))
            }
            if size > fileSize - off { break }
            off += size
        }
        throw ClipFlowError.badInput("input '\(path)' has no movie box (moov): not an MP4/MOV clip, or cut short")
    }

    /// The boxes inside `parent`, up to the first one that does not fit in it.
    static func children(_ parent: Box) -> [Box] {
        var boxes: [Box] = []
        let p = parent.payload
        var i = p.startIndex
        while i + 8 <= p.endIndex {
            var size = Int(be32(p[i..<(i + 4)]))
            var header = 8
            let type = String(decoding: p[(i + 4)..<(i + 8)], as: UTF8.self)
            if size == 1 {
                guard i + 16 <= p.endIndex else { break }
                let s = be64(p[(i + 8)..<(i + 16)])
                size = s > UInt64(p.endIndex - i) ? Int.max : Int(s)
                header = 16
            } else if size == 0 {
                size = p.endIndex - i
            }
            // A box that does not fit is where FFmpeg stops reading this parent too.
            if size < header || size > p.endIndex - i { break }
            boxes.append(Box(type: type, payload: p[(i + header)..<(i + size)], offset: parent.offset + (i - p.startIndex)))
            i += size
        }
        return boxes
    }

    private static func readTrack(_ trak: Box, path: String, index: Int, fileSize: Int64) throws -> SampleTables {
        var t = SampleTables()
        func dup(_ name: String) -> ClipFlowError {
            .badInput("input '\(path)': track \(index + 1) has two \(tableName[name] ?? "'\(name)' boxes")")
        }
        for tkhd in children(trak) where tkhd.type == "tkhd" {
            guard let version = tkhd.payload.first else { continue }
            if version == 1 {
                t.trackID = be32(tkhd.payload, at: 20) ?? 0
                if let hi = be32(tkhd.payload, at: 28), let lo = be32(tkhd.payload, at: 32) { t.trackDuration = UInt64(hi) << 32 | UInt64(lo) }
            } else {
                t.trackID = be32(tkhd.payload, at: 12) ?? 0
                t.trackDuration = UInt64(be32(tkhd.payload, at: 20) ?? 0)
            }
        }
        for edts in children(trak) where edts.type == "edts" {
            for elst in children(edts) where elst.type == "elst" {
                let b = Array(elst.payload)
                guard b.count >= 8 else { continue }
                let wide = b[0] == 1
                let size = wide ? 20 : 12
                let n = min(Int(be32(b, 4)), (b.count - 8) / size)
                t.edits = (0..<n).map { i in
                    let at = 8 + i * size
                    if wide {
                        let d = UInt64(be32(b, at)) << 32 | UInt64(be32(b, at + 4))
                        let m = Int64(bitPattern: UInt64(be32(b, at + 8)) << 32 | UInt64(be32(b, at + 12)))
                        return Edit(duration: d, mediaTime: m)
                    }
                    return Edit(duration: UInt64(be32(b, at)), mediaTime: Int64(Int32(bitPattern: be32(b, at + 4))))
                }
            }
        }
        for mdia in children(trak) where mdia.type == "mdia" {
            for box in children(mdia) {
                switch box.type {
                case "mdhd":
                    if t.present.contains("mdhd") { throw dup("mdhd") }
                    t.present.insert("mdhd")
                    guard let version = box.payload.first else { break }
                    t.timescale = be32(box.payload, at: version == 1 ? 20 : 12) ?? 0
                case "minf":
                    for stbl in children(box) where stbl.type == "stbl" {
                        try readTables(stbl, into: &t, path: path, fileSize: fileSize, dup: dup)
                    }
                default: break
                }
            }
        }
        return t
    }

    private static func readTables(
        _ stbl: Box, into t: inout SampleTables, path: String, fileSize: Int64,
        dup: (String) -> ClipFlowError
    ) throws {
        for box in children(stbl) {
            var name = box.type
            if name == "co64" { name = "stco" }
            if name == "stz2" { name = "stsz" }
            guard tableName[name] != nil else { continue }
            if t.present.contains(name) { throw dup(name) }
            t.present.insert(name)
            let b = Array(box.payload)
            func entries(_ width: Int, headerBytes: Int = 8) throws -> Int {
                // Full box: version/flags, then entry_count (stsz: sample size first).
                guard b.count >= headerBytes else {
                    throw ClipFlowError.badInput("input '\(path)': its \(tableName[name]!) is cut short (\(b.count) bytes)")
                }
                let n = Int(be32(b[(headerBytes - 4)..<headerBytes]))
                let room = (b.count - headerBytes) / width
                if n > room {
                    throw ClipFlowError.badInput("input '\(path)': its \(tableName[name]!) claims \(n) entries but has room for \(room)")
                }
                return n
            }
            switch box.type {
            case "stsd":
                t.descriptions = try entries(1)
            case "stts":
                let n = try entries(8)
                t.timeToSample = (0..<n).map { TimeRun(count: be32(b, 8 + 8 * $0), delta: be32(b, 12 + 8 * $0)) }
            case "ctts":
                let n = try entries(8)
                t.compositionOffsets = (0..<n).map { OffsetRun(count: be32(b, 8 + 8 * $0), offset: Int32(bitPattern: be32(b, 12 + 8 * $0))) }
            case "stss":
                let n = try entries(4)
                t.syncSamples = (0..<n).map { be32(b, 8 + 4 * $0) }
            case "stsc":
                let n = try entries(12)
                t.sampleToChunk = (0..<n).map {
                    ChunkRun(firstChunk: be32(b, 8 + 12 * $0), samplesPerChunk: be32(b, 12 + 12 * $0), descriptionIndex: be32(b, 16 + 12 * $0))
                }
            case "stsz":
                guard b.count >= 12 else {
                    throw ClipFlowError.badInput("input '\(path)': its sample-size table (stsz) is cut short (\(b.count) bytes)")
                }
                let constant = be32(b, 4)
                if constant != 0 {
                    let n = Int(be32(b, 8))
                    // A constant size costs no table bytes: bound the count by what the file holds.
                    if UInt64(n) * UInt64(constant) > UInt64(max(0, fileSize)) {
                        throw ClipFlowError.badInput(
                            "input '\(path)': its sample-size table (stsz) lists \(n) samples of \(constant) bytes, more than the file holds (\(describe(bytes: fileSize)))"
                        )
                    }
                    // And by what a clip can be: the table is expanded, 4 bytes a sample.
                    if n > maxSamples {
                        throw ClipFlowError.badInput(
                            "input '\(path)': its sample-size table (stsz) lists \(n) samples; a clip of more than \(maxSamples) samples in one track is not supported"
                        )
                    }
                    t.sampleSizes = Array(repeating: constant, count: n)
                } else {
                    let n = try entries(4, headerBytes: 12)
                    t.sampleSizes = (0..<n).map { be32(b, 12 + 4 * $0) }
                }
            case "stz2":
                guard b.count >= 12 else {
                    throw ClipFlowError.badInput("input '\(path)': its sample-size table (stz2) is cut short (\(b.count) bytes)")
                }
                let field = Int(b[7])
                let n = Int(be32(b, 8))
                guard [4, 8, 16].contains(field), n <= (b.count - 12) * 8 / field else {
                    throw ClipFlowError.badInput("input '\(path)': its compact sample-size table (stz2) is malformed")
                }
                t.sampleSizes = (0..<n).map { k in
                    switch field {
                    case 4: let v = b[12 + k / 2]; return UInt32(k % 2 == 0 ? v >> 4 : v & 0xF)
                    case 8: return UInt32(b[12 + k])
                    default: return UInt32(b[12 + 2 * k]) << 8 | UInt32(b[13 + 2 * k])
                    }
                }
            case "stco":
                let n = try entries(4)
                t.chunkOffsets = (0..<n).map { UInt64(be32(b, 8 + 4 * $0)) }
            case "co64":
                let n = try entries(8)
                t.chunkOffsets = (0..<n).map { UInt64(be32(b, 8 + 8 * $0)) << 32 | UInt64(be32(b, 12 + 8 * $0)) }
            default: break
            }
        }
    }
}

private func be32<C: Collection>(_ b: C) -> UInt32 where C.Element == UInt8 {
    b.reduce(0) { $0 << 8 | UInt32($1) }
}
/// The big-endian 32-bit value `at` bytes into a box payload, if the payload holds it.
private func be32(_ b: ArraySlice<UInt8>, at: Int) -> UInt32? {
    let i = b.startIndex + at
    return i + 4 <= b.endIndex ? be32(b[i..<(i + 4)]) : nil
}
private func be64<C: Collection>(_ b: C) -> UInt64 where C.Element == UInt8 {
    b.reduce(0) { $0 << 8 | UInt64($1) }
}
private func be32(_ b: [UInt8], _ at: Int) -> UInt32 {
    UInt32(b[at]) << 24 | UInt32(b[at + 1]) << 16 | UInt32(b[at + 2]) << 8 | UInt32(b[at + 3])
}
