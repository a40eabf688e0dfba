import XCTest
@testable import ClipFlowMedia

/// Display matrices (FFmpeg's layout, as `av_display_rotation_set` and `av_display_matrix_flip`
/// write them) read as a mirror and a turn, and planes written that way.
final class DisplayOrientationTests: XCTestCase {
    /// (a b; c d) in 16.16 fixed point into a 3x3 display matrix.
    func matrix(_ a: Double, _ b: Double, _ c: Double, _ d: Double) -> [Int32] {
        [Int32(a * 65536), Int32(b * 65536), 0, Int32(c * 65536), Int32(d * 65536), 0, 0, 0, 1 << 30]
    }

    func testEveryRotationAndFlipIsReadAsAMirrorThenATurn() {
        let cases: [(String, [Int32], DisplayOrientation)] = [
            ("identity", matrix(1, 0, 0, 1), .upright),
            ("av_display_rotation_set(90): players turn it clockwise", matrix(0, 1, -1, 0), DisplayOrientation(turn: 90, mirrored: false)),
            ("av_display_rotation_set(-90)", matrix(0, -1, 1, 0), DisplayOrientation(turn: 270, mirrored: false)),
            ("av_display_rotation_set(180)", matrix(-1, 0, 0, -1), DisplayOrientation(turn: 180, mirrored: false)),
            ("hflip", matrix(-1, 0, 0, 1), DisplayOrientation(turn: 0, mirrored: true)),
            ("vflip: a mirror turned 180", matrix(1, 0, 0, -1), DisplayOrientation(turn: 180, mirrored: true)),
            ("rotation_set(90), then hflip: a transpose", matrix(0, 1, 1, 0), DisplayOrientation(turn: 270, mirrored: true)),
            ("rotation_set(-90), then hflip", matrix(0, -1, -1, 0), DisplayOrientation(turn: 90, mirrored: true)),
            ("scaled identity", matrix(2, 0, 0, 2), .upright),
            ("45 degrees: not supported, upright", matrix(0.7071, 0.7071, -0.7071, 0.7071), .upright),
            ("singular", matrix(0, 0, 0, 0), .upright)
        ]
        for (name, m, expected) in cases { XCTAssertEqual(DisplayOrientation(matrix: m), expected, name) }
        XCTAssertEqual(DisplayOrientation(matrix: [1, 2]), .upright, "not a 3x3 matrix")
    }

    /// The 3x2 plane 1 2 3 / 4 5 6 written each of the eight ways.
    func testPlanesAreMirroredThenTurned() {
        let src: [UInt8] = [1, 2, 3, 4, 5, 6]
        let cases: [(Int, Bool, [UInt8])] = [
            (0, false, [1, 2, 3, 4, 5, 6]), (0, true, [3, 2, 1, 6, 5, 4]),
            (90, false, [4, 1, 5, 2, 6, 3]), (90, true, [6, 3, 5, 2, 4, 1]),
            (180, false, [6, 5, 4, 3, 2, 1]), (180, true, [4, 5, 6, 1, 2, 3]),
            (270, false, [3, 6, 2, 5, 1, 4]), (270, true, [1, 4, 2, 5, 3, 6])
        ]
        for (turn, mirrored, expected) in cases {
            var out = [UInt8](repeating: 0, count: 6)
            let dstStride = turn % 180 == 0 ? 3 : 2
            src.withUnsafeBufferPointer { s in
                out.withUnsafeMutableBufferPointer { d in
                    orientPlane(
                        from: s.baseAddress!, stride: 3, width: 3, height: 2, into: d.baseAddress!, stride: dstStride,
                        DisplayOrientation(turn: turn, mirrored: mirrored))
                }
            }
            XCTAssertEqual(out, expected, "turn \(turn), mirrored \(mirrored)")
        }
    }
}
