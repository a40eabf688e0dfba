import Foundation
import XCTest

@testable import ClipFlowServe

/// How a message is shown without the server's data folder, whichever way the folder is spelled.
final class DataPathsTests: XCTestCase {
    func testTheDataFolderIsDATAAndAnUploadIsTheUpload() throws {
        let folder = FileManager.default.temporaryDirectory.appendingPathComponent("data-paths-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let real = folder.appendingPathComponent("real"), link = folder.appendingPathComponent("link")
        try FileManager.default.createDirectory(at: real, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: folder) }
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: real)
        let paths = DataPaths(link)
        let upload = "'\(link.path)/uploads/0123456789abcdef0123456789abcdef'"
        XCTAssertEqual(paths.scrub("cannot open \(upload): Invalid data"), "cannot open the upload: Invalid data")
        XCTAssertEqual(
            paths.scrub("input \(upload) is not a video FFmpeg can read: Invalid data"), "the upload is not a video FFmpeg can read: Invalid data")
        XCTAssertEqual(
            paths.scrub("cannot create '\(real.path)/media/1/a1-0000000a-first': File exists"), "cannot create 'DATA/media/1/a1-0000000a-first': File exists")
        XCTAssertEqual(paths.scrub("'\(link.path)' is full"), "'DATA' is full")
        XCTAssertEqual(paths.scrub("\(folder.path)/other stays"), "\(folder.path)/other stays")
    }
}
