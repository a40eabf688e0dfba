import XCTest
import Foundation
import Synchronization
import ClipFlowCore
import ClipFlowTestSupport
@testable import ClipFlowUpload

/// The upload stage alone in the harness and in a graph, against the real TUS test server.
final class UploadStageHarnessTests: XCTestCase {
    var dir = ""
    var server: LocalTUS!

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "upload-stage-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        server = try LocalTUS(directory: dir + "/server")
    }

    override func tearDownWithError() throws {
        server?.stop()
        try? FileManager.default.removeItem(atPath: dir)
    }

    func makeFile(_ name: String, bytes: Int) throws -> String {
        let path = dir + "/" + name
        var d = Data(count: bytes)
        for i in stride(from: 0, to: bytes, by: 4096) { d[i] = UInt8(truncatingIfNeeded: i / 4096 &* 31) }
        try d.write(to: URL(fileURLWithPath: path))
        return path
    }

    func destination(chunk: Int64? = nil) -> UploadDestination {
        var d = UploadDestination(method: .tus, endpoint: server.baseURL)
        d.chunkSize = chunk
        return d
    }

    func testUploadStageUploadsWhatItReceivedAndReportsTheURL() throws {
        let file = try makeFile("clip.mp4", bytes: 300_000)
        let h = StageHarness(UploadStage(id: "up", destination: destination(), queueDirectory: dir + "/queue", concurrency: 1))
        try h.prepare()
        XCTAssertEqual(try h.push(.file(file, type: .video)), .ok)
        try h.endOfStream()
        XCTAssertEqual(h.finish().count, 0, "a sink leaves nothing behind")
        let url = try XCTUnwrap(
            h.events.lazy.compactMap { e -> String? in
                if case .output(let p) = e.kind { return p }; return nil
            }.first)
        XCTAssertEqual(try fileSHA256(server.storedPath(url)), try fileSHA256(file))
        XCTAssertTrue(
            h.events.contains {
                guard case .item(_, "progress", let fields, _) = $0.kind else { return false }
                return fields.contains(EventField("acknowledged", .integer(300_000))) && fields.contains(EventField("total", .integer(300_000)))
            })
        XCTAssertTrue(
            h.events.contains {
                if case .result(let r) = $0.kind { return r.contains(EventField("finished", .integer(1))) }; return false
            })
    }

    /// A graceful stop (first SIGINT) pauses a running upload at once: it stays queued and
    /// resumable, and the next run continues it to the end.
    func testStopPausesARunningUploadAndTheNextRunFinishesIt() throws {
        let file = try makeFile("big.mp4", bytes: 48 << 20)
        let queueDir = dir + "/queue"

        /// Stops the graph at the upload's first progress report (some bytes sent, most not).
        final class StopAtFirstProgress: EventSink, Sendable {
            let runner = Mutex<GraphRunner?>(nil)
            func emit(_ event: PipelineEvent) {
                guard event.stage == "up", case .item(_, "progress", let fields, _) = event.kind else { return }
                if case .integer(let done)? = fields.first(where: { $0.key == "acknowledged" })?.value,
                    case .integer(let total)? = fields.first(where: { $0.key == "total" })?.value, done > 0, done < total
                {
                    runner.withLock { $0 }?.stop()
                }
            }
        }
        let sink = StopAtFirstProgress()
        let d = destination(chunk: 256 << 10)
        let first = try GraphRunner(
            nodes: [
                StageNode("files") { FilesStage(id: "files", paths: [file], glob: nil) },
                StageNode("up") { UploadStage(id: "up", destination: d, queueDirectory: queueDir, concurrency: 1) }
            ],
            edges: [Edge(from: "files", to: "up")], sink: sink)
        sink.runner.withLock { $0 = first }
        let started = Date()
        XCTAssertEqual(first.run(), .interrupted)
        XCTAssertLessThan(Date().timeIntervalSince(started), 20)

        let queue = try UploadQueue(directory: queueDir) { d, s in try d.makeUploader(store: s) }
        let paused = try XCTUnwrap(queue.list().first)
        XCTAssertEqual(paused.state, .queued, "a stopped upload stays queued")
        XCTAssertGreaterThan(paused.acknowledged, 0)
        XCTAssertLessThan(paused.acknowledged, 48 << 20, "paused at once, not run to the end")

        let rec = EventRecorder()
        let second = try GraphRunner(
            nodes: [
                StageNode("files") { FilesStage(id: "files", paths: [file], glob: nil) },
                StageNode("up") { UploadStage(id: "up", destination: d, queueDirectory: queueDir, concurrency: 1) }
            ],
            edges: [Edge(from: "files", to: "up")], sink: rec)
        XCTAssertEqual(second.run(), .completed)
        let done = try XCTUnwrap(queue.list().first)
        XCTAssertEqual(done.id, paused.id, "the same upload continued")
        XCTAssertEqual(done.state, .finished)
        let url = try XCTUnwrap(done.result?.url)
        XCTAssertEqual(try fileSHA256(server.storedPath(url)), try fileSHA256(file))
        XCTAssertTrue(
            rec.events.contains {
                if case .item(_, "started", _, let text) = $0.kind { return text.contains("resuming at") }; return false
            }, "the second run resumed where the first stopped")
    }
}
