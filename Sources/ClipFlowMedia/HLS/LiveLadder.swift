import ClipFlowCore
import Foundation

/// A recording's ladder while it is recorded: one folder holding each fragment's copy ladder as
/// it arrives (`f00000`, `f00001`, ...: an `hls` copy of the fragment alone, nothing decoded,
/// whose timeline starts where the fragment before it ended: `timeline-start`), and at its top
/// the playlists that join them: `EVENT` media playlists that only grow (segments are added at
/// the end, none changes) and get `#EXT-X-ENDLIST` once the recording ended, a master playlist and
/// `feed.json` (the first fragment's covers, linked to the top). A fragment whose sample
/// description (codec parameters) differs from the one's before it starts with a discontinuity
/// and its own init section.
/// Every file at the top is written to a temporary name and renamed, so a reader never sees half
/// of one. The caller appends one fragment at a time (one writer per folder).
public enum LiveLadder {
    /// The folder of fragment `index` inside the live folder.
    public static func fragmentFolder(_ index: Int) -> String { String(format: "f%05d", index) }

    /// Seconds the first `count` fragment folders of `live` last (their video rendition's
    /// segments): where the next fragment's timeline starts.
    public static func seconds(_ live: URL, count: Int) throws -> Double {
        try (0..<count).reduce(0.0) { total, i in
            let tracks = try LadderTracks.read(from: live.appendingPathComponent(fragmentFolder(i)))
            return total + (tracks.video.first.map { $0.segments.reduce(0) { $0 + $1.seconds } } ?? 0)
        }
    }

    /// Writes the top of `live` for its first `count` fragment folders (each complete);
    /// `ended`: the recording is over, the playlists are closed. Returns the seconds they last.
    @discardableResult
    public static func write(_ live: URL, count: Int, ended: Bool) throws -> Double {
        guard count > 0 else { throw ClipFlowError.failure("internal: a live ladder needs a fragment") }
        let folders = (0..<count).map(fragmentFolder)
        let first = try LadderTracks.read(from: live.appendingPathComponent(folders[0]))
        guard let firstVideo = first.video.first else { throw ClipFlowError.badInput("'\(folders[0])': the fragment's ladder has no video") }
        var video = try joined(firstVideo, live: live, folders: folders) { $0.video.first }
        video.iframesURI = nil
        let audio = try first.audio.map { a in try joined(a, live: live, folders: folders) { $0.audio } }
        try save(HLSPlaylists.media(video, type: ended ? .closedEvent : .event), live, video.playlistURI)
        if let audio { try save(HLSPlaylists.media(audio, type: ended ? .closedEvent : .event), live, audio.playlistURI) }
        try save(HLSPlaylists.master(video: [video], audio: audio), live, "master.m3u8")
        try linkCovers(from: live.appendingPathComponent(folders[0]), into: live)
        var entry = FeedEntry(id: live.lastPathComponent, video: [video], audio: audio, covers: live)
        entry.live = ended ? nil : true
        try save(FeedManifest(videos: [entry]).serialized, live, "feed.json")
        return video.segments.reduce(0) { $0 + $1.seconds }
    }

    /// The rendition of `model`'s kind (`pick`) across the fragment folders: each segment's URI
    /// under its folder, the first folder's init section, and a new one (after a discontinuity)
    /// where a fragment's sample description differs from the one's before it. A fragment
    /// without that rendition (no sound) adds nothing to it.
    private static func joined(_ model: HLSTrack, live: URL, folders: [String], pick: (LadderTracks) -> HLSTrack?) throws -> HLSTrack {
        var out = model
        out.segments = []
        out.initURI = folders[0] + "/" + model.initURI
        var last: [UInt8]?
        for folder in folders {
            guard let t = pick(try LadderTracks.read(from: live.appendingPathComponent(folder))) else { continue }
            let description = try sampleDescription(live.appendingPathComponent(folder).appendingPathComponent(t.initURI))
            let changed = last.map { $0 != description } ?? false
            last = description
            for (i, s) in t.segments.enumerated() {
                var segment = s
                segment.uri = folder + "/" + s.uri
                if i == 0 && changed { segment.newInit = folder + "/" + t.initURI }
                out.segments.append(segment)
            }
        }
        return out
    }

    /// An init section's bytes without what differs between fragments of the same codec
    /// parameters: the bit rates the muxer measured (`btrt` boxes, zeroed).
    static func sampleDescription(_ url: URL) throws -> [UInt8] {
        var bytes: [UInt8]
        do { bytes = [UInt8](try Data(contentsOf: url)) } catch { throw ClipFlowError.badInput("'\(url.path)': cannot read the init section") }
        let tag: [UInt8] = Array("btrt".utf8)
        var i = 4
        while i + 16 <= bytes.count {
            if Array(bytes[i..<(i + 4)]) == tag {
                for k in (i + 4)..<(i + 16) { bytes[k] = 0 }
                i += 16
            } else {
                i += 1
            }
        }
        return bytes
    }

    /// The first fragment's covers (`poster*.jpg`), at the top of the live folder too (hard
    /// links), where the API and the feed name them.
    private static func linkCovers(from first: URL, into live: URL) throws {
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: first.path)) ?? []).filter { $0.hasPrefix("poster") && $0.hasSuffix(".jpg") }
        for name in names where !FileManager.default.fileExists(atPath: live.appendingPathComponent(name).path) {
            guard link(first.appendingPathComponent(name).path, live.appendingPathComponent(name).path) == 0 || errno == EEXIST else {
                throw ClipFlowError.output("cannot link '\(live.appendingPathComponent(name).path)'", errno: errno)
            }
        }
    }

    private static func save(_ text: String, _ live: URL, _ name: String) throws {
        let url = live.appendingPathComponent(name)
        // Named by this process and a random number: two servers writing the same folder's top
        // (several sharing one data folder) never write into one temporary file.
        let temporary = live.appendingPathComponent(".\(name).\(getpid())-\(UInt32.random(in: 0...UInt32.max)).tmp")
        do {
            try Data(text.utf8).write(to: temporary)
            guard rename(temporary.path, url.path) == 0 else { throw ClipFlowError.output("cannot rename '\(temporary.path)'", errno: errno) }
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw ClipFlowError.output("cannot write '\(url.path)'", writing: error)
        }
    }
}
