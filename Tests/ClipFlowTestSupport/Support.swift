import Foundation

/// Runs a program and captures its output. Used to make fixtures with the ffmpeg CLI and to judge
/// outputs with tools we did not write (ffprobe, ffmpeg, mediainfo).
public struct Run {
    public var status: Int32
    public var stdout: Data
    public var stderr: String
    public var out: String { String(decoding: stdout, as: UTF8.self) }

    @discardableResult
    public static func run(_ args: [String], env: [String: String] = [:], check: Bool = true) throws -> Run {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = args
        var e = ProcessInfo.processInfo.environment
        for (k, v) in env { e[k] = v }
        p.environment = e
        let o = Pipe(), er = Pipe()
        p.standardOutput = o
        p.standardError = er
        p.standardInput = FileHandle.nullDevice
        try p.run()
        // Read both pipes concurrently so neither fills up.
        final class Box: @unchecked Sendable { var data = Data() }
        let errBox = Box()
        let g = DispatchGroup()
        g.enter()
        DispatchQueue.global().async {
            errBox.data = er.fileHandleForReading.readDataToEndOfFile(); g.leave()
        }
        let outData = o.fileHandleForReading.readDataToEndOfFile()
        g.wait()
        let errData = errBox.data
        p.waitUntilExit()
        let r = Run(status: p.terminationStatus, stdout: outData, stderr: String(decoding: errData, as: UTF8.self))
        if check && r.status != 0 {
            throw NSError(
                domain: "Run", code: Int(r.status),
                userInfo: [
                    NSLocalizedDescriptionKey:
                        "\(args.joined(separator: " ")) exited \(r.status): \(r.stderr.suffix(2000))"
                ])
        }
        return r
    }
}

extension Run {
    /// Starts `binary args`, waits until `marker` appears on the watched stream (stdout when
    /// `watchStdout`, else stderr), sends SIGINT, and returns the exit status and everything the
    /// watched stream printed. The other stream is discarded. A marker that has not appeared
    /// within `timeout` seconds never will: the program is interrupted all the same (killed 30 s
    /// later if it still runs) and the text ends with a line saying so, so the test fails with
    /// what was printed instead of waiting for good.
    public static func interrupt(
        _ binary: String, _ args: [String], after marker: String, watchStdout: Bool = false, timeout: TimeInterval = 180
    ) throws -> (status: Int32, text: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = args
        let pipe = Pipe()
        if watchStdout {
            p.standardOutput = pipe; p.standardError = FileHandle.nullDevice
        } else {
            p.standardError = pipe; p.standardOutput = FileHandle.nullDevice
        }
        p.standardInput = FileHandle.nullDevice
        try p.run()
        let pid = p.processIdentifier, started = Date()
        let late = DispatchWorkItem { kill(pid, SIGINT) }
        let stuck = DispatchWorkItem { kill(pid, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout, execute: late)
        DispatchQueue.global().asyncAfter(deadline: .now() + timeout + 30, execute: stuck)
        var seen = Data()
        while !String(decoding: seen, as: UTF8.self).contains(marker) {
            let d = pipe.fileHandleForReading.availableData
            if d.isEmpty { break }
            seen += d
        }
        late.cancel()
        let timedOut = !String(decoding: seen, as: UTF8.self).contains(marker) && Date().timeIntervalSince(started) >= timeout
        kill(pid, SIGINT)
        let rest = pipe.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        stuck.cancel()
        let text = String(decoding: seen + rest, as: UTF8.self)
        return (p.terminationStatus, timedOut ? text + "\n[Run.interrupt: '\(marker)' did not appear within \(Int(timeout)) s]" : text)
    }
}

public enum Probe {
    /// Number of decodable video frames (ffprobe counts frames by decoding).
    public static func videoFrames(_ path: String) throws -> Int {
        let r = try Run.run([
            "ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0",
            "-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", path
        ])
        let first = r.out.split(whereSeparator: { $0 == "\n" || $0 == "," }).first ?? ""
        return Int(first.trimmingCharacters(in: .whitespaces)) ?? -1
    }

    /// Presentation timestamps (seconds) of the video packets, in presentation order.
    public static func videoPTS(_ path: String) throws -> [Double] {
        let r = try Run.run([
            "ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
            "packet=pts_time", "-of", "csv=p=0", path
        ])
        return r.out.split(separator: "\n").compactMap { Double($0.trimmingCharacters(in: .whitespaces)) }.sorted()
    }

