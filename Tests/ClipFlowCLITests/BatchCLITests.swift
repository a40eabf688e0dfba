import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow batch` as a user runs it over many fragment sets: killed part-way and run again,
/// with bad rows among good ones, as one task of a batch engine's array, stopped by a signal.
/// Outputs are judged by ffprobe.
final class BatchCLITests: XCTestCase {
    let fx = Fixtures.shared
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let pipeline = root.appendingPathComponent("pipelines/fragments-to-folder.json").path

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func clipflow(_ args: [String], env: [String: String] = [:]) throws -> Run { try Run.run([binary] + args, env: env, check: false) }

    /// `count` sets of five 1-second fragments of one recording (hard links of one set), and a
    /// rows CSV naming each set and its own output folder.
    func fragmentSets(_ count: Int, in dir: URL) throws -> (rows: String, outs: [String]) {
        var csv = "CLIPS,OUT\n", outs: [String] = []
        let fragments = try (0..<5).map { try fx.toneClip($0, seconds: 1) }
        for s in 0..<count {
            let set = dir.appendingPathComponent("sets/set-\(s)")
            try FileManager.default.createDirectory(at: set, withIntermediateDirectories: true)
            for (i, f) in fragments.enumerated() { try FileManager.default.linkItem(atPath: f, toPath: set.appendingPathComponent("fragment\(i).mp4").path) }
            let out = dir.appendingPathComponent("out/set-\(s)").path
            csv += "\(set.path),\(out)\n"
            outs.append(out)
        }
        let rows = dir.appendingPathComponent("rows.csv").path
        try csv.write(toFile: rows, atomically: true, encoding: .utf8)
        return (rows, outs)
    }

    /// A row's outputs as the pipeline writes them: the merge, its cover, and both published.
    func complete(_ out: String) -> Bool {
        ["merged.mp4", "cover.jpg", "publish/merged.mp4", "publish/cover.jpg"].allSatisfy { FileManager.default.fileExists(atPath: out + "/" + $0) }
    }

    func summary(_ path: String) throws -> [String: Any] {
        try XCTUnwrap(JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: path))) as? [String: Any])
    }

    func statuses(_ s: [String: Any]) -> [Int: String] {
        var out: [Int: String] = [:]
        for r in s["results"] as? [[String: Any]] ?? [] { out[r["row"] as? Int ?? -1] = r["status"] as? String }
        return out
    }

    func inode(_ path: String) -> UInt64 { ((try? FileManager.default.attributesOfItem(atPath: path))?[.systemFileNumber] as? UInt64) ?? 0 }

    func temporaries(under dir: String) -> [String] {
        (FileManager.default.enumerator(atPath: dir)?.allObjects as? [String] ?? []).filter { $0.contains("clipflow-tmp") }
    }

    /// 40 rows, two at a time, killed (SIGKILL) once about a third are done, then run again: the
    /// rows complete at the kill are skipped (their files untouched), every other row runs once,
    /// every output is whole (ffprobe: 150 frames, 5 s, a JPEG cover; every 8th decoded in full),
    /// no temporary is left.
    func testFortyRowsKilledPartWayAndRunAgainDoEveryRowOnce() throws {
        let dir = fx.scratch("batch-kill")
        let (rows, outs) = try fragmentSets(40, in: dir)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["batch", Self.pipeline, "--rows", rows, "--jobs", "2", "--quiet"]
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        let deadline = Date().addingTimeInterval(120)
        while p.isRunning && outs.filter(complete).count < 13 && Date() < deadline { usleep(20_000) }
        XCTAssertTrue(p.isRunning, "the batch ended before it could be killed part-way")
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        let doneAtKill = Set(outs.indices.filter { complete(outs[$0]) })
        XCTAssertGreaterThanOrEqual(doneAtKill.count, 13)
        XCTAssertLessThan(doneAtKill.count, 40)
        let inodes = Dictionary(uniqueKeysWithValues: doneAtKill.map { ($0, inode(outs[$0] + "/merged.mp4")) })

        let again = try clipflow(["batch", Self.pipeline, "--rows", rows, "--jobs", "2"])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertTrue(again.stderr.contains("batch: \(40 - doneAtKill.count) done, \(doneAtKill.count) skipped, 0 failed"), again.stderr)
        let s = try summary(rows + ".summary.json")
        XCTAssertEqual(s["total"] as? Int, 40)
        let status = statuses(s)
        for i in 0..<40 { XCTAssertEqual(status[i], doneAtKill.contains(i) ? "skipped" : "ok", "row \(i)") }
        for (i, n) in inodes { XCTAssertEqual(inode(outs[i] + "/merged.mp4"), n, "row \(i) was complete and must not be written again") }
        for (i, out) in outs.enumerated() {
            XCTAssertEqual(try Probe.stream(out + "/merged.mp4", "v:0", "nb_frames").split(separator: ",").first, "150", out)
            XCTAssertEqual(Double(try Probe.stream(out + "/merged.mp4", "v:0", "duration").split(separator: ",").first ?? "") ?? 0, 5, accuracy: 0.05, out)
            XCTAssertEqual(try Probe.stream(out + "/cover.jpg", "v:0", "codec_name"), "mjpeg", out)
            XCTAssertEqual(
                try Data(contentsOf: URL(fileURLWithPath: out + "/publish/merged.mp4")), try Data(contentsOf: URL(fileURLWithPath: out + "/merged.mp4")))
            if i % 8 == 0 { XCTAssertEqual(try Probe.decodeErrors(out + "/merged.mp4"), "", out) }
        }
        XCTAssertEqual(temporaries(under: dir.appendingPathComponent("out").path), [], "a killed run's temporaries are swept by the next")
        // A third run has nothing left to do.
        let third = try clipflow(["batch", Self.pipeline, "--rows", rows])
        XCTAssertEqual(third.status, 0)
        XCTAssertTrue(third.stderr.contains("batch: 0 done, 40 skipped, 0 failed"), third.stderr)
    }

    /// Bad rows (a variable missing, an input folder missing, a clip that is not a video, a row
    /// the CSV cannot hold) fail alone with their reasons in the summary; the good rows complete;
    /// the exit status says a row needs fixing (65), not a retry.
    func testBadRowsFailAloneWithTheirReasons() throws {
        let dir = fx.scratch("batch-bad")
        let (_, outs) = try fragmentSets(2, in: dir)
        let broken = dir.appendingPathComponent("sets/broken")
        try FileManager.default.createDirectory(at: broken, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: try fx.toneClip(0, seconds: 1), toPath: broken.appendingPathComponent("fragment0.mp4").path)
        try Data(repeating: 0x41, count: 5000).write(to: broken.appendingPathComponent("fragment1.mp4"))
        let rows = dir.appendingPathComponent("rows.jsonl").path
        let lines = [
            #"{"CLIPS": "\#(dir.path)/sets/set-0", "OUT": "\#(outs[0])"}"#,
            #"{"CLIPS": "\#(dir.path)/sets/set-1"}"#,
            #"{"CLIPS": "\#(dir.path)/sets/none", "OUT": "\#(dir.path)/out/none"}"#,
            #"{"CLIPS": "\#(broken.path)", "OUT": "\#(dir.path)/out/broken"}"#,
            #"{"CLIPS": ["not", "a", "string"]}"#,
            #"{"CLIPS": "\#(dir.path)/sets/set-1", "OUT": "\#(outs[1])"}"#
        ]
        try (lines.joined(separator: "\n") + "\n").write(toFile: rows, atomically: true, encoding: .utf8)
        let r = try clipflow(["batch", Self.pipeline, "--rows", rows, "--jobs", "2"])
        XCTAssertEqual(r.status, 65, r.stderr)
        let s = try summary(rows + ".summary.json")
        XCTAssertEqual(s["ok"] as? Int, 2)
        XCTAssertEqual(s["failed"] as? Int, 4)
        let results = try XCTUnwrap(s["results"] as? [[String: Any]])
        func reason(_ row: Int) -> String { results.first { $0["row"] as? Int == row }?["reason"] as? String ?? "" }
        XCTAssertTrue(reason(1).contains("variable ${OUT} is not set"), reason(1))
        XCTAssertTrue(reason(2).contains("sets/none/fragment*.mp4\" matches no files"), reason(2))
        XCTAssertTrue(reason(3).contains("fragment1.mp4"), reason(3))
        XCTAssertEqual(reason(4), "\"CLIPS\": expected a string, number or boolean, got an array")
        for row in 1...4 { XCTAssertEqual(results.first { $0["row"] as? Int == row }?["retryable"] as? Bool, false, "row \(row)") }
        XCTAssertTrue(r.stderr.contains("row 3: failed (\(rows):4): "), r.stderr)
        for out in outs { XCTAssertEqual(try Probe.videoFrames(out + "/merged.mp4"), 150) }
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.path + "/out/broken/merged.mp4"))
    }

    /// One task of an array: the index comes from JOB_COMPLETION_INDEX (as Kubernetes sets it) or
    /// SLURM_ARRAY_TASK_ID; only that row runs; every event of the run carries its row; an index
    /// past the rows is an error that a retry cannot fix.
    func testOneTaskOfAnArrayRunsItsRowOnly() throws {
        let dir = fx.scratch("batch-index")
        let (rows, outs) = try fragmentSets(4, in: dir)
        let r = try clipflow(["batch", Self.pipeline, "--rows", rows, "--events", "json"], env: ["JOB_COMPLETION_INDEX": "2"])
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(outs.map(complete), [false, false, true, false])
        let events = r.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        XCTAssertGreaterThan(events.count, 10)
        let stageEvents = events.filter { $0["stage"] as? String != "batch" }
        XCTAssertTrue(stageEvents.contains { $0["stage"] as? String == "merged" && $0["event"] as? String == "finished" })
        for e in stageEvents { XCTAssertEqual(e["row"] as? Int, 2, "\(e)") }
        XCTAssertTrue(events.contains { $0["stage"] as? String == "batch" && $0["event"] as? String == "ok" && $0["row"] as? Int == 2 })
        XCTAssertEqual(statuses(try summary(rows + ".summary-2.json")), [2: "ok"])

        let slurm = try clipflow(["batch", Self.pipeline, "--rows", rows, "--quiet"], env: ["SLURM_ARRAY_TASK_ID": "0"])
        XCTAssertEqual(slurm.status, 0, slurm.stderr)
        XCTAssertTrue(complete(outs[0]))

        let past = try clipflow(["batch", Self.pipeline, "--rows", rows], env: ["SLURM_ARRAY_TASK_ID": "9"])
        XCTAssertEqual(past.status, 65)
        XCTAssertTrue(past.stderr.contains("error: row 9 (from SLURM_ARRAY_TASK_ID) does not exist: the batch has 4 row(s), 0 to 3"), past.stderr)
    }

    /// SIGTERM (as a batch engine stops a task): the running row stops, no new row starts, the
    /// summary says so, the exit status is 130; running again finishes the rest.
    func testStoppedBatchSaysSoAndFinishesWhenRunAgain() throws {
        let dir = fx.scratch("batch-stop")
        let (rows, outs) = try fragmentSets(8, in: dir)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["batch", Self.pipeline, "--rows", rows, "--jobs", "1"]
        p.standardInput = FileHandle.nullDevice
        p.standardOutput = FileHandle.nullDevice
        let err = Pipe()
        p.standardError = err
        try p.run()
        let deadline = Date().addingTimeInterval(60)
        while p.isRunning && !complete(outs[1]) && Date() < deadline { usleep(10_000) }
        kill(p.processIdentifier, SIGTERM)
        let text = String(decoding: err.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        p.waitUntilExit()
        XCTAssertEqual(p.terminationStatus, 130, text)
        XCTAssertTrue(text.contains("stopped: rows that completed are kept; run the batch again to finish the rest"), text)
        let s = try summary(rows + ".summary.json")
        XCTAssertGreaterThan(s["not_started"] as? Int ?? 0, 0)
        let again = try clipflow(["batch", Self.pipeline, "--rows", rows, "--jobs", "2", "--quiet"])
        XCTAssertEqual(again.status, 0, again.stderr)
        XCTAssertTrue(outs.allSatisfy(complete))
        XCTAssertEqual(temporaries(under: dir.appendingPathComponent("out").path), [])
    }

    /// At a terminal (a pseudo-terminal rendered by pyte): while the batch runs, one status line on
    /// the cursor's row (rows finished of all, done, skipped, failed, running, rate, time left); a
    /// line for the row that failed; at the end the status line is gone and the summary line says
    /// what happened.
    func testTerminalShowsOneStatusLineAndTheFailedRow() throws {
        let dir = fx.scratch("batch-tty")
        let (rows, _) = try fragmentSets(8, in: dir)
        let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: rows))
        handle.seekToEndOfFile()
        handle.write(Data("\(dir.path)/sets/none,\(dir.path)/out/none\n".utf8))
        handle.closeFile()
        let s = try TerminalSession.run(
            [
                ["wait": #"batch: [1-8]/9 rows \(\d+ done, 0 skipped, [01] failed\), [0-2] running, [0-9.]+ rows/s, about [0-9:]+ s? ?left"#, "timeout": 90],
                ["screen": "running"],
                ["wait": #"batch: 8 done, 0 skipped, 1 failed; summary: "#, "timeout": 120], ["screen": "end"], ["exit": 10]
            ], [binary, "batch", Self.pipeline, "--rows", rows, "--jobs", "2"])
        XCTAssertNil(s.failed, s.raw)
        XCTAssertEqual(s.status, 65)
        XCTAssertTrue(s.statusRow("running").hasPrefix("batch: "), "the status line is where the cursor is: \(s.screen("running").lines)")
        let end = s.screen("end").lines.filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        let shown = end.joined()  // a long line wraps at the terminal's width
        XCTAssertTrue(shown.contains("row 8: failed (\(rows):10): ") && shown.contains("matches no files"), "\(end)")
        XCTAssertFalse(end.contains { $0.contains("/9 rows (") }, "the status line is cleared at the end: \(end)")
    }

    /// --each-dir: one row per sub-folder, ${DIR} and ${NAME}; outputs in folders made for them.
    func testEachDirRunsOneRowPerFolder() throws {
        let dir = fx.scratch("batch-each")
        _ = try fragmentSets(3, in: dir)
        let pipeline = dir.appendingPathComponent("each.json").path
        try """
        {"version": 1, "stages": [
          {"id": "clips", "kind": "files", "glob": "${DIR}/fragment*.mp4", "sort": "name"},
          {"id": "merged", "kind": "merge", "inputs": ["clips"], "output": "\(dir.path)/merged/${NAME}.mp4", "rotate": 90}
        ]}
        """.write(toFile: pipeline, atomically: true, encoding: .utf8)
        let r = try clipflow(["batch", pipeline, "--each-dir", dir.appendingPathComponent("sets").path, "--summary", dir.path + "/summary.json"])
        XCTAssertEqual(r.status, 0, r.stderr)
        for s in 0..<3 {
            let out = "\(dir.path)/merged/set-\(s).mp4"
            XCTAssertEqual(try Probe.videoFrames(out), 150)
            XCTAssertEqual(try Probe.rotation(out), -90, "a quarter turn clockwise, in FFmpeg's sign")
        }
        XCTAssertEqual(try summary(dir.path + "/summary.json")["ok"] as? Int, 3)
    }

    /// Two rows that would write the same file fail before either runs (neither output is
    /// half one row's and half the other's).
    func testRowsWritingOneOutputFailBeforeRunning() throws {
        let dir = fx.scratch("batch-clash")
        _ = try fragmentSets(2, in: dir)
        let rows = dir.appendingPathComponent("clash.csv").path
        try "CLIPS,OUT\n\(dir.path)/sets/set-0,\(dir.path)/out/same\n\(dir.path)/sets/set-1,\(dir.path)/out/same/\n".write(
            toFile: rows, atomically: true, encoding: .utf8)
        let r = try clipflow(["batch", Self.pipeline, "--rows", rows])
        XCTAssertEqual(r.status, 65)
        XCTAssertTrue(r.stderr.contains("which row(s) 1 write too; give each row its own outputs"), r.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.path + "/out/same/merged.mp4"))
    }

    /// The exit statuses a batch may end with (`clipflow batch --help`): anything else, a crash's
    /// signal above all, is a task a batch engine cannot classify.
    static let documentedStatuses: Set<Int32> = [0, 64, 65, 75, 130]

    /// Two rows naming one file by different real paths (`link` is a symlink to `out`) fail
    /// before either runs, each naming the other and the clash; nothing is written; 65.
    func testRowsWritingOneFileThroughASymlinkFailBeforeRunning() throws {
        let dir = fx.scratch("batch-clash-symlink")
        _ = try fragmentSets(2, in: dir)
        try FileManager.default.createDirectory(atPath: dir.path + "/out", withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(atPath: dir.path + "/link", withDestinationPath: dir.path + "/out")
        let rows = dir.appendingPathComponent("clash.csv").path
        try "CLIPS,OUT\n\(dir.path)/sets/set-0,\(dir.path)/out/same\n\(dir.path)/sets/set-1,\(dir.path)/link/same\n".write(
            toFile: rows, atomically: true, encoding: .utf8)
        let r = try clipflow(["batch", Self.pipeline, "--rows", rows])
        XCTAssertEqual(r.status, 65, r.stderr)
        let s = try summary(rows + ".summary.json")
        XCTAssertEqual(statuses(s), [0: "failed", 1: "failed"])
        let results = try XCTUnwrap(s["results"] as? [[String: Any]])
        func reason(_ row: Int) -> String { results.first { $0["row"] as? Int == row }?["reason"] as? String ?? "" }
        XCTAssertTrue(reason(0).contains("writes '\(dir.path)/out/same/merged.mp4', which row(s) 1 write too"), reason(0))
        XCTAssertTrue(reason(0).contains("row 1 names it '\(dir.path)/link/same/merged.mp4'"), reason(0))
        XCTAssertTrue(reason(1).contains("writes '\(dir.path)/link/same/merged.mp4', which row(s) 0 write too"), reason(1))
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path + "/out"), [], "nothing is written")
    }

    /// Row 0 writes into row 1's input folder, where row 1's pattern would match its output:
    /// both rows are refused before either runs, each naming the other; nothing is written; 65.
    func testRowWritingAnotherRowsInputFailsBeforeRunning() throws {
        let dir = fx.scratch("batch-writes-input")
        _ = try fragmentSets(2, in: dir)
        let pipeline = dir.appendingPathComponent("merge.json").path
        try """
        {"version": 1, "stages": [
          {"id": "clips", "kind": "files", "glob": "${CLIPS}/fragment*.mp4", "sort": "name"},
          {"id": "merged", "kind": "merge", "inputs": ["clips"], "output": "${OUT}"}
        ]}
        """.write(toFile: pipeline, atomically: true, encoding: .utf8)
        let rows = dir.appendingPathComponent("rows.csv").path
        try "CLIPS,OUT\n\(dir.path)/sets/set-0,\(dir.path)/sets/set-1/fragment9.mp4\n\(dir.path)/sets/set-1,\(dir.path)/out/one.mp4\n".write(
            toFile: rows, atomically: true, encoding: .utf8)
        for jobs in ["1", "2"] {
            let r = try clipflow(["batch", pipeline, "--rows", rows, "--jobs", jobs])
            XCTAssertEqual(r.status, 65, r.stderr)
            let s = try summary(rows + ".summary.json")
            XCTAssertEqual(statuses(s), [0: "failed", 1: "failed"])
            let results = try XCTUnwrap(s["results"] as? [[String: Any]])
            func reason(_ row: Int) -> String { results.first { $0["row"] as? Int == row }?["reason"] as? String ?? "" }
            XCTAssertTrue(
                reason(0).contains("stages[1].output '\(dir.path)/sets/set-1/fragment9.mp4' is an input of row 1 (stages[0].glob"), reason(0))
            XCTAssertTrue(reason(1).contains("stages[0].glob '\(dir.path)/sets/set-1/fragment*.mp4' reads what row 0 writes"), reason(1))
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir.path + "/sets/set-1/fragment9.mp4"))
            XCTAssertFalse(FileManager.default.fileExists(atPath: dir.path + "/out/one.mp4"))
        }
    }

    /// A stride no row index can reach past (`--shard 1/Int.max`, or `--index 1 --index-count`
    /// of it) selects the one row it names, and the batch ends with a documented status.
    func testHugeShardStrideRunsTheOneRowItNames() throws {
        let dir = fx.scratch("batch-huge-stride")
        let (rows, outs) = try fragmentSets(2, in: dir)
        let r = try clipflow(["batch", Self.pipeline, "--rows", rows, "--shard", "1/9223372036854775807"])
        XCTAssertTrue(Self.documentedStatuses.contains(r.status), "status \(r.status): \(r.stderr)")
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(outs.map(complete), [false, true])
        XCTAssertEqual(statuses(try summary(rows + ".summary-1-of-9223372036854775807.json")), [1: "ok"])
        let indexed = try clipflow(["batch", Self.pipeline, "--rows", rows, "--index", "1", "--index-count", "9223372036854775807"])
        XCTAssertTrue(Self.documentedStatuses.contains(indexed.status), "status \(indexed.status): \(indexed.stderr)")
        XCTAssertEqual(indexed.status, 0, indexed.stderr)
        XCTAssertTrue(indexed.stderr.contains("batch: 0 done, 1 skipped, 0 failed"), indexed.stderr)
        let beyond = try clipflow(["batch", Self.pipeline, "--rows", rows, "--shard", "9223372036854775806/9223372036854775807"])
        XCTAssertEqual(beyond.status, 0, beyond.stderr)
        XCTAssertTrue(beyond.stderr.contains("batch: 0 of 2 row(s)"), beyond.stderr)
    }
}
