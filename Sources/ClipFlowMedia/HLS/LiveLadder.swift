import ClipFlowCore
import Foundation

/// A recording's ladder while it is recorded: one folder holding each fragment's copy ladder as
/// it arrives (`f00000`, `f00001`, ...: an `hls` copy of the fragment alone, nothing decoded,
/// whose timeline starts where the fragment before it ended: `timeline-start`), and at its top
/// the playlists that join them: `EVENT` media playlists that only grow (segments are added at
/// the end, none changes) and get `#EXT-X-ENDLIST` once the recording ended, a master playlist and
/// `feed.json` (covers from the first fragment). A fragment whose codec parameters differ from
/// the one's before it starts with a discontinuity and its own init section.
/// Every file at the top is written to a temporary name and renamed, so a reader never sees half
/// of one. The caller appends one fragment at a time (one writer per folder).
public enum LiveLadder {
    /// The folder of fragment `index` inside the live folder.
    public static func fragmentFolder(_ index: Int) -> String { String(format: "f%05d", index) }

    /// Seconds fragment folder `folder` lasts (its video rendition's segments): where the next
    /// fragment's timeline starts, after the ones before it.
    public static func seconds(of folder: URL) throws -> Double {
        let tracks = try LadderTracks.read(from: folder)
        return tracks.video.first.map { $0.segments.reduce(0) { $0 + $1.seconds } } ?? 0
    }

    /// Writes the top of `live` for its first `count` fragment folders (each complete);
    /// `ended`: the recording is over, the playlists are closed.
    public static func write(_ live: URL, count: Int, ended: Bool) throws {
        guard count > 0 else { throw ClipFlowError.failure("internal: a live ladder needs a fragment") }
        let folders = (0..<count).map(fragmentFolder)
        let first = try LadderTracks.read(from: live.appendingPathComponent(folders[0]))
        guard let firstVideo = first.video.first else { throw ClipFlowError.badInput("'\(folders[0])': the fragment's ladder has no video") }
        var video = joined(firstVideo, live: live, folders: folders) { $0.video.first }
        video.iframesURI = nil
        let audio = first.audio.map { a in joined(a, live: live, folders: folders) { $0.audio } }
        try save(HLSPlaylists.media(video, type: ended ? .closedEvent : .event), live, video.playlistURI)
        if let audio { try save(HLSPlaylists.media(audio, type: ended ? .closedEvent : .event), live, audio.playlistURI) }
        try save(HLSPlaylists.master(video: [video], audio: audio), live, "master.m3u8")
        let firstFolder = live.appendingPathComponent(folders[0])
        var entry = FeedEntry(id: live.lastPathComponent, video: [video], audio: audio, covers: firstFolder)
        let prefix = folders[0] + "/"
        entry.cover = prefix + entry.cover
        entry.covers = entry.covers.map { FeedEntry.Cover(uri: prefix + $0.uri, size: $0.size) }
        entry.live = ended ? nil : true
        try save(FeedManifest(videos: [entry]).serialized, live, "feed.json")
    }

    /// The rendition of `model`'s kind (`pick`) across the fragment folders: each segment's URI
    /// under its folder, the first folder's init section, and a new one (after a discontinuity)
    /// where a fragment's init bytes differ from the one before it. A fragment without that
    /// rendition adds nothing to it.
    private static func joined(_ model: HLSTrack, live: URL, folders: [String], pick: (LadderTracks) -> HLSTrack?) -> HLSTrack {
        var out = model
        out.segments = []
        out.initURI = folders[0] + "/" + model.initURI
        var last: HLSTrack?
        for folder in folders {
            guard let tracks = try? LadderTracks.read(from: live.appendingPathComponent(folder)), let t = pick(tracks) else { continue }
            // Other codec parameters need the new init section; the same ones do not (the init
            // sections differ in their measured bit rates alone).
            let changed = last.map { $0.codecs != t.codecs || $0.width != t.width || $0.height != t.height || $0.channels != t.channels } ?? false
            last = t
            for (i, s) in t.segments.enumerated() {
                var segment = s
                segment.uri = folder + "/" + s.uri
                if i == 0 && changed { segment.newInit = folder + "/" + t.initURI }
                out.segments.append(segment)
            }
        }
        return out
    }

    private static func save(_ text: String, _ live: URL, _ name: String) throws {
        let url = live.appendingPathComponent(name)
        let temporary = live.appendingPathComponent(".\(name).tmp")
        do {
            try Data(text.utf8).write(to: temporary)
            guard rename(temporary.path, url.path) == 0 else { throw ClipFlowError.output("cannot rename '\(temporary.path)'", errno: errno) }
        } catch {
            try? FileManager.default.removeItem(at: temporary)
            throw ClipFlowError.output("cannot write '\(url.path)'", writing: error)
        }
    }
}
