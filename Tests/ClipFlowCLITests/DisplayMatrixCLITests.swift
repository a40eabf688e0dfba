import XCTest
import Foundation
import ClipFlowTestSupport

/// Clips whose track matrix mirrors (and/or turns) the picture come out of `transcode` and `hls`
/// looking as a player shows the source: judged by SSIM against ffmpeg's own filters (hflip,
/// vflip, transpose) applied to the stored pixels.
final class DisplayMatrixCLITests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    /// 320x240, the test picture (asymmetric: text, a moving marker), no display matrix.
    func source() throws -> String {
        try fx.clip(
            "matrix-src.mp4",
            ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=2", "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"])
    }

    /// A copy of the source whose tkhd matrix is (a b; c d) in FFmpeg's layout (16.16 fixed
    /// point; x' = a x + c y, y' = b x + d y), and the picture a player shows for it, made by ffmpeg
    /// from the stored pixels with `filter`.
    func matrixClip(_ name: String, a: Int32, b: Int32, c: Int32, d: Int32, filter: String) throws -> (clip: String, shown: String) {
        let src = try source()
        let clip = fx.dir.appendingPathComponent("matrix-\(name).mp4").path
        // tkhd (version 0): the matrix starts 40 bytes into the payload: a b u c d v x y w.
        try MP4Patch.write(src, to: clip, box: "moov/trak/tkhd", at: 40, UInt32(bitPattern: a << 16))
        for (at, v) in [(44, b), (52, c), (56, d)] { try MP4Patch.write(clip, to: clip, box: "moov/trak/tkhd", at: at, UInt32(bitPattern: v << 16)) }
        let shown = try fx.clip("matrix-\(name)-shown.mp4", ["-i", src, "-vf", filter, "-c:v", "libx264", "-preset", "ultrafast", "-crf", "10"])
        return (clip, shown)
    }

    /// The same clip turned 180 degrees (what a mirror was wrongly made into).
    func turned180() throws -> String {
        try fx.clip("matrix-turned180.mp4", ["-i", try source(), "-vf", "hflip,vflip", "-c:v", "libx264", "-preset", "ultrafast", "-crf", "10"])
    }

    func testMirroredFlippedAndTransposedMatricesComeOutAsPlayersShowThem() throws {
        let cases: [(String, Int32, Int32, Int32, Int32, String)] = [
            ("hflip", -1, 0, 0, 1, "hflip"), ("vflip", 1, 0, 0, -1, "vflip"), ("transpose", 0, 1, 1, 0, "transpose=cclock_flip"),
            ("turn90", 0, 1, -1, 0, "transpose=clock")
        ]
        let out = fx.scratch("matrix")
        for (name, a, b, c, d, filter) in cases {
            let (clip, shown) = try matrixClip(name, a: a, b: b, c: c, d: d, filter: filter)
            for upright in [true, false] {
                let mp4 = out.appendingPathComponent("\(name)-\(upright).mp4").path
                let r = try Run.run(
                    [binary, "transcode", clip, "-o", mp4, "--encoder-preset", "ultrafast", "--quiet"] + (upright ? ["--upright"] : []), check: false)
                XCTAssertEqual(r.status, 0, r.stderr)
                // ffmpeg applies the output's own matrix (a pure rotation, or none) when decoding.
                let similarity = try Probe.ssim(mp4, shown)
                XCTAssertGreaterThan(similarity, 0.9, "\(name) upright=\(upright): as a player shows the source")
                if name == "hflip" {
                    XCTAssertLessThan(try Probe.ssim(mp4, try turned180()), similarity - 0.1, "mirrored, not turned 180 degrees")
                }
            }
        }
    }

    func testMirroredClipsLadderIsMirrored() throws {
        let (clip, shown) = try matrixClip("hflip", a: -1, b: 0, c: 0, d: 1, filter: "hflip")
        let ladder = fx.scratch("matrix-hls").appendingPathComponent("ladder").path
        let r = try Run.run([binary, "hls", clip, "-o", ladder, "--encoder-preset", "ultrafast", "--quiet"], check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        let rendition = "\(ladder)/360p.m3u8"
        let similarity = try Probe.ssim(rendition, shown)
        XCTAssertGreaterThan(similarity, 0.9, "the rendition shows the source as a player does")
        XCTAssertLessThan(try Probe.ssim(rendition, try turned180()), similarity - 0.1, "mirrored, not turned 180 degrees")
    }
}
