internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// A ladder's storyboard, for a player's seek preview: `storyboard.jpg`, one sprite of small
/// upright pictures (each fitted within `tile` pixels, `columns` to a row, at most `maxTiles`),
/// and `storyboard.vtt`, a WebVTT track whose cues name each picture's time span and its place in
/// the sprite (`storyboard.jpg#xywh=X,Y,W,H`), as hosted video services publish them.
///
/// The pictures are the first frames of a rendition's segments (every segment, or every k-th so
/// that at most `maxTiles` are taken): each segment starts with a keyframe, so one segment is
/// decoded per picture, never the whole video, and the smallest rendition is the cheapest.
enum Storyboard {
    static let vtt = "storyboard.vtt"
    static let sprite = "storyboard.jpg"
    static let tile = 160
    static let columns = 10
    static let maxTiles = 100

    /// Writes both files into `work` from `track`, a rendition whose files are in `work`.
    static func write(from track: HLSTrack, in work: URL) throws {
        guard !track.segments.isEmpty else { return }
        var starts: [Double] = []
        var t = 0.0
        for s in track.segments {
            starts.append(t)
            t += s.seconds
        }
        let total = t
        let stride = (track.segments.count + maxTiles - 1) / maxTiles
        let chosen = Swift.stride(from: 0, to: track.segments.count, by: stride).map { $0 }
        let initBytes = try bytes(of: track.initURI, range: track.initRange, in: work)
        let part = work.appendingPathComponent(".storyboard-part.mp4")
        defer { try? FileManager.default.removeItem(at: part) }

        var tiles: [Frame] = []
        for i in chosen {
            let s = track.segments[i]
            let segment = try bytes(of: s.uri, range: s.offset.map { ByteRange(offset: $0, length: s.bytes) }, in: work)
            try (initBytes + segment).write(to: part)
            tiles.append(try firstPicture(of: part.path))
        }
        let tw = Int(tiles[0].f.pointee.width), th = Int(tiles[0].f.pointee.height)
        let across = min(columns, tiles.count), down = (tiles.count + across - 1) / across
        let sheet = try Frame()
        sheet.f.pointee.width = Int32(tw * across)
        sheet.f.pointee.height = Int32(th * down)
        sheet.f.pointee.format = AV_PIX_FMT_YUVJ420P.rawValue
        try FF.check(av_frame_get_buffer(sheet.f, 0), "allocating the storyboard")
        // Black where no picture goes (a last row not full).
        for plane in 0..<3 {
            guard let d = sheet.data(plane) else { continue }
            let rows = plane == 0 ? th * down : th * down / 2
            memset(d, plane == 0 ? 0 : 128, sheet.linesize(plane) * rows)
        }
        var cues = "WEBVTT\n"
        for (n, picture) in tiles.enumerated() {
            let x = (n % across) * tw, y = (n / across) * th
            try place(picture, in: sheet, x: x, y: y, width: tw, height: th)
            let start = starts[chosen[n]], end = n + 1 < chosen.count ? starts[chosen[n + 1]] : total
            cues += "\n\(timestamp(start)) --> \(timestamp(end))\n\(sprite)#xywh=\(x),\(y),\(tw),\(th)\n"
        }
        try DurableFiles.write(Array(try Thumbnailer.encodeJPEG(sheet)), to: work.appendingPathComponent(sprite).path)
        try DurableFiles.write(Array(cues.utf8), to: work.appendingPathComponent(vtt).path)
    }

    /// "HH:MM:SS.mmm", as WebVTT writes a cue's time.
    static func timestamp(_ seconds: Double) -> String {
        let ms = Int((seconds * 1000).rounded())
        return String(format: "%02d:%02d:%02d.%03d", ms / 3_600_000, ms / 60000 % 60, ms / 1000 % 60, ms % 1000)
    }

    private static func bytes(of uri: String, range: ByteRange?, in work: URL) throws -> Data {
        let url = work.appendingPathComponent(uri)
        guard let range else { return try Data(contentsOf: url) }
        guard let h = FileHandle(forReadingAtPath: url.path) else { throw ClipFlowError.output("cannot read '\(url.path)' for the storyboard") }
        defer { try? h.close() }
        try h.seek(toOffset: UInt64(range.offset))
        return try h.read(upToCount: range.length) ?? Data()
    }

    /// The first picture of the video in `path`, upright and fitted within `tile`.
    private static func firstPicture(of path: String) throws -> Frame {
        let dmx = try Demuxer(path: path)
        guard let vi = (0..<dmx.streamCount).first(where: { dmx.codecpar($0).pointee.codec_type == AVMEDIA_TYPE_VIDEO }) else {
            throw ClipFlowError.badInput("'\(path)': no picture for the storyboard")
        }
        let dec = try CodecContext.decoder(for: dmx.codecpar(vi), what: "storyboard decoder")
        guard let frame = try Thumbnailer.firstFrame(dmx, dec, vi, try Packet()) else {
            throw ClipFlowError.badInput("'\(path)': no picture for the storyboard could be decoded")
        }
        return try Thumbnailer.upright(frame, turned: Thumbnailer.clockwiseTurn(of: dmx.stream(vi)), limit: ThumbnailSize(maxWidth: tile, maxHeight: tile))
    }

    /// Copies `picture` (4:2:0, `width`x`height` at most) into `sheet` at (`x`, `y`), both even.
    private static func place(_ picture: Frame, in sheet: Frame, x: Int, y: Int, width: Int, height: Int) throws {
        let pw = min(width, Int(picture.f.pointee.width)), ph = min(height, Int(picture.f.pointee.height))
        for plane in 0..<3 {
            guard let s = picture.data(plane), let d = sheet.data(plane) else { continue }
            let shift = plane == 0 ? 0 : 1
            let rowBytes = pw >> shift, rows = ph >> shift
            let sl = picture.linesize(plane), dl = sheet.linesize(plane)
            for r in 0..<rows { memcpy(d + ((y >> shift) + r) * dl + (x >> shift), s + r * sl, rowBytes) }
        }
    }
}
