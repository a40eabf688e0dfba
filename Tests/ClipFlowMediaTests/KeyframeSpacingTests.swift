import ClipFlowMedia
import ClipFlowTestSupport
import Foundation
import XCTest

/// Keyframe spacing read without decoding: from an MP4's sample tables and from a Matroska file's
/// packets (the same video remuxed), against what ffprobe says of the same files.
final class KeyframeSpacingTests: XCTestCase {
    let fx = Fixtures.shared

    /// ffprobe's longest stretch between keyframes (and to the end), in seconds.
    func probedLongestGap(_ path: String) throws -> Double {
        let r = try Run.run(["ffprobe", "-v", "error", "-select_streams", "v", "-show_entries", "packet=pts_time,flags", "-of", "csv=p=0", path])
        let packets = r.out.split(separator: "\n").compactMap { line -> (Double, Bool)? in
            let f = line.split(separator: ",")
            guard f.count >= 2, let t = Double(f[0]) else { return nil }
            return (t, f[1].contains("K"))
        }
        let keys = packets.filter(\.1).map(\.0).sorted()
        let end = (packets.map(\.0).max() ?? 0) + 1.0 / 30
        return zip(keys, keys.dropFirst() + [end]).map { $1 - $0 }.max() ?? 0
    }

    func testSparseKeyframesFromTablesAndFromPackets() throws {
        let mp4 = try fx.clip(
            "spacing-sparse.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30", "-t", "12", "-c:v", "libx264", "-preset", "ultrafast", "-g", "150",
                "-keyint_min", "150", "-sc_threshold", "0", "-bf", "2"
            ])
        let mkv = fx.scratch("spacing").appendingPathComponent("sparse.mkv").path
        try Run.run(["ffmpeg", "-v", "error", "-y", "-i", mp4, "-c", "copy", mkv])
        let expected = try probedLongestGap(mp4)
        XCTAssertEqual(expected, 5, accuracy: 0.05, "the fixture: keyframes at 0, 5 and 10 s")
        for path in [mp4, mkv] {
            let s = try KeyframeSpacing.measure(path)
            XCTAssertTrue(s.startsWithKeyframe, path)
            XCTAssertEqual(s.longestGap, expected, accuracy: 0.05, path)
        }
    }

    func testATailLongerThanTheGapsCounts() throws {
        let mp4 = try fx.clip(
            "spacing-tail.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30", "-t", "9", "-c:v", "libx264", "-preset", "ultrafast", "-force_key_frames",
                "expr:eq(n,0)+eq(n,30)+eq(n,60)", "-g", "1000", "-sc_threshold", "0"
            ])
        let s = try KeyframeSpacing.measure(mp4)
        XCTAssertEqual(s.longestGap, try probedLongestGap(mp4), accuracy: 0.05)
        XCTAssertEqual(s.longestGap, 7, accuracy: 0.05, "from the keyframe at 2 s to the end at 9 s")
    }
}
