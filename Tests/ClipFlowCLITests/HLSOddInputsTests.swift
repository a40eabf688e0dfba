import XCTest
import Foundation
import ClipFlowTestSupport

/// `clipflow hls` and `clipflow transcode` on inputs of odd sizes, pixel formats, orientations and
/// frame rates: each makes a ladder that `hls lint` accepts and an MP4 that ffmpeg decodes without
/// an error. `scripts/asan-media` runs this same set against a build with AddressSanitizer
/// (`CLIPFLOW_TEST_BINARY` names the binary to run; default: the one built with the tests).
final class HLSOddInputsTests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        ProcessInfo.processInfo.environment["CLIPFLOW_TEST_BINARY"]
            ?? URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    /// One input: a name, the picture's size, its pixel format, and how it is stored.
    struct Case {
        var name: String
        var size: String
        var pixelFormat: String
        /// Encoder and container arguments (after the filters).
        var codec: [String]
        var ext = "mp4"
        var rate = "30"
        var extraFilters = ""
        var extra: [String] = []
    }

    static let h264 = ["-c:v", "libx264", "-preset", "ultrafast"]
    static let ffv1 = ["-c:v", "ffv1"]

    /// Widths and heights of 2, 6, 17, 4094x2 and 2x600; 4:2:0, 4:2:2, 4:4:4, 10-bit, grey, NV12,
    /// full range; portrait; odd and variable frame rates.
    static let cases: [Case] = [
        Case(name: "thin444", size: "2:600", pixelFormat: "yuv444p", codec: h264),
        Case(name: "thin422", size: "2:600", pixelFormat: "yuv422p", codec: h264),
        Case(name: "six444", size: "6:600", pixelFormat: "yuv444p", codec: h264),
        Case(name: "six422", size: "6:64", pixelFormat: "yuv422p", codec: h264),
        Case(name: "six420", size: "6:6", pixelFormat: "yuv420p", codec: h264),
        Case(name: "two420", size: "2:2", pixelFormat: "yuv420p", codec: ffv1, ext: "mkv"),
        Case(name: "odd17-420", size: "17:33", pixelFormat: "yuv420p", codec: ffv1, ext: "mkv"),
        Case(name: "odd17-444", size: "17:17", pixelFormat: "yuv444p", codec: h264),
        Case(name: "wide4094", size: "4094:2", pixelFormat: "yuv420p", codec: h264),
        Case(name: "tall2x600-420", size: "2:600", pixelFormat: "yuv420p", codec: h264),
        Case(name: "high10", size: "66:38", pixelFormat: "yuv420p10le", codec: h264),
        Case(name: "gray", size: "70:46", pixelFormat: "gray", codec: ffv1, ext: "mkv"),
        Case(name: "nv12", size: "70:46", pixelFormat: "nv12", codec: ["-c:v", "rawvideo"], ext: "nut"),
        Case(name: "fullrange", size: "64:48", pixelFormat: "yuvj420p", codec: h264),
        Case(name: "portrait", size: "48:64", pixelFormat: "yuv420p", codec: h264, extra: ["-metadata:s:v", "rotate=90"]),
        Case(name: "portrait444-odd", size: "17:40", pixelFormat: "yuv444p", codec: h264, extra: ["-metadata:s:v", "rotate=270"]),
        Case(name: "rate7", size: "64:48", pixelFormat: "yuv420p", codec: h264, rate: "7"),
        Case(name: "rate23976", size: "64:48", pixelFormat: "yuv420p", codec: h264, rate: "24000/1001"),
        Case(
            name: "variable", size: "64:48", pixelFormat: "yuv420p", codec: h264, rate: "30", extraFilters: ",setpts='N/30/TB+gte(N,10)*0.37/TB'",
            extra: ["-vsync", "passthrough"])
    ]

    func clip(_ c: Case) throws -> String {
        try fx.clip(
            "odd-\(c.name).\(c.ext)",
            [
                "-f", "lavfi", "-i", "testsrc2=size=64x64:rate=\(c.rate):duration=1.5", "-f", "lavfi", "-i", "sine=r=48000:d=1.5",
                "-vf", "scale=\(c.size)\(c.extraFilters)", "-pix_fmt", c.pixelFormat
            ] + c.codec + ["-c:a", c.ext == "nut" ? "pcm_s16le" : "aac"] + c.extra)
    }

    /// What went wrong in one case, or nil.
    func check(_ c: Case) throws -> String? {
        let input = try clip(c)
        let out = fx.scratch("odd-\(c.name)")
        let hls = try Run.run([binary, "hls", input, "-o", out.appendingPathComponent("ladder").path, "--encoder-preset", "ultrafast", "--quiet"], check: false)
        if hls.status != 0 { return "hls exited \(hls.status): \(hls.stderr.suffix(1500))" }
        let lint = try Run.run([binary, "hls", "lint", out.appendingPathComponent("ladder").path], check: false)
        if lint.status != 0 { return "hls lint: \(lint.out.suffix(1500))" }
        let mp4 = out.appendingPathComponent("t.mp4").path
        let t = try Run.run([binary, "transcode", input, "-o", mp4, "--encoder-preset", "ultrafast", "--quiet"], check: false)
        if t.status != 0 { return "transcode exited \(t.status): \(t.stderr.suffix(1500))" }
        let errors = try Probe.decodeErrors(mp4)
        if !errors.isEmpty { return "the transcode's output does not decode cleanly: \(errors)" }
        if try Probe.videoFrames(mp4) == 0 { return "the transcode wrote no picture" }
        let left = try FileManager.default.contentsOfDirectory(atPath: out.path).filter { $0.contains("clipflow-tmp") }
        if !left.isEmpty { return "temporaries left: \(left)" }
        return nil
    }

    func testOddSizesPixelFormatsOrientationsAndRatesGoThroughHLSAndTranscode() throws {
        var failures: [String] = []
        for c in Self.cases {
            if let why = try check(c) { failures.append("\(c.name) (\(c.size) \(c.pixelFormat)): \(why)") }
        }
        XCTAssertEqual(failures, [], failures.joined(separator: "\n\n"))
    }

    /// A clip that shows nothing for 10 hours between two pictures cannot be written as one MP4
    /// track at 90 kHz: both commands say so, naming the file, instead of FFmpeg's "patches welcome".
    func testTenHourPauseIsRefusedNamingTheFileAndWhatToDo() throws {
        let gap = try fx.clip(
            "odd-gap.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=64x48:rate=1:duration=3", "-vf", "setpts='if(gte(N,1),(36000+N)/TB,PTS)'", "-vsync", "passthrough",
                "-c:v", "libx264", "-bf", "0", "-video_track_timescale", "1000"
            ])
        let out = fx.scratch("odd-gap")
        for args in [["hls", gap, "-o", out.appendingPathComponent("ladder").path], ["transcode", gap, "-o", out.appendingPathComponent("t.mp4").path]] {
            let r = try Run.run([binary] + args + ["--quiet"], check: false)
            XCTAssertEqual(r.status, 65, "\(args[0]): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("input '\(gap)'"), "\(args[0]) names the file: \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("shows nothing for 10 h 0 min"), "\(args[0]) says why: \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("Cut the clip at the pause"), "\(args[0]) says what to do: \(r.stderr)")
            XCTAssertFalse(r.stderr.contains("patches welcome"), r.stderr)
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: out.path), [], "nothing left behind")
    }
}
