import XCTest
@testable import ClipFlowMedia

/// RFC 6381 strings and HLS bit rates as tables (values checked against real files in
/// notes/issue16/research.md).
final class CodecStringsTests: XCTestCase {
    func testH264FromAvcC() {
        XCTAssertEqual(CodecStrings.avc([1, 0x64, 0x00, 0x1f, 0xff, 0xe1]), "avc1.64001f")
        XCTAssertEqual(CodecStrings.avc([1, 0x42, 0xc0, 0x1e, 0xff], sampleEntry: "avc3"), "avc3.42c01e")
        XCTAssertNil(CodecStrings.avc([0, 0, 0, 1, 0x67]), "Annex B is not a record")
    }

    func testHEVCFromHvcC() {
        // x265 Main, level 3.1: 01 01 60000000 900000000000 5d
        let main: [UInt8] = [1, 0x01, 0x60, 0, 0, 0, 0x90, 0, 0, 0, 0, 0, 0x5d]
        XCTAssertEqual(CodecStrings.hevc(main), "hvc1.1.6.L93.90")
        // Main 10, level 4.1, compatibility flag 2, constraints b0: Apple's example.
        let main10: [UInt8] = [1, 0x02, 0x20, 0, 0, 0, 0xb0, 0, 0, 0, 0, 0, 123]
        XCTAssertEqual(CodecStrings.hevc(main10), "hvc1.2.4.L123.b0")
        // High tier, profile space 1.
        let high: [UInt8] = [1, 0x61, 0x60, 0, 0, 0, 0, 0, 0, 0, 0, 0, 150]
        XCTAssertEqual(CodecStrings.hevc(high, sampleEntry: "hev1"), "hev1.A1.6.H150")
    }

    func testAV1FromAv1C() {
        // SVT-AV1 Main, seq_level_idx 5 (3.1), Main tier, 8-bit 4:2:0: 81 05 0c 00.
        XCTAssertEqual(CodecStrings.av1([0x81, 0x05, 0x0c, 0x00]), "av01.0.05M.08")
        // High profile (1), level 4.0 (8), High tier, 10-bit.
        XCTAssertEqual(CodecStrings.av1([0x81, 0x28, 0xc0, 0x00]), "av01.1.08H.10")
        // Professional (2), 12-bit.
        XCTAssertEqual(CodecStrings.av1([0x81, 0x4d, 0x60, 0x00]), "av01.2.13M.12")
        XCTAssertNil(CodecStrings.av1([0x01, 0x05, 0x0c, 0x00]), "no marker and version")
    }

    func testAACFromAudioSpecificConfig() {
        XCTAssertEqual(CodecStrings.aac([0x11, 0x88]), "mp4a.40.2")
        XCTAssertEqual(CodecStrings.aac([0x2a, 0x08]), "mp4a.40.5")
        XCTAssertEqual(CodecStrings.aac([0xf8, 0x20]), "mp4a.40.33", "escape: 32 + 1")
        XCTAssertNil(CodecStrings.aac([]))
    }

    func testPeakAndAverageSegmentRates() {
        // Target 2 s: runs of 1 to 3 s count. One heavy 2 s segment sets the peak.
        let bytes = [250_000, 1_000_000, 250_000], seconds = [2.0, 2.0, 2.0]
        XCTAssertEqual(SegmentRates.peak(bytes: bytes, seconds: seconds, target: 2), 4_000_000)
        XCTAssertEqual(SegmentRates.average(bytes: bytes, seconds: seconds), 2_000_000)
        // Short segments are measured together: two 0.4 s segments (0.8 s) are too short a run on
        // their own; with the next they make 2 s.
        XCTAssertEqual(SegmentRates.peak(bytes: [100_000, 100_000, 10_000], seconds: [0.4, 0.4, 1.2], target: 2), 840_000)
        // A segment longer than 1.5 targets still counts alone.
        XCTAssertEqual(SegmentRates.peak(bytes: [400_000], seconds: [4], target: 2), 800_000)
    }
}
