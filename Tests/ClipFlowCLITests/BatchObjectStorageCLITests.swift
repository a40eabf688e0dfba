import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow batch` with inputs and outputs on a real S3 server (SeaweedFS on 127.0.0.1): killed
/// part-way and run again, every output once and whole, nothing left half-uploaded; a storage
/// outage is a failure a retry may fix (75), a missing object one it cannot (65); no secret in
/// anything printed. Objects are judged by boto3 and ffprobe, never by our client.
final class BatchObjectStorageCLITests: XCTestCase {
    let fx = Fixtures.shared
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let pipeline = root.appendingPathComponent("pipelines/fragments-to-folder.json").path
    static let outputs = ["merged.mp4", "cover.jpg", "publish/merged.mp4", "publish/cover.jpg"]

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    /// `count` sets of five 1-second fragments put under sets/set-N/ (by boto3), and a rows CSV
    /// whose inputs and outputs are s3:// URLs.
    func fragmentSets(_ count: Int, on s3: SeaweedFS, in dir: URL) throws -> String {
        let fragments = try (0..<5).map { try fx.toneClip($0, seconds: 1) }
        let tree = dir.appendingPathComponent("to-put")
        var csv = "CLIPS,OUT\n"
        for s in 0..<count {
            let set = tree.appendingPathComponent("set-\(s)")
            try FileManager.default.createDirectory(at: set, withIntermediateDirectories: true)
            for (i, f) in fragments.enumerated() { try FileManager.default.linkItem(atPath: f, toPath: set.appendingPathComponent("fragment\(i).mp4").path) }
            csv += "s3://\(s3.bucket)/sets/set-\(s),s3://\(s3.bucket)/out/set-\(s)\n"
        }
        XCTAssertEqual(try s3.putTree(tree, prefix: "sets/").count, count * 5)
        try FileManager.default.removeItem(at: tree)
        let rows = dir.appendingPathComponent("rows.csv").path
        try csv.write(toFile: rows, atomically: true, encoding: .utf8)
        return rows
    }

    func summary(_ path: String) throws -> [String: Any] {
        try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
    }

    func testBatchOnObjectStorageKilledAndRunAgainWritesEveryOutputOnce() throws {
        let s3 = try SeaweedFS.start()
        defer { s3.stop() }
        let dir = fx.scratch("batch-s3")
        let sets = 10
        let rows = try fragmentSets(sets, on: s3, in: dir)
        let env = s3.environment.merging(["TMPDIR": dir.path]) { _, b in b }

        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["batch", Self.pipeline, "--rows", rows, "--jobs", "2", "--quiet"]
        p.environment = ProcessInfo.processInfo.environment.merging(env) { _, b in b }
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        let deadline = Date().addingTimeInterval(180)
        while p.isRunning && Date() < deadline {
            if try s3.keys(prefix: "out/").filter({ $0.hasSuffix("publish/cover.jpg") }).count >= 3 { break }
            usleep(300_000)
        }
        XCTAssertTrue(p.isRunning, "the batch ended before it could be killed part-way")
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        let keysAtKill = Set(try s3.keys(prefix: "out/"))
        let doneAtKill = (0..<sets).filter { s in Self.outputs.allSatisfy { keysAtKill.contains("out/set-\(s)/\($0)") } }
        XCTAssertGreaterThanOrEqual(doneAtKill.count, 3)
        XCTAssertLessThan(doneAtKill.count, sets)

        let again = try Run.run([binary, "batch", Self.pipeline, "--rows", rows, "--jobs", "2"], env: env, check: false)
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertTrue(again.stderr.contains("batch: \(sets - doneAtKill.count) done, \(doneAtKill.count) skipped, 0 failed"), again.stderr)
        // Every output once, nothing else under out/, no multipart upload left open.
        let expected = Set((0..<sets).flatMap { s in Self.outputs.map { "out/set-\(s)/\($0)" } })
        XCTAssertEqual(Set(try s3.keys(prefix: "out/")), expected)
        XCTAssertEqual(try s3.pendingMultipartUploads(), 0)
        for s in [0, sets / 2, sets - 1] {
            let local = dir.appendingPathComponent("check-\(s).mp4")
            try s3.download(key: "out/set-\(s)/merged.mp4", to: local)
            XCTAssertEqual(try Probe.videoFrames(local.path), 150)
            XCTAssertEqual(try Probe.rotation(local.path), -90)
            XCTAssertEqual(try s3.objectSHA256(key: "out/set-\(s)/publish/merged.mp4"), try s3.objectSHA256(key: "out/set-\(s)/merged.mp4"))
            let meta = try s3.head(key: "out/set-\(s)/merged.mp4")["metadata"] as? [String: Any]
            XCTAssertEqual((meta?["clipflow-row"] as? String)?.count, 64)
        }
        // Scratch folders went with their rows.
        let left = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains("clipflow-batch-row") }
        XCTAssertEqual(left, [])
    }

    /// `clipflow run` takes s3:// paths the same way: the fragments fetched, the three outputs
    /// (a file, its cover, a published folder) uploaded once the run completed; a local-only
    /// parameter refuses an s3:// URL, naming the field.
    func testRunTakesObjectStoragePathsToo() throws {
        let s3 = try SeaweedFS.start()
        defer { s3.stop() }
        let dir = fx.scratch("run-s3")
        _ = try fragmentSets(1, on: s3, in: dir)
        let r = try Run.run(
            [binary, "run", Self.pipeline, "--set", "CLIPS=s3://\(s3.bucket)/sets/set-0", "--set", "OUT=s3://\(s3.bucket)/single"], env: s3.environment,
            check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(Set(try s3.keys(prefix: "single/")), Set(Self.outputs.map { "single/\($0)" }))
        let local = dir.appendingPathComponent("single.mp4")
        try s3.download(key: "single/merged.mp4", to: local)
        XCTAssertEqual(try Probe.videoFrames(local.path), 150)

        // validate fetches s3:// inputs to check them as run does; a missing one is named.
        let valid = try Run.run(
            [binary, "validate", Self.pipeline, "--set", "CLIPS=s3://\(s3.bucket)/sets/set-0", "--set", "OUT=s3://\(s3.bucket)/v"], env: s3.environment,
            check: false)
        XCTAssertEqual(valid.status, 0, valid.stderr)
        XCTAssertTrue(valid.out.contains("valid (4 stages"), valid.out)
        let invalid = try Run.run(
            [binary, "validate", Self.pipeline, "--set", "CLIPS=s3://\(s3.bucket)/sets/none", "--set", "OUT=s3://\(s3.bucket)/v"], env: s3.environment,
            check: false)
        XCTAssertEqual(invalid.status, 65, invalid.stderr)
        XCTAssertTrue(invalid.stderr.contains("stages[0].glob: 's3://\(s3.bucket)/sets/none/fragment*.mp4' matches no objects"), invalid.stderr)
        XCTAssertEqual(try s3.keys(prefix: "v/"), [], "validate writes nothing")

        // --each-dir on a prefix: one row per "folder" under it.
        let each = dir.appendingPathComponent("each.json").path
        try """
        {"version": 1, "stages": [
          {"id": "clips", "kind": "files", "glob": "${DIR}/fragment*.mp4", "sort": "name"},
          {"id": "merged", "kind": "merge", "inputs": ["clips"], "output": "s3://\(s3.bucket)/each/${NAME}.mp4"}
        ]}
        """.write(toFile: each, atomically: true, encoding: .utf8)
        let rows = try Run.run(
            [binary, "batch", each, "--each-dir", "s3://\(s3.bucket)/sets/", "--summary", dir.path + "/each.json.summary"], env: s3.environment, check: false)
        XCTAssertEqual(rows.status, 0, rows.stderr)
        XCTAssertEqual(try s3.keys(prefix: "each/"), ["each/set-0.mp4"])

        let pipeline = dir.appendingPathComponent("queue.json").path
        try """
        {"version": 1, "stages": [
          {"id": "clips", "kind": "files", "glob": "s3://\(s3.bucket)/sets/set-0/fragment*.mp4"},
          {"id": "up", "kind": "upload", "inputs": ["clips"], "method": "tus", "endpoint": "http://127.0.0.1:9/files", "queue-dir": "s3://\(s3.bucket)/queue"}
        ]}
        """.write(toFile: pipeline, atomically: true, encoding: .utf8)
        let refused = try Run.run([binary, "run", pipeline], env: s3.environment, check: false)
        XCTAssertEqual(refused.status, 65, refused.stderr)
        XCTAssertTrue(
            refused.stderr.contains(
                "stages[1].queue-dir: 's3://\(s3.bucket)/queue': object storage is taken only for files a stage reads or writes; give a local path"),
            refused.stderr)
    }

    func testStorageOutageIsRetryableAndAMissingObjectIsNot() throws {
        let s3 = try SeaweedFS.start()
        let dir = fx.scratch("batch-s3-fail")
        let rows = try fragmentSets(1, on: s3, in: dir)
        let missing = dir.appendingPathComponent("missing.csv").path
        try "CLIPS,OUT\ns3://\(s3.bucket)/sets/none,s3://\(s3.bucket)/out/none\n".write(toFile: missing, atomically: true, encoding: .utf8)
        let gone = try Run.run([binary, "batch", Self.pipeline, "--rows", missing], env: s3.environment, check: false)
        XCTAssertEqual(gone.status, 65, gone.stderr)
        XCTAssertTrue(gone.stderr.contains("'s3://\(s3.bucket)/sets/none/fragment*.mp4' matches no objects"), gone.stderr)

        s3.stop()
        // Two tries a request (as the AWS tools' AWS_MAX_ATTEMPTS), so the outage is seen in seconds.
        let down = try Run.run(
            [binary, "batch", Self.pipeline, "--rows", rows, "--events", "json"], env: s3.environment.merging(["AWS_MAX_ATTEMPTS": "2"]) { _, b in b },
            check: false)
        XCTAssertEqual(down.status, 75, down.stderr)
        let s = try summary(rows + ".summary.json")
        let row = try XCTUnwrap((s["results"] as? [[String: Any]])?.first)
        XCTAssertEqual(row["status"] as? String, "failed")
        XCTAssertEqual(row["retryable"] as? Bool, true)
        for text in [down.stderr, down.out, try String(contentsOfFile: rows + ".summary.json", encoding: .utf8)] {
            XCTAssertFalse(text.contains(s3.secretKey), "the secret key must never be printed")
        }
    }
}
