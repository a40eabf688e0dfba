import XCTest
import Foundation
import ClipFlowTestSupport
#if canImport(Glibc)
    import Glibc
#endif

/// One SIGINT in a record -> merge -> upload pipeline ends the recording; the rest of the graph
/// completes: the video is joined, covered and uploaded (a real TUS server on 127.0.0.1), and
/// nothing is left queued. Only a second stop (or the stop's deadline) would pause the uploads.
final class PipelineStopTests: XCTestCase {
    let fx = Fixtures.shared
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func testFirstStopFinishesTheRecordingAndTheUploads() throws {
        let tus = try TUSServer.start(directory: fx.scratch("stop-tus"))
        defer { tus.stop() }
        let out = fx.scratch("stop-pipeline").path
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = [
            "run", "--events", "json", "--set", "OUT=\(out)", "--set", "DURATION=120", "--set", "TUS_ENDPOINT=\(tus.baseURL)",
            Self.root.appendingPathComponent("pipelines/testpattern-to-upload.json").path
        ]
        let events = Pipe()
        p.standardOutput = events
        p.standardError = FileHandle.nullDevice
        p.standardInput = FileHandle.nullDevice
        try p.run()
        defer { if p.isRunning { kill(p.processIdentifier, SIGKILL) } }
        // Read every event as it comes (so the pipe never fills), until the process ends.
        // `@unchecked Sendable`: `text` is read and written only under `lock`.
        final class Lines: @unchecked Sendable {
            let lock = NSLock()
            var text = ""
            func append(_ d: Data) { lock.withLock { text += String(decoding: d, as: UTF8.self) } }
            var all: String { lock.withLock { text } }
        }
        let lines = Lines()
        let reader = Thread {
            while true {
                let d = events.fileHandleForReading.availableData
                if d.isEmpty { break }
                lines.append(d)
            }
        }
        reader.start()
        // Stop once the first 2-second fragment is written (the recording is well under way).
        let deadline = Date().addingTimeInterval(60)
        while Date() < deadline, p.isRunning, !FileManager.default.fileExists(atPath: "\(out)/clips/clip-0001.mp4") { usleep(50_000) }
        XCTAssertTrue(FileManager.default.fileExists(atPath: "\(out)/clips/clip-0001.mp4"), "the recording never wrote a fragment")
        kill(p.processIdentifier, SIGINT)
        let end = Date().addingTimeInterval(90)
        while p.isRunning, Date() < end { usleep(50_000) }
        XCTAssertFalse(p.isRunning, "one stop ends the run")
        p.waitUntilExit()
        while !reader.isFinished { usleep(10_000) }
        // A stopped run's exit status (130), but nothing failed and nothing is left undone.
        XCTAssertEqual(p.terminationStatus, 130)
        let parsed = lines.all.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        XCTAssertFalse(parsed.contains { $0["event"] as? String == "failed" }, lines.all)
        let video = "\(out)/video.mp4"
        XCTAssertGreaterThanOrEqual(try Probe.videoFrames(video), 60)
        XCTAssertEqual(try Probe.decodeErrors(video), "")
        let stored = Set(try tus.storedFiles().map { try sha256(ofFile: $0) })
        XCTAssertTrue(stored.contains(try sha256(ofFile: video)), "the TUS server holds the video")
        XCTAssertTrue(stored.contains(try sha256(ofFile: "\(out)/cover.jpg")), "the TUS server holds the cover")
        let queue = try Run.run([binary, "upload", "list", "--json", "--queue", "\(out)/upload-queue"])
        let entries = try JSONSerialization.jsonObject(with: queue.stdout) as? [[String: Any]] ?? []
        XCTAssertEqual(entries.map { $0["state"] as? String }, ["finished", "finished"], "nothing left queued")
    }
}
