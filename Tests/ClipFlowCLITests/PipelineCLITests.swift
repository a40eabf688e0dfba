import XCTest
import Foundation
import ClipFlowTestSupport

/// `clipflow run | validate | stages | schema` as a user runs them, on the pipelines in the repo.
final class PipelineCLITests: XCTestCase {
    let fx = Fixtures.shared
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func clipflow(_ args: [String]) throws -> Run { try Run.run([binary] + args, check: false) }

    func files(_ dir: String, _ ext: String) throws -> [String] {
        let d = Self.root.appendingPathComponent(dir)
        return try FileManager.default.contentsOfDirectory(atPath: d.path).filter { $0.hasSuffix(ext) }.sorted().map { d.appendingPathComponent($0).path }
    }

    /// Three fragments of one recording, named as the example pipelines expect.
    func fragments() throws -> String {
        let dir = fx.scratch("fragments")
        for i in 0..<3 {
            try FileManager.default.copyItem(atPath: try fx.toneClip(i, seconds: 2), toPath: dir.appendingPathComponent("fragment\(i).mp4").path)
        }
        return dir.path
    }

    /// Every invalid fixture: exit 1, every problem reported at its line, column and JSON path,
    /// exactly as in its .expected file, and nothing run.
    func testInvalidPipelinesReportEveryProblemAtItsPath() throws {
        let all = try files("fixtures/pipelines/invalid", ".json") + files("fixtures/pipelines/invalid-semantic", ".json")
        XCTAssertGreaterThanOrEqual(all.count, 15)
        for f in all {
            let expected = try String(contentsOfFile: String(f.dropLast(5)) + ".expected", encoding: .utf8)
                .split(separator: "\n").map { "\(f):\($0)" }
            for cmd in ["validate", "run"] {
                let r = try clipflow([cmd, "--set", "CLIPFLOW_TEST_ROTATE=45", f])
                XCTAssertEqual(r.status, 65, "\(cmd) \(f)")
                var lines = r.stderr.split(separator: "\n").map(String.init)
                let last = lines.popLast() ?? ""
                XCTAssertEqual(lines, expected, "\(cmd) \(f)")
                XCTAssertEqual(last, "error: \(f): \(expected.count) problem\(expected.count == 1 ? "" : "s") found; nothing was run")
            }
        }
    }

    func testUsageErrors() throws {
        var r = try clipflow(["validate", "/nonexistent/p.json"])
        XCTAssertEqual(r.status, 65)
        XCTAssertEqual(r.stderr, "error: pipeline '/nonexistent/p.json': no such file\n")
        r = try clipflow(["run", "--set", "=x", Self.root.appendingPathComponent("pipelines/backpressure.json").path])
        XCTAssertNotEqual(r.status, 0)
        XCTAssertTrue(r.stderr.contains("--set expects KEY=VALUE (got '=x')"), r.stderr)
    }

    /// The committed schema is the one the binary generates from its registry.
    func testCommittedSchemaIsTheGeneratedOne() throws {
        let r = try clipflow(["schema"])
        XCTAssertEqual(r.status, 0)
        let committed = try String(contentsOfFile: Self.root.appendingPathComponent("schema/pipeline.schema.json").path, encoding: .utf8)
        XCTAssertEqual(r.out, committed, "run `clipflow schema > schema/pipeline.schema.json` after changing a stage kind")
    }

