import ClipFlowTestSupport
import Foundation
import XCTest

/// Every long command (`merge`, `record`, `upload`, `run`) goes through the one front door: a
/// graph run by the one runner, the same event schema, the same exit statuses, the same renderer.
final class FrontDoorCLITests: XCTestCase {
    let fx = Fixtures.shared
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func clipflow(_ args: [String], env: [String: String] = [:]) throws -> Run { try Run.run([binary] + args, env: env, check: false) }

    func events(_ r: Run) -> [[String: Any]] {
        r.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    /// One pipeline file joining `clips` into `out`.
    func pipeline(_ name: String, clips: [String], out: String) throws -> String {
        let p = fx.scratch("front-door").appendingPathComponent(name).path
        let list = clips.map { "\"\($0)\"" }.joined(separator: ",")
        try """
        {"version": 1, "stages": [
          {"id": "files", "kind": "files", "paths": [\(list)]},
          {"id": "merge", "kind": "merge", "inputs": ["files"], "output": "\(out)"}
        ]}
        """.write(toFile: p, atomically: true, encoding: .utf8)
        return p
    }

    /// The stages of a run as its events show them: each started once and finished once, in a
    /// stream where every line has `time`, `stage` and `event` first.
    func assertRunThroughTheRunner(_ r: Run, stages: Set<String>, _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertEqual(r.status, 0, "\(what): \(r.stderr)", file: file, line: line)
        let ev = events(r)
        XCTAssertEqual(ev.count, r.out.split(separator: "\n").count, "\(what): every stdout line is an event", file: file, line: line)
        for e in ev {
            XCTAssertNotNil(e["time"] as? Double, "\(what): \(e)", file: file, line: line)
            XCTAssertNotNil(e["stage"] as? String, "\(what): \(e)", file: file, line: line)
            XCTAssertNotNil(e["event"] as? String, "\(what): \(e)", file: file, line: line)
        }
        for kind in ["started", "finished"] {
            let named = ev.filter { $0["event"] as? String == kind && $0["item"] == nil }.compactMap { $0["stage"] as? String }
            XCTAssertEqual(named.sorted(), stages.sorted(), "\(what): one \(kind) per graph node", file: file, line: line)
        }
        // The keys lead every line in the same order.
        for text in r.out.split(separator: "\n") {
            XCTAssertTrue(text.hasPrefix("{\"time\":"), "\(what): \(text)", file: file, line: line)
            XCTAssertTrue(text.contains(",\"stage\":\"") && text.range(of: "\"stage\":")!.lowerBound < text.range(of: "\"event\":")!.lowerBound)
        }
    }

    func testEveryLongCommandRunsThroughTheRunnerWithTheSameEventSchema() throws {
        let a = try fx.toneClip(0, seconds: 1), b = try fx.toneClip(1, seconds: 1)
        let dir = fx.scratch("front-door-events")

        let merge = try clipflow([
            "merge", "--events", "json", "-o", dir.appendingPathComponent("m.mp4").path, "--thumbnail", dir.appendingPathComponent("m.jpg").path, a, b
        ])
        assertRunThroughTheRunner(merge, stages: ["files", "merge", "merge.probe", "thumbnail"], "merge")
        let result = try XCTUnwrap(events(merge).first { $0["event"] as? String == "result" && $0["stage"] as? String == "merge" })
        XCTAssertEqual(result["clips"] as? Int, 2)
        XCTAssertEqual(try Probe.videoFrames(dir.appendingPathComponent("m.mp4").path), result["video_frames"] as? Int)

        let run = try clipflow(["run", "--events", "json", try pipeline("p.json", clips: [a, b], out: dir.appendingPathComponent("r.mp4").path)])
        assertRunThroughTheRunner(run, stages: ["files", "merge", "merge.probe"], "run")

        let record = try clipflow(["record", "--events", "json", "-o", dir.appendingPathComponent("rec").path, "--size", "320x240", "--duration", "1", "--fast"]
        )
        assertRunThroughTheRunner(record, stages: ["camera", "record"], "record")

        let server = try TUSServer.start(directory: fx.scratch("front-door-tus"))
        defer { server.stop() }
        let file = dir.appendingPathComponent("m.mp4").path
        let queue = fx.scratch("front-door-q").path
        let upload = try clipflow(["upload", file, "--to", "tus", "--endpoint", server.baseURL, "--queue", queue, "--events", "json"])
        assertRunThroughTheRunner(upload, stages: ["upload"], "upload send")
        // Per-item events name the upload, with the fields of the upload.
        let ev = events(upload)
        let item = try XCTUnwrap(ev.first { $0["event"] as? String == "started" && $0["item"] != nil })
        XCTAssertEqual(item["stage"] as? String, "upload")
        XCTAssertEqual(item["resumed_at"] as? Int, 0)
        XCTAssertNotNil((ev.last { $0["event"] as? String == "finished" && $0["item"] != nil }?["result"] as? [String: Any])?["url"])

        let queued = try clipflow(["upload", a, "--to", "tus", "--endpoint", server.baseURL, "--queue", queue, "--no-wait"])
        XCTAssertEqual(queued.status, 0, queued.stderr)
        let later = try clipflow(["upload", "run", "--queue", queue, "--events", "json"])
        assertRunThroughTheRunner(later, stages: ["upload"], "upload run")
        XCTAssertEqual(events(later).filter { $0["event"] as? String == "finished" && $0["item"] != nil }.count, 1)
    }

    /// Bad input exits 65 from every command; a failing server exits 1; each names the problem.
    func testTheSameExitStatusMapsTheSameKindOfErrorAcrossCommands() throws {
        let dir = fx.scratch("front-door-status")
        let missing = dir.appendingPathComponent("missing.mp4").path
        let out = dir.appendingPathComponent("o.mp4").path
        let cases: [(String, Run)] = [
            ("merge", try clipflow(["merge", "-o", out, missing])),
            ("run", try clipflow(["run", try pipeline("bad.json", clips: [missing], out: out)])),
            ("record", try clipflow(["record", "-o", dir.appendingPathComponent("rec").path, "--preset", "warp", "--duration", "1", "--fast"])),
            (
                "upload",
                try clipflow(["upload", missing, "--to", "tus", "--endpoint", "http://127.0.0.1:9/files", "--queue", dir.appendingPathComponent("q").path])
            )
        ]
        for (command, r) in cases {
            XCTAssertEqual(r.status, 65, "\(command): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("error: "), "\(command): \(r.stderr)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: out), command)
        }
        let port = ServerProcess.freePort()
        let down = try clipflow([
            "upload", try fx.toneClip(0, seconds: 1), "--to", "tus", "--endpoint", "http://127.0.0.1:\(port)/files",
            "--queue", dir.appendingPathComponent("q2").path, "--retries", "1", "--retry-delay", "0.01"
        ])
        XCTAssertEqual(down.status, 1, down.stderr)
        XCTAssertTrue(down.stderr.contains("error: "), down.stderr)
    }

