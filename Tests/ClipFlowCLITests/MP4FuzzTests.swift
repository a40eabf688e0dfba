import XCTest
import Foundation
import ClipFlowTestSupport

/// The MP4 fuzz set (Tests/Fuzz): seeded mutants of real H.264, HEVC (hvc1), MOV and video-only
/// clips, each joined with a good clip in both orders by `clipflow merge` and `merge --thumbnail`.
/// Every run ends by itself, without a signal, with exit 0 and an output ffmpeg decodes, or exit 1
/// naming the bad file and not the good one; nothing is left behind and no input changes
/// (fuzz_mp4.py states the rules). This bounded set runs in `swift test`; `scripts/fuzz-mp4` runs
/// the same generator longer (CLIPFLOW_FUZZ_CASES).
final class MP4FuzzTests: XCTestCase {
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }
    static let driver = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fuzz/fuzz_mp4.py").path

    /// Seeds 25-48 include an audio timescale of 0 (a hang before the tables were checked) and a
    /// video timescale of 1 that blamed the good clip.
    func testMutatedClipsAreMergedOrRefusedNamingTheBadFileAndLeaveNothingBehind() throws {
        let work = Fixtures.shared.scratch("mp4-fuzz")
        let fixtures = Fixtures.shared.dir.appendingPathComponent("mp4-fuzz-clips").path
        let r = try Run.run(
            [
                "python3", Self.driver, "--clipflow", binary, "--fixtures", fixtures,
                "--work", work.path, "--seed", "25", "--cases", "24", "--jobs", "2", "--timeout", "20"
            ],
            check: false)
        XCTAssertEqual(r.status, 0, "fuzz failures:\n\(r.out.suffix(6000))\n\(r.stderr.suffix(2000))")
        XCTAssertTrue(r.out.contains("fuzz_mp4: 24 cases"), r.out + r.stderr)
    }
}
