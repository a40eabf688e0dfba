import ClipFlowCore
import Foundation

/// Where the test pattern draws what tests read back. Pure geometry of a `width` x `height`
/// picture, shared by the generator and by anything that checks recorded output.
///
/// ```
///  +----------------------------------------------+
///  | ####       [#][ ][#][#] ... 20-bit counter    |   marker: white square, top-left quarter
///  | ####        000123                           |   counter: 20 blocks, MSB first, white = 1
///  |        [#][#][#][ ] ... 32-bit clock [#]     |   clock (when asked for): 32 blocks, the
///  |                                              |   capture's wall-clock milliseconds, between
///  |                                              |   two white blocks that mark the row
///  |                 +----------+                 |
///  |                 |  flash   |                 |   flash: white for one frame each second,
///  |                 +----------+                 |          in step with the audio beep
///  |      [moving box] ->                         |   moving element: crosses in 2 s
///  +----------------------------------------------+
/// ```
public struct TestPatternLayout: Sendable, Equatable {
    public static let counterBits = 20
    /// The clock row: milliseconds since the Unix epoch modulo 2^32 (a wrap every 49.7 days).
    public static let clockBits = 32
    public let width: Int
    public let height: Int
    /// Side of one counter block in pixels (even).
    public let block: Int
    public let counterOrigin: (x: Int, y: Int)
    /// Where the clock row starts (its first marking block): below the counter's digits, centred.
    public let clockOrigin: (x: Int, y: Int)
    public let marker: Rect
    public let flash: Rect
    public let moverSize: Int
    public let moverY: Int

    public struct Rect: Sendable, Equatable {
        public var x, y, w, h: Int
    }

    public init(width: Int, height: Int) {
        self.width = width
        self.height = height
        block = max(8, (width / 64) & ~1)
        let codeWidth = Self.counterBits * block
        counterOrigin = (max(0, (width - codeWidth) / 2), height / 16)
        clockOrigin = (max(0, (width - (Self.clockBits + 2) * block) / 2), counterOrigin.y + 5 * block)
        marker = Rect(x: width / 32, y: height / 32, w: width / 4 - width / 16, h: height / 4 - height / 16)
        flash = Rect(x: width * 3 / 8, y: height * 3 / 8, w: width / 4, h: height / 4)
        moverSize = max(4, (height / 8) & ~1)
        moverY = (height * 11 / 16) & ~1
    }

    public static func == (a: Self, b: Self) -> Bool { a.width == b.width && a.height == b.height }

    /// Why a picture of this size cannot carry the clock row, or nil: its 34 blocks must fit
    /// across and end above the flash rectangle.
    public var clockProblem: String? {
        let across = (Self.clockBits + 2) * block
        if across > width { return "the clock needs a picture at least \(across) pixels wide" }
        if clockOrigin.y + block > flash.y { return "the clock needs a taller picture (its row would cross the flash)" }
        return nil
    }

    /// Reads the frame counter from a grey (luma) picture of this layout; nil if a block is
    /// neither clearly dark nor clearly bright (not a test-pattern picture).
    public func readCounter(grey: [UInt8]) -> Int? {
        readBlocks(grey: grey, origin: counterOrigin, count: Self.counterBits)
    }

    /// Reads the clock row (`TestPatternSettings.clock`): the wall-clock milliseconds modulo 2^32
    /// at which the picture was captured; nil where there is no clock row (its two marking
    /// blocks are not white).
    public func readClock(grey: [UInt8]) -> UInt32? {
        guard clockProblem == nil,
            let row = readBlocks(grey: grey, origin: clockOrigin, count: Self.clockBits + 2),
            row >> (Self.clockBits + 1) == 1, row & 1 == 1
        else { return nil }
        return UInt32(truncatingIfNeeded: row >> 1)
    }

    /// Milliseconds from a picture's clock (`readClock`) to `now` (seconds since the Unix epoch),
    /// across the clock's wrap; negative when the picture's clock is ahead of `now`.
    public static func milliseconds(since clock: UInt32, now: Double) -> Int64 {
        Int64(Int32(bitPattern: clockValue(now) &- clock))
    }

    /// The clock row's value for `seconds` since the Unix epoch.
    public static func clockValue(_ seconds: Double) -> UInt32 {
        UInt32(truncatingIfNeeded: Int64((seconds * 1000).rounded(.down)))
    }

