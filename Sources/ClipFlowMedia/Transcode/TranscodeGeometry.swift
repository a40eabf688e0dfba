import Foundation

/// A rectangle of pixels.
struct PixelRect: Equatable, CustomStringConvertible {
    var x: Int, y: Int, width: Int, height: Int
    var description: String { "\(width)x\(height)+\(x)+\(y)" }
}

/// Where one clip's picture goes in the output frame: the part of the source that is shown
/// (`crop`, in source pixels) and where it lands (`dest`, in frame pixels). Both in the
/// orientation the pixels are written in. Every size and offset is even (4:2:0 chroma).
struct Placement: Equatable {
    var crop: PixelRect
    var dest: PixelRect
    /// The frame has pixels the picture does not cover (they are black).
    var pads: Bool
}

/// The output frame's size and each clip's place in it (pure; table-tested).
enum TranscodeGeometry {
    /// The output frame for a source picture of `source` (in the orientation the output is
    /// written in), as `settings` ask: its size, a height, a limit, a frame, never larger than
    /// the source unless `upscale`.
    static func frame(for source: PictureSize, _ s: TranscodeSettings) -> PictureSize {
        let sw = Double(source.width), sh = Double(source.height)
        let cap = s.upscale ? Double.infinity : 1
        if let h = s.height {
            let k = min(Double(h) / sh, cap)
            return PictureSize(width: even(sw * k), height: even(sh * k))
        }
        if var l = s.limit {
            if source.height > source.width, l.width > l.height { l = l.swapped }
            let k = min(Double(l.width) / sw, Double(l.height) / sh, cap)
            return PictureSize(width: even(sw * k), height: even(sh * k))
        }
        guard let f = s.frame else { return PictureSize(width: even(sw), height: even(sh)) }
        if s.upscale { return f }
        let fw = Double(f.width), fh = Double(f.height)
        // A source smaller than the frame shrinks the frame (same shape), so that the picture is
        // not enlarged: contain and stretch until the source fills one side, cover until it
        // fills both.
        let k = s.fit == .cover ? min(sw / fw, sh / fh) : max(sw / fw, sh / fh)
        if k >= 1 { return f }
        return PictureSize(width: even(fw * k), height: even(fh * k))
    }

    /// Where a source picture of `source` goes in `frame`.
    static func place(_ source: PictureSize, in frame: PictureSize, fit: Fit, upscale: Bool) -> Placement {
        let sw = Double(source.width), sh = Double(source.height)
        let fw = Double(frame.width), fh = Double(frame.height)
        let full = PixelRect(x: 0, y: 0, width: source.width, height: source.height)
        let cap = upscale ? Double.infinity : 1
        switch fit {
        case .stretch:
            return Placement(crop: full, dest: PixelRect(x: 0, y: 0, width: frame.width, height: frame.height), pads: false)
        case .contain:
            let k = min(fw / sw, fh / sh, cap)
            let w = min(frame.width, even(sw * k)), h = min(frame.height, even(sh * k))
            return Placement(crop: full, dest: centred(w, h, in: frame), pads: w < frame.width || h < frame.height)
        case .cover:
            let k = min(max(fw / sw, fh / sh), cap)
            let cw = min(source.width, even(fw / k)), ch = min(source.height, even(fh / k))
            let crop = PixelRect(x: evenDown((source.width - cw) / 2), y: evenDown((source.height - ch) / 2), width: cw, height: ch)
            let w = min(frame.width, even(Double(cw) * k)), h = min(frame.height, even(Double(ch) * k))
            return Placement(crop: crop, dest: centred(w, h, in: frame), pads: w < frame.width || h < frame.height)
        }
    }

    /// `rect` of a picture displayed turned `degrees` clockwise, in the picture's stored pixels
    /// (`stored` is the stored size).
    static func storedRect(_ r: PixelRect, turned degrees: Int, stored: PictureSize) -> PixelRect {
        switch degrees {
        case 90: return PixelRect(x: r.y, y: stored.height - r.x - r.width, width: r.height, height: r.width)
        case 180: return PixelRect(x: stored.width - r.x - r.width, y: stored.height - r.y - r.height, width: r.width, height: r.height)
        case 270: return PixelRect(x: stored.width - r.y - r.height, y: r.x, width: r.height, height: r.width)
        default: return r
        }
    }

    private static func centred(_ w: Int, _ h: Int, in f: PictureSize) -> PixelRect {
        PixelRect(x: evenDown((f.width - w) / 2), y: evenDown((f.height - h) / 2), width: w, height: h)
    }
    /// The nearest even number, at least 2.
    static func even(_ v: Double) -> Int { max(2, Int((v / 2).rounded()) * 2) }
    private static func evenDown(_ v: Int) -> Int { max(0, v & ~1) }
}
