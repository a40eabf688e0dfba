import ClipFlowCore
import Foundation

/// What a ladder's folder holds, as `tracks.json`: each rendition's description (files, measured
/// segments, codecs, size), so that a later ladder of the same source can take renditions from it
/// (`LadderReuse`) and still write a master playlist from what the segments measure.
public struct LadderTracks: Codable {
    static let file = "tracks.json"
    var video: [HLSTrack]
    var audio: HLSTrack?

    func serialized() throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        return String(decoding: try encoder.encode(self), as: UTF8.self) + "\n"
    }

    /// The names of the video renditions of the complete ladder in `folder` (their playlists'
    /// names without `.m3u8`), in the ladder's order (`LadderRung.ordered`).
    public static func videoRenditions(in folder: URL) throws -> [String] {
        LadderRung.ordered(try read(from: folder).video.map { String($0.playlistURI.dropLast(5)) })
    }

    static func read(from folder: URL) throws -> LadderTracks {
        let url = folder.appendingPathComponent(file)
        do { return try JSONDecoder().decode(LadderTracks.self, from: Data(contentsOf: url)) } catch {
            throw ClipFlowError.badInput("'\(url.path)': cannot read the ladder's description: \(error.localizedDescription)")
        }
    }
}

/// Renditions of an earlier, complete ladder of the same source that a new ladder takes as they
/// are: their files are hard-linked into the new folder (no copy, no encode; the folders must be
/// on one file system) and they join its master playlist. `tracks` names them by their playlists'
/// names without `.m3u8` ("360p", `audio`); a name the earlier ladder does not have is skipped
/// (a source without sound has no `audio`). `poster`: its covers (`LadderCovers`) are taken too.
public struct LadderReuse: Sendable, Equatable {
    /// The name of a ladder's audio rendition.
    public static let audio = "audio"
    /// The name that stands for the poster in a list of what to reuse (`named`).
    public static let poster = "poster"
    public var folder: URL
    public var tracks: [String]
    public var poster: Bool

    public init(folder: URL, tracks: [String], poster: Bool) {
        self.folder = folder
        self.tracks = tracks
        self.poster = poster
    }

    /// What the `hls` stage's `reuse-renditions` names (`360p,audio,poster`, `360p-av1`), or nil
    /// when it is not a list of such names (letters, digits and inner hyphens, each once).
    public static func names(_ list: String) -> [String]? {
        let names = list.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingCharacters(in: .whitespaces) }
        let valid = names.allSatisfy {
            !$0.isEmpty && !$0.hasPrefix("-") && !$0.hasSuffix("-") && $0.allSatisfy { c in c.isASCII && (c.isLetter || c.isNumber || c == "-") }
        }
        return valid && Set(names).count == names.count ? names : nil
    }

    /// What `names` accepts, for a refusal.
    public static let expected = "rendition names and poster, each once, comma-separated: 720p,audio,poster"

    /// Reuse of `names`: renditions, and `poster` for the poster.
    public init(folder: URL, named names: [String]) {
        self.init(folder: folder, tracks: names.filter { $0 != Self.poster }, poster: names.contains(Self.poster))
    }

    /// Links the named renditions' files (and the poster) into `work`; returns their descriptions.
    func link(into work: URL) throws -> [HLSTrack] {
        let described = try LadderTracks.read(from: folder)
        let chosen = (described.video + [described.audio].compactMap { $0 }).filter { tracks.contains(String($0.playlistURI.dropLast(5))) }
        var files = Set<String>()
        for t in chosen {
            files.formUnion([t.playlistURI, t.initURI] + t.segments.map(\.uri) + [t.iframesURI].compactMap { $0 })
        }
        let fm = FileManager.default
        // A ladder made before the smaller covers existed has only the full one.
        if poster { files.formUnion(LadderCovers.all.filter { fm.fileExists(atPath: folder.appendingPathComponent($0).path) }) }
        for name in files.sorted() {
            let from = folder.appendingPathComponent(name), to = work.appendingPathComponent(name)
            do {
                try fm.createDirectory(at: to.deletingLastPathComponent(), withIntermediateDirectories: true)
                try fm.linkItem(at: from, to: to)
            } catch {
                throw ClipFlowError.output("cannot link '\(from.path)' into the new ladder", writing: error)
            }
        }
        return chosen
    }
}
