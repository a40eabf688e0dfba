import ClipFlowCore
import ClipFlowTestSupport
import Foundation
import Synchronization
import XCTest

@testable import ClipFlowUpload

/// The `upload-queue` stage alone in the stage harness: it runs what the queue holds, reports each
/// upload as item events, ends with a result, fails naming each failed file, and pauses on stop.
final class UploadQueueStageTests: XCTestCase {
    /// "Uploads" by copying the file in 64 KiB steps `delay` apart; a file whose name contains
    /// "bad" is refused by the "server"; `secret` appears in every failure message.
    struct CopyUploader: FileUploader {
        let target: URL
        let delay: Double
        var destination: String { "copy \(target.path)" }
        func upload(file: String, id: String, metadata: [String: String], control: UploadControl, observer: UploadObserver) throws -> UploadResult {
            let data = try Data(contentsOf: URL(fileURLWithPath: file))
            observer.upload(.started(id: id, file: file, bytes: Int64(data.count), resumedAt: 0))
            if file.contains("bad") {
                // As the real uploaders do: the failure is reported, then thrown.
                let e = UploadError(.http(403), message: "\(file): refused (token s3cr3t-in-message)")
                observer.upload(.failed(id: id, code: e.code, message: e.message))
                throw e
            }
            var sent = 0
            while sent < data.count {
                try control.check()
                Thread.sleep(forTimeInterval: delay)
                sent = min(data.count, sent + 65536)
                observer.upload(.progress(id: id, UploadProgress(acknowledged: Int64(sent), total: Int64(data.count))))
            }
            let out = target.appendingPathComponent((file as NSString).lastPathComponent)
            try data.write(to: out)
            let r = UploadResult(method: "copy", bytes: Int64(data.count), url: out.path)
            observer.upload(.finished(id: id, r))
            return r
        }
        func discard(file: String) throws {}
    }

    var dir: URL!

    override func setUpWithError() throws {
        dir = Fixtures.shared.scratch("upload-queue-stage-\(name.filter(\.isLetter))")
        try FileManager.default.createDirectory(at: dir.appendingPathComponent("server"), withIntermediateDirectories: true)
    }

    func file(_ name: String, bytes: Int = 200_000) throws -> String {
        let f = dir.appendingPathComponent(name)
        try Data((0..<bytes).map { UInt8(truncatingIfNeeded: $0) }).write(to: f)
        return f.path
    }

    /// Queues `files` and returns the stage over that queue, in a harness, and the entry ids.
    func harness(_ files: [String], delay: Double = 0, ids: Bool = false) throws -> (StageHarness, [String]) {
        let server = dir.appendingPathComponent("server"), state = dir.appendingPathComponent("state").path
        let make: @Sendable (UploadDestination, ResumeStore) throws -> FileUploader = { _, _ in CopyUploader(target: server, delay: delay) }
        let q = try UploadQueue(directory: state, concurrency: 2, makeUploader: make)
        let destination = UploadDestination(method: .tus, endpoint: "http://127.0.0.1:1/files")
        let added = try files.map { try q.add(file: $0, destination: destination).id }
        let stage = UploadQueueStage(id: "up", directory: state, concurrency: 2, ids: ids ? added : [], makeUploader: make)
        return (StageHarness(stage), added)
    }

    func items(_ h: StageHarness) -> [(id: String, name: String, fields: [EventField], text: String)] {
        h.events.compactMap { if case .item(let id, let name, let f, let t) = $0.kind { return (id, name, f, t) } else { return nil } }
    }

    func result(_ h: StageHarness) -> [EventField]? {
        h.events.lazy.compactMap { if case .result(let r) = $0.kind { return r } else { return nil } }.first
    }

    func testEveryQueuedUploadRunsAndIsReportedAsItemEvents() throws {
        let a = try file("a.mp4"), b = try file("b.mp4", bytes: 100_000)
        let (h, ids) = try harness([a, b])
        try h.prepare()
        try h.produce()
        XCTAssertTrue(h.finish().isEmpty)
        let ev = items(h)
        for (n, (id, f)) in zip(ids, [a, b]).enumerated() {
            let size = [200_000, 100_000][n]
            let mine = ev.filter { $0.id == id }
            XCTAssertEqual(mine.first?.name, "started")
            XCTAssertEqual(mine.first?.fields["file"], .string(f))
            XCTAssertEqual(mine.first?.fields["resumed_at"], .integer(0))
            XCTAssertEqual(mine.filter { $0.name == "progress" }.last?.fields["acknowledged"], .integer(Int64(size)))
            guard case .object(let r)? = mine.last?.fields["result"] else { return XCTFail("no result for \(id): \(mine)") }
            XCTAssertEqual(mine.last?.name, "finished")
            XCTAssertEqual(r["bytes"], .integer(Int64(size)))
        }
        XCTAssertEqual(
            result(h),
            [
                .init("finished", .integer(2)), .init("paused", .integer(0)), .init("failed", .integer(0)), .init("cancelled", .integer(0)),
                .init("failed_ids", .string(""))
            ])
        XCTAssertEqual(
            try Data(contentsOf: dir.appendingPathComponent("server/a.mp4")), try Data(contentsOf: URL(fileURLWithPath: a)), "what the server holds")
    }

    func testAFailedUploadFailsTheStageNamingTheFileAndTheRetryCommandWithoutSecrets() throws {
        Secrets.shared.register("s3cr3t-in-message")
        let good = try file("good.mp4"), bad = try file("bad.mp4")
        let (h, ids) = try harness([good, bad], ids: true)
        try h.prepare()
        XCTAssertThrowsError(try h.produce()) { e in
            let err = e as? ClipFlowError
            XCTAssertEqual(err?.kind, .failure)
            let state = self.dir.appendingPathComponent("state").path
            XCTAssertTrue(
                err?.message.hasPrefix("\(bad): refused") == true
                    && err?.message.hasSuffix("(id \(ids[1]); `clipflow upload resume \(ids[1]) --queue \(state)` retries)") == true,
                String(describing: err))
            XCTAssertFalse(err?.message.contains("s3cr3t") ?? true)
        }
        h.finish(.failed)
        let failed = try XCTUnwrap(items(h).first { $0.name == "failed" })
        XCTAssertEqual(failed.id, ids[1])
        XCTAssertEqual(failed.fields["code"], .string("http-403"))
        XCTAssertFalse(failed.text.contains("s3cr3t") || failed.fields["message"]?.string?.contains("s3cr3t") == true, failed.text)
        XCTAssertEqual(result(h)?["finished"], .integer(1))
        XCTAssertEqual(result(h)?["failed"], .integer(1))
    }

    /// A graceful stop (first SIGINT) pauses the running uploads at once; they stay queued.
    func testStopPausesRunningUploadsPromptlyAndKeepsThemQueued() throws {
        let big = try file("big.mp4", bytes: 6_000_000)
        let (h, ids) = try harness([big], delay: 0.02)
        try h.prepare()
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { h.stop() }
        let started = Date()
        try h.produce()
        XCTAssertLessThan(Date().timeIntervalSince(started), 1.5, "paused promptly")
        h.finish(.stopped)
        XCTAssertEqual(result(h)?["paused"], .integer(1))
        let q = try UploadQueue(directory: dir.appendingPathComponent("state").path) { _, _ in throw UploadError(.badInput, message: "unused") }
        XCTAssertEqual(try q.list().first { $0.id == ids[0] }?.state, .queued)
    }
}