    /// `count` blocks from `origin`, most significant first, white = 1; nil if a block is neither
    /// clearly dark nor clearly bright.
    private func readBlocks(grey: [UInt8], origin: (x: Int, y: Int), count: Int) -> Int? {
        guard grey.count >= width * height, origin.x + count * block <= width, origin.y + block <= height else { return nil }
        var value = 0
        let r = max(1, block / 4)
        for i in 0..<count {
            let cx = origin.x + i * block + block / 2, cy = origin.y + block / 2
            var sum = 0, n = 0
            for y in (cy - r)..<(cy + r) { for x in (cx - r)..<(cx + r) { sum += Int(grey[y * width + x]); n += 1 } }
            let mean = sum / max(1, n)
            if mean > 170 { value = value << 1 | 1 } else if mean < 90 { value <<= 1 } else { return nil }
        }
        return value
    }

    /// Mean luma of the flash rectangle of a grey picture (bright: a flash frame).
    public func flashLevel(grey: [UInt8]) -> Double {
        guard grey.count >= width * height else { return 0 }
        var sum = 0
        for y in flash.y..<(flash.y + flash.h) { for x in flash.x..<(flash.x + flash.w) { sum += Int(grey[y * width + x]) } }
        return Double(sum) / Double(flash.w * flash.h)
    }
}

/// Settings of the synthetic camera.
public struct TestPatternSettings: Sendable, Equatable {
    public var width = 1280
    public var height = 720
    /// Frames per second.
    public var fps: Double = 30
    /// Picture layout delivered (yuv420p, nv12 or yuyv422).
    public var format: PixelFormat = .yuv420p
    /// Audio sample rate; 0 for no audio.
    public var sampleRate = 48_000
    public var channels = 1
    public var toneHz = 440.0
    public var beepHz = 1000.0
    /// Beep length in seconds (starts on each whole second, with the flash frame).
    public var beepSeconds = 0.1
    /// Whether pictures carry the clock row (`TestPatternLayout.readClock`): the wall-clock time
    /// each was captured, so the delay to wherever it is shown can be read off the picture.
    public var clock = false

    public init(width: Int = 1280, height: Int = 720, fps: Double = 30, format: PixelFormat = .yuv420p, sampleRate: Int = 48_000) {
        self.width = width
        self.height = height
        self.fps = fps
        self.format = format
        self.sampleRate = sampleRate
    }

    /// Why these settings cannot make a picture, or nil.
    public var problem: String? {
        if width < 64 || height < 64 || width > 7680 || height > 4320 { return "size \(width)x\(height) is out of range (64x64 to 7680x4320)" }
        if width % 2 != 0 || height % 2 != 0 { return "size \(width)x\(height) must have even sides (4:2:0 chroma)" }
        if !(fps > 0 && fps <= 240) { return "frame rate \(fps) is out of range (above 0, at most 240)" }
        if format == .mjpeg { return "the test pattern makes raw pictures (yuv420p, nv12, yuyv422), not mjpeg" }
        if sampleRate != 0 && !(8000...192_000).contains(sampleRate) { return "sample rate \(sampleRate) is out of range (8000 to 192000, or 0 for none)" }
        if clock, let p = TestPatternLayout(width: width, height: height).clockProblem { return "size \(width)x\(height): \(p)" }
        return nil
    }
}

/// Draws test-pattern pictures and audio. Deterministic: frame `n` and sample `s` depend only on
/// `n`, `s`, the settings and the wall-clock time given, so a test can predict exactly what was
/// recorded.
///
/// Picture: a dark gradient, a white orientation marker in the top-left quarter, a 20-bit frame
/// counter as blocks with the number in digits under it, a box crossing the frame every 2 s, a
/// centre rectangle that flashes white on the first frame of every second, and (when asked for)
/// a row of blocks with the wall-clock time the picture was captured. Audio: a quiet tone
/// with a loud beep at the start of every second, so A/V sync is measurable from the output.
///
/// Not thread-safe; one owner (the source stage's queue).
public final class TestPatternGenerator {
    public let settings: TestPatternSettings
    public let layout: TestPatternLayout
    private var baseY: [UInt8]
    private let chromaW: Int, chromaH: Int

