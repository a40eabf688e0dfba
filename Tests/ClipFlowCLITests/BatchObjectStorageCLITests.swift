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

    /// The exit statuses a batch may end with (`clipflow batch --help`).
    static let documentedStatuses: Set<Int32> = [0, 64, 65, 75, 130]

    /// Runs `script` in python3 with boto3 (a client that is not ours) against `s3`: the script
    /// has `s3`, a client, and `bucket`. Returns what it printed.
    @discardableResult
    func boto3(_ script: String, on s3: SeaweedFS) throws -> String {
        let prelude = """
            import os, boto3
            from botocore.config import Config
            s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"], region_name=os.environ["AWS_REGION"],
                aws_access_key_id=os.environ["AWS_ACCESS_KEY_ID"], aws_secret_access_key=os.environ["AWS_SECRET_ACCESS_KEY"],
                config=Config(s3={"addressing_style": "path"}))
            bucket = "\(s3.bucket)"

            """
        return try Run.run(["python3", "-c", prelude + script], env: s3.environment).out
    }

    /// A pipeline file in `dir`: the row's fragments (`CLIPS`) as one HLS ladder in `${OUT}/hls`.
    func ladderPipeline(in dir: URL) throws -> String {
        let pipeline = dir.appendingPathComponent("ladder.json").path
        try """
        {"version": 1, "stages": [
          {"id": "clips", "kind": "files", "glob": "${CLIPS}/fragment*.mp4", "sort": "name"},
          {"id": "ladder", "kind": "hls", "inputs": ["clips"], "output": "${OUT}/hls", "profile": "feed", "encoder-preset": "ultrafast"}
        ]}
        """.write(toFile: pipeline, atomically: true, encoding: .utf8)
        return pipeline
    }

    /// A ladder's row killed between its last segment and its playlists (the bucket as the kill
    /// leaves it: every segment there with the row's key, no playlist, the master's multipart
    /// upload begun) is not complete: the next run redoes it, puts the master last, aborts the
    /// stale upload, and the run after that skips it.
    func testHalfPublishedLadderIsRedoneAndItsStaleUploadAborted() throws {
        let s3 = try SeaweedFS.start()
        defer { s3.stop() }
        let dir = fx.scratch("batch-s3-ladder")
        let rows = try fragmentSets(1, on: s3, in: dir)
        let pipeline = try ladderPipeline(in: dir)
        let first = try Run.run([binary, "batch", pipeline, "--rows", rows], env: s3.environment, check: false)
        XCTAssertEqual(first.status, 0, first.stderr)
        let prefix = "out/set-0/hls/"
        let whole = Set(try s3.keys(prefix: prefix))
        XCTAssertTrue(whole.contains(prefix + "master.m3u8"), "\(whole)")
        XCTAssertGreaterThan(whole.filter { $0.hasSuffix(".m4s") }.count, 1, "\(whole)")

        try boto3(
            """
            for o in s3.list_objects_v2(Bucket=bucket, Prefix="\(prefix)")["Contents"]:
                if o["Key"].endswith(".m3u8"):
                    s3.delete_object(Bucket=bucket, Key=o["Key"])
            u = s3.create_multipart_upload(Bucket=bucket, Key="\(prefix)master.m3u8")
            s3.upload_part(Bucket=bucket, Key="\(prefix)master.m3u8", UploadId=u["UploadId"], PartNumber=1, Body=b"#EXTM3U\\n")
            """, on: s3)
        XCTAssertEqual(try s3.pendingMultipartUploads(), 1)
        XCTAssertFalse(try s3.keys(prefix: prefix).contains { $0.hasSuffix(".m3u8") })

        let again = try Run.run([binary, "batch", pipeline, "--rows", rows], env: s3.environment, check: false)
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertTrue(again.stderr.contains("batch: 1 done, 0 skipped, 0 failed"), again.stderr)
        XCTAssertEqual(Set(try s3.keys(prefix: prefix)), whole)
        XCTAssertEqual(try s3.pendingMultipartUploads(), 0, "the killed run's upload is aborted")
        let meta = try s3.head(key: prefix + "master.m3u8")["metadata"] as? [String: Any]
        XCTAssertEqual((meta?["clipflow-row"] as? String)?.count, 64)
        let master = dir.appendingPathComponent("master.m3u8")
        try s3.download(key: prefix + "master.m3u8", to: master)
        let text = try String(contentsOf: master, encoding: .utf8)
        XCTAssertTrue(text.hasPrefix("#EXTM3U") && text.contains("#EXT-X-STREAM-INF"), text)

        let third = try Run.run([binary, "batch", pipeline, "--rows", rows], env: s3.environment, check: false)
        XCTAssertEqual(third.status, 0, third.stderr)
        XCTAssertTrue(third.stderr.contains("batch: 0 done, 1 skipped, 0 failed"), third.stderr)
    }

    /// Ladders of six rows, two at a time, killed (SIGKILL) while a row's ladder is part-way up
    /// (some of its objects there, not its master playlist), then run again: the half-published
    /// row is redone, not skipped; every ladder ends whole with its master carrying the row's
    /// key, and no multipart upload is left open.
    func testLadderBatchKilledMidUploadRedoesTheHalfPublishedRow() throws {
        let s3 = try SeaweedFS.start()
        defer { s3.stop() }
        let dir = fx.scratch("batch-s3-ladder-kill")
        let sets = 6
        let rows = try fragmentSets(sets, on: s3, in: dir)
        let pipeline = try ladderPipeline(in: dir)
        let env = s3.environment.merging(["TMPDIR": dir.path]) { _, b in b }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["batch", pipeline, "--rows", rows, "--jobs", "2", "--quiet"]
        p.environment = ProcessInfo.processInfo.environment.merging(env) { _, b in b }
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        // One boto3 process watches the bucket as fast as it answers. The moment a row's ladder
        // is there in part it stops the batch (SIGSTOP), lets the requests already sent land, and
        // looks again: a row still there in part gets the batch killed (SIGKILL) and its prefix
        // printed; otherwise (its master arrived meanwhile) the batch goes on and the watch too.
        let partial = try boto3(
            """
            import signal, time
            def half_rows():
                keys = [o["Key"] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="out/") for o in page.get("Contents", [])]
                rows = {k.split("/hls/")[0] for k in keys if "/hls/" in k}
                return sorted(r for r in rows if r + "/hls/master.m3u8" not in keys)
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline:
                if half_rows():
                    os.kill(\(p.processIdentifier), signal.SIGSTOP)
                    time.sleep(0.2)
                    half = half_rows()
                    if half:
                        os.kill(\(p.processIdentifier), signal.SIGKILL)
                        print(half[0])
                        break
                    os.kill(\(p.processIdentifier), signal.SIGCONT)
                time.sleep(0.005)
            """, on: s3
        ).trimmingCharacters(in: .whitespacesAndNewlines)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationReason, .uncaughtSignal, "the batch ended before a row's ladder was there in part")
        XCTAssertTrue(partial.hasPrefix("out/set-"), partial)
        XCTAssertFalse(try s3.keys(prefix: partial + "/hls/").contains(partial + "/hls/master.m3u8"))
        let keysAtKill = Set(try s3.keys(prefix: "out/"))
        let wholeAtKill = (0..<sets).filter { keysAtKill.contains("out/set-\($0)/hls/master.m3u8") }

        let again = try Run.run([binary, "batch", pipeline, "--rows", rows, "--jobs", "2"], env: env, check: false)
        XCTAssertTrue(Self.documentedStatuses.contains(again.status), "status \(again.status): \(again.stderr)")
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertTrue(again.stderr.contains("batch: \(sets - wholeAtKill.count) done, \(wholeAtKill.count) skipped, 0 failed"), again.stderr)
        let s = try summary(rows + ".summary.json")
        let results = try XCTUnwrap(s["results"] as? [[String: Any]])
        let halfRow = Int(partial.dropFirst("out/set-".count)) ?? -1
        XCTAssertEqual(results.first { $0["row"] as? Int == halfRow }?["status"] as? String, "ok", "the half-published row is redone")
        let keys = Set(try s3.keys(prefix: "out/"))
        let ladder = Set(keys.filter { $0.hasPrefix("out/set-0/hls/") }.map { String($0.dropFirst("out/set-0/hls/".count)) })
        XCTAssertTrue(ladder.contains("master.m3u8"), "\(ladder)")
        XCTAssertEqual(keys, Set((0..<sets).flatMap { r in ladder.map { "out/set-\(r)/hls/\($0)" } }), "every ladder whole, nothing else")
        XCTAssertEqual(try s3.pendingMultipartUploads(), 0, "no multipart upload left open")
        for r in 0..<sets {
            let meta = try s3.head(key: "out/set-\(r)/hls/master.m3u8")["metadata"] as? [String: Any]
            XCTAssertEqual((meta?["clipflow-row"] as? String)?.count, 64, "row \(r)")
        }
    }

    /// A file output that names a folder (`s3://b/out/trail/`, `s3://b/out/..`) is bad input,
    /// refused before anything is written: 65, no object, no upload begun.
    func testObjectOutputNamingAFolderIsRefusedUpFront() throws {
        let s3 = try SeaweedFS.start()
        defer { s3.stop() }
        let dir = fx.scratch("batch-s3-folder-output")
        _ = try fragmentSets(1, on: s3, in: dir)
        let pipeline = dir.appendingPathComponent("merge.json").path
        try """
        {"version": 1, "stages": [
          {"id": "clips", "kind": "files", "glob": "${CLIPS}/fragment*.mp4", "sort": "name"},
          {"id": "merged", "kind": "merge", "inputs": ["clips"], "output": "${OUT}"}
        ]}
        """.write(toFile: pipeline, atomically: true, encoding: .utf8)
        let rows = dir.appendingPathComponent("folders.csv").path
        let outputs = ["s3://\(s3.bucket)/out/trail/", "s3://\(s3.bucket)/out/..", "s3://\(s3.bucket)/out/./x.mp4"]
        try ("CLIPS,OUT\n" + outputs.map { "s3://\(s3.bucket)/sets/set-0,\($0)\n" }.joined()).write(toFile: rows, atomically: true, encoding: .utf8)
        let r = try Run.run([binary, "batch", pipeline, "--rows", rows], env: s3.environment, check: false)
        XCTAssertTrue(Self.documentedStatuses.contains(r.status), "status \(r.status): \(r.stderr)")
        XCTAssertEqual(r.status, 65, r.stderr)
        let s = try summary(rows + ".summary.json")
        let results = try XCTUnwrap(s["results"] as? [[String: Any]])
        XCTAssertEqual(results.count, outputs.count)
        for (i, out) in outputs.enumerated() {
            let row = try XCTUnwrap(results.first { $0["row"] as? Int == i })
            XCTAssertEqual(row["status"] as? String, "failed", "\(row)")
            XCTAssertEqual(row["retryable"] as? Bool, false, "\(row)")
            let reason = row["reason"] as? String ?? ""
            XCTAssertTrue(reason.contains("stages[1].output: '\(out)'"), reason)
        }
        XCTAssertEqual(try s3.keys().filter { !$0.hasPrefix("sets/") }, [], "nothing is written")
        XCTAssertEqual(try s3.pendingMultipartUploads(), 0)

        let run = try Run.run(
            [binary, "run", pipeline, "--set", "CLIPS=s3://\(s3.bucket)/sets/set-0", "--set", "OUT=s3://\(s3.bucket)/out/trail/"], env: s3.environment,
            check: false)
        XCTAssertEqual(run.status, 65, run.stderr)
        XCTAssertEqual(try s3.keys().filter { !$0.hasPrefix("sets/") }, [], "nothing is written")
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
