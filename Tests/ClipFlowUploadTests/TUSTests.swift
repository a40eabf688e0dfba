import Foundation
import XCTest
@testable import ClipFlowUpload
import ClipFlowTestSupport

/// An observer that runs an action once, on the first progress event past `after` bytes.
final class Trigger: UploadObserver, @unchecked Sendable {
    let log = UploadEventLog()
    private let lock = NSLock()
    private var fired = false
    let after: Int64
    let action: @Sendable () -> Void
    init(after: Int64, _ action: @escaping @Sendable () -> Void) { self.after = after; self.action = action }
    func upload(_ event: UploadEvent) {
        log.upload(event)
        if case .progress(_, let p) = event, p.acknowledged > after {
            lock.lock(); let go = !fired; fired = true; lock.unlock()
            if go { action() }
        }
    }
}

final class TUSTests: XCTestCase {
    var dir = ""
    var server: LocalTUS!

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "tus-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        server = try LocalTUS(directory: dir + "/server")
    }

    override func tearDownWithError() throws {
        server?.stop()
        try? FileManager.default.removeItem(atPath: dir)
    }

    // MARK: helpers

    func makeFile(_ name: String, bytes: Int, seed: UInt64 = 1) throws -> String {
        var rng = seed &* 6364136223846793005 &+ 1442695040888963407
        var data = Data(count: bytes)
        data.withUnsafeMutableBytes { raw in
            let p = raw.bindMemory(to: UInt8.self)
            for i in 0..<bytes {
                rng = rng &* 6364136223846793005 &+ 1442695040888963407
                p[i] = UInt8(truncatingIfNeeded: rng >> 33)
            }
        }
        let path = dir + "/" + name
        try data.write(to: URL(fileURLWithPath: path))
        return path
    }

    func options(_ endpoint: String, chunk: Int64 = 256 << 10, stall: Int = 2) -> TUSOptions {
        var t = TransportSettings()
        t.stallTimeout = stall
        var o = TUSOptions(endpoint: endpoint, chunkSize: chunk, retry: .fast, transport: t)
        o.progressInterval = 0
        return o
    }

    func store() throws -> ResumeStore { try ResumeStore(path: dir + "/resume.json") }

    func progressValues(_ log: UploadEventLog) -> [Int64] {
        log.all.compactMap { if case .progress(_, let p) = $0 { return p.acknowledged } else { return nil } }
    }

    func assertMonotonic(_ log: UploadEventLog, file f: StaticString = #filePath, line: UInt = #line) {
        let v = progressValues(log)
        XCTAssertEqual(v, v.sorted(), "progress went backwards: \(v)", file: f, line: line)
    }

    // MARK: basics

    /// OPTIONS, creation-with-upload (first chunk in the POST), relative Location resolved, metadata
    /// (filename, filetype from the extension, user keys), PATCH chunks, sha256 checksums the server
    /// verified, progress = acknowledged bytes, events in order.
    func testUploadCreatesWithFirstChunkAndMetadataAndStoresIntactBytes() throws {
        let file = try makeFile("clip one.mp4", bytes: 1_000_000)
        let up = TUSUploader(options: options(server.baseURL), store: try store())
        let log = UploadEventLog()
        let result = try up.upload(file: file, id: "u1", metadata: ["title": "Hällo, world"], control: UploadControl(), observer: log)

        XCTAssertEqual(result.bytes, 1_000_000)
        let url = try XCTUnwrap(result.url)
        XCTAssertTrue(url.hasPrefix(server.baseURL + "/"), "relative Location must be resolved: \(url)")
        XCTAssertEqual(try fileSHA256(server.storedPath(url)), try fileSHA256(file))
        let stats = up.lastRun
        XCTAssertEqual(stats.requests["OPTIONS"], 1)
        XCTAssertEqual(stats.requests["POST"], 1)
        XCTAssertEqual(stats.requests["PATCH"], 3, "1,000,000 bytes in 256 KiB chunks: first in the POST, three PATCHes")
        XCTAssertEqual(stats.checksumAlgorithm, "sha256")

        // The server's view: complete, with our metadata.
        let r = try CurlTransport().perform(HTTPRequest(method: "HEAD", url: url, headers: [("Tus-Resumable", "1.0.0")]))
        XCTAssertEqual(r.header("upload-offset"), "1000000")
        XCTAssertEqual(r.header("upload-length"), "1000000")
        let meta = try TUSMetadata.decode(r.header("upload-metadata") ?? "")
        XCTAssertEqual(meta["filename"], "clip one.mp4")
        XCTAssertEqual(meta["filetype"], "video/mp4")
        XCTAssertEqual(meta["title"], "Hällo, world")

        let names = log.all.map(\.name)
        XCTAssertEqual(names.first, "started")
        XCTAssertEqual(names.last, "finished")
        if case .started(_, _, let bytes, let resumedAt) = log.all[0] { XCTAssertEqual(bytes, 1_000_000); XCTAssertEqual(resumedAt, 0) }
        assertMonotonic(log)
        XCTAssertEqual(progressValues(log).last, 1_000_000)
        XCTAssertTrue(try store().all.isEmpty, "a finished upload leaves no resume record")
    }

    func testChecksumOffAndNoCreationWithUploadSendsPlainPatches() throws {
        let file = try makeFile("a.mov", bytes: 600_000)
        var o = options(server.baseURL)
        o.checksum = .off
        o.creationWithUpload = false
        let up = TUSUploader(options: o, store: try store())
        let result = try up.upload(file: file, id: "u", metadata: [:], control: UploadControl(), observer: NoUploadObserver())
        XCTAssertNil(up.lastRun.checksumAlgorithm)
        XCTAssertEqual(up.lastRun.requests["PATCH"], 3)
        XCTAssertEqual(try Run.run(["cmp", "--", file, server.storedPath(result.url!)], check: false).status, 0, "the stored upload differs from the file")
    }

    /// The server really verifies Upload-Checksum: a wrong digest gets a real 460, the chunk is sent
    /// again (counted); a digest that is always wrong gives up after maxChecksumAttempts.
    func testChecksumMismatch460ResendsChunkThenGivesUp() throws {
        let file = try makeFile("c.mp4", bytes: 700_000)
        let up = TUSUploader(options: options(server.baseURL), store: try store())
        let corruptions = Atomic2()
        up.checksumHook.withLock { $0 = { value in corruptions.next() == 2 ? "AAAA" + value.dropFirst(4) : value } }
        let result = try up.upload(file: file, id: "u", metadata: [:], control: UploadControl(), observer: NoUploadObserver())
        XCTAssertEqual(up.lastRun.checksumResends, 1)
        XCTAssertEqual(try Run.run(["cmp", "--", file, server.storedPath(result.url!)], check: false).status, 0, "the stored upload differs from the file")

        let file2 = try makeFile("d.mp4", bytes: 700_000, seed: 2)
        up.checksumHook.withLock { $0 = { _ in Data(repeating: 1, count: 32).base64EncodedString() } }
        let log = UploadEventLog()
        XCTAssertThrowsError(try up.upload(file: file2, id: "u2", metadata: [:], control: UploadControl(), observer: log)) { e in
            XCTAssertEqual((e as? UploadError)?.code, "checksum-mismatch")
        }
        // The POST carried a bad checksum too: it is the first refusal (POSTs are not re-sent on 460).
        XCTAssertEqual(log.named("failed").count, 1)
    }

    func testTusMaxSizeRefusesABiggerFileBeforeCreating() throws {
        let small = try LocalTUS(directory: dir + "/small", extraArgs: ["--max-size", "1000"])
        let file = try makeFile("big.mp4", bytes: 5000)
        let up = TUSUploader(options: options(small.baseURL), store: try store())
        let log = UploadEventLog()
        XCTAssertThrowsError(try up.upload(file: file, id: "u", metadata: [:], control: UploadControl(), observer: log)) { e in
            let u = e as? UploadError
            XCTAssertEqual(u?.code, "too-large")
            XCTAssertTrue(u?.message.contains("Tus-Max-Size 1000") ?? false, u?.message ?? "")
            XCTAssertTrue(u?.message.contains("big.mp4") ?? false)
        }
        XCTAssertNil(up.lastRun.requests["POST"])
        XCTAssertEqual(log.named("failed").count, 1)
    }

    func testZeroByteFileIsCreatedWithLengthZeroAndFinishes() throws {
        let file = dir + "/empty.mp4"
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data()))
        let up = TUSUploader(options: options(server.baseURL), store: try store())
        let log = UploadEventLog()
        let result = try up.upload(file: file, id: "z", metadata: [:], control: UploadControl(), observer: log)
        XCTAssertEqual(result.bytes, 0)
        XCTAssertNil(up.lastRun.requests["PATCH"])
        let h = try server.head(result.url!)
        XCTAssertEqual(h.status, 200)
        XCTAssertEqual(h.offset, 0)
        XCTAssertEqual(try FileManager.default.attributesOfItem(atPath: server.storedPath(result.url!))[.size] as? Int, 0)
        XCTAssertEqual(log.named("finished").count, 1)
    }

    // MARK: resume, expiry, termination

    /// Pause mid-upload; a NEW uploader (new store instance: a new process) continues the same
    /// upload URL from the server's offset, with no new POST.
    func testPausedUploadResumesInANewUploaderFromTheServerOffset() throws {
        let file = try makeFile("p.mp4", bytes: 2_000_000)
        let control = UploadControl()
        let t1 = Trigger(after: 500_000) { control.pause() }
        let up1 = TUSUploader(options: options(server.baseURL), store: try store())
        XCTAssertThrowsError(try up1.upload(file: file, id: "p", metadata: [:], control: control, observer: t1)) { e in
            XCTAssertEqual(e as? UploadError, .paused)
        }
        XCTAssertEqual(t1.log.named("paused").count, 1)
        let record = try XCTUnwrap(try store().all.first)
        let url = try XCTUnwrap(record.uploadURL)
        let serverOffset = try XCTUnwrap(try server.head(url).offset)
        XCTAssertGreaterThan(serverOffset, 0)
        XCTAssertLessThan(serverOffset, 2_000_000)

        let up2 = TUSUploader(options: options(server.baseURL), store: try store())
        let log = UploadEventLog()
        let result = try up2.upload(file: file, id: "p", metadata: [:], control: UploadControl(), observer: log)
        XCTAssertEqual(result.url, url, "the same upload continues")
        XCTAssertNil(up2.lastRun.requests["POST"])
        guard case .started(_, _, _, let resumedAt) = log.all.first else { return XCTFail("no started event") }
        XCTAssertEqual(resumedAt, serverOffset)
        XCTAssertEqual(up2.lastRun.requests["PATCH"], Int((2_000_000 - serverOffset + (256 << 10) - 1) / (256 << 10)))
        assertMonotonic(log)
        XCTAssertEqual(try fileSHA256(server.storedPath(url)), try fileSHA256(file))
        XCTAssertTrue(try store().all.isEmpty)
    }

    /// A file changed between runs (new fingerprint): a new upload, the stale one terminated on
    /// the server, and only the new content stored.
    func testChangedFileStartsANewUploadAndTerminatesTheStaleOne() throws {
        let file = try makeFile("ch.mp4", bytes: 1_500_000)
        let control = UploadControl()
        let up = TUSUploader(options: options(server.baseURL), store: try store())
        XCTAssertThrowsError(try up.upload(file: file, id: "c", metadata: [:], control: control, observer: Trigger(after: 300_000) { control.pause() }))
        let oldURL = try XCTUnwrap(try store().all.first?.uploadURL)
        XCTAssertEqual(try server.head(oldURL).status, 200)

        Thread.sleep(forTimeInterval: 0.02)
        _ = try makeFile("ch.mp4", bytes: 1_500_000, seed: 99)  // same size, new content and mtime
        let up2 = TUSUploader(options: options(server.baseURL), store: try store())
        let result = try up2.upload(file: file, id: "c", metadata: [:], control: UploadControl(), observer: NoUploadObserver())
        XCTAssertNotEqual(result.url, oldURL)
        XCTAssertEqual(up2.lastRun.terminated, [oldURL])
        XCTAssertEqual(try server.head(oldURL).status, 404, "the stale upload is deleted on the server")
        XCTAssertEqual(try Run.run(["cmp", "--", file, server.storedPath(result.url!)], check: false).status, 0, "the stored upload differs from the file")
        XCTAssertTrue(try store().all.isEmpty)
    }

    /// The upload vanished on the server (404): the record is dropped and a new upload made.
    func testGoneUploadIsCreatedAnew() throws {
        let file = try makeFile("g.mp4", bytes: 1_200_000)
        let control = UploadControl()
        let up = TUSUploader(options: options(server.baseURL), store: try store())
        XCTAssertThrowsError(try up.upload(file: file, id: "g", metadata: [:], control: control, observer: Trigger(after: 300_000) { control.pause() }))
        let oldURL = try XCTUnwrap(try store().all.first?.uploadURL)
        _ = try CurlTransport().perform(HTTPRequest(method: "DELETE", url: oldURL, headers: [("Tus-Resumable", "1.0.0")]))
        XCTAssertEqual(try server.head(oldURL).status, 404)

        let log = UploadEventLog()
        let result = try up.upload(file: file, id: "g", metadata: [:], control: UploadControl(), observer: log)
        XCTAssertNotEqual(result.url, oldURL)
        XCTAssertEqual(up.lastRun.requests["POST"], 1)
        XCTAssertEqual(try Run.run(["cmp", "--", file, server.storedPath(result.url!)], check: false).status, 0, "the stored upload differs from the file")
    }

    /// Upload-Expires is kept in the record; an expired upload is not resumed (no HEAD), a new one
    /// is created.
    func testExpiredUploadIsNotResumed() throws {
        let expiring = try LocalTUS(directory: dir + "/exp", extraArgs: ["--upload-expiry", "2"])
        let file = try makeFile("e.mp4", bytes: 1_000_000)
        let control = UploadControl()
        let up = TUSUploader(options: options(expiring.baseURL), store: try store())
        XCTAssertThrowsError(try up.upload(file: file, id: "e", metadata: [:], control: control, observer: Trigger(after: 200_000) { control.pause() }))
        let record = try XCTUnwrap(try store().all.first)
        let expires = try XCTUnwrap(record.expires, "Upload-Expires must be stored")
        XCTAssertLessThan(abs(expires.timeIntervalSinceNow), 5)
        Thread.sleep(forTimeInterval: max(0, expires.timeIntervalSinceNow) + 0.5)

        let result = try up.upload(file: file, id: "e", metadata: [:], control: UploadControl(), observer: NoUploadObserver())
        XCTAssertNotEqual(result.url, record.uploadURL)
        XCTAssertNil(up.lastRun.requests["HEAD"], "an expired upload is not asked about")
        XCTAssertEqual(up.lastRun.requests["POST"], 1)
        XCTAssertEqual(try fileSHA256(expiring.storedPath(result.url!)), try fileSHA256(file))
    }

    func testCancelTerminatesTheUploadAndDropsTheRecord() throws {
        let file = try makeFile("x.mp4", bytes: 1_500_000)
        let control = UploadControl()
        let t = Trigger(after: 300_000) { control.cancel() }
        let up = TUSUploader(options: options(server.baseURL), store: try store())
        XCTAssertThrowsError(try up.upload(file: file, id: "x", metadata: [:], control: control, observer: t)) { e in
            XCTAssertEqual(e as? UploadError, .cancelled)
        }
        let url = try XCTUnwrap(up.lastRun.uploadURL)
        XCTAssertEqual(up.lastRun.terminated, [url])
        XCTAssertEqual(try server.head(url).status, 404)
        XCTAssertTrue(try store().all.isEmpty)
        XCTAssertEqual(t.log.named("cancelled").count, 1)
    }

    /// The file grows mid-upload: the next chunk's stamp check fails with file-changed naming the
    /// file, the server upload is terminated and the record dropped.
    func testFileChangedMidUploadFailsAndTerminates() throws {
        let file = try makeFile("grow.mp4", bytes: 1_500_000)
        let t = Trigger(after: 300_000) {
            let h = FileHandle(forWritingAtPath: file)!
            h.seekToEndOfFile(); h.write(Data(repeating: 7, count: 1000)); h.closeFile()
        }
        let up = TUSUploader(options: options(server.baseURL), store: try store())
        XCTAssertThrowsError(try up.upload(file: file, id: "f", metadata: [:], control: UploadControl(), observer: t)) { e in
            let u = e as? UploadError
            XCTAssertEqual(u?.code, "file-changed")
            XCTAssertTrue(u?.message.contains("grow.mp4") ?? false)
            XCTAssertFalse(u?.retryable ?? true)
        }
        let url = try XCTUnwrap(up.lastRun.uploadURL)
        XCTAssertEqual(try server.head(url).status, 404)
        XCTAssertTrue(try store().all.isEmpty)
        XCTAssertEqual(t.log.named("failed").count, 1)
    }

    // MARK: faults through the proxy

    /// 50 connection cuts at random offsets mid-PATCH (every other PATCH), each followed by HEAD
    /// and a resend from the server's offset; every upload intact.
    func testFiftyRandomCutsMidPatchAllUploadsIntact() throws {
        let proxy = try LocalProxy(upstreamPort: server.port, directory: dir)
        var rules: [[String: Any]] = []
        for i in 0..<50 {
            rules.append(["method": "PATCH", "skip": i == 0 ? 0 : 1, "times": 1, "action": "cut", "after_bytes": "random", "seed": i])
        }
        try proxy.rules(rules)
        var uploads = 0
        var retries = 0
        while try proxy.stats().faults < 50 && uploads < 10 {
            uploads += 1
            let file = try makeFile("cut\(uploads).mp4", bytes: 3_000_000, seed: UInt64(uploads))
            let up = TUSUploader(options: options(proxy.baseURL, chunk: 128 << 10), store: try store())
            let log = UploadEventLog()
            let result = try up.upload(file: file, id: "cut", metadata: [:], control: UploadControl(), observer: log)
            XCTAssertEqual(try fileSHA256(server.storedPath(result.url!)), try fileSHA256(file), "upload \(uploads)")
            assertMonotonic(log)
            retries += log.named("retry-resumed").count
        }
        let cuts = try proxy.outcomes("PATCH").filter { $0 == "cut" }.count
        XCTAssertEqual(cuts, 50, "the proxy cut 50 PATCHes")
        XCTAssertGreaterThanOrEqual(retries, 50)
    }

    /// The server applied a PATCH but the client never saw the 204: HEAD shows the new offset and
    /// the upload continues from there (the chunk is not sent twice).
    func testLostResponseHeadsAndContinues() throws {
        let proxy = try LocalProxy(upstreamPort: server.port, directory: dir)
        try proxy.rules([["method": "PATCH", "skip": 2, "times": 1, "action": "drop_response"]])
        let file = try makeFile("lost.mp4", bytes: 1_500_000)
        let up = TUSUploader(options: options(proxy.baseURL), store: try store())
        let log = UploadEventLog()
        let result = try up.upload(file: file, id: "l", metadata: [:], control: UploadControl(), observer: log)
        XCTAssertEqual(try proxy.outcomes("PATCH").filter { $0 == "drop_response" }.count, 1)
        // POST has chunk 0; PATCH 1, 2 ok; PATCH 3 applied but lost: HEAD says 4 chunks are there.
        let resumed = log.all.compactMap { if case .retryResumed(_, _, let o) = $0 { return o } else { return nil } }
        XCTAssertEqual(resumed, [4 * (256 << 10)])
        XCTAssertEqual(up.lastRun.requests["PATCH"], 5, "chunks 1..5 once each (1,500,000 bytes = 6 chunks)")
        XCTAssertEqual(try Run.run(["cmp", "--", file, server.storedPath(result.url!)], check: false).status, 0, "the stored upload differs from the file")
    }

    func testServerRestartMidUploadContinues() throws {
        let proxy = try LocalProxy(upstreamPort: server.port, directory: dir)
        // Slow PATCHes so the restart lands while the upload is under way.
        try proxy.rules([["method": "PATCH", "times": -1, "action": "delay", "seconds": 0.1]])
        let file = try makeFile("restart.mp4", bytes: 2_500_000)
        let server = self.server!
        let oldPID = server.pid
        let t = Trigger(after: 500_000) { DispatchQueue.global().async { try? server.restart() } }
        var o = options(proxy.baseURL, chunk: 128 << 10)
        o.retry = RetryPolicy(baseDelay: 0.2, maxDelay: 1, maxAttemptsWithoutProgress: 8)
        let up = TUSUploader(options: o, store: try store())
        let result = try up.upload(file: file, id: "r", metadata: [:], control: UploadControl(), observer: t)
        XCTAssertNotEqual(server.pid, oldPID, "the server was restarted")
        XCTAssertGreaterThan(t.log.named("retry-started").count, 0, "the restart cost at least one failed request")
        XCTAssertGreaterThan(t.log.named("retry-resumed").count, 0)
        XCTAssertEqual(try Run.run(["cmp", "--", file, server.storedPath(result.url!)], check: false).status, 0, "the stored upload differs from the file")
    }

    /// Bursts of 503, 423 and 429 (Retry-After honoured) on PATCH: retried with events, then done.
    func testServerErrorBurstsAreRetriedWithEvents() throws {
        let proxy = try LocalProxy(upstreamPort: server.port, directory: dir)
        try proxy.rules([
            ["method": "PATCH", "times": 3, "action": "status", "status": 503, "body": "busy"],
            ["method": "PATCH", "times": 2, "action": "status", "status": 423, "body": "locked"],
            ["method": "PATCH", "times": 1, "action": "status", "status": 429, "headers": ["Retry-After": "1"]],
            ["method": "HEAD", "times": 1, "action": "status", "status": 500]
        ])
        let file = try makeFile("burst.mp4", bytes: 800_000)
        var o = options(proxy.baseURL)
        o.retry = RetryPolicy(baseDelay: 0.01, maxDelay: 0.2, maxAttemptsWithoutProgress: 8)  // Retry-After is capped at 10 x maxDelay
        let up = TUSUploader(options: o, store: try store())
        let log = UploadEventLog()
        let start = Date()
        let result = try up.upload(file: file, id: "b", metadata: [:], control: UploadControl(), observer: log)
        let outcomes = try proxy.outcomes("PATCH")
        XCTAssertEqual(outcomes.filter { $0 == "status:503" }.count, 3)
        XCTAssertEqual(outcomes.filter { $0 == "status:423" }.count, 2)
        XCTAssertEqual(outcomes.filter { $0 == "status:429" }.count, 1)
        let delays = log.all.compactMap { if case .retryStarted(_, _, let d, let r) = $0 { return (d, r) } else { return nil } }
        XCTAssertEqual(delays.count, 7)
        XCTAssertTrue(delays.contains { $0.0 >= 1 && $0.1.contains("429") }, "Retry-After: 1 honoured: \(delays)")
        XCTAssertTrue(delays.contains { $0.1.contains("HTTP 503") && $0.1.contains("busy") })
        XCTAssertGreaterThanOrEqual(Date().timeIntervalSince(start), 1)
        XCTAssertEqual(try Run.run(["cmp", "--", file, server.storedPath(result.url!)], check: false).status, 0, "the stored upload differs from the file")
    }

    func testStallTimesOutThenRetriesAndSucceeds() throws {
        let proxy = try LocalProxy(upstreamPort: server.port, directory: dir)
        try proxy.rules([["method": "PATCH", "skip": 1, "times": 1, "action": "stall", "after_bytes": 1000, "seconds": 8]])
        let file = try makeFile("stall.mp4", bytes: 1_000_000)
        let up = TUSUploader(options: options(proxy.baseURL, stall: 1), store: try store())
        let log = UploadEventLog()
        let start = Date()
        let result = try up.upload(file: file, id: "s", metadata: [:], control: UploadControl(), observer: log)
        XCTAssertLessThan(Date().timeIntervalSince(start), 7, "the stall timeout, not the proxy, ended the stalled PATCH")
        XCTAssertEqual(try proxy.stats().faults, 1, "the proxy stalled one PATCH")
        XCTAssertTrue(log.all.contains { if case .retryStarted(_, _, _, let r) = $0 { return r.contains("stalled") } else { return false } })
        XCTAssertEqual(try Run.run(["cmp", "--", file, server.storedPath(result.url!)], check: false).status, 0, "the stored upload differs from the file")
    }

    /// 409 (offset mismatch) → HEAD at once and continue.
    func testConflictHeadsAndContinues() throws {
        let proxy = try LocalProxy(upstreamPort: server.port, directory: dir)
        try proxy.rules([["method": "PATCH", "skip": 1, "times": 1, "action": "status", "status": 409, "body": "Upload-Offset mismatch"]])
        let file = try makeFile("conf.mp4", bytes: 900_000)
        let up = TUSUploader(options: options(proxy.baseURL), store: try store())
        let log = UploadEventLog()
        let result = try up.upload(file: file, id: "c", metadata: [:], control: UploadControl(), observer: log)
        XCTAssertEqual(up.lastRun.requests["HEAD"], 1)
        XCTAssertEqual(log.named("retry-resumed").count, 1)
        XCTAssertEqual(try Run.run(["cmp", "--", file, server.storedPath(result.url!)], check: false).status, 0, "the stored upload differs from the file")
    }

    /// A 5xx that never ends: gives up after maxAttemptsWithoutProgress with a retryable error.
    func testEndless503GivesUpRetryable() throws {
        let proxy = try LocalProxy(upstreamPort: server.port, directory: dir)
        try proxy.rules([["method": "PATCH", "times": -1, "action": "status", "status": 503]])
        let file = try makeFile("dead.mp4", bytes: 900_000)
        let up = TUSUploader(options: options(proxy.baseURL), store: try store())
        let log = UploadEventLog()
        XCTAssertThrowsError(try up.upload(file: file, id: "d", metadata: [:], control: UploadControl(), observer: log)) { e in
            let u = e as? UploadError
            XCTAssertEqual(u?.code, "http-503")
            XCTAssertEqual(u?.retryable, true)
        }
        XCTAssertEqual(log.named("retry-started").count, RetryPolicy.fast.maxAttemptsWithoutProgress)
        XCTAssertEqual(up.lastRun.requests["PATCH"], RetryPolicy.fast.maxAttemptsWithoutProgress + 1)
        XCTAssertEqual(try proxy.stats().faults, RetryPolicy.fast.maxAttemptsWithoutProgress + 1, "every PATCH got the proxy's 503")
        XCTAssertNotNil(try store().all.first?.uploadURL, "the record stays: the upload can be resumed later")
    }

    /// Other 4xx fail at once with the server's text (redacted) and the status in the code; the
    /// Authorization header's value never shows up in errors or events.
    func testForbiddenFailsAtOnceWithServerTextRedacted() throws {
        let proxy = try LocalProxy(upstreamPort: server.port, directory: dir)
        let secret = "sekrit-\(UUID().uuidString)"
        try proxy.rules([
            [
                "method": "PATCH", "times": 1, "action": "status", "status": 403,
                "body": "  quota exceeded for Bearer \(secret)\n"
            ]
        ])
        let file = try makeFile("forb.mp4", bytes: 900_000)
        let up = TUSUploader(options: options(proxy.baseURL), store: try store(), headers: { ["Authorization": "Bearer \(secret)"] })
        let log = UploadEventLog()
        XCTAssertThrowsError(try up.upload(file: file, id: "f", metadata: [:], control: UploadControl(), observer: log)) { e in
            let u = e as? UploadError
            XCTAssertEqual(u?.code, "http-403")
            XCTAssertEqual(u?.retryable, false)
            XCTAssertTrue(u?.message.contains("HTTP 403 (quota exceeded for ***)") ?? false, u?.message ?? "")
            XCTAssertFalse(u?.message.contains(secret) ?? true)
        }
        XCTAssertEqual(log.named("retry-started").count, 0)
        XCTAssertFalse(log.all.contains { "\($0)".contains(secret) })
    }

    // MARK: large file

    /// A sparse file of 4.25 GiB (markers around the 4 GiB boundary and at the end) uploaded for
    /// real: 64-bit offsets, bytes intact (compared byte for byte), resident memory bounded
    /// whatever the chunk size.
    func testASparseFileBeyond4GiBUploadsWithBoundedMemory() throws {
        let size: Int64 = (4 << 30) + (256 << 20)
        let file = dir + "/huge.mp4"
        let fd = open(file, O_CREAT | O_WRONLY, 0o644)
        XCTAssertEqual(ftruncate(fd, off_t(size)), 0)
        for at in [0, (4 << 30) - 3, 1 << 32, size - 16] as [Int64] {
            let marker = Array("marker@\(at)".utf8.prefix(16))
            XCTAssertEqual(pwrite(fd, marker, marker.count, off_t(at)), marker.count)
        }
        close(fd)

        let before = rss()
        let peak = PeakRSS()
        var o = options(server.baseURL, chunk: 64 << 20, stall: 30)
        o.retry = RetryPolicy(baseDelay: 0.2, maxDelay: 1, maxAttemptsWithoutProgress: 4)
        let up = TUSUploader(options: o, store: try store())
        let start = Date()
        let result = try up.upload(file: file, id: "huge", metadata: [:], control: UploadControl(), observer: peak)
        let seconds = Date().timeIntervalSince(start)
        let grew = peak.max - before.rss
        print(
            "4.25 GiB upload: \(String(format: "%.1f", seconds)) s, \(String(format: "%.0f", Double(size) / seconds / 1e6)) MB/s; RSS before \(before.rss >> 10) MiB, peak during \(peak.max >> 10) MiB (+\(grew >> 10) MiB); VmHWM \(before.hwm >> 10) -> \(rss().hwm >> 10) MiB"
        )
        XCTAssertEqual(result.bytes, size)
        XCTAssertEqual(try server.head(result.url!).offset, size)
        XCTAssertLessThan(grew, 48 << 10, "resident memory grew by \(grew >> 10) MiB with 64 MiB chunks")
        XCTAssertEqual(try Run.run(["cmp", "--", file, server.storedPath(result.url!)], check: false).status, 0, "the stored upload differs from the file")
        try? FileManager.default.removeItem(atPath: server.storedPath(result.url!))
    }
}