    /// Text mode: the same renderer for every command; lines are "STAGE: ..." with no carriage
    /// return when stderr is not a terminal, and the same progress line shape. By default only
    /// what a person needs (files written, the summary); `--verbose` adds progress and queues.
    func testTextModeLinesLookAlikeAcrossCommands() throws {
        let a = try fx.toneClip(0, seconds: 1), b = try fx.toneClip(1, seconds: 1)
        let dir = fx.scratch("front-door-text")
        func commands(_ extra: [String], _ tag: String) throws -> [(String, Run)] {
            [
                ("merge", try clipflow(["merge", "-o", dir.appendingPathComponent("m\(tag).mp4").path, a, b] + extra)),
                ("run", try clipflow(["run", try pipeline("t\(tag).json", clips: [a, b], out: dir.appendingPathComponent("r\(tag).mp4").path)] + extra)),
                (
                    "record",
                    try clipflow(["record", "-o", dir.appendingPathComponent("rec\(tag)").path, "--size", "320x240", "--duration", "1", "--fast"] + extra)
                )
            ]
        }
        let plain = try commands([], "")
        let verbose = try commands(["--verbose"], "-v")
        for (command, r) in plain + verbose {
            XCTAssertEqual(r.status, 0, "\(command): \(r.stderr)")
            XCTAssertFalse(r.stderr.contains("\r"), command)
            XCTAssertEqual(r.out, "", "\(command): text mode writes nothing on stdout")
        }
        for (command, r) in plain {
            XCTAssertFalse(r.stderr.contains("queue from"), "\(command): queue statistics are for --verbose: \(r.stderr)")
            XCTAssertFalse(r.stderr.contains("files: "), "\(command): listing files takes no time: \(r.stderr)")
        }
        XCTAssertEqual(plain[0].1.stderr.split(separator: "\n").count, 1, "merge: its summary alone: \(plain[0].1.stderr)")
        XCTAssertTrue(plain[1].1.stderr.contains("merge: wrote \(dir.appendingPathComponent("r.mp4").path)\n"), plain[1].1.stderr)
        XCTAssertTrue(plain[2].1.stderr.contains("record: wrote "), plain[2].1.stderr)
        for (_, r) in verbose.prefix(2) {
            XCTAssertTrue(r.stderr.contains("files: 100% (2 of 2 files)\n"), r.stderr)
            XCTAssertTrue(r.stderr.contains("merge: 100% ("), r.stderr)
            XCTAssertTrue(r.stderr.contains("merge.probe: queue from files: at most "), r.stderr)
            XCTAssertTrue(r.stderr.contains("merge: queue from merge.probe: at most "), r.stderr)
        }
        XCTAssertTrue(verbose[2].1.stderr.contains("record: queue from camera: at most "), verbose[2].1.stderr)
    }
}