    /// The schema, checked by an independent validator (Python jsonschema), agrees with ours:
    /// every example passes both; every invalid fixture fails both; the semantic fixtures (what
    /// a schema cannot express: ids, cycles, connections, files, variables) pass the schema and
    /// fail ours.
    func testSchemaAndValidatorAgree() throws {
        let schema = Self.root.appendingPathComponent("schema/pipeline.schema.json").path
        func schemaAccepts(_ f: String) throws -> Bool {
            let code = """
                import json, sys, jsonschema
                schema = json.load(open(sys.argv[1]))
                jsonschema.Draft202012Validator.check_schema(schema)
                try:
                    doc = json.load(open(sys.argv[2]))
                except ValueError:
                    sys.exit(3)
                errors = list(jsonschema.Draft202012Validator(schema).iter_errors(doc))
                sys.exit(0 if not errors else 3)
                """
            let r = try Run.run(["python3", "-c", code, schema, f], check: false)
            XCTAssertTrue(r.status == 0 || r.status == 3, r.stderr)
            return r.status == 0
        }
        let clips = try fragments(), out = fx.scratch("schema-agree").path
        for f in try files("pipelines", ".json") {
            XCTAssertTrue(try schemaAccepts(f), "schema rejects example \(f)")
            let r = try clipflow([
                "validate", "--set", "CLIPS=\(clips)", "--set", "OUT=\(out)", "--set", "ROTATE=90", "--set", "COUNT=10",
                "--set", "DURATION=2", "--set", "DEVICE=/dev/video0",
                "--set", "TUS_ENDPOINT=https://tus.example/files", "--set", "GCORE_API=https://api.example/streaming",
                "--set", "GCORE_UPLOAD_URL=https://{hostname}/upload",
                "--set", "S3_ENDPOINT=https://s3.example", "--set", "BUCKET=media", "--set", "MICROPHONE=default", f
            ])
            XCTAssertEqual(r.status, 0, "validator rejects example \(f): \(r.stderr)")
        }
        for f in try files("fixtures/pipelines/invalid", ".json") {
            XCTAssertFalse(try schemaAccepts(f), "schema accepts invalid \(f)")
            XCTAssertEqual(try clipflow(["validate", f]).status, 65)
        }
        for f in try files("fixtures/pipelines/invalid-semantic", ".json") {
            XCTAssertTrue(try schemaAccepts(f), "semantic fixture \(f) should be beyond the schema")
            XCTAssertEqual(try clipflow(["validate", "--set", "CLIPFLOW_TEST_ROTATE=45", f]).status, 65)
        }
    }

    func testStagesListsEveryKindWithDefaults() throws {
        let r = try clipflow(["stages"])
        XCTAssertEqual(r.status, 0)
        for k in ["files", "merge", "thumbnail", "directory", "synthetic", "null"] {
            XCTAssertTrue(r.out.contains("\n\(k) - ") || r.out.hasPrefix("\(k) - "), "missing kind \(k)")
        }
        XCTAssertTrue(r.out.contains("rotate: one of 0, 90, 180, 270 (default 0)"), r.out)
        XCTAssertTrue(r.out.contains("output: a path (string) (required)"), r.out)
    }