/// VmRSS / VmHWM of this process, in KiB.
func rss() -> (rss: Int64, hwm: Int64) {
    let text = (try? String(contentsOfFile: "/proc/self/status", encoding: .utf8)) ?? ""
    func field(_ name: String) -> Int64 {
        guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }) else { return 0 }
        return Int64(line.split(separator: " ").dropFirst().first.map(String.init) ?? "0") ?? 0
    }
    return (field("VmRSS"), field("VmHWM"))
}

/// Samples VmRSS on every event.
final class PeakRSS: UploadObserver, @unchecked Sendable {
    private let lock = NSLock()
    private var value: Int64 = 0
    func upload(_ event: UploadEvent) {
        let r = rss().rss
        lock.lock(); value = Swift.max(value, r); lock.unlock()
    }
    var max: Int64 { lock.lock(); defer { lock.unlock() }; return value }
}

/// A thread-safe counter (1, 2, 3, ...).
final class Atomic2: @unchecked Sendable {
    private let lock = NSLock()
    private var n = 0
    func next() -> Int { lock.lock(); defer { lock.unlock() }; n += 1; return n }
}

/// Review fixes: credential refresh, final stamp check, no-progress PATCHes, explicit checksums.
final class TUSReviewFixTests: XCTestCase {
    var dir = ""
    var server: LocalTUS!

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "tusfix-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        server = try LocalTUS(directory: dir + "/server")
    }

    override func tearDownWithError() throws {
        server?.stop()
        try? FileManager.default.removeItem(atPath: dir)
    }

    func makeFile(_ name: String, bytes: Int) throws -> String {
        let path = dir + "/" + name
        var data = Data(count: bytes)
        for i in 0..<bytes { data[i] = UInt8(truncatingIfNeeded: i &* 2654435761 >> 7) }
        try data.write(to: URL(fileURLWithPath: path))
        return path
    }

    func options(_ endpoint: String) -> TUSOptions {
        var t = TransportSettings()
        t.stallTimeout = 5
        var o = TUSOptions(endpoint: endpoint, chunkSize: 256 << 10, retry: .fast, transport: t)
        o.progressInterval = 0
        return o
    }

    func store() throws -> ResumeStore { try ResumeStore(path: dir + "/resume.json") }

    /// A credential command for a TUS destination: each run appends a line to `counter` and
    /// prints a new token (`tok-1`, `tok-2`...).
    func tokenCommand(counter: String) -> [String] {
        ["/bin/sh", "-c", "echo x >> '\(counter)'; n=$(wc -l < '\(counter)' | tr -d ' '); printf '{\"token\":\"tok-%s\"}' \"$n\""]
    }

    func lines(_ path: String) -> Int {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    func destinationUploader(_ endpoint: String, counter: String) throws -> TUSUploader {
        var d = UploadDestination(method: .tus, endpoint: endpoint, credentials: CredentialSource(command: tokenCommand(counter: counter)))
        d.chunkSize = 256 << 10
        d.maxRetries = 3
        d.retryDelay = 0.01
        return try XCTUnwrap(try d.makeUploader(store: try store()) as? TUSUploader)
    }

    /// One 401 on a PATCH mid-upload: `credentialsExpired`, the destination's provider is asked
    /// again (twice in all: start + refresh, the cached token dropped), the request is repeated and
    /// the SAME upload (one POST, one URL) completes intact.
    func testRefused401OnPatchRefreshesCredentialsAndContinuesTheSameUpload() throws {
        let proxy = try LocalProxy(upstreamPort: server.port, directory: dir)
        try proxy.rules([["method": "PATCH", "skip": 1, "times": 1, "action": "status", "status": 401, "body": "token expired"]])
        let counter = dir + "/count"
        let file = try makeFile("auth.mp4", bytes: 1_200_000)
        let up = try destinationUploader(proxy.baseURL, counter: counter)
        let log = UploadEventLog()
        let result = try up.upload(file: file, id: "a", metadata: [:], control: UploadControl(), observer: log)
        XCTAssertEqual(try proxy.outcomes("PATCH").filter { $0 == "status:401" }.count, 1)
        XCTAssertEqual(log.named("credentials-expired").count, 1)
        XCTAssertEqual(lines(counter), 2, "provider asked at start and once on the refusal")
        XCTAssertEqual(up.lastRun.requests["POST"], 1, "no second upload is created")
        XCTAssertEqual(up.lastRun.credentialRefreshes, 1)
        XCTAssertEqual(result.url, up.lastRun.uploadURL)
        XCTAssertEqual(try Run.run(["cmp", "--", file, server.storedPath(result.url!)], check: false).status, 0, "the stored upload differs from the file")
        XCTAssertEqual(log.named("failed").count, 0)
    }

    /// Refused again right after the refresh: fails with http-403 and the server's text (redacted),
    /// and keeps the resume record (the upload can be resumed once the credentials are fixed).
    func testRefusedAgainAfterRefreshFailsAndKeepsTheRecord() throws {
        let proxy = try LocalProxy(upstreamPort: server.port, directory: dir)
        try proxy.rules([["method": "PATCH", "skip": 1, "times": 2, "action": "status", "status": 403, "body": "denied for Bearer tok-2"]])
        let counter = dir + "/count"
        let file = try makeFile("auth2.mp4", bytes: 1_200_000)
        let up = try destinationUploader(proxy.baseURL, counter: counter)
        let log = UploadEventLog()
        XCTAssertThrowsError(try up.upload(file: file, id: "a", metadata: [:], control: UploadControl(), observer: log)) { e in
            let u = e as? UploadError
            XCTAssertEqual(u?.code, "http-403")
            XCTAssertTrue(u?.message.contains("HTTP 403 (denied for ***)") ?? false, u?.message ?? "")
            XCTAssertTrue(u?.message.contains("again right after a refresh") ?? false, u?.message ?? "")
        }
        XCTAssertEqual(log.named("credentials-expired").count, 1)
        XCTAssertEqual(lines(counter), 2)
        XCTAssertEqual(try store().all.first?.uploadURL, up.lastRun.uploadURL, "the record stays")
    }

    /// A 403 on the resume HEAD is refused credentials, not a vanished upload: refresh, HEAD
    /// again, continue the same upload (nothing re-created, the record never dropped).
    func testForbiddenResumeHeadRefreshesInsteadOfRecreating() throws {
        let proxy = try LocalProxy(upstreamPort: server.port, directory: dir)
        try proxy.rules([["method": "PATCH", "skip": 1, "times": -1, "action": "status", "status": 503]])
        let counter = dir + "/count"
        let file = try makeFile("head403.mp4", bytes: 1_200_000)
        XCTAssertThrowsError(
            try destinationUploader(proxy.baseURL, counter: counter)
                .upload(file: file, id: "h", metadata: [:], control: UploadControl(), observer: NoUploadObserver()))
        let url = try XCTUnwrap(try store().all.first?.uploadURL)
        try proxy.rules([["method": "HEAD", "times": 1, "action": "status", "status": 403, "body": "expired"]])
        let up = try destinationUploader(proxy.baseURL, counter: counter)
        let log = UploadEventLog()
        let result = try up.upload(file: file, id: "h", metadata: [:], control: UploadControl(), observer: log)
        XCTAssertEqual(result.url, url)
        XCTAssertEqual(up.lastRun.recreated, 0)
        XCTAssertNil(up.lastRun.requests["POST"])
        XCTAssertEqual(log.named("credentials-expired").count, 1)
        XCTAssertEqual(try fileSHA256(server.storedPath(url)), try fileSHA256(file))
    }

    /// The file changes while its last chunk is sent: not reported as uploaded; file-changed,
    /// the server upload terminated and the record dropped (as mid-upload).
    func testFileChangedDuringTheLastChunkFails() throws {
        let size = 700_000
        let file = try makeFile("last.mp4", bytes: size)
        let t = Trigger(after: Int64(size - 1)) {
            let h = FileHandle(forWritingAtPath: file)!
            h.seekToEndOfFile(); h.write(Data(repeating: 7, count: 10)); h.closeFile()
        }
        let up = TUSUploader(options: options(server.baseURL), store: try store())
        XCTAssertThrowsError(try up.upload(file: file, id: "f", metadata: [:], control: UploadControl(), observer: t)) { e in
            XCTAssertEqual((e as? UploadError)?.code, "file-changed")
        }
        XCTAssertEqual(t.log.named("finished").count, 0)
        XCTAssertEqual(try server.head(try XCTUnwrap(up.lastRun.uploadURL)).status, 404)
        XCTAssertTrue(try store().all.isEmpty)
    }

    /// A 204 whose Upload-Offset does not move is a failure without progress: retried with backoff,
    /// then given up after maxAttemptsWithoutProgress (it used to loop for ever; the upload is
    /// paused after 20 s so a regression fails instead of hanging).
    func testPatchThatNeverAdvancesGivesUp() throws {
        let proxy = try LocalProxy(upstreamPort: server.port, directory: dir)
        try proxy.rules([
            [
                "method": "PATCH", "times": -1, "action": "status", "status": 204,
                "headers": ["Tus-Resumable": "1.0.0", "Upload-Offset": "0"]
            ]
        ])
        let file = try makeFile("stuck.mp4", bytes: 600_000)
        var o = options(proxy.baseURL)
        o.creationWithUpload = false
        let up = TUSUploader(options: o, store: try store())
        let control = UploadControl()
        DispatchQueue.global().asyncAfter(deadline: .now() + 20) { control.pause() }
        let log = UploadEventLog()
        XCTAssertThrowsError(try up.upload(file: file, id: "s", metadata: [:], control: control, observer: log)) { e in
            let u = e as? UploadError
            XCTAssertEqual(u?.code, "no-progress")
            XCTAssertEqual(u?.retryable, true)
        }
        XCTAssertEqual(log.named("retry-started").count, RetryPolicy.fast.maxAttemptsWithoutProgress)
        XCTAssertNotNil(try store().all.first?.uploadURL)
    }

    /// checksum sha1/sha256: that algorithm when offered; a clear error when it is not.
    func testExplicitChecksumAlgorithmIsUsedOrRefused() throws {
        var o = options(server.baseURL)
        o.checksum = .sha1
        let file = try makeFile("sha1.mp4", bytes: 600_000)
        let up = TUSUploader(options: o, store: try store())
        let result = try up.upload(file: file, id: "c", metadata: [:], control: UploadControl(), observer: NoUploadObserver())
        XCTAssertEqual(up.lastRun.checksumAlgorithm, "sha1")
        XCTAssertEqual(try Run.run(["cmp", "--", file, server.storedPath(result.url!)], check: false).status, 0, "the stored upload differs from the file")

        let proxy = try LocalProxy(upstreamPort: server.port, directory: dir)
        try proxy.rules([
            [
                "method": "OPTIONS", "times": -1, "action": "status", "status": 204,
                "headers": [
                    "Tus-Resumable": "1.0.0", "Tus-Version": "1.0.0", "Tus-Extension": "creation,checksum",
                    "Tus-Checksum-Algorithm": "md5"
                ]
            ]
        ])
        var o2 = options(proxy.baseURL)
        o2.checksum = .sha256
        XCTAssertThrowsError(
            try TUSUploader(options: o2, store: try store())
                .upload(file: file, id: "c2", metadata: [:], control: UploadControl(), observer: NoUploadObserver())
        ) { e in
            let u = e as? UploadError
            XCTAssertEqual(u?.code, "unsupported")
            XCTAssertTrue(u?.message.contains("sha256") ?? false, u?.message ?? "")
        }
        var d = UploadDestination(method: .tus, endpoint: server.baseURL)
        d.checksum = .sha256
        XCTAssertEqual(d.tusOptions.checksum, .sha256)
        d.checksum = .sha1
        XCTAssertEqual(d.tusOptions.checksum, .sha1)
    }
}
