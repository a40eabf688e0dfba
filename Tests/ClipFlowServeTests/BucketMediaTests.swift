import ClipFlowTestSupport
import ClipFlowUpload
import Foundation
import XCTest

@testable import ClipFlowServe

/// A bucket's media and uploads (`BucketMedia`, `BucketUploads`) against a real S3 server
/// (SeaweedFS), their bytes counted by the object store (`S3Traffic`) and the bucket judged by
/// boto3: each byte moves once.
final class BucketMediaTests: XCTestCase {
    nonisolated(unsafe) static var s3: SeaweedFS?
    /// Why the server did not start, reported by every test (a failure, not a skip).
    nonisolated(unsafe) static var startError: Error?

    override class func setUp() {
        super.setUp()
        do { s3 = try SeaweedFS.start() } catch { startError = error }
    }

    override class func tearDown() {
        s3?.stop()
        super.tearDown()
    }

    var s3: SeaweedFS { Self.s3! }
    var dir: URL!

    override func setUpWithError() throws {
        if let e = Self.startError { throw e }
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("bucket-media-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    }

    override func tearDownWithError() throws {
        try? FileManager.default.removeItem(at: dir)
    }

    /// A bucket under a prefix of this test's own, and media storage in it with folders in `dir`.
    func media() throws -> BucketMedia {
        let bucket = try ServeBucket(url: "s3://\(s3.bucket)/\(name.filter { $0.isLetter })/", environment: s3.environment)
        return try BucketMedia(bucket: bucket, scratch: dir.appendingPathComponent("scratch"), kept: dir.appendingPathComponent("kept"))
    }

    func write(_ file: URL, bytes: Int, seed: UInt8) throws {
        try FileManager.default.createDirectory(at: file.deletingLastPathComponent(), withIntermediateDirectories: true)
        try Data((0..<bytes).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) }).write(to: file)
    }