    /// A stream field from ffprobe (e.g. "duration", "nb_frames", "width").
    public static func stream(_ path: String, _ selector: String, _ field: String) throws -> String {
        let r = try Run.run([
            "ffprobe", "-v", "error", "-select_streams", selector, "-show_entries",
            "stream=\(field)", "-of", "csv=p=0", path
        ])
        return r.out.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// Rotation reported by ffprobe from the display matrix (FFmpeg's sign convention).
    public static func rotation(_ path: String) throws -> Int? {
        let r = try Run.run([
            "ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
            "stream_side_data=rotation", "-of", "csv=p=0", path
        ])
        return Int(r.out.trimmingCharacters(in: .whitespacesAndNewlines).split(separator: "\n").first ?? "")
    }

    /// Errors printed by ffmpeg while decoding every stream fully (empty = clean).
    /// `keepTimestamps`: pass decoded pictures on with their own times and time base
    /// (`-fps_mode passthrough -enc_time_base -1`), for variable-rate videos; otherwise the null
    /// output's constant-rate timing complains of pictures closer together than its rate, which
    /// says nothing about the file.
    public static func decodeErrors(_ path: String, keepTimestamps: Bool = false) throws -> String {
        let mode = keepTimestamps ? ["-fps_mode", "passthrough", "-enc_time_base", "-1"] : []
        let r = try Run.run(["ffmpeg", "-v", "error", "-i", path] + mode + ["-f", "null", "-"], check: false)
        return r.status == 0 ? r.stderr : "exit \(r.status): \(r.stderr)"
    }

    /// Decoded audio as mono float samples (ffmpeg decodes; edit lists honoured as ffmpeg does).
    public static func audioSamples(_ path: String, mono: Bool = true) throws -> [Float] {
        var args = ["ffmpeg", "-v", "error", "-i", path, "-map", "0:a:0", "-f", "f32le"]
        if mono { args += ["-ac", "1"] }
        let r = try Run.run(args + ["-"])
        return r.stdout.withUnsafeBytes { Array($0.bindMemory(to: Float.self)) }
    }

    /// Top-level boxes in file order, as ffprobe's trace log names them.
    public static func topLevelBoxes(_ path: String) throws -> [String] {
        let r = try Run.run(["ffprobe", "-v", "trace", "-i", path], check: false)
        var boxes: [String] = []
        for line in r.stderr.split(separator: "\n") where line.contains("parent:'root'") {
            if let a = line.range(of: "type:'") {
                let rest = line[a.upperBound...]
                if let b = rest.firstIndex(of: "'") { boxes.append(String(rest[..<b])) }
            }
        }
        return boxes
    }

    /// A decoded picture (first frame, display orientation applied by ffmpeg) as grey pixels.
    public static func greyPicture(_ path: String, at seconds: Double = 0) throws -> (w: Int, h: Int, px: [UInt8]) {
        let size = try Run.run([
            "ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
            "stream=width,height", "-of", "csv=p=0", path
        ]).out
            .trimmingCharacters(in: .whitespacesAndNewlines).split(separator: ",").compactMap { Int($0) }
        var w = size[0], h = size[1]
        if let rot = try? rotation(path), abs(rot) == 90 || abs(rot) == 270 { swap(&w, &h) }
        let seek = seconds > 0 ? ["-ss", String(seconds)] : []
        let r = try Run.run(
            ["ffmpeg", "-v", "error"] + seek + [
                "-i", path, "-frames:v", "1",
                "-f", "rawvideo", "-pix_fmt", "gray", "-"
            ])
        return (w, h, [UInt8](r.stdout))
    }

    /// Which quarter-corner of a grey picture is brightest ("TL", "TR", "BL", "BR").
    public static func brightestCorner(w: Int, h: Int, px: [UInt8]) -> String {
        guard px.count >= w * h, w >= 4, h >= 4 else { return "no picture (\(px.count) bytes for \(w)x\(h))" }
        func mean(_ x0: Int, _ y0: Int) -> Double {
            var s = 0.0
            for y in y0..<(y0 + h / 4) { for x in x0..<(x0 + w / 4) { s += Double(px[y * w + x]) } }
            return s / Double((w / 4) * (h / 4))
        }
        let c = ["TL": mean(0, 0), "TR": mean(w - w / 4, 0), "BL": mean(0, h - h / 4), "BR": mean(w - w / 4, h - h / 4)]
        return c.max { $0.value < $1.value }!.key
    }

    /// SSIM ("All", ffmpeg's `ssim` filter) of `distorted` against `reference`, the reference
    /// scaled to the distorted size (bicubic). Both start at time 0, so pictures pair up by time
    /// whatever each container's start offset. `distortedOptions` go before the distorted input
    /// (`-ss 2 -t 1.5`: one part of it).
    public static func ssim(_ distorted: String, _ reference: String, distortedOptions: [String] = []) throws -> Double {
        let graph = "[0:v]setpts=PTS-STARTPTS[d0];[1:v]setpts=PTS-STARTPTS[r0];[r0][d0]scale2ref=flags=bicubic[r][d];[d][r]ssim"
        let r = try Run.run(["ffmpeg", "-v", "info"] + distortedOptions + ["-i", distorted, "-i", reference, "-lavfi", graph, "-f", "null", "-"])
        guard let a = r.stderr.range(of: "All:") else { return 0 }
        return Double(r.stderr[a.upperBound...].prefix { "0123456789.".contains($0) }) ?? 0
    }

    /// What a viewer gets: each video played to its end in headless chromium (Playwright,
    /// `scripts/browser-play`): `ended`, `error`, `duration`, `current_time`, `width`, `height`,
    /// `frames` (pictures presented), `segments` (media segments fetched, in order). `options`:
    /// `--rate R`, `--throttle KBPS`, `--timeout S`.
    public static func browserPlayback(_ paths: [String], options: [String] = []) throws -> [[String: Any]] {
        let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        let r = try Run.run(["python3", root.appendingPathComponent("scripts/browser-play").path] + options + paths, check: false)
        let rows = r.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        if rows.count != paths.count { throw NSError(domain: "browser-play", code: Int(r.status), userInfo: [NSLocalizedDescriptionKey: r.stderr]) }
        return rows
    }

    public static func mediainfo(_ path: String, _ field: String) throws -> String {
        let r = try Run.run(["mediainfo", "--Inform=General;%\(field)%", path])
        return r.out.trimmingCharacters(in: .whitespacesAndNewlines)
    }
}

/// Fixture clips made with the ffmpeg CLI into a temporary folder (never committed; the committed
/// fixtures/ folder holds only tiny files): the folder `CLIPFLOW_FIXTURES_DIR` names, which
/// scripts/test-parallel sets so that its test processes make each clip once between them, or
/// else a folder of this process's own.
public final class Fixtures: @unchecked Sendable {
    public static let shared = Fixtures()
    public let dir: URL
    private let lock = NSLock()
    private var made: [String: String] = [:]

