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
        let a = try AtomicOutput(target: target, replacing: false)
        XCTAssertEqual(a.temporary.deletingLastPathComponent().path, dir.path, "temp file sits next to the target")
        try Data("x".utf8).write(to: a.temporary)
        XCTAssertFalse(FileManager.default.fileExists(atPath: target.path))
        try a.commit()
        XCTAssertEqual(try String(contentsOf: target, encoding: .utf8), "x")

        let b = try AtomicOutput(target: dir.appendingPathComponent("other.mp4"), replacing: false)
        try Data("y".utf8).write(to: b.temporary)
        b.discard()
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), ["out.mp4"])
    }

    func testAnExistingTargetIsReplacedOnlyWhenAsked() throws {
        let target = dir.appendingPathComponent("out.mp4")
        try Data("old".utf8).write(to: target)
        XCTAssertThrowsError(try AtomicOutput(target: target, label: "-o", replacing: false)) { e in
            let m = (e as? ClipFlowError)?.message ?? ""
            XCTAssertTrue(m.contains("-o '\(target.path)' exists") && m.contains("-y"), m)
        }
        let a = try AtomicOutput(target: target, replacing: true)
        try Data("new".utf8).write(to: a.temporary)
        try a.commit()
        XCTAssertEqual(try String(contentsOf: target, encoding: .utf8), "new")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), ["out.mp4"])
    }

    func testATargetThatAppearsMeanwhileIsKeptAndTheNewOutputDiscarded() throws {
        let target = dir.appendingPathComponent("out.mp4")
        let a = try AtomicOutput(target: target, replacing: false)
        try Data("new".utf8).write(to: a.temporary)
        try Data("someone else's".utf8).write(to: target)
        XCTAssertThrowsError(try a.commit()) { e in
            XCTAssertTrue(((e as? ClipFlowError)?.message ?? "").contains("appeared while it was being written"), "\(e)")
        }
        XCTAssertEqual(try String(contentsOf: target, encoding: .utf8), "someone else's")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), ["out.mp4"], "the temporary is gone")
    }

    func testAFolderIsReplacedWholeWhenAsked() throws {
        let target = dir.appendingPathComponent("ladder")
        try FileManager.default.createDirectory(at: target, withIntermediateDirectories: true)
        try Data("old".utf8).write(to: target.appendingPathComponent("old.m3u8"))
        XCTAssertThrowsError(try AtomicOutput(folder: target, replacing: false))
        let a = try AtomicOutput(folder: target, replacing: true)
        try Data("new".utf8).write(to: a.temporary.appendingPathComponent("master.m3u8"))
        try a.commit()
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: target.path), ["master.m3u8"])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), ["ladder"], "the old folder is gone")
    }

    func testDeinitDiscards() throws {
        var tmp = ""
        do {
            let a = try AtomicOutput(target: dir.appendingPathComponent("z.mp4"), replacing: false)
            tmp = a.temporary.path
            try Data("z".utf8).write(to: a.temporary)
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: tmp))
    }

    func testMissingFolderAndDirectoryTargetAreClearErrors() {
        XCTAssertThrowsError(try AtomicOutput(target: dir.appendingPathComponent("nope/out.mp4"), replacing: false)) { e in
            XCTAssertTrue("\(e)".contains("does not exist"), "\(e)")
        }
        XCTAssertThrowsError(try AtomicOutput(target: dir, replacing: false)) { e in
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
