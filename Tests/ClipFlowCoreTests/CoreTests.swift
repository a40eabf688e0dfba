import XCTest
@testable import ClipFlowCore

final class AtomicOutputTests: XCTestCase {
    var dir: URL!
    override func setUpWithError() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("atomic-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    }
    override func tearDownWithError() throws { try? FileManager.default.removeItem(at: dir) }

    func testCommitRenamesAndDiscardLeavesNothing() throws {
        let target = dir.appendingPathComponent("out.mp4")
        let a = try AtomicOutput(target: target)
        XCTAssertEqual(a.temporary.deletingLastPathComponent().path, dir.path, "temp file sits next to the target")
        try Data("x".utf8).write(to: a.temporary)
        XCTAssertFalse(FileManager.default.fileExists(atPath: target.path))
        try a.commit()
        XCTAssertEqual(try String(contentsOf: target, encoding: .utf8), "x")

        let b = try AtomicOutput(target: dir.appendingPathComponent("other.mp4"))
        try Data("y".utf8).write(to: b.temporary)
        b.discard()
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), ["out.mp4"])
    }

    func testDeinitDiscards() throws {
        var tmp = ""
        do {
            let a = try AtomicOutput(target: dir.appendingPathComponent("z.mp4"))
            tmp = a.temporary.path
            try Data("z".utf8).write(to: a.temporary)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: tmp))
    }

    func testMissingFolderAndDirectoryTargetAreClearErrors() {
        XCTAssertThrowsError(try AtomicOutput(target: dir.appendingPathComponent("nope/out.mp4"))) { e in
            XCTAssertTrue("\(e)".contains("does not exist"), "\(e)")
        }
        XCTAssertThrowsError(try AtomicOutput(target: dir)) { e in
            XCTAssertTrue("\(e)".contains("is a directory"), "\(e)")
        }
    }
}

final class CancellationTests: XCTestCase {
    func testFlagIsOneWayAndChecks() {
        let f = CancellationFlag()
        XCTAssertNoThrow(try f.check())
        f.cancel()
        XCTAssertTrue(f.isCancelled)
        XCTAssertThrowsError(try f.check()) { XCTAssertEqual($0 as? ClipFlowError, .interrupted) }
        XCTAssertEqual(ClipFlowError.interrupted.exitCode, 130)
    }
}
