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
        try joined(live, count: count).seconds
    }

    /// Writes the top of `live` for its first `count` fragment folders (each complete);
    /// `ended`: the recording is over, the playlists are closed. Returns the seconds they last.
    /// What the folders joined so far is kept (`Joined`, in the hidden `.joined.json`), so a
    /// fragment appended reads its own folder only, however long the recording.
    @discardableResult
    public static func write(_ live: URL, count: Int, ended: Bool) throws -> Double {
        let joined = try joined(live, count: count)
        try save(Joined.serialized(joined), live, Joined.file)
        let video = joined.video, audio = joined.audio
        try save(HLSPlaylists.media(video, type: ended ? .closedEvent : .event), live, video.playlistURI)
        if let audio { try save(HLSPlaylists.media(audio, type: ended ? .closedEvent : .event), live, audio.playlistURI) }
        try save(HLSPlaylists.master(video: [video], audio: audio), live, "master.m3u8")
        try linkCovers(from: live.appendingPathComponent(fragmentFolder(0)), into: live)
        var entry = FeedEntry(id: live.lastPathComponent, video: [video], audio: audio, covers: live)
        entry.live = ended ? nil : true
        try save(FeedManifest(videos: [entry]).serialized, live, "feed.json")
        return joined.seconds
    }

    /// The renditions of the first `count` fragment folders joined: from what was kept of fewer
    /// (`Joined.file`), the folders after it added; from the first folder when nothing fits.
    private static func joined(_ live: URL, count: Int) throws -> Joined {
        guard count > 0 else { throw ClipFlowError.failure("internal: a live ladder needs a fragment") }
        var joined = (try? JSONDecoder().decode(Joined.self, from: Data(contentsOf: live.appendingPathComponent(Joined.file))))
            .flatMap { $0.count <= count ? $0 : nil }
        for i in (joined?.count ?? 0)..<count {
            let folder = fragmentFolder(i)
            let tracks = try LadderTracks.read(from: live.appendingPathComponent(folder))
            guard let video = tracks.video.first else { throw ClipFlowError.badInput("'\(folder)': the fragment's ladder has no video") }
            if joined == nil {
                var v = video
                v.segments = []
                v.initURI = folder + "/" + video.initURI
                v.iframesURI = nil
                var a = tracks.audio
                a?.segments = []
                a?.initURI = folder + "/" + (tracks.audio?.initURI ?? "")
                joined = Joined(count: 0, video: v, audio: a, seconds: 0)
            }
            try joined!.add(video, live: live, folder: folder, audio: false)
            if let sound = tracks.audio, joined!.audio != nil { try joined!.add(sound, live: live, folder: folder, audio: true) }
            joined!.seconds += video.segments.reduce(0) { $0 + $1.seconds }
            joined!.count = i + 1
        }
        return joined!
    }

    /// Fragment folders joined: how many, their video and audio renditions (each segment's URI
    /// under its folder, the first folder's init section, and a new one after a discontinuity
    /// where a fragment's sample description differs from the one's before it), their seconds,
    /// and the last sample descriptions seen.
    private struct Joined: Codable {
        static let file = ".joined.json"
        var count: Int
        var video: HLSTrack
        var audio: HLSTrack?
        var seconds: Double
        var lastVideo: Data? = nil
        var lastAudio: Data? = nil

        /// Adds fragment `folder`'s rendition `t` (the audio when `audio`).
        mutating func add(_ t: HLSTrack, live: URL, folder: String, audio: Bool) throws {
            let description = Data(try LiveLadder.sampleDescription(live.appendingPathComponent(folder).appendingPathComponent(t.initURI)))
            let last = audio ? lastAudio : lastVideo
            let changed = last.map { $0 != description } ?? false
            if audio { lastAudio = description } else { lastVideo = description }
            var segments = t.segments.map { s -> HLSSegment in
                var segment = s
                segment.uri = folder + "/" + s.uri
                return segment
            }
            if changed, !segments.isEmpty { segments[0].newInit = folder + "/" + t.initURI }
            if audio { self.audio?.segments += segments } else { video.segments += segments }
        }

        static func serialized(_ j: Joined) throws -> String {
            String(decoding: try JSONEncoder().encode(j), as: UTF8.self)
        }
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
