import XCTest
import Foundation
import ClipFlowTestSupport
#if canImport(Glibc)
    import Glibc
#endif

/// A writer killed with SIGKILL leaves its hidden temporary; the next clipflow run writing into
/// the same folder removes it, but never a live writer's.
final class LeftoverTemporariesCLITests: XCTestCase {
    let fx = Fixtures.shared
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    private func temporaries(_ dir: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.contains(".clipflow-tmp-") }.sorted()
    }

    private func start(_ args: [String]) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = args
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        return p
    }

    /// Waits until a temporary in `dir` named `.PREFIX...` holds at least `bytes` bytes (its
    /// writer is mid-write).
    private func waitForTemporary(_ prefix: String, in dir: String, bytes: Int, while p: Process) -> String? {
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, p.isRunning {
            for t in temporaries(dir) where t.hasPrefix("." + prefix) {
                let size = (try? FileManager.default.attributesOfItem(atPath: "\(dir)/\(t)")[.size] as? NSNumber)?.intValue ?? 0
                if size >= bytes { return t }
            }
            usleep(2_000)
        }
        return nil
    }

    func testTemporaryOfAKilledMergeIsRemovedByTheNextRunButALiveWritersIsNot() throws {
        let clip = try fx.toneClip(0, seconds: 1)
        let dir = fx.scratch("cli-leftover").path
        // A live writer in another process: a recording whose open fragment is a temporary.
        let rec = try start(["record", "-o", dir, "--size", "320x240", "--no-audio"])
        defer { if rec.isRunning { kill(rec.processIdentifier, SIGKILL) } }
        let live = try XCTUnwrap(waitForTemporary("clip-0001.mp4", in: dir, bytes: 1, while: rec), "the recording never started")

        // 300 joins take seconds: long enough to be killed mid-write.
        let merge = try start(["merge", "-o", "\(dir)/big.mp4", "--quiet"] + Array(repeating: clip, count: 300))
        let left = try XCTUnwrap(waitForTemporary("big.mp4", in: dir, bytes: 64 << 10, while: merge), "the merge never started writing")
        kill(merge.processIdentifier, SIGKILL)
        merge.waitUntilExit()
        XCTAssertEqual(merge.terminationReason, .uncaughtSignal)
        XCTAssertEqual(temporaries(dir), [left, live].sorted(), "SIGKILL leaves the temporary; the merge did not touch the live one")
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(dir)/big.mp4"))

        // The next run writing into the folder removes the dead writer's temporary only.
        let r = try Run.run([binary, "merge", "-o", "\(dir)/small.mp4", "--quiet", clip, clip], check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(temporaries(dir), [live], "the killed merge's temporary is gone, the live recording's kept")
        XCTAssertEqual(try Probe.videoFrames("\(dir)/small.mp4"), 60)

        // The recording is unharmed: stopped, it finalises its fragment from that temporary.
        kill(rec.processIdentifier, SIGINT)
        rec.waitUntilExit()
        XCTAssertEqual(rec.terminationStatus, 130)
        XCTAssertEqual(temporaries(dir), [])
        XCTAssertEqual(try Probe.decodeErrors("\(dir)/clip-0001.mp4"), "")
        XCTAssertGreaterThan(try Probe.videoFrames("\(dir)/clip-0001.mp4"), 0)
    }
}
