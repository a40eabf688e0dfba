import XCTest
import Foundation
import ClipFlowTestSupport
#if canImport(Glibc)
    import Glibc
#endif

/// An `hls` run killed with SIGKILL leaves its hidden temporary folder; the next run writing into
/// the same folder removes it (as it does a killed writer's temporary file).
final class HLSLeftoverCLITests: XCTestCase {
    let fx = Fixtures.shared
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    private func temporaries(_ dir: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.contains(".clipflow-tmp-") }.sorted()
    }

    func testFolderOfAKilledLadderIsRemovedByTheNextRun() throws {
        let source = try fx.clip(
            "leftover-hls-src.mp4",
            ["-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30:duration=20", "-c:v", "libx264", "-preset", "ultrafast"])
        let dir = fx.scratch("hls-leftover").path
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["hls", source, "-o", "\(dir)/first", "--ladder", "720,360", "--encoder-preset", "medium", "--quiet"]
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        defer { if p.isRunning { kill(p.processIdentifier, SIGKILL) } }
        // Mid-way: the temporary folder holds a first segment.
        var left: String?
        let deadline = Date().addingTimeInterval(60)
        while left == nil, Date() < deadline, p.isRunning {
            for t in temporaries(dir) where t.hasPrefix(".first.clipflow-tmp-") {
                let segments = (try? FileManager.default.contentsOfDirectory(atPath: "\(dir)/\(t)/360p")) ?? []
                if segments.contains("seg-0.m4s") { left = t }
            }
            usleep(20_000)
        }
        let folder = try XCTUnwrap(left, "the ladder never wrote a segment")
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationReason, .uncaughtSignal)
        XCTAssertEqual(temporaries(dir), [folder], "SIGKILL leaves the folder")
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(dir)/first"))

        let short = try fx.clip(
            "leftover-hls-short.mp4", ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=1", "-c:v", "libx264", "-preset", "ultrafast"])
        let r = try Run.run([binary, "hls", short, "-o", "\(dir)/second", "--encoder-preset", "ultrafast", "--quiet"], check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(temporaries(dir), [], "the killed run's folder is gone")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir).sorted(), ["second"])
    }
}
