import ClipFlowTestSupport
import Foundation
import XCTest

/// The command line as a person meets it: no output replaced without `-y`, what `--rotate` and
/// `--set-rotation` mean, one line per error, quiet by default, help texts, upload wording.
final class CommandLineCLITests: XCTestCase {
    let fx = Fixtures.shared
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func clipflow(_ args: [String], env: [String: String] = [:]) throws -> Run { try Run.run([binary] + args, env: env, check: false) }

    func sha(_ path: String) throws -> String {
        String(try Run.run(["sha256sum", path]).out.prefix(64))
    }

    /// A clip stored as it was recorded, its display matrix turning it 90 degrees clockwise, as a
    /// phone writes it, made by the ffmpeg CLI: on a stream copy FFmpeg 5.1 writes the `rotate`
    /// tag into the matrix, and a tag of 270 comes out as the matrix ffprobe reads as -90.
    func turnedClip() throws -> String {
        try fx.clip("turned-cw90.mov", ["-i", try fx.toneClip(0, seconds: 1), "-c", "copy", "-metadata:s:v:0", "rotate=270", "-f", "mov"])
    }

    // MARK: 1. No silent overwrite

    func testEveryCommandRefusesToReplaceAnOutputUnlessToldTo() throws {
        let a = try fx.toneClip(0, seconds: 1), b = try fx.toneClip(1, seconds: 1)
        let dir = fx.scratch("overwrite")
        let out = dir.appendingPathComponent("merged.mp4").path, cover = dir.appendingPathComponent("cover.jpg").path
        let ladder = dir.appendingPathComponent("ladder").path, joined = dir.appendingPathComponent("joined.mp4").path
        try Data("an earlier video".utf8).write(to: URL(fileURLWithPath: out))
        try Data("an earlier cover".utf8).write(to: URL(fileURLWithPath: cover))
        try Data("an earlier transcode".utf8).write(to: URL(fileURLWithPath: joined))
        try FileManager.default.createDirectory(atPath: ladder, withIntermediateDirectories: true)
        try Data("#EXTM3U\n".utf8).write(to: URL(fileURLWithPath: ladder + "/master.m3u8"))
        let inputs = try [a, b].map(sha)
        let before = try [out, cover, joined, ladder + "/master.m3u8"].map(sha)

        // The default output name too: `clipflow merge a.mp4` in a folder holding merged.mp4.
        let cases: [(args: [String], cwd: String?, says: [String])] = [
            (["merge", a, b], dir.path, ["error: -o 'merged.mp4' exists; give -y (--overwrite) to replace it"]),
            (
                ["merge", "-o", out, "--thumbnail", cover, a, b], nil,
                [
                    "error: -o '\(out)' exists; give -y (--overwrite) to replace it",
                    "error: --thumbnail '\(cover)' exists; give -y (--overwrite) to replace it"
                ]
            ),
            (["transcode", "-o", joined, "--height", "120", a], nil, ["error: -o '\(joined)' exists; give -y (--overwrite) to replace it"]),
            (["hls", "-o", ladder, a], nil, ["error: -o '\(ladder)' exists; give -y (--overwrite) to replace it"])
        ]
        for c in cases {
            let r: Run
            if let cwd = c.cwd {
                r = try Run.run(["/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", cwd, binary] + c.args, check: false)
            } else {
                r = try clipflow(c.args)
            }
            XCTAssertEqual(r.status, 1, "\(c.args): \(r.stderr)")
            XCTAssertEqual(r.stderr, c.says.joined(separator: "\n") + "\n", "\(c.args)")
        }
        XCTAssertEqual(try [out, cover, joined, ladder + "/master.m3u8"].map(sha), before, "nothing replaced")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: ladder), ["master.m3u8"])

        // -y replaces each, with real media (read back by ffprobe), and never touches the inputs.
        for args in [
            ["merge", "-y", "-q", "-o", out, "--thumbnail", cover, a, b], ["transcode", "--overwrite", "-q", "-o", joined, "--height", "120", a],
            ["hls", "-y", "-q", "-o", ladder, a]
        ] {
            let r = try clipflow(args)
            XCTAssertEqual(r.status, 0, "\(args): \(r.stderr)")
        }
        XCTAssertEqual(try Probe.videoFrames(out), 60)
        XCTAssertEqual(try Probe.stream(cover, "v:0", "codec_name"), "mjpeg")
        XCTAssertEqual(try Probe.stream(joined, "v:0", "height"), "120")
        XCTAssertTrue(try String(contentsOfFile: ladder + "/master.m3u8", encoding: .utf8).contains("#EXT-X-STREAM-INF"))
        XCTAssertFalse(FileManager.default.fileExists(atPath: ladder + "/.leftover"))
        XCTAssertEqual(try [a, b].map(sha), inputs, "inputs untouched")
        let names = try FileManager.default.contentsOfDirectory(atPath: dir.path)
        XCTAssertFalse(names.contains { $0.contains(".clipflow-tmp-") }, "no temporaries left: \(names)")
    }

    func testAPipelineStageReplacesAnOutputOnlyWithOverwriteOrRunDashY() throws {
        let a = try fx.toneClip(0, seconds: 1)
        let dir = fx.scratch("overwrite-pipeline")
        let out = dir.appendingPathComponent("m.mp4").path, cover = dir.appendingPathComponent("m.jpg").path
        func pipeline(_ name: String, overwrite: Bool?) throws -> String {
            let field = overwrite.map { ", \"overwrite\": \($0)" } ?? ""
            let p = dir.appendingPathComponent(name).path
            try """
            {"version": 1, "stages": [
              {"id": "files", "kind": "files", "paths": ["\(a)"]},
              {"id": "merge", "kind": "merge", "inputs": ["files"], "output": "\(out)"\(field)},
              {"id": "cover", "kind": "thumbnail", "inputs": ["merge"], "output": "\(cover)"}
            ]}
            """.write(toFile: p, atomically: true, encoding: .utf8)
            return p
        }
        let plain = try pipeline("plain.json", overwrite: nil)
        let first = try clipflow(["run", "-q", plain])
        XCTAssertEqual(first.status, 0, first.stderr)
        let made = try sha(out)

        // A second run: both outputs exist; each is named at its place, nothing runs.
        for command in ["validate", "run"] {
            let r = try clipflow([command, plain])
            XCTAssertEqual(r.status, 65, "\(command): \(r.stderr)")
            XCTAssertTrue(
                r.stderr.contains("\(plain):4:"), "\(command): the merge stage's line: \(r.stderr)")
            XCTAssertTrue(
                r.stderr.contains("stages[1].output: '\(out)' exists; it is replaced only when asked (\"overwrite\": true on this stage, or -y)"),
                "\(command): \(r.stderr)")
            XCTAssertTrue(r.stderr.contains("stages[2].output: '\(cover)' exists"), "\(command): \(r.stderr)")
        }
        XCTAssertEqual(try sha(out), made)

        // "overwrite": true on the merge lets it replace its output; the cover is still refused.
        let one = try clipflow(["run", "-q", try pipeline("one.json", overwrite: true)])
        XCTAssertEqual(one.status, 65, one.stderr)
        XCTAssertFalse(one.stderr.contains("stages[1].output"), one.stderr)
        XCTAssertTrue(one.stderr.contains("stages[2].output: '\(cover)' exists"), one.stderr)

        // -y sets it on every stage that writes.
        let all = try clipflow(["run", "-q", "-y", plain])
        XCTAssertEqual(all.status, 0, all.stderr)
        XCTAssertEqual(try Probe.videoFrames(out), 30)
        XCTAssertEqual(try Probe.stream(cover, "v:0", "codec_name"), "mjpeg")
    }

    // MARK: 2. --rotate adds, --set-rotation sets

    func testRotateAddsToTheClipsOwnTurnAndSetRotationReplacesIt() throws {
        let turned = try turnedClip()
        XCTAssertEqual(try Probe.rotation(turned), -90, "the fixture shows turned 90 degrees clockwise")
        let dir = fx.scratch("rotation")
        func merged(_ args: [String], _ name: String) throws -> Int? {
            let out = dir.appendingPathComponent(name).path
            let r = try clipflow(["merge", "-q", "-o", out] + args + [turned])
            XCTAssertEqual(r.status, 0, "\(args): \(r.stderr)")
            return try Probe.rotation(out)
        }
        // ffprobe's rotation counts counter-clockwise: -90 is a clockwise quarter turn.
        XCTAssertEqual(try merged([], "own.mp4"), -90, "the clip's own turn is kept")
        XCTAssertEqual(abs(try merged(["--rotate", "90"], "added.mp4") ?? 0), 180, "90 on top of its own 90")
        XCTAssertEqual(try merged(["--set-rotation", "90"], "set90.mp4"), -90, "set: exactly 90, whatever the clip carries")
        XCTAssertNil(try merged(["--set-rotation", "0"], "set0.mp4"), "set to 0: no turn at all")
        XCTAssertEqual(try merged(["--set-rotation", "270"], "set270.mp4"), 90)

        let both = try clipflow(["merge", "--rotate", "90", "--set-rotation", "90", "-o", dir.appendingPathComponent("x.mp4").path, turned])
        XCTAssertEqual(both.status, 64)
        XCTAssertTrue(both.stderr.hasPrefix("error: give --rotate (a turn added to the clips' own) or --set-rotation (the turn itself), not both"), both.stderr)

        let help = try clipflow(["merge", "--help"]).out
        XCTAssertTrue(help.contains("more than the clips' own turn"), help)
        XCTAssertTrue(help.contains("--set-rotation"), help)

        // The pipeline's merge stage takes the same two fields.
        let p = dir.appendingPathComponent("set.json").path
        let out = dir.appendingPathComponent("p.mp4").path
        try """
        {"version": 1, "stages": [
          {"id": "files", "kind": "files", "paths": ["\(turned)"]},
          {"id": "merge", "kind": "merge", "inputs": ["files"], "output": "\(out)", "set-rotation": 180}
        ]}
        """.write(toFile: p, atomically: true, encoding: .utf8)
        let run = try clipflow(["run", "-q", p])
        XCTAssertEqual(run.status, 0, run.stderr)
        XCTAssertEqual(abs(try Probe.rotation(out) ?? 0), 180)
    }

    // MARK: 3. One line per error, one spelling; a stop is "stopped"

    func testEachErrorIsOneLineSpelledOneWay() throws {
        let a = try fx.toneClip(0, seconds: 1)
        let big = try fx.clip("vga-1s.mp4", seconds: 1, size: "640x480")
        let dir = fx.scratch("one-line")
        let cases: [(args: [String], status: Int32, line: String)] = [
            (["merge", "-o", dir.appendingPathComponent("m.mp4").path, "missing.mp4"], 65, "error: input 'missing.mp4': no such file"),
            (
                ["merge", "-o", dir.appendingPathComponent("m.mp4").path, a, big], 65,
                "error: cannot join '\(a)' and '\(big)' without re-encoding: video size differs (320x240 vs 640x480); --conform would re-encode clip 2 (\(big)) (--conform --plan shows why)"
            ),
            (["mrege", a], 64, "error: unknown command 'mrege'; did you mean 'merge'? (see 'clipflow --help')"),
            (["merge", "--rotate", "45", a], 64, "error: --rotate must be 0, 90, 180 or 270 (got 45) (see 'clipflow merge --help')"),
            (["merge", "--rotaet", "90", a], 64, "error: unknown option '--rotaet'; did you mean '--rotate'? (see 'clipflow merge --help')"),
            (
                ["upload", "lsit"], 64,
                "error: 'lsit' is neither a file nor an upload command; did you mean 'clipflow upload list'? (see 'clipflow upload send --help')"
            )
        ]
        for c in cases {
            let r = try clipflow(c.args)
            XCTAssertEqual(r.status, c.status, "\(c.args): \(r.stderr)")
            XCTAssertEqual(r.stderr, c.line + "\n", "\(c.args)")
            XCTAssertFalse(r.stderr.contains("Error:"), "\(c.args)")
        }

        // A pipeline parameter spelt as another form of the word gets its suggestion.
        let p = dir.appendingPathComponent("rotation.json").path
        try """
        {"version": 1, "stages": [
          {"id": "files", "kind": "files", "paths": ["\(a)"]},
          {"id": "merge", "kind": "merge", "inputs": ["files"], "output": "\(dir.path)/p.mp4", "rotation": 90}
        ]}
        """.write(toFile: p, atomically: true, encoding: .utf8)
        let v = try clipflow(["validate", p])
        XCTAssertEqual(v.status, 65)
        XCTAssertTrue(v.stderr.contains("stages[1].rotation: unknown parameter for a merge stage (did you mean 'rotate'?)"), v.stderr)
    }

    /// Inputs are told before outputs: a missing input is the error even where the output
    /// exists too (merge, transcode, hls).
    func testAMissingInputIsToldBeforeAnOutputThatExists() throws {
        let a = try fx.toneClip(0, seconds: 1)
        let dir = fx.scratch("inputs-first")
        let file = dir.appendingPathComponent("merged.mp4").path
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data("an earlier merge".utf8)))
        let folder = dir.appendingPathComponent("ladder").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let missing = dir.appendingPathComponent("missing.mp4").path
        for args in [["merge", "-o", file], ["transcode", "-o", file], ["hls", "-o", folder]] {
            let r = try clipflow(args + [a, missing])
            XCTAssertEqual(r.status, 65, "\(args): \(r.stderr)")
            XCTAssertEqual(r.stderr, "error: input '\(missing)': no such file\n", "\(args)")
        }
        XCTAssertEqual(try String(contentsOfFile: file, encoding: .utf8), "an earlier merge")
    }

    /// A clip a copy cannot take but a conform can (an MKV) is refused with the way to ask for
    /// the conform, spelt where the merge was asked for: `--conform` on the command line,
    /// `"conform": true` in a pipeline and in a batch's row.
    func testTheConformSuggestionIsSpeltWhereTheMergeWasAskedFor() throws {
        let a = try fx.toneClip(0, seconds: 1)
        let mkv = try fx.clip(
            "suggest-conform.mkv",
            ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "1", "-c:v", "libx264", "-c:a", "aac"])
        let dir = fx.scratch("suggest-conform")
        let out = dir.appendingPathComponent("m.mp4").path
        let refusal = "input '\(mkv)' is a 'matroska,webm' file; merge takes MP4/MOV clips; "
        let cli = try clipflow(["merge", "-o", out, a, mkv])
        XCTAssertEqual(cli.status, 65, cli.stderr)
        XCTAssertEqual(cli.stderr, "error: " + refusal + "--conform would re-encode clip 2 (\(mkv)) (--conform --plan shows why)\n")

        let pipeline = dir.appendingPathComponent("merge.json").path
        try """
        {"version": 1, "stages": [
          {"id": "files", "kind": "files", "paths": ["${A}", "${B}"]},
          {"id": "merge", "kind": "merge", "inputs": ["files"], "output": "${OUT}"}
        ]}
        """.write(toFile: pipeline, atomically: true, encoding: .utf8)
        let field = "\"conform\": true would re-encode clip 2 (\(mkv)) (`clipflow merge --conform --plan` with the clips shows why)"
        let run = try clipflow(["run", pipeline, "--set", "A=\(a)", "--set", "B=\(mkv)", "--set", "OUT=\(out)"])
        XCTAssertEqual(run.status, 65, run.stderr)
        XCTAssertEqual(run.stderr, "error: stage 'merge': " + refusal + field + "\n")

        let rows = dir.appendingPathComponent("rows.csv").path
        try "A,B,OUT\n\(a),\(mkv),\(out)\n".write(toFile: rows, atomically: true, encoding: .utf8)
        let batch = try clipflow(["batch", pipeline, "--rows", rows, "--quiet"])
        XCTAssertEqual(batch.status, 65, batch.stderr)
        let summary = try XCTUnwrap(
            JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: rows + ".summary.json"))) as? [String: Any])
        let reason = (summary["results"] as? [[String: Any]])?.first?["reason"] as? String ?? ""
        XCTAssertTrue(reason.contains(refusal + field), reason)
        XCTAssertFalse(reason.contains("--conform would"), reason)
        XCTAssertFalse(FileManager.default.fileExists(atPath: out))
    }

    func testAStopIsSaidOnceAsStoppedNotAsAnError() throws {
        let long = try fx.clip("stop-30s.mp4", seconds: 30, size: "1280x720")
        let dir = fx.scratch("stop")
        // Interrupted once the transcode shows progress (after its first second of work).
        let (status, text) = try Run.interrupt(
            binary, ["transcode", "-o", dir.appendingPathComponent("t.mp4").path, "--preset", "web-720p", long], after: "transcode: ")
        XCTAssertEqual(status, 130, text)
        let lines = text.split(separator: "\n")
        XCTAssertEqual(lines.last, "stopped: no output was written", text)
        XCTAssertFalse(text.contains("error"), text)
        XCTAssertEqual(lines.filter { $0.contains("stopped") }.count, 1, "said once: \(text)")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), [])
    }

    // MARK: 4. Quiet by default; progress for work a person waits for

    func testSevenQuickFilesPrintOnlyTheSummary() throws {
        let clips = try (0..<7).map { try fx.toneClip($0, seconds: 1) }
        let dir = fx.scratch("seven")
        let r = try clipflow(["merge", "-o", dir.appendingPathComponent("m.mp4").path] + clips)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stderr.split(separator: "\n").count, 1, r.stderr)
        XCTAssertTrue(r.stderr.hasPrefix("merged 7 clips into "), r.stderr)
        let v = try clipflow(["merge", "-v", "-o", dir.appendingPathComponent("v.mp4").path] + clips)
        XCTAssertTrue(v.stderr.contains("files: 14% (1 of 7 files)"), v.stderr)
        XCTAssertTrue(v.stderr.contains("merge.probe: queue from files: at most "), v.stderr)
    }

    /// In a terminal: quick work leaves its summary and nothing else on the screen; long work
    /// shows a status line while it runs, erased at the end for the summary.
    func testInATerminalAStatusLineOnlyForWorkThatTakesAWhile() throws {
        let clips = try (0..<3).map { try fx.toneClip($0, seconds: 1) }
        let long = try fx.clip("status-20s.mp4", seconds: 20, size: "1280x720")
        let dir = fx.scratch("terminal")

        let quick = try TerminalSession.run(
            [["exit": 60], ["screen": "end"]], [binary, "merge", "-o", dir.appendingPathComponent("m.mp4").path] + clips)
        XCTAssertNil(quick.failed)
        XCTAssertEqual(quick.status, 0, quick.raw)
        let shown = quick.screen("end").lines.filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        XCTAssertEqual(shown.count, 1, "\(shown)")
        XCTAssertTrue(shown.first?.hasPrefix("merged 3 clips into ") == true, "\(shown)")

        let slow = try TerminalSession.run(
            [
                ["wait": "transcode: \\[#*-*\\] \\d+%", "timeout": 60], ["screen": "running"], ["exit": 120], ["screen": "end"]
            ], [binary, "transcode", "-o", dir.appendingPathComponent("t.mp4").path, "--preset", "web-360p", long])
        XCTAssertNil(slow.failed, slow.raw)
        XCTAssertEqual(slow.status, 0, slow.raw)
        // The transcode's graph: its decode runs, its encoder reports the transcode's progress.
        XCTAssertTrue(slow.statusRow("running").hasPrefix("files: done | transcode.decode: running | transcode: ["), slow.statusRow("running"))
        let end = slow.screen("end").lines.filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        XCTAssertEqual(end.count, 1, "the status line is gone, the summary stays: \(end)")
        XCTAssertTrue(end.first?.hasPrefix("transcoded 1 input into ") == true, "\(end)")

        // Ctrl-C: the status line goes, one line says what the stop left, no error.
        let stopped = try TerminalSession.run(
            [["wait": "transcode: \\[", "timeout": 60], ["press": "\u{3}"], ["exit": 60], ["screen": "end"]],
            [binary, "transcode", "-o", dir.appendingPathComponent("stopped.mp4").path, "--preset", "web-360p", long])
        XCTAssertNil(stopped.failed, stopped.raw)
        XCTAssertEqual(stopped.status, 130, stopped.raw)
        let left = stopped.screen("end").lines.filter { !$0.trimmingCharacters(in: .whitespaces).isEmpty }
        XCTAssertEqual(left.map { $0.trimmingCharacters(in: .whitespaces) }, ["stopped: no output was written"], stopped.raw)
        XCTAssertTrue(stopped.modeRestored)
        XCTAssertFalse(FileManager.default.fileExists(atPath: dir.appendingPathComponent("stopped.mp4").path))
    }

    // MARK: 5. Help texts

    /// A command whose common work is its default subcommand (`clipflow hls IN -o DIR`,
    /// `clipflow upload FILE --to ...`) shows that subcommand's usage, arguments and options in
    /// its own help, before its subcommands; `clipflow help hls` says the same, and so does the
    /// description the man pages are made from (`man clipflow.hls`).
    func testAParentsHelpShowsItsDefaultSubcommandsOptions() throws {
        let dump = try XCTUnwrap(try JSONSerialization.jsonObject(with: try clipflow(["--experimental-dump-help"]).stdout) as? [String: Any])
        let commands = try XCTUnwrap((dump["command"] as? [String: Any])?["subcommands"] as? [[String: Any]])
        func argumentNames(_ c: [String: Any]?) -> [String] {
            (c?["arguments"] as? [[String: Any]] ?? []).compactMap { ($0["preferredName"] as? [String: Any])?["name"] as? String }
        }
        for (parent, child) in [("hls", "write"), ("upload", "send")] {
            let described = commands.first { $0["commandName"] as? String == parent }
            let childDescribed = (described?["subcommands"] as? [[String: Any]])?.first { $0["commandName"] as? String == child }
            XCTAssertGreaterThan(argumentNames(childDescribed).count, 3, parent)
            XCTAssertEqual(argumentNames(described), argumentNames(childDescribed), parent)
            let help = try clipflow([parent, "--help"])
            XCTAssertEqual(help.status, 0, help.stderr)
            let own = try clipflow([parent, child, "--help"]).out
            let options = own.split(separator: "\n").filter { $0.hasPrefix("  -") || $0.hasPrefix("  <") }
            XCTAssertGreaterThan(options.count, 3, own)
            for option in options { XCTAssertTrue(help.out.contains(option), "\(parent) --help lacks '\(option)':\n\(help.out)") }
            XCTAssertTrue(help.out.contains("USAGE: clipflow \(parent) <subcommand>\n       clipflow \(parent) [\(child)] "), help.out)
            let subcommands = try XCTUnwrap(help.out.range(of: "SUBCOMMANDS:"), help.out)
            XCTAssertTrue(help.out[subcommands.upperBound...].contains("\(child) (default)"), help.out)
            XCTAssertLessThan(try XCTUnwrap(help.out.range(of: "OPTIONS:")).lowerBound, subcommands.lowerBound, help.out)
            XCTAssertEqual(try clipflow(["help", parent]).out, help.out)
        }
        XCTAssertFalse(try clipflow(["merge", "--help"]).out.contains("(default)"), "merge has no subcommands")
    }

    /// Help sentences read whole and say what the command does: `record`'s about `--segment`,
    /// `merge`'s and its `--plan` option's about what the plan prints.
    func testHelpSentencesSayWhatTheCommandDoes() throws {
        func words(_ text: String) -> String { text.replacingOccurrences(of: "\\s+", with: " ", options: .regularExpression) }
        let record = words(try clipflow(["record", "--help"]).out)
        XCTAssertTrue(record.contains("same length. --segment starts a new fragment every N seconds (on a keyframe);"), record)
        XCTAssertFalse(record.contains("Fragments are --segment"), record)
        let merge = words(try clipflow(["merge", "--help"]).out)
        XCTAssertTrue(merge.contains("--conform --plan prints what would be done: a table, or JSON with --events json."), merge)
        XCTAssertTrue(merge.contains("a table, or JSON with --events json."), merge)
        XCTAssertFalse(merge.contains("done, as JSON"), merge)
    }

    /// Every command's help, rendered: no stray backslash, no option that does nothing there.
    func testEveryCommandsHelpReadsClean() throws {
        let dump = try clipflow(["--experimental-dump-help"])
        XCTAssertEqual(dump.status, 0, dump.stderr)
        let root = try XCTUnwrap(try JSONSerialization.jsonObject(with: dump.stdout) as? [String: Any])
        var paths: [[String]] = []
        func walk(_ command: [String: Any], _ path: [String]) {
            paths.append(path)
            for sub in command["subcommands"] as? [[String: Any]] ?? [] {
                if let name = sub["commandName"] as? String, name != "help" { walk(sub, path + [name]) }
            }
        }
        walk(try XCTUnwrap(root["command"] as? [String: Any]), [])
        XCTAssertGreaterThan(paths.count, 20, "\(paths)")
        var helps: [String: String] = [:]
        for path in paths {
            let r = try clipflow(path + ["--help"])
            XCTAssertEqual(r.status, 0, "\(path): \(r.stderr)")
            let text = r.out
            helps[path.joined(separator: " ")] = text
            XCTAssertFalse(text.isEmpty, "\(path)")
            for line in text.split(separator: "\n") {
                XCTAssertFalse(line.hasSuffix("\\"), "\(path): a stray backslash: \(line)")
                XCTAssertFalse(line.contains("\\\\"), "\(path): \(line)")
            }
        }
        for quiet in ["upload list", "upload pause", "upload cancel", "upload prune"] {
            XCTAssertFalse(helps[quiet]?.contains("--concurrency") ?? true, "\(quiet) uploads nothing")
        }
        for uploading in ["upload send", "upload run", "upload resume"] {
            XCTAssertTrue(helps[uploading]?.contains("--concurrency") ?? false, uploading)
        }
        for writing in ["merge", "transcode", "hls write", "run", "validate"] {
            XCTAssertTrue(helps[writing]?.contains("-y, --overwrite") ?? false, "\(writing): \(helps[writing] ?? "")")
        }

        let stages = try clipflow(["stages"]).out
        XCTAssertFalse(stages.contains("9007199254740992"), stages)
        XCTAssertTrue(stages.contains("no byte limit"), stages)
        XCTAssertTrue(stages.contains("    tags: a list of strings\n"), stages)
        XCTAssertTrue(stages.contains("    ids: a list of strings\n"), stages)

        // The README lists the stage kinds this build has, every one.
        let kinds = stages.split(separator: "\n").filter { !$0.hasPrefix(" ") && $0.contains(" - ") }.map { String($0.split(separator: " ")[0]) }
        let readme = try String(
            contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("README.md"), encoding: .utf8)
        let start = try XCTUnwrap(readme.range(of: "- Stage kinds (`clipflow stages`):"))
        let listed = readme[start.upperBound...].prefix { $0 != "." }
        let named = Set(listed.split(separator: "`").enumerated().filter { $0.offset % 2 == 1 }.map { String($0.element) })
        XCTAssertEqual(named, Set(kinds), String(listed))
    }

    // MARK: 6. Upload wording

    func testUploadTitlesGoOnePerFile() throws {
        let a = try fx.toneClip(0, seconds: 1), b = try fx.toneClip(1, seconds: 1)
        let queue = fx.scratch("titles").path
        let one = try clipflow(["upload", a, b, "--to", "tus", "--endpoint", "http://127.0.0.1:9/files", "--title", "Holiday", "--queue", queue, "--no-wait"])
        XCTAssertEqual(one.status, 64)
        XCTAssertTrue(one.stderr.hasPrefix("error: --title: 1 title for 2 files; give one per file, in their order, or none"), one.stderr)

        let two = try clipflow([
            "upload", a, b, "--to", "tus", "--endpoint", "http://127.0.0.1:9/files", "--title", "Morning", "--title", "Evening", "--queue", queue,
            "--no-wait"
        ])
        XCTAssertEqual(two.status, 0, two.stderr)
        let list = try clipflow(["upload", "list", "--json", "--queue", queue])
        let entries = try XCTUnwrap(try JSONSerialization.jsonObject(with: list.stdout) as? [[String: Any]])
        let titles = Dictionary(
            uniqueKeysWithValues: entries.map { (($0["file"] as? String) ?? "", (($0["metadata"] as? [String: String]) ?? [:])["title"] ?? "") })
        XCTAssertEqual(titles, [a: "Morning", b: "Evening"], "\(entries)")
    }

    /// A Gcore upload whose upload server is down names where it was going, and says so once.
    func testAFailedGcoreUploadNamesItsDestination() throws {
        let api = try GcoreAPI.start(tusHost: "127.0.0.1:9")
        defer { api.stop() }
        let file = try fx.toneClip(0, seconds: 1)
        let queue = fx.scratch("gcore-down").path
        let r = try clipflow(
            [
                "upload", file, "--to", "gcore", "--endpoint", api.url, "--upload-url", "http://{hostname}/files", "--retries", "1", "--retry-delay",
                "0.05", "--queue", queue
            ], env: ["CLIPFLOW_UPLOAD_TOKEN": api.access, "CLIPFLOW_UPLOAD_REFRESH_TOKEN": api.refresh])
        XCTAssertEqual(r.status, 1, r.stderr)
        XCTAssertTrue(r.stderr.contains("upload to http://127.0.0.1:9/files failed 2 times in a row"), r.stderr)
        XCTAssertFalse(r.stderr.contains("upload to  "), r.stderr)
        let lines = r.stderr.split(separator: "\n")
        XCTAssertEqual(lines.filter { $0.contains("failed 2 times") }.count, 1, "the reason is told once: \(r.stderr)")
        XCTAssertTrue(lines.last?.hasPrefix("error: 1 upload failed (above); `clipflow upload resume ") == true, r.stderr)
    }
}