    private init() {
        if let shared = ProcessInfo.processInfo.environment["CLIPFLOW_FIXTURES_DIR"], !shared.isEmpty {
            dir = URL(fileURLWithPath: shared)
        } else {
            dir = FileManager.default.temporaryDirectory.appendingPathComponent("clipflow-fixtures-\(getpid())")
        }
        try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        chmod(dir.path, 0o777)
    }

    /// A fresh empty folder for one test's outputs.
    public func scratch(_ name: String) -> URL {
        let d = dir.appendingPathComponent("out-\(name)-\(UInt32.random(in: 0...UInt32.max))")
        try? FileManager.default.createDirectory(at: d, withIntermediateDirectories: true)
        chmod(d.path, 0o777)
        return d
    }

    /// Makes (once) a camera-like H.264/AAC MP4: the test picture at 30 fps and a 48 kHz tone,
    /// `seconds` long, `size` ("WxH").
    public func clip(_ name: String, seconds: Int, size: String) throws -> String {
        try clip(
            name,
            [
                "-f", "lavfi", "-i", "testsrc2=size=\(size):rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", String(seconds), "-c:v", "libx264",
                "-preset", "ultrafast", "-c:a", "aac"
            ])
    }

    /// Makes (once) a clip with `ffmpeg` arguments and returns its path.
    public func clip(_ name: String, _ args: [String]) throws -> String {
        lock.lock(); defer { lock.unlock() }
        if let p = made[name] { return p }
        let path = dir.appendingPathComponent(name).path
        try Self.makeOnce(path) { try Run.run(["ffmpeg", "-v", "error", "-y"] + args + [$0]) }
        made[name] = path
        return path
    }

    /// Makes the file at `path` with `make` unless it exists, safely for several processes
    /// sharing the folder: under an exclusive lock on a hidden lock file beside it (a second
    /// process asking for the same file waits, then finds it made), `make` writes a hidden
    /// temporary in the same folder whose name ends as `path`'s does (so ffmpeg still picks the
    /// format from the extension), renamed to `path` once complete: nobody sees a half-written file.
    public static func makeOnce(_ path: String, _ make: (String) throws -> Void) throws {
        let url = URL(fileURLWithPath: path)
        let folder = url.deletingLastPathComponent(), name = url.lastPathComponent
        let lockPath = folder.appendingPathComponent(".\(name).lock").path
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o666)
        guard fd >= 0 else {
            throw NSError(domain: "Fixtures", code: 1, userInfo: [NSLocalizedDescriptionKey: "cannot open \(lockPath): \(String(cString: strerror(errno)))"])
        }
        defer { close(fd) }
        while flock(fd, LOCK_EX) != 0 && errno == EINTR {}
        defer { _ = flock(fd, LOCK_UN) }
        if FileManager.default.fileExists(atPath: path) { return }
        let temporary = folder.appendingPathComponent(".making-\(getpid())-\(name)").path
        do {
            try make(temporary)
            guard rename(temporary, path) == 0 else {
                throw NSError(
                    domain: "Fixtures", code: 2, userInfo: [NSLocalizedDescriptionKey: "cannot rename \(temporary): \(String(cString: strerror(errno)))"])
            }
        } catch {
            unlink(temporary)
            throw error
        }
    }

