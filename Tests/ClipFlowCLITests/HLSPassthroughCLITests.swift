import XCTest
import Foundation
import ClipFlowTestSupport

/// `clipflow hls` with a source that fits its top rung: the source's own pictures are that rung
/// (`--passthrough auto`, the default), and a source that does not fit is encoded, the reason said.
final class HLSPassthroughCLITests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func clipflow(_ args: [String]) throws -> Run { try Run.run([binary] + args, check: false) }

    /// As a phone's upload is: H.264 High (B-frames: decoding order is not display order) at a
    /// sensible bit rate, a keyframe every second, AAC.
    func phoneLike() throws -> String {
        try fx.clip(
            "passthrough-phone.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "8", "-c:v", "libx264", "-preset",
                "veryfast", "-profile:v", "high", "-g", "30", "-b:v", "3M", "-maxrate", "4M", "-bufsize", "6M", "-pix_fmt", "yuv420p", "-c:a", "aac",
                "-movflags", "+faststart"
            ])
    }

    /// The decoded pictures' checksums (framemd5), in order.
    func pictureHashes(_ path: String) throws -> [String] {
        try Run.run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:v", "-f", "framemd5", "-"]).out.split(separator: "\n")
            .filter { !$0.hasPrefix("#") }.map { String($0.split(separator: ",").last!).trimmingCharacters(in: .whitespaces) }
    }

    func testASourceThatFitsIsTheTopRungAsItIs() throws {
        let src = try phoneLike()
        let out = fx.scratch("passthrough-fits").appendingPathComponent("hls")
        let r = try clipflow(["hls", src, "-o", out.path, "--encoder-preset", "ultrafast", "--events", "json"])
        XCTAssertEqual(r.status, 0, r.stderr)
        // The top rung (720p) is not encoded: the copy stands in for it, the lower rungs are encoded.
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: out.path))
        XCTAssertTrue(names.isSuperset(of: ["copy", "540p", "360p", "audio"]), "\(names)")
        XCTAssertFalse(names.contains("720p"), "\(names)")
        XCTAssertTrue(r.out.contains("the source's own pictures are this rung"), r.out)
        // Every picture as the source's (ffmpeg decodes both).
        let source = try pictureHashes(src)
        XCTAssertEqual(source.count, 240)
        XCTAssertEqual(try pictureHashes(out.appendingPathComponent("copy.m3u8").path), source)
        // The playlists say the truth: lint-clean (BANDWIDTH at least the measured peak, CODECS
        // from the streams, every rendition cut at the same instants), CODECS as ffprobe reads
        // the source's profile and level.
        let lint = try clipflow(["hls", "lint", out.path])
        XCTAssertEqual(lint.status, 0, lint.out)
        XCTAssertTrue(lint.out.contains("\"errors\":0,\"warnings\":0"), lint.out)
        let level = try XCTUnwrap(Int(try Probe.stream(src, "v:0", "level")))
        XCTAssertEqual(try Probe.stream(src, "v:0", "profile"), "High")
        let master = try String(contentsOf: out.appendingPathComponent("master.m3u8"), encoding: .utf8)
        let top = try XCTUnwrap(master.split(separator: "\n").first { $0.hasPrefix("#EXT-X-STREAM-INF") })
        XCTAssertTrue(top.contains("CODECS=\"avc1.6400\(String(format: "%02x", level)),mp4a.40.2\""), String(top))
        XCTAssertTrue(top.contains("RESOLUTION=1280x720"), String(top))
        XCTAssertTrue(master.contains("\ncopy.m3u8\n"), master)
        // And a browser plays it to the end.
        let played = try XCTUnwrap(try Probe.browserPlayback([out.appendingPathComponent("master.m3u8").path]).first)
        XCTAssertEqual(played["ended"] as? Bool, true, "\(played)")
    }

    /// What other tools write passes through as the phone's upload does: GStreamer's mp4mux (its
    /// x264enc's keyframes 29 pictures apart, no sound), the ffmpeg CLI's Matroska and its
    /// QuickTime MOV. Each one's top rung is its own pictures, and the ladder lints clean.
    func testWhatOtherToolsWritePassesThrough() throws {
        let dir = fx.scratch("passthrough-other-tools")
        let gstreamer = dir.appendingPathComponent("gstreamer.mp4").path
        let made = try Run.run(
            [
                "gst-launch-1.0", "-q", "videotestsrc", "num-buffers=180", "pattern=smpte", "!", "video/x-raw,width=1280,height=720,framerate=30/1", "!",
                "x264enc", "key-int-max=30", "bitrate=2500", "speed-preset=veryfast", "!", "video/x-h264,profile=high", "!", "mp4mux", "!", "filesink",
                "location=\(gstreamer)"
            ], check: false)
        XCTAssertEqual(made.status, 0, made.stderr)
        let x264 = ["-c:v", "libx264", "-preset", "veryfast", "-profile:v", "high", "-g", "30", "-b:v", "2M", "-maxrate", "3M", "-bufsize", "4M"]
        let source = ["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "6"]
        let matroska = try fx.clip("passthrough-ffmpeg.mkv", source + x264 + ["-pix_fmt", "yuv420p", "-c:a", "libopus"])
        let quicktime = try fx.clip("passthrough-ffmpeg.mov", source + x264 + ["-pix_fmt", "yuv420p", "-c:a", "aac", "-f", "mov"])
        for (label, input) in [("gstreamer", gstreamer), ("matroska", matroska), ("quicktime", quicktime)] {
            let out = dir.appendingPathComponent(label)
            let r = try clipflow(["hls", input, "-o", out.path, "--encoder-preset", "ultrafast"])
            XCTAssertEqual(r.status, 0, "\(label): \(r.stderr)")
            let names = Set(try FileManager.default.contentsOfDirectory(atPath: out.path))
            XCTAssertTrue(names.isSuperset(of: ["copy", "540p", "360p"]) && !names.contains("720p"), "\(label): \(names)\n\(r.stderr)")
            XCTAssertEqual(try pictureHashes(out.appendingPathComponent("copy.m3u8").path), try pictureHashes(input), label)
            let lint = try clipflow(["hls", "lint", out.path])
            XCTAssertTrue(lint.out.contains("\"errors\":0,\"warnings\":0"), "\(label): \(lint.out)")
        }
    }

    func testASourceThatDoesNotFitIsEncodedAndTheReasonSaid() throws {
        let sparse = try fx.clip(
            "passthrough-sparse-keyframes.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-t", "12", "-c:v", "libx264", "-preset", "ultrafast", "-g", "300",
                "-keyint_min", "300", "-sc_threshold", "0"
            ])
        let out = fx.scratch("passthrough-sparse").appendingPathComponent("hls")
        let r = try clipflow(["hls", sparse, "-o", out.path, "--encoder-preset", "ultrafast"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertTrue(r.stderr.contains("360p encoded, not passed through: its keyframes are up to 10.0 s apart, and a segment is 6 s"), r.stderr)
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: out.path))
        XCTAssertTrue(names.contains("360p"), "\(names)")
        XCTAssertFalse(names.contains("copy"), "\(names)")
        XCTAssertEqual(try clipflow(["hls", "lint", out.path]).status, 0)

        // Above the bit rate a passthrough may have, and with passthrough off: encoded.
        let src = try phoneLike()
        let capped = fx.scratch("passthrough-capped").appendingPathComponent("hls")
        let c = try clipflow(["hls", src, "-o", capped.path, "--ladder", "720,360", "--passthrough-rate", "0.5", "--encoder-preset", "ultrafast"])
        XCTAssertEqual(c.status, 0, c.stderr)
        XCTAssertTrue(c.stderr.contains("720p encoded, not passed through: its video averages"), c.stderr)
        XCTAssertTrue(c.stderr.contains("above 1.8 Mbit/s (0.5 times the 720p rung's cap)"), c.stderr)
        let off = fx.scratch("passthrough-off").appendingPathComponent("hls")
        let o = try clipflow(["hls", src, "-o", off.path, "--ladder", "720,360", "--passthrough", "off", "--encoder-preset", "ultrafast"])
        XCTAssertEqual(o.status, 0, o.stderr)
        XCTAssertFalse(o.stderr.contains("passed through"), o.stderr)
        XCTAssertEqual(Set(try FileManager.default.contentsOfDirectory(atPath: off.path)).intersection(["copy", "720p", "360p"]), ["720p", "360p"])
        XCTAssertNotEqual(try clipflow(["hls", src, "-o", off.path + "-x", "--passthrough", "sometimes"]).status, 0)
    }

    /// An iPhone's default: HEVC. It is a rendition beside the rungs (declared with its own
    /// CODECS), and every H.264 rung is made, the top one too, for players without HEVC.
    func testAnHEVCSourceIsARenditionBesideTheWholeH264Ladder() throws {
        func hevc(_ name: String, openGOP: Bool) throws -> String {
            try fx.clip(
                name,
                [
                    "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "4", "-c:v", "libx265", "-preset",
                    "ultrafast", "-x265-params", "keyint=30:min-keyint=30:open-gop=\(openGOP ? 1 : 0):log-level=error", "-b:v", "2M", "-tag:v", "hvc1",
                    "-c:a", "aac"
                ])
        }
        let src = try hevc("passthrough-hevc.mp4", openGOP: false)
        let out = fx.scratch("passthrough-hevc").appendingPathComponent("hls")
        let r = try clipflow(["hls", src, "-o", out.path, "--encoder-preset", "ultrafast"])
        XCTAssertEqual(r.status, 0, r.stderr)
        let names = Set(try FileManager.default.contentsOfDirectory(atPath: out.path))
        XCTAssertTrue(names.isSuperset(of: ["copy", "720p", "540p", "360p"]), "\(names)")
        XCTAssertEqual(try pictureHashes(out.appendingPathComponent("copy.m3u8").path), try pictureHashes(src))
        let lint = try clipflow(["hls", "lint", out.path])
        XCTAssertTrue(lint.out.contains("\"errors\":0,\"warnings\":0"), lint.out)
        // CODECS as ffprobe reads the stream: Main profile, its level; H.264 variants first.
        XCTAssertEqual(try Probe.stream(src, "v:0", "profile"), "Main")
        let level = try Probe.stream(src, "v:0", "level")
        let master = try String(contentsOf: out.appendingPathComponent("master.m3u8"), encoding: .utf8)
        let variants = master.split(separator: "\n").filter { $0.hasPrefix("#EXT-X-STREAM-INF") }
        XCTAssertEqual(variants.count, 4, master)
        XCTAssertTrue(variants[0].contains("CODECS=\"avc1."), master)
        let copy = try XCTUnwrap(variants.last)
        XCTAssertTrue(copy.contains("CODECS=\"hvc1.1.6.L\(level)."), master)
        XCTAssertTrue(copy.contains("RESOLUTION=1280x720"), master)

        // Open GOPs (x265's default): a segment would need the one before; encoded, the reason said.
        let open = try hevc("passthrough-hevc-open.mp4", openGOP: true)
        let o = try clipflow(["hls", open, "-o", fx.scratch("passthrough-hevc-open").appendingPathComponent("hls").path, "--encoder-preset", "ultrafast"])
        XCTAssertEqual(o.status, 0, o.stderr)
        XCTAssertTrue(o.stderr.contains("720p encoded, not passed through: its keyframes begin open GOPs"), o.stderr)
    }
}
