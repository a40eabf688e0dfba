import Foundation
import XCTest

@testable import ClipFlowBatch

/// Rows of one batch that would step on each other, found before any runs: one place written by
/// two rows however each spells it (a symlinked folder, an object key), a row writing inside a
/// folder another row makes whole, a row writing what another row's pattern reads.
final class RowConflictsTests: XCTestCase {
    typealias Written = RowPaths.Written
    typealias Read = RowPaths.Read

    func folder() throws -> String {
        let d = FileManager.default.temporaryDirectory.appendingPathComponent("row-conflicts-\(UInt32.random(in: 0...UInt32.max))")
        try FileManager.default.createDirectory(at: d.appendingPathComponent("out"), withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: d.path + "/link", withDestinationPath: d.path + "/out")
        addTeardownBlock { try? FileManager.default.removeItem(at: d) }
        return d.path
    }

    func testOneFileThroughASymlinkedFolderIsOneOutput() throws {
        let d = try folder()
        let found = RowConflicts.find([
            (0, RowPaths(writes: [Written(path: d + "/out/same.mp4", folder: false, field: "stages[1].output")], reads: [])),
            (1, RowPaths(writes: [Written(path: d + "/link/same.mp4", folder: false, field: "stages[1].output")], reads: [])),
            (2, RowPaths(writes: [Written(path: d + "/out/other.mp4", folder: false, field: "stages[1].output")], reads: []))
        ])
        XCTAssertEqual(
            found[0], "writes '\(d)/out/same.mp4', which row(s) 1 write too; give each row its own outputs (row 1 names it '\(d)/link/same.mp4')")
        XCTAssertEqual(
            found[1], "writes '\(d)/link/same.mp4', which row(s) 0 write too; give each row its own outputs (row 0 names it '\(d)/out/same.mp4')")
        XCTAssertNil(found[2])
    }

    func testAnOutputAnotherRowsPatternMatchesIsRefusedForBoth() throws {
        let d = try folder()
        let found = RowConflicts.find([
            (0, RowPaths(writes: [Written(path: d + "/link/set-1/fragment9.mp4", folder: false, field: "stages[1].output")], reads: [])),
            (1, RowPaths(writes: [], reads: [Read(path: d + "/out/set-1/fragment*.mp4", pattern: true, field: "stages[0].glob")])),
            (2, RowPaths(writes: [], reads: [Read(path: d + "/out/set-*/other*.mp4", pattern: true, field: "stages[0].glob")]))
        ])
        XCTAssertEqual(
            found[0],
            "stages[1].output '\(d)/link/set-1/fragment9.mp4' is an input of row 1 (stages[0].glob '\(d)/out/set-1/fragment*.mp4'); a row must not write another row's inputs"
        )
        XCTAssertEqual(
            found[1],
            "stages[0].glob '\(d)/out/set-1/fragment*.mp4' reads what row 0 writes (stages[1].output '\(d)/link/set-1/fragment9.mp4'); a row must not write another row's inputs"
        )
        XCTAssertNil(found[2], "a pattern that cannot match the output")
    }

    func testObjectsInsideAFolderAnotherRowMakesWholeAndPatternsOverIt() {
        let found = RowConflicts.find([
            (0, RowPaths(writes: [Written(path: "s3://b/out/a/hls/", folder: true, field: "stages[1].output", commitMarker: "master.m3u8")], reads: [])),
            (1, RowPaths(writes: [Written(path: "s3://b/out/a/hls/extra.mp4", folder: false, field: "stages[1].output")], reads: [])),
            (2, RowPaths(writes: [], reads: [Read(path: "s3://b/out/a/hls/*.m4s", pattern: true, field: "stages[0].glob")])),
            (3, RowPaths(writes: [Written(path: "s3://b/out/b/hls", folder: true, field: "stages[1].output")], reads: [])),
            (4, RowPaths(writes: [], reads: [Read(path: "s3://b/in/b/*.mp4", pattern: true, field: "stages[0].glob")]))
        ])
        XCTAssertEqual(
            found[1],
            "writes 's3://b/out/a/hls/extra.mp4' inside the folder 's3://b/out/a/hls/' that row 0 makes whole (stages[1].output); give each row its own outputs"
        )
        XCTAssertEqual(
            found[0],
            "makes the folder 's3://b/out/a/hls/' whole (stages[1].output), but row 1 writes 's3://b/out/a/hls/extra.mp4' inside it; give each row its own outputs"
        )
        XCTAssertEqual(
            found[2],
            "stages[0].glob 's3://b/out/a/hls/*.m4s' reads what row 0 writes (stages[1].output 's3://b/out/a/hls/'); a row must not write another row's inputs")
        XCTAssertNil(found[3])
        XCTAssertNil(found[4])
    }
}