    public init(_ settings: TestPatternSettings) throws {
        if let p = settings.problem { throw ClipFlowError.badInput("testpattern: \(p)") }
        self.settings = settings
        layout = TestPatternLayout(width: settings.width, height: settings.height)
        chromaW = settings.width / 2
        chromaH = settings.height / 2
        let w = settings.width
        var row = [UInt8](repeating: 0, count: w)
        for x in 0..<w { row[x] = UInt8(36 + 28 * x / w) }
        baseY = []
        baseY.reserveCapacity(w * settings.height)
        for _ in 0..<settings.height { baseY += row }
        // The marker is static: part of the base picture.
        let m = layout.marker
        for y in m.y..<(m.y + m.h) { for x in m.x..<(m.x + m.w) { baseY[y * w + x] = 235 } }
    }

    /// True if frame `n` is the first frame at or after a whole second (a flash frame).
    public func isFlash(_ n: Int64) -> Bool {
        let fps = settings.fps
        if n == 0 { return true }
        return floor(Double(n) / fps) > floor(Double(n - 1) / fps)
    }

    /// Picture number `n`, time-stamped `n / fps` (and `clockTime`, when it is paced on the capture
    /// clock); `wallClock` (seconds since the Unix epoch) is drawn in the clock row when the
    /// settings ask for one.
    public func video(frame n: Int64, clockTime: Double? = nil, wallClock: Double? = nil) -> VideoFrame {
        let w = settings.width, h = settings.height
        let ySize = w * h, cSize = chromaW * chromaH
        var planar = Data(count: ySize + 2 * cSize)
        planar.withUnsafeMutableBytes { raw in
            let p = raw.bindMemory(to: UInt8.self).baseAddress!
            p.update(from: baseY, count: ySize)
            memset(p + ySize, 128, 2 * cSize)
            let l = layout
            // Flash.
            if isFlash(n) { fill(p, l.flash.x, l.flash.y, l.flash.w, l.flash.h, y: 235, u: 128, v: 128) }
            // Moving box: crosses the picture every two seconds.
            let travel = max(1, w - l.moverSize)
            let step = Double(travel) / (2 * settings.fps)
            let mx = Int(Double(n) * step) % travel & ~1
            fill(p, mx, l.moverY, l.moverSize, l.moverSize, y: 150, u: 84, v: 196)
            drawBlocks(p, UInt64(truncatingIfNeeded: n), count: TestPatternLayout.counterBits, at: l.counterOrigin)
            // The number in digits under the blocks.
            drawNumber(p, n, x: l.counterOrigin.x, y: l.counterOrigin.y + l.block + l.block / 2, unit: max(2, l.block / 2))
            if settings.clock, let wallClock {
                // A white block, the 32 bits, a white block.
                let row = UInt64(TestPatternLayout.clockValue(wallClock)) << 1 | 1 << 33 | 1
                drawBlocks(p, row, count: TestPatternLayout.clockBits + 2, at: l.clockOrigin)
            }
        }
        let data: Data
        switch settings.format {
        case .nv12: data = Self.toNV12(planar, w, h)
        case .yuyv422: data = Self.toYUYV(planar, w, h)
        default: data = planar
        }
        return VideoFrame(
            width: w, height: h, format: settings.format == .mjpeg ? .yuv420p : settings.format,
            data: data, time: Double(n) / settings.fps, sequence: n, nominalRate: settings.fps, clockTime: clockTime)
    }

    /// `count` sample frames starting at sample frame `first`.
    public func audio(from first: Int64, count: Int) -> AudioChunk {
        let sr = Double(settings.sampleRate), ch = settings.channels
        var out = [Float](repeating: 0, count: count * ch)
        let beepLen = Int64(settings.beepSeconds * sr)
        let srInt = Int64(settings.sampleRate)
        for i in 0..<count {
            let s = first + Int64(i)
            let t = Double(s) / sr
            var v = 0.2 * sin(2 * .pi * settings.toneHz * t)
            if s % srInt < beepLen { v += 0.6 * sin(2 * .pi * settings.beepHz * t) }
            for c in 0..<ch { out[i * ch + c] = Float(v) }
        }
        return AudioChunk(sampleRate: settings.sampleRate, channels: ch, samples: out, firstSample: first)
    }

    /// Sample frames that belong with picture `n`: from the picture's time to the next one's.
    public func audioRange(forFrame n: Int64) -> Range<Int64> {
        let sr = Double(settings.sampleRate), fps = settings.fps
        let a = Int64((Double(n) * sr / fps).rounded(.down)), b = Int64((Double(n + 1) * sr / fps).rounded(.down))
        return a..<b
    }

