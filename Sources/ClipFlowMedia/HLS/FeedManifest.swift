import Foundation

/// `feed.json`: what a feed client needs to start a video fast, written into every published
/// folder and read back by the hosting side (`clipflow serve`), which rebases its paths.
public struct FeedManifest: Codable, Sendable, Equatable {
    public var videos: [FeedEntry]

    public init(videos: [FeedEntry]) { self.videos = videos }

    /// The manifest as written: keys sorted, slashes as they are, one line.
    public var serialized: String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return String(decoding: (try? encoder.encode(self)) ?? Data(), as: UTF8.self) + "\n"
    }
}

/// One video of a feed: its id (the folder's name), cover (and the smaller covers present, by the
/// long side they fit), master playlist, duration, the init and first segments of the rendition
/// a player starts on (the lowest) and of the audio, to prefetch while the video before it plays,
/// every rendition so a player can start on the rung the connection sustains, and the
/// storyboard's WebVTT track when there is one (`Storyboard`). Paths are relative to the folder.
public struct FeedEntry: Codable, Sendable, Equatable {
    public var id: String
    public var cover: String
    public var covers: [Cover]
    public var master: String
    public var duration: Double
    public var prefetch: [Prefetch]
    public var renditions: [Rendition]
    public var storyboard: String?
    public var audio: Rendition?
    /// A recording still being recorded: its playlists grow (`EVENT`); a player reads them again
    /// and starts at their live edge. Absent when false.
    public var live: Bool?

    enum CodingKeys: String, CodingKey { case id, cover, covers, master, duration, prefetch, renditions, storyboard, audio, live }

    /// Reads an entry written by any version: folders published before `covers`, `prefetch` or
    /// `renditions` existed have none of them.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        id = try c.decode(String.self, forKey: .id)
        cover = try c.decode(String.self, forKey: .cover)
        covers = try c.decodeIfPresent([Cover].self, forKey: .covers) ?? []
        master = try c.decode(String.self, forKey: .master)
        duration = try c.decode(Double.self, forKey: .duration)
        prefetch = try c.decodeIfPresent([Prefetch].self, forKey: .prefetch) ?? []
        renditions = try c.decodeIfPresent([Rendition].self, forKey: .renditions) ?? []
        storyboard = try c.decodeIfPresent(String.self, forKey: .storyboard)
        audio = try c.decodeIfPresent(Rendition.self, forKey: .audio)
        live = try c.decodeIfPresent(Bool.self, forKey: .live)
    }

    public struct Cover: Codable, Sendable, Equatable {
        public var uri: String
        /// The long side it fits, pixels.
        public var size: Int
    }

    public struct Prefetch: Codable, Sendable, Equatable {
        public var `init`: String
        public var segment: String
    }

    /// A rendition: name, playlist, codecs, peak bits per second (a video's with the audio, as
    /// the master playlist's BANDWIDTH), init and first segment, and a video's size and frame
    /// rate (`frame_rate`; absent in folders published before it was written).
    public struct Rendition: Codable, Sendable, Equatable {
        public var name: String
        public var playlist: String
        public var codecs: String
        public var bandwidth: Int
        public var `init`: String
        public var segment: String
        public var width: Int?
        public var height: Int?
        public var frameRate: Double?

        enum CodingKeys: String, CodingKey {
            case name, playlist, codecs, bandwidth, `init`, segment, width, height
            case frameRate = "frame_rate"
        }

        init(_ t: HLSTrack, bandwidth: Double) {
            name = String(t.playlistURI.dropLast(5))
            playlist = t.playlistURI
            codecs = t.codecs
            self.bandwidth = Int(bandwidth.rounded(.up))
            `init` = t.initURI
            segment = t.segments.first?.uri ?? ""
            width = t.width > 0 ? t.width : nil
            height = t.width > 0 ? t.height : nil
            frameRate = t.frameRate > 0 ? (t.frameRate * 1000).rounded() / 1000 : nil
        }
    }

    /// The entry of a folder `id` holding `video` (in the master's order, `HLSPlaylists.ordered`) and `audio`, with the covers
    /// and storyboard present in `work`. Renditions kept as byte ranges of one file are left out.
    init(id: String, video: [HLSTrack], audio sound: HLSTrack?, covers work: URL) {
        func present(_ name: String) -> Bool { FileManager.default.fileExists(atPath: work.appendingPathComponent(name).path) }
        self.id = id
        cover = LadderCovers.full
        covers = LadderCovers.sizes.filter { present(LadderCovers.name($0)) }.map { Cover(uri: LadderCovers.name($0), size: $0) }
        master = "master.m3u8"
        let seconds = video.first.map { $0.segments.reduce(0) { $0 + $1.seconds } } ?? 0
        duration = (seconds * 1000).rounded() / 1000
        prefetch = [HLSPlaylists.smallest(of: video), sound].compactMap { $0 }.compactMap { t in
            t.segments.first.map { Prefetch(init: t.initURI, segment: $0.uri) }
        }
        renditions = video.filter { $0.initRange == nil }.map { Rendition($0, bandwidth: $0.peak + (sound?.peak ?? 0)) }
        storyboard = present(Storyboard.vtt) ? Storyboard.vtt : nil
        audio = sound.flatMap { $0.initRange == nil ? Rendition($0, bandwidth: $0.peak) : nil }
    }

    /// The entry with every path prefixed by `base` (where the folder is served) and followed by
    /// `query` (a token that opens them, as `?token=...`).
    public func rebased(_ base: String, query: String = "") -> FeedEntry {
        var e = self
        e.cover = base + cover + query
        e.covers = covers.map { Cover(uri: base + $0.uri + query, size: $0.size) }
        e.master = base + master + query
        e.prefetch = prefetch.map { Prefetch(init: base + $0.`init` + query, segment: base + $0.segment + query) }
        e.renditions = renditions.map { $0.rebased(base, query: query) }
        e.storyboard = storyboard.map { base + $0 + query }
        e.audio = audio?.rebased(base, query: query)
        return e
    }
}

extension FeedEntry.Rendition {
    fileprivate func rebased(_ base: String, query: String) -> Self {
        var r = self
        r.playlist = base + playlist + query
        r.`init` = base + `init` + query
        r.segment = base + segment + query
        return r
    }
}