    /// Every example in pipelines/ runs end to end; outputs judged by ffprobe.
    func testEveryExamplePipelineRuns() throws {
        let clips = try fragments()
        let sum = try (0..<3).map { try Probe.videoFrames("\(clips)/fragment\($0).mp4") }.reduce(0, +)
        // The upload examples upload for real: a TUS server, the Gcore-style API stand-in in front
        // of it, and SeaweedFS (a real S3 server, signature checks on), all on 127.0.0.1.
        let tus = try TUSServer.start(directory: fx.scratch("example-tus"))
        defer { tus.stop() }
        let gcore = try GcoreAPI.start(tusHost: tus.hostPort, access: "example-access", refresh: "example-refresh")
        defer { gcore.stop() }
        let s3 = try SeaweedFS.start(buckets: ["examples"])
        defer { s3.stop() }
        // The microphone example records from a private PulseAudio's pipe source, fed by the test.
        let pulse = try PulseAudioServer.start()
        defer { pulse.stop() }
        let microphone = MicrophoneFeeder(server: pulse)
        try microphone.start()
        defer { microphone.stop() }
        var ran = Set<String>()
        for f in try files("pipelines", ".json") {
            let name = (f as NSString).lastPathComponent
            let out = fx.scratch("example-\(name)").path
            // The webcam example records from the emulated vivid camera (there is no camera here).
            let r = try Run.run(
                [
                    binary, "run", "--events", "json", "--set", "CLIPS=\(clips)", "--set", "OUT=\(out)",
                    "--set", "ROTATE=90", "--set", "COUNT=200", "--set", "DURATION=2", "--set", "DEVICE=/dev/video0",
                    "--set", "TUS_ENDPOINT=\(tus.baseURL)", "--set", "GCORE_API=\(gcore.url)",
                    "--set", "GCORE_UPLOAD_URL=http://{hostname}/files",
                    "--set", "S3_ENDPOINT=\(s3.endpoint)", "--set", "BUCKET=\(s3.bucket)", "--set", "MICROPHONE=\(PulseAudioServer.pipePCM)", f
                ],
                env: [
                    "CLIPFLOW_V4L2_EMULATE": "1",
                    "CLIPFLOW_UPLOAD_TOKEN": "example-access", "CLIPFLOW_UPLOAD_REFRESH_TOKEN": "example-refresh",
                    "AWS_ACCESS_KEY_ID": s3.accessKey, "AWS_SECRET_ACCESS_KEY": s3.secretKey
                ].merging(pulse.environment) { a, _ in a }, check: false)
            XCTAssertEqual(r.status, 0, "\(name): \(r.stderr)")
            let events = r.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            XCTAssertFalse(events.isEmpty, name)
            XCTAssertFalse(events.contains { $0["event"] as? String == "failed" }, name)
            ran.insert(name)
            switch name {
            case "fragments-to-folder.json":
                for m in ["\(out)/merged.mp4", "\(out)/publish/merged.mp4"] {
                    XCTAssertEqual(try Probe.videoFrames(m), sum)
                    XCTAssertEqual(try Probe.rotation(m), -90)
                    XCTAssertEqual(try Probe.topLevelBoxes(m).filter { $0 == "moov" || $0 == "mdat" }, ["moov", "mdat"])
                    XCTAssertEqual(try Probe.decodeErrors(m), "")
                }
                // 320x240 turned 90 degrees: an upright 240x320 cover.
                XCTAssertEqual(try Probe.stream("\(out)/publish/cover.jpg", "v:0", "width"), "240")
                XCTAssertEqual(try Probe.stream("\(out)/cover.jpg", "v:0", "height"), "320")
                XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: "\(out)/publish").sorted(), ["cover.jpg", "merged.mp4"])
            case "two-cameras.json":
                XCTAssertEqual(try Probe.videoFrames("\(out)/joined.mp4"), sum)
                XCTAssertEqual(try Probe.rotation("\(out)/joined.mp4"), -90)
                XCTAssertEqual(try Probe.videoFrames("\(out)/archive/joined.mp4"), sum)
                XCTAssertEqual(try Probe.stream("\(out)/joined.jpg", "v:0", "width"), "240")
            case "webcam-with-microphone.json":
                // 2 s of camera and microphone: one fragment with both streams, as long as each other.
                let clip = "\(out)/clips/clip-0001.mp4"
                XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: "\(out)/clips"), ["clip-0001.mp4"])
                XCTAssertEqual(try Probe.videoFrames(clip), 60)
                XCTAssertEqual(try Probe.stream(clip, "a:0", "codec_name"), "aac")
                XCTAssertEqual(try AVSync.streamDuration(clip, "a:0"), try AVSync.streamDuration(clip, "v:0"), accuracy: 1024.0 / 48_000)
                XCTAssertEqual(try Probe.decodeErrors("\(out)/video.mp4"), "")
                XCTAssertEqual(try Probe.stream("\(out)/cover.jpg", "v:0", "width"), "720", "720 on the long side")
            case "backpressure.json":
                let done = events.last { $0["stage"] as? String == "slow" && $0["event"] as? String == "progress" }
                XCTAssertEqual(done?["completed"] as? Int, 200)
                XCTAssertFalse(events.contains { $0["event"] as? String == "dropped" })
            case "live-preview.json":
                let received = events.last { $0["stage"] as? String == "preview" && $0["event"] as? String == "progress" }?["completed"] as? Int
                let dropped = events.last { $0["stage"] as? String == "preview" && $0["event"] as? String == "dropped" }?["count"] as? Int
                XCTAssertGreaterThan(dropped ?? 0, 0, "a 50/s consumer behind a 100/s source drops")
                XCTAssertEqual((received ?? 0) + (dropped ?? 0), 200, "received + dropped == produced")
            case "testpattern-to-upload.json", "webcam-to-upload.json":
                // 2 s at 30 fps in 2-second fragments: one clip of 60 pictures, joined, turned, covered.
                let clipFiles = try FileManager.default.contentsOfDirectory(atPath: "\(out)/clips").sorted()
                XCTAssertEqual(clipFiles, ["clip-0001.mp4"], name)
                let v = "\(out)/video.mp4"
                XCTAssertEqual(try Probe.videoFrames(v), 60, name)
                XCTAssertEqual(try Probe.rotation(v), -90, name)
                XCTAssertEqual(try Probe.topLevelBoxes(v).filter { $0 == "moov" || $0 == "mdat" }, ["moov", "mdat"], name)
                XCTAssertEqual(try Probe.decodeErrors(v), "", name)
                XCTAssertEqual(try Probe.stream("\(out)/cover.jpg", "v:0", "width"), "406", "720p turned upright, 720 on the long side")
                XCTAssertEqual(try Probe.stream("\(out)/cover.jpg", "v:0", "height"), "720")
                // What the server stored is the video (and, for TUS, the cover) byte for byte.
                let stored = Set(try tus.storedFiles().map { try sha256(ofFile: $0) })
                XCTAssertTrue(stored.contains(try sha256(ofFile: v)), "\(name): the TUS server holds the video")
                let outputs = events.filter { $0["stage"] as? String == "upload" && $0["event"] as? String == "output" }
                if name == "testpattern-to-upload.json" {
                    XCTAssertTrue(stored.contains(try sha256(ofFile: "\(out)/cover.jpg")), "the TUS server holds the cover")
                    XCTAssertEqual(outputs.count, 2, "\(events)")
                    XCTAssertEqual(try Probe.stream(v, "a:0", "codec_name"), "aac")
                    let pic = try Probe.greyPicture(v, at: 0.5)
                    XCTAssertEqual(Probe.brightestCorner(w: pic.w, h: pic.h, px: pic.px), "TR", "the marker, top-left when recorded, turned clockwise")
                } else {
                    XCTAssertEqual(outputs.count, 1, "\(events)")
                    let videos = try gcore.videos()
                    XCTAssertEqual(videos.count, 1)
                    XCTAssertEqual(videos.first?["name"] as? String, "Webcam /dev/video0")
                }
                let queue = try Run.run([binary, "upload", "list", "--json", "--queue", "\(out)/upload-queue"])
                let entries = try JSONSerialization.jsonObject(with: queue.stdout) as? [[String: Any]] ?? []
                XCTAssertEqual(entries.map { $0["state"] as? String }, Array(repeating: "finished", count: outputs.count))
            case "fragments-to-hls.json":
                // 320x240 turned 90 degrees: one portrait rendition (the smallest rung, never enlarged).
                let master = try String(contentsOfFile: "\(out)/hls/master.m3u8", encoding: .utf8)
                XCTAssertTrue(master.contains("RESOLUTION=240x320"), master)
                XCTAssertEqual(try Probe.videoFrames("\(out)/joined.mp4"), sum)
                let lint = try Run.run([binary, "hls", "lint", "\(out)/hls"], check: false)
                XCTAssertEqual(lint.status, 0, lint.out)
                let stages = Set(events.compactMap { $0["stage"] as? String })
                XCTAssertTrue(stages.isSuperset(of: ["ladder.decode", "ladder.360p", "ladder.audio", "ladder"]), "\(stages)")
            case "clips-to-web.json":
                // Three 320x240 fragments: web-720p never enlarges them; every picture is kept.
                let web = "\(out)/web.mp4"
                XCTAssertEqual(try Probe.videoFrames(web), sum)
                XCTAssertEqual(try Probe.stream(web, "v:0", "codec_name,profile,width,height"), "h264,High,320,240")
                XCTAssertEqual(try Probe.topLevelBoxes(web).filter { $0 == "moov" || $0 == "mdat" }, ["moov", "mdat"])
                XCTAssertEqual(try Probe.decodeErrors(web), "")
                XCTAssertEqual(try Probe.stream("\(out)/cover.jpg", "v:0", "width"), "320")
            case "fragments-to-s3.json":
                XCTAssertEqual(try Probe.videoFrames("\(out)/merged.mp4"), sum)
                XCTAssertEqual(try s3.objectSHA256(key: "videos/merged.mp4"), try sha256(ofFile: "\(out)/merged.mp4"))
                XCTAssertEqual(try s3.objectSHA256(key: "videos/cover.jpg"), try sha256(ofFile: "\(out)/cover.jpg"))
                let meta = try s3.head(key: "videos/merged.mp4")["metadata"] as? [String: String]
                XCTAssertEqual(meta?["title"], "Fragments", "\(String(describing: meta))")
                XCTAssertFalse(r.out.contains(s3.secretKey) || r.stderr.contains(s3.secretKey))
            default:
                XCTFail("no checks written for example \(name)")
            }
        }
        XCTAssertEqual(ran.count, try files("pipelines", ".json").count)
    }

    /// Issue 12, point 1: a number no integer can hold (literal, or from `--set R=inf`) used to
    /// kill `validate` and `run` with SIGILL (exit 132). Now: exit 1, the field named, and the
    /// other problems in the file reported too.
    func testNumbersBeyondAnyIntegerAreReportedNotCrashing() throws {
        let clip = try fx.toneClip(0, seconds: 1)
        let dir = fx.scratch("pipe-numbers")
        let pipeline = dir.appendingPathComponent("p.json").path
        for (rotate, r, shown) in [
            ("1e19", "0", "1e+19"), ("\"${R}\"", "inf", "inf (from ${R})"), ("\"${R}\"", "nan", "nan (from ${R})"),
            ("\"${R}\"", "-1e300", "-1e+300 (from ${R})")
        ] {
            try """
            {"version": 1, "stages": [
              {"id": "clips", "kind": "files", "paths": ["\(clip)"]},
              {"id": "joined", "kind": "merge", "inputs": ["clips"], "output": "\(dir.path)/out/m.mp4", "rotate": \(rotate)},
              {"id": "cover", "kind": "thumbnail", "inputs": ["joined"], "output": "\(dir.path)/out/c.jpg", "sise": "64"}
            ]}
            """.write(toFile: pipeline, atomically: true, encoding: .utf8)
            for cmd in ["validate", "run"] {
                let r = try clipflow([cmd, "--set", "R=\(r)", pipeline])
                XCTAssertEqual(r.status, 65, "\(cmd) rotate \(rotate) R=\(r): \(r.stderr)")
                let lines = r.stderr.split(separator: "\n").map(String.init)
                XCTAssertEqual(lines.count, 3, r.stderr)
                XCTAssertTrue(lines.first?.hasSuffix(": stages[1].rotate: expected one of 0, 90, 180, 270, got \(shown)") ?? false, r.stderr)
                XCTAssertTrue(lines.dropFirst().first?.contains("stages[2].sise: unknown parameter") ?? false, r.stderr)
                XCTAssertEqual(lines.last, "error: \(pipeline): 2 problems found; nothing was run")
            }
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: "\(dir.path)/out"), "nothing run")
    }

    /// Issue 12, point 7: a NUL in a path passed `validate`, and `run` left `merged%00.mp4`. Now
    /// every path field (also after `${VAR}` substitution) refuses control characters, by name.
    func testControlCharactersInPathsAreRefusedAndRunLeavesNothing() throws {
        let clip = try fx.toneClip(0, seconds: 1)
        let dir = fx.scratch("pipe-nul")
        let out = dir.appendingPathComponent("out").path
        let pipeline = dir.appendingPathComponent("p.json").path
        try """
        {"version": 1, "stages": [
          {"id": "clips", "kind": "files", "paths": ["\(clip)"]},
          {"id": "joined", "kind": "merge", "inputs": ["clips"], "output": "\(out)/merged\\u0000.mp4"},
          {"id": "cover", "kind": "thumbnail", "inputs": ["joined"], "output": "${OUT}/c.jpg"}
        ]}
        """.write(toFile: pipeline, atomically: true, encoding: .utf8)
        for cmd in ["validate", "run"] {
            let r = try clipflow([cmd, "--set", "OUT=\(out)/\u{1B}[2J", pipeline])
            XCTAssertEqual(r.status, 65, "\(cmd): \(r.stderr)")
            XCTAssertEqual(
                r.stderr.split(separator: "\n").map(String.init),
                [
                    "\(pipeline):3:68: stages[1].output: expected a path without control characters, got \"\(out)/merged\\u0000.mp4\" (U+0000)",
                    "\(pipeline):4:72: stages[2].output: expected a path without control characters, got \"\(out)/\\u001b[2J/c.jpg\" (U+001B)",
                    "error: \(pipeline): 2 problems found; nothing was run"
                ])
        }
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), ["p.json"], "no stray output, no folder")
    }

    /// Issue 12, points 2 and 3 through a pipeline: a `thumbnail` stage writing over an input
    /// (spelled through a symlinked folder) or over the merged video, and a `directory` sink
    /// copying onto an input, are refused by `validate` and `run` before anything runs.
    func testPipelineOutputsOverInputsOrEachOtherAreRefused() throws {
        let dir = fx.scratch("pipe-clash")
        let real = dir.appendingPathComponent("real"), link = dir.appendingPathComponent("link")
        try FileManager.default.createDirectory(at: real, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: real)
        let a = real.appendingPathComponent("a.mp4").path, b = real.appendingPathComponent("b.mp4").path
        try FileManager.default.copyItem(atPath: try fx.toneClip(0, seconds: 1), toPath: a)
        try FileManager.default.copyItem(atPath: try fx.toneClip(1, seconds: 1), toPath: b)
        let pipeline = dir.appendingPathComponent("p.json").path
        try """
        {"version": 1, "stages": [
          {"id": "clips", "kind": "files", "paths": ["\(a)", "\(b)"]},
          {"id": "joined", "kind": "merge", "inputs": ["clips"], "output": "${OUT}/m.mp4"},
          {"id": "cover", "kind": "thumbnail", "inputs": ["joined"], "output": "\(link.path)/b.mp4"},
          {"id": "cover2", "kind": "thumbnail", "inputs": ["joined"], "output": "${OUT}/./m.mp4"},
          {"id": "publish", "kind": "directory", "inputs": ["clips"], "path": "\(link.path)"}
        ]}
        """.write(toFile: pipeline, atomically: true, encoding: .utf8)
        let before = try [a, b].map { try sha256(ofFile: $0) }
        let out = dir.appendingPathComponent("out").path
        for cmd in ["validate", "run"] {
            let r = try clipflow([cmd, "--set", "OUT=\(out)", pipeline])
            XCTAssertEqual(r.status, 65, "\(cmd): \(r.stderr)")
            XCTAssertEqual(
                r.stderr.split(separator: "\n").map(String.init),
                [
                    "\(pipeline):4:72: stages[2].output: '\(link.path)/b.mp4' is the same file as stages[0].paths[1] '\(b)'; inputs are never overwritten",
                    "\(pipeline):5:73: stages[3].output: '\(out)/./m.mp4' is the same file as stages[1].output '\(out)/m.mp4'; give each output its own file",
                    "\(pipeline):6:71: stages[4].path: would write '\(link.path)/a.mp4' (the copy of '\(a)'), which is the same file as stages[0].paths[0] '\(a)'; inputs are never overwritten",
                    "\(pipeline):6:71: stages[4].path: would write '\(link.path)/b.mp4' (the copy of '\(b)'), which is the same file as stages[0].paths[1] '\(b)'; inputs are never overwritten",
                    "error: \(pipeline): 4 problems found; nothing was run"
                ])
            XCTAssertEqual(try [a, b].map { try sha256(ofFile: $0) }, before)
            XCTAssertFalse(FileManager.default.fileExists(atPath: out))
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: real.path).sorted(), ["a.mp4", "b.mp4"])
        }
    }

    /// SIGINT during a run: exit 130, the merge in progress leaves nothing, no temporary files.
    func testInterruptDuringAPipelineLeavesNoPartialOutput() throws {
        let clip = try fx.toneClip(0)
        let dir = fx.scratch("pipe-sigint")
        let out = dir.appendingPathComponent("out").path
        let pipeline = dir.appendingPathComponent("p.json").path
        let list = Array(repeating: "\"\(clip)\"", count: 600).joined(separator: ",")
        try """
        {"version": 1, "stages": [
          {"id": "clips", "kind": "files", "paths": [\(list)]},
          {"id": "joined", "kind": "merge", "inputs": ["clips"], "output": "\(out)/joined.mp4"},
          {"id": "cover", "kind": "thumbnail", "inputs": ["joined"], "output": "\(out)/cover.jpg"},
          {"id": "publish", "kind": "directory", "inputs": ["joined", "cover"], "path": "\(out)/publish"}
        ]}
        """.write(toFile: pipeline, atomically: true, encoding: .utf8)
        let (status, text) = try Run.interrupt(
            binary, ["run", "--events", "json", pipeline],
            after: "\"stage\":\"joined\",\"event\":\"progress\"", watchStdout: true)
        XCTAssertFalse(text.contains("\"event\":\"output\",\"path\":\"\(out)/joined.mp4\""), "the merge finished before the signal")
        XCTAssertEqual(status, 130, text)
        XCTAssertTrue(text.contains("\"stage\":\"joined\",\"event\":\"interrupted\""), text)
        let left = (FileManager.default.enumerator(atPath: out)?.allObjects as? [String]) ?? []
        XCTAssertEqual(left.filter { !$0.hasSuffix("publish") }, [], "no output, no temporary file: \(left)")
    }
}