    public static let x264 = ["-c:v", "libx264", "-preset", "ultrafast", "-g", "30", "-bf", "2", "-pix_fmt", "yuv420p"]

    /// Clip i of a continuous recording cut into `seconds`-long pieces: a moving test picture at
    /// `fps` and a 440 Hz tone that continues exactly across clips (so joins can be checked).
    public func toneClip(
        _ i: Int, seconds: Double = 4, fps: Int = 30, size: String = "320x240",
        rate: Int = 48000, channels: Int = 1, audioSeconds: Double? = nil,
        extra: [String] = [], tag: String = ""
    ) throws -> String {
        let start = Double(i) * seconds
        let frames = Int((seconds * Double(fps)).rounded())
        let ad = audioSeconds ?? seconds
        let layout = channels == 2 ? "|0.2*sin(2*PI*660*(t+\(start)))" : ""
        return try clip(
            "tone\(i)-\(seconds)-\(fps)-\(size)-\(rate)-\(channels)-\(ad)\(tag).mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=\(size):rate=\(fps),trim=start_frame=\(i * frames):end_frame=\(i * frames + frames),setpts=PTS-STARTPTS",
                "-f", "lavfi", "-i", "aevalsrc=0.25*sin(2*PI*440*(t+\(start)))\(layout):s=\(rate):d=\(ad)"
            ] + Fixtures.x264 + ["-c:a", "aac", "-b:a", "192k"] + extra)
    }
}

/// Copies of fixture clips with one 32-bit field of one box changed: damaged inputs for tests.
/// Boxes are named by path, with an index for repeated names: "moov/trak[1]/mdia/mdhd".
public enum MP4Patch {
    /// The payload range (after the 8-byte header) of the box at `path`, or nil.
    public static func payload(_ path: String, in data: [UInt8]) -> Range<Int>? {
        var range = 0..<data.count
        for part in path.split(separator: "/") {
            var name = String(part), index = 0
            if let open = name.firstIndex(of: "[") {
                index = Int(name[name.index(after: open)..<name.index(before: name.endIndex)]) ?? 0
                name = String(name[..<open])
            }
            var off = range.lowerBound, seen = 0
            var found: Range<Int>? = nil
            while off + 8 <= range.upperBound {
                let size = Int(data[off]) << 24 | Int(data[off + 1]) << 16 | Int(data[off + 2]) << 8 | Int(data[off + 3])
                let type = String(decoding: data[(off + 4)..<(off + 8)], as: UTF8.self)
                guard size >= 8, off + size <= range.upperBound else { return nil }
                if type == name {
                    if seen == index { found = (off + 8)..<(off + size); break }
                    seen += 1
                }
                off += size
            }
            guard let f = found else { return nil }
            range = f
        }
        return range
    }

    /// The big-endian 32-bit field `at` bytes into the payload of `box` in the file at `path`.
    public static func uint32(_ path: String, box: String, at: Int) throws -> UInt32 {
        let data = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
        guard let p = payload(box, in: data), p.lowerBound + at + 4 <= p.upperBound else {
            throw NSError(domain: "MP4Patch", code: 1, userInfo: [NSLocalizedDescriptionKey: "no field \(at) in \(box) of \(path)"])
        }
        let i = p.lowerBound + at
        return UInt32(data[i]) << 24 | UInt32(data[i + 1]) << 16 | UInt32(data[i + 2]) << 8 | UInt32(data[i + 3])
    }

    /// Writes a copy of `source` to `destination` with the field set to `value`.
    public static func write(_ source: String, to destination: String, box: String, at: Int, _ value: UInt32) throws {
        var data = [UInt8](try Data(contentsOf: URL(fileURLWithPath: source)))
        guard let p = payload(box, in: data), p.lowerBound + at + 4 <= p.upperBound else {
            throw NSError(domain: "MP4Patch", code: 1, userInfo: [NSLocalizedDescriptionKey: "no field \(at) in \(box) of \(source)"])
        }
        let i = p.lowerBound + at
        data[i] = UInt8(value >> 24); data[i + 1] = UInt8(value >> 16 & 0xFF); data[i + 2] = UInt8(value >> 8 & 0xFF); data[i + 3] = UInt8(value & 0xFF)
        try Data(data).write(to: URL(fileURLWithPath: destination))
    }
}

/// A small seedable generator (SplitMix64) for the fuzz sets: the same seed gives the same cases
/// on every machine.
public struct SplitMix64: RandomNumberGenerator {
    public var state: UInt64
    public init(seed: UInt64) { state = seed }
    public mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