    // MARK: drawing (planar 4:2:0; x, y, w, h even where chroma matters)

    private func fill(_ p: UnsafeMutablePointer<UInt8>, _ x0: Int, _ y0: Int, _ w0: Int, _ h0: Int, y: UInt8, u: UInt8, v: UInt8) {
        let W = settings.width, H = settings.height
        let x = max(0, x0), yy = max(0, y0)
        let w = min(W, x0 + w0) - x, h = min(H, y0 + h0) - yy
        guard w > 0, h > 0 else { return }
        for r in yy..<(yy + h) { memset(p + r * W + x, Int32(y), w) }
        let uPlane = p + W * H, vPlane = uPlane + chromaW * chromaH
        for r in (yy / 2)..<((yy + h + 1) / 2) {
            memset(uPlane + r * chromaW + x / 2, Int32(u), (w + 1) / 2)
            memset(vPlane + r * chromaW + x / 2, Int32(v), (w + 1) / 2)
        }
    }

    /// The low `count` bits of `value` as a row of blocks from `origin`, most significant first,
    /// white = 1 (what `TestPatternLayout` reads back).
    private func drawBlocks(_ p: UnsafeMutablePointer<UInt8>, _ value: UInt64, count: Int, at origin: (x: Int, y: Int)) {
        let b = layout.block
        for i in 0..<count {
            let bit = (value >> UInt64(count - 1 - i)) & 1
            fill(p, origin.x + i * b, origin.y, b, b, y: bit == 1 ? 235 : 16, u: 128, v: 128)
        }
    }

    /// 3x5 glyphs for 0-9, one row per 3 bits.
    private static let glyphs: [[UInt8]] = [
        [7, 5, 5, 5, 7], [2, 6, 2, 2, 7], [7, 1, 7, 4, 7], [7, 1, 7, 1, 7], [5, 5, 7, 1, 1],
        [7, 4, 7, 1, 7], [7, 4, 7, 5, 7], [7, 1, 1, 1, 1], [7, 5, 7, 5, 7], [7, 5, 7, 1, 7]
    ]

    private func drawNumber(_ p: UnsafeMutablePointer<UInt8>, _ n: Int64, x: Int, y: Int, unit u: Int) {
        let text = String(format: "%06lld", n)
        var cx = x
        for ch in text.utf8 {
            let g = Self.glyphs[Int(ch - 48)]
            for (row, bits) in g.enumerated() {
                for col in 0..<3 where bits & (4 >> UInt8(col)) != 0 {
                    fill(p, cx + col * u, y + row * u, u, u, y: 220, u: 128, v: 128)
                }
            }
            cx += 4 * u
        }
    }

    static func toNV12(_ planar: Data, _ w: Int, _ h: Int) -> Data {
        let ySize = w * h, cw = w / 2, ch = h / 2
        var out = Data(count: planar.count)
        out.withUnsafeMutableBytes { o in
            planar.withUnsafeBytes { i in
                let src = i.bindMemory(to: UInt8.self).baseAddress!, dst = o.bindMemory(to: UInt8.self).baseAddress!
                memcpy(dst, src, ySize)
                let u = src + ySize, v = u + cw * ch, uv = dst + ySize
                for k in 0..<(cw * ch) { uv[2 * k] = u[k]; uv[2 * k + 1] = v[k] }
            }
        }
        return out
    }

    static func toYUYV(_ planar: Data, _ w: Int, _ h: Int) -> Data {
        let ySize = w * h, cw = w / 2, ch = h / 2
        var out = Data(count: w * h * 2)
        out.withUnsafeMutableBytes { o in
            planar.withUnsafeBytes { i in
                let src = i.bindMemory(to: UInt8.self).baseAddress!, dst = o.bindMemory(to: UInt8.self).baseAddress!
                let u = src + ySize, v = u + cw * ch
                for y in 0..<h {
                    let yr = src + y * w, cr = (y / 2) * cw, d = dst + y * w * 2
                    for x in 0..<cw {
                        d[4 * x] = yr[2 * x]; d[4 * x + 1] = u[cr + x]; d[4 * x + 2] = yr[2 * x + 1]; d[4 * x + 3] = v[cr + x]
                    }
                }
            }
        }
        return out
    }
}
