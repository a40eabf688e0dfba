import ClipFlowCore
import ClipFlowTestSupport
import Foundation
import XCTest

/// Files put down by `DurableFiles.write` hold their bytes, a path already taken is refused (a
/// ladder's files are new; a hard-linked file reused from a published ladder must never be written
/// through), and a whole tree is made durable at once, or the failure names the path.
final class DurableFilesTests: XCTestCase {
    let fx = Fixtures.shared

    func testFilesAreWrittenOnceAndATreeIsMadeDurable() throws {
        let dir = fx.scratch("durable-files")
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("copy/deeper"), withIntermediateDirectories: true)
        let big = (0..<(3 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        try DurableFiles.write(big, to: dir.appendingPathComponent("copy/seg-0.m4s").path)
        try DurableFiles.write(Array("#EXTM3U\n".utf8), to: dir.appendingPathComponent("master.m3u8").path)
        try DurableFiles.write([], to: dir.appendingPathComponent("copy/deeper/empty").path)
        XCTAssertEqual(try Data(contentsOf: dir.appendingPathComponent("copy/seg-0.m4s")), Data(big))
        XCTAssertEqual(try String(contentsOf: dir.appendingPathComponent("master.m3u8"), encoding: .utf8), "#EXTM3U\n")

        let taken = dir.appendingPathComponent("master.m3u8").path
        XCTAssertThrowsError(try DurableFiles.write(Array("other".utf8), to: taken)) { error in
            XCTAssertTrue("\(error)".contains(taken), "\(error)")
        }
        XCTAssertEqual(try String(contentsOf: dir.appendingPathComponent("master.m3u8"), encoding: .utf8), "#EXTM3U\n", "untouched")

        try DurableFiles.sync(folder: dir)
        let missing = dir.appendingPathComponent("gone")
        XCTAssertThrowsError(try DurableFiles.sync(folder: missing)) { error in
            XCTAssertTrue("\(error)".contains(missing.path), "\(error)")
        }
    }
}