    func names(_ folder: URL) -> [String] { ((try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []).sorted() }

    /// The second folder's files that are hard links to the first's are copied by the bucket, the
    /// rest streamed from the disk: the bytes written are the new files' alone, and every object
    /// is its file, with the type of its name.
    func testAFolderPutsOnlyTheFilesItWroteAndCopiesWhatItTookOver() async throws {
        let media = try media(), traffic = media.bucket.store.traffic
        let work = media.workFolder(7, step: "1-ladder-1")
        let first = work.appendingPathComponent("a1-0000000a-copy"), full = work.appendingPathComponent("a1-0000000b-full")
        try write(first.appendingPathComponent("audio/seg-0.m4s"), bytes: 300_000, seed: 1)
        try write(first.appendingPathComponent("audio.m3u8"), bytes: 200, seed: 2)
        try write(first.appendingPathComponent("copy/seg-0.m4s"), bytes: 700_000, seed: 3)
        let start = traffic.written
        try await media.put(7, "a1-0000000a-copy", from: work, reusing: "")
        XCTAssertEqual(traffic.written - start, 1_000_200, "each file sent once, streamed")

        // The ladder took the audio over (hard links) and wrote a rung of its own.
        for name in ["audio/seg-0.m4s", "audio.m3u8"] {
            try FileManager.default.createDirectory(
                at: full.appendingPathComponent(name).deletingLastPathComponent(), withIntermediateDirectories: true)
            try FileManager.default.linkItem(at: first.appendingPathComponent(name), to: full.appendingPathComponent(name))
        }
        try write(full.appendingPathComponent("720p/seg-0.m4s"), bytes: 400_000, seed: 4)
        // Made again: the same bytes as the earlier folder's (a storyboard), or others.
        try write(first.appendingPathComponent("storyboard.jpg"), bytes: 5000, seed: 8)
        try write(full.appendingPathComponent("storyboard.jpg"), bytes: 5000, seed: 8)
        try write(first.appendingPathComponent("poster.jpg"), bytes: 3000, seed: 8)
        try write(full.appendingPathComponent("poster.jpg"), bytes: 3000, seed: 9)
        try await media.put(7, "a1-0000000a-copy", from: work, reusing: "")
        let before = traffic.written
        try await media.put(7, "a1-0000000b-full", from: work, reusing: "a1-0000000a-copy")
        XCTAssertEqual(traffic.written - before, 403_000, "only the rung and the poster it wrote are sent")

        let prefix = media.folderKey(7, "a1-0000000b-full")
        let names = ["audio.m3u8", "audio/seg-0.m4s", "720p/seg-0.m4s", "storyboard.jpg", "poster.jpg"]
        XCTAssertEqual(try s3.keys(prefix: prefix).sorted(), names.map { prefix + $0 }.sorted())
        for name in names {
            XCTAssertEqual(try s3.objectSHA256(key: prefix + name), try sha256(ofFile: full.appendingPathComponent(name)), name)
        }
        XCTAssertEqual(try s3.head(key: prefix + "audio.m3u8")["content_type"] as? String, "application/vnd.apple.mpegurl", "the copy keeps its type")
        XCTAssertEqual(try s3.head(key: prefix + "audio/seg-0.m4s")["content_type"] as? String, "video/iso.segment")

        // The earlier folder's objects gone (its grace over), a ladder built on it sends its files.
        try await media.bucket.perform { s, b in try s.deleteAll(bucket: b, prefix: media.folderKey(7, "a1-0000000a-copy")) }
        let again = traffic.written
        let third = work.appendingPathComponent("a1-0000000c-full")
        try FileManager.default.createDirectory(at: third, withIntermediateDirectories: true)
        try FileManager.default.linkItem(at: first.appendingPathComponent("audio.m3u8"), to: third.appendingPathComponent("audio.m3u8"))
        try await media.put(7, "a1-0000000c-full", from: work, reusing: "a1-0000000a-copy")
        XCTAssertEqual(traffic.written - again, 200, "sent from here when the bucket has no object to copy")
        XCTAssertEqual(
            try s3.objectSHA256(key: media.folderKey(7, "a1-0000000c-full") + "audio.m3u8"), try sha256(ofFile: third.appendingPathComponent("audio.m3u8")))

        // The server's metrics show the bucket's counts.
        XCTAssertFalse(ServeMetrics().exposition(jobs: nil).contains("clipflow_bucket"), "no bucket, no counts")
        let text = ServeMetrics(storage: traffic).exposition(jobs: nil)
        XCTAssertTrue(text.contains("\nclipflow_bucket_bytes_written_total \(traffic.written)\n"), text)
        XCTAssertTrue(text.contains("\nclipflow_bucket_bytes_read_total \(traffic.read)\n"), text)
    }

    /// The ladder step on the server of the playable step takes that step's folder: the upload is
    /// not downloaded again (a HEAD checks it is that upload's object as it is) and the published
    /// folder is not downloaded at all. A copy of another upload, or of an object that changed, is
    /// never used.
    func testTheNextStepTakesTheKeptFolderAndNeverAStaleUpload() async throws {
        let media = try media(), traffic = media.bucket.store.traffic
        let database = try SQLiteStore(path: dir.appendingPathComponent("db.sqlite").path)
        let uploads = BucketUploads(bucket: media.bucket, database: database)
        let key = String(repeating: "ab", count: 32)
        try write(dir.appendingPathComponent("source"), bytes: 900_000, seed: 5)
        let object = uploads.objectKey(key), source = dir.appendingPathComponent("source").path
        try await media.bucket.perform { s, b in try s.put(file: source, bucket: b, key: object) }

        let playable = media.workFolder(3, step: "9-playable-1")
        try FileManager.default.createDirectory(at: playable, withIntermediateDirectories: true)
        var read = traffic.read
        let input = try await uploads.localFile(key, scratch: playable)
        XCTAssertEqual(traffic.read - read, 900_000, "downloaded once")
        XCTAssertEqual(try sha256(ofFile: input), try sha256(ofFile: URL(fileURLWithPath: source)))
        try write(playable.appendingPathComponent("a1-00000001-copy/index.m3u8"), bytes: 100, seed: 6)
        try await media.put(3, "a1-00000001-copy", from: playable, reusing: "")
        await media.keep(3, job: 9, from: playable, published: "a1-00000001-copy")
        await media.release(playable)
        XCTAssertEqual(names(media.keptFolder), ["3-9"])

        // Another job's step takes nothing; this job's ladder step takes it all.
        let other = media.workFolder(3, step: "10-ladder-1")
        try FileManager.default.createDirectory(at: other, withIntermediateDirectories: true)
        await media.resume(3, job: 10, into: other)
        XCTAssertEqual(names(other), [])
        let ladder = media.workFolder(3, step: "9-ladder-1")
        try FileManager.default.createDirectory(at: ladder, withIntermediateDirectories: true)
        await media.resume(3, job: 9, into: ladder)
        XCTAssertEqual(names(media.keptFolder), [], "taken: nothing kept")
        read = traffic.read
        let again = try await uploads.localFile(key, scratch: ladder)
        try await media.prepare(3, published: "a1-00000001-copy", in: ladder)
        XCTAssertEqual(traffic.read - read, 0, "neither the upload nor the published folder read again")
        XCTAssertEqual(try sha256(ofFile: again), try sha256(ofFile: URL(fileURLWithPath: source)))

        // The object changed (same size): the copy is stale and is fetched again.
        try write(dir.appendingPathComponent("source"), bytes: 900_000, seed: 7)
        try await media.bucket.perform { s, b in try s.put(file: source, bucket: b, key: object) }
        read = traffic.read
        let fresh = try await uploads.localFile(key, scratch: ladder)
        XCTAssertEqual(traffic.read - read, 900_000)
        XCTAssertEqual(try sha256(ofFile: fresh), try sha256(ofFile: URL(fileURLWithPath: source)))
        // A copy of another upload is never taken for this one.
        let second = String(repeating: "cd", count: 32)
        try await media.bucket.perform { s, b in try s.put(Data(count: 5000), bucket: b, key: uploads.objectKey(second)) }
        let copied = try await uploads.localFile(second, scratch: ladder)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: copied)), Data(count: 5000))

        // Elsewhere (nothing kept), the published folder is downloaded.
        let elsewhere = media.workFolder(3, step: "9-ladder-2")
        try FileManager.default.createDirectory(at: elsewhere, withIntermediateDirectories: true)
        await media.resume(3, job: 9, into: elsewhere)
        try await media.prepare(3, published: "a1-00000001-copy", in: elsewhere)
        XCTAssertEqual(
            try Data(contentsOf: elsewhere.appendingPathComponent("a1-00000001-copy/index.m3u8")),
            try Data(contentsOf: ladder.appendingPathComponent("a1-00000001-copy/index.m3u8")))
        for work in [other, ladder, elsewhere] { await media.release(work) }
        XCTAssertEqual(names(media.scratch), [])
    }

    /// An upload's whole parts go side by side while its bytes arrive: with the proxy holding
    /// part 1 back, parts 2 and 3 are stored first; the durable mark stays before part 1 until it
    /// is, and the completed object is the bytes sent.
    func testAnUploadsPartsGoSideBySide() async throws {
        let proxy = try FaultProxy.start(upstream: s3.endpoint)
        defer { proxy.stop() }
        var environment = s3.environment
        environment["AWS_ENDPOINT_URL_S3"] = proxy.url
        let bucket = try ServeBucket(url: "s3://\(s3.bucket)/\(name.filter { $0.isLetter })/", environment: environment)
        let database = try SQLiteStore(path: dir.appendingPathComponent("db.sqlite").path)
        let uploads = BucketUploads(bucket: bucket, database: database)
        let part = Int(BucketUploads.partSize(length: 0)), length = 3 * part + 1000
        let bytes = Data((0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ $0 >> 12) })
        let row = try await database.insert(UploadRow(id: "side", length: Int64(length), offset: 0, metadata: "", createdAt: 1, expiresAt: 2), carrying: nil)
        try proxy.setRules([["method": "PUT", "query_contains": "partNumber=1&", "action": "delay", "seconds": 3, "times": 1]])
        let writer = try await uploads.writer(for: row)
        for start in stride(from: 0, to: 3 * part, by: 1 << 20) { try await writer.append(Array(bytes[start..<start + (1 << 20)])) }
        let early = try await writer.checkpoint()
        XCTAssertEqual(early.offset, 0, "part 1 is still on its way: nothing is durable yet")
        try await writer.append(Array(bytes[(3 * part)...]))
        let end = try await writer.finish()
        XCTAssertEqual(end.offset, Int64(length))
        // The proxy records a request once the upstream closed it, a moment after its answer.
        var answered: [String] = []
        for _ in 0..<60 {
            answered = try proxy.stats().requests.filter { $0.method == "PUT" && $0.target.contains("partNumber=") }.map(\.target)
            if answered.count >= 4 { break }
            try await Task.sleep(nanoseconds: 50_000_000)
        }
        XCTAssertEqual(answered.count, 4, "\(answered)")
        XCTAssertTrue(answered.prefix(2).allSatisfy { !$0.contains("partNumber=1&") }, "parts 2 and 3 answered before part 1: \(answered)")
        let object = uploads.objectKey("side"), copy = dir.appendingPathComponent("copy").path
        try await bucket.perform { s, b in _ = try s.download(bucket: b, key: object, to: copy) }
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: copy)), bytes)
    }

    /// Kept folders no step will take go: the video's published folder is another now (its ladder
    /// was published elsewhere), the video is removed, or more are kept than the limit; a new
    /// server starts with none.
    func testKeptFoldersGoOnceNoStepWillTakeThem() async throws {
        let media = try media()
        func keep(_ video: Int64, _ job: Int64) async throws {
            let work = media.workFolder(video, step: "\(job)-playable-1")
            try write(work.appendingPathComponent("upload"), bytes: 10, seed: 1)
            try write(work.appendingPathComponent("p\(video)/index.m3u8"), bytes: 10, seed: 1)
            await media.keep(video, job: job, from: work, published: "p\(video)")
            await media.release(work)
        }
        try await keep(1, 1)
        try await keep(2, 2)
        try await keep(3, 3)
        XCTAssertEqual(names(media.keptFolder), ["1-1", "2-2", "3-3"])
        // Video 1's ladder was published by another server; video 2 is still at its first folder.
        await media.sweepSuperseded(grace: 0, skip: { _ in false }, published: { $0 == 1 ? "a2-00000000-full" : "p\($0)" })
        XCTAssertEqual(names(media.keptFolder), ["2-2", "3-3"])
        try await media.remove(3)
        XCTAssertEqual(names(media.keptFolder), ["2-2"])
        for v in 10..<(10 + Int64(BucketMedia.keptLimit)) { try await keep(v, v) }
        XCTAssertEqual(names(media.keptFolder).count, BucketMedia.keptLimit)
        XCTAssertFalse(names(media.keptFolder).contains("2-2"), "the oldest went")
        XCTAssertEqual(names(media.scratch), [])
        _ = try self.media()
        XCTAssertEqual(names(media.keptFolder), [], "a server starts with nothing kept")
    }
}
