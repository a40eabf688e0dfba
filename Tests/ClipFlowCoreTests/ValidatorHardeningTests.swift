import XCTest
import Foundation
@testable import ClipFlowCore

/// The validator on hostile documents: numbers no integer can hold, control characters in
/// paths, outputs that are inputs or each other, and very long lists.
final class ValidatorHardeningTests: XCTestCase {
    var dir: URL!
    override func setUpWithError() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("validator-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    }
    override func tearDownWithError() throws { try? FileManager.default.removeItem(at: dir) }

    /// The core kinds plus two stand-ins for media kinds: a joiner with `output` and `rotate`, and
    /// a cover writer with `output`, declaring the files they write.
    func registry() -> StageRegistry {
        let r = StageRegistry()
        CoreStages.register(into: r)
        let writes: StageFilesOf = { p in StageFiles(writes: p.string("output").map { [FileField("output", $0)] } ?? []) }
        r.register(
            StageKind(
                name: "join", summary: "test joiner", inputs: [.clips], minInputs: 1, output: .video,
                params: [
                    ParamSpec("output", .path, required: true, help: "out"),
                    ParamSpec("rotate", .integerChoice([0, 90, 180, 270]), default: .number(0), help: "turn")
                ],
                files: writes, make: { id, _ in NullSink(id: id, delay: 0) }))
        r.register(
            StageKind(
                name: "cover", summary: "test cover", inputs: [.video], minInputs: 1, output: .image,
                params: [ParamSpec("output", .path, required: true, help: "out")],
                files: writes, make: { id, _ in NullSink(id: id, delay: 0) }))
        return r
    }

    func issues(_ text: String, _ vars: [String: String] = [:]) -> [String] {
        switch PipelineValidator(registry: registry(), variables: vars, environment: [:]).validate(text: text) {
        case .valid: return []
        case .invalid(let i): return i.map { "\($0.path): \($0.message)" }
        }
    }

    func clip(_ name: String) throws -> String {
        let p = dir.appendingPathComponent(name).path
        try Data("clip \(name)".utf8).write(to: URL(fileURLWithPath: p))
        return p
    }

    // MARK: numbers (issue 12, point 1)

    /// 1e19 and ${R} = inf/nan/-1e300 used to trap in Int(Double) (SIGILL) before any range check.
    func testNumbersNoIntegerCanHoldAreReportedWithTheOtherProblems() throws {
        let a = try clip("a.mp4")
        let doc = """
            {"version": 1, "stages": [
              {"id": "clips", "kind": "files", "paths": ["\(a)", "\(dir.path)/missing.mp4"]},
              {"id": "j", "kind": "join", "inputs": ["clips"], "output": "\(dir.path)/o.mp4", "rotate": 1e19},
              {"id": "s", "kind": "synthetic", "count": 1e19, "size": -1e300, "rate": "${R}"},
              {"id": "n", "kind": "null", "inputs": ["s"], "queue": {"max-bytes": 1e19, "max-time": 1e308}}
            ]}
            """
        XCTAssertEqual(
            issues(doc, ["R": "inf"]),
            [
                "stages[0].paths[1]: '\(dir.path)/missing.mp4': no such file",
                "stages[1].rotate: expected one of 0, 90, 180, 270, got 1e+19",
                "stages[2].count: expected an integer of at least 0, got 1e+19 (larger than any number a pipeline takes, 9007199254740992)",
                "stages[2].size: expected an integer from 0 to 1073741824, got -1e+300",
                "stages[2].rate: expected a number of at least 0, got inf (from ${R})",
                "stages[3].queue.max-bytes: expected an integer from 1 to 9007199254740992, got 1e+19",
                "stages[3].queue.max-time: expected a number of seconds above 0 (at most 9007199254740992), got 1e+308"
            ])
        for r in ["nan", "-1e300", "1e19", "-inf"] {
            let i = issues(doc.replacingOccurrences(of: "\"rotate\": 1e19", with: "\"rotate\": \"${R}\""), ["R": r])
            XCTAssertTrue(
                i.contains("stages[1].rotate: expected one of 0, 90, 180, 270, got \(r == "1e19" ? "1e+19" : r == "-1e300" ? "-1e+300" : r) (from ${R})"),
                "\(r): \(i)")
        }
        // The largest accepted integer still converts.
        let ok = "{\"version\": 1, \"stages\": [{\"id\": \"s\", \"kind\": \"synthetic\", \"count\": 9007199254740992}]}"
        guard case .valid(let p) = PipelineValidator(registry: registry(), environment: [:]).validate(text: ok) else { return XCTFail("valid") }
        XCTAssertEqual(p.stages[0].params.int("count"), 9_007_199_254_740_992)
        XCTAssertNil(StageParams(["x": .number(1e19)]).int("x"), "no trap even on values the validator never lets through")
    }

    // MARK: control characters (point 7)

    func testControlCharactersInPathsAreRefusedNamingTheField() throws {
        let a = try clip("a.mp4")
        let doc = """
            {"version": 1, "stages": [
              {"id": "clips", "kind": "files", "paths": ["\(a)", "\(dir.path)/b\\u0007.mp4"]},
              {"id": "j", "kind": "join", "inputs": ["clips"], "output": "\(dir.path)/merged\\u0000.mp4"},
              {"id": "c", "kind": "cover", "inputs": ["j"], "output": "${OUT}/c.jpg"},
              {"id": "d", "kind": "directory", "inputs": ["j"], "path": "\(dir.path)/pub\\u007f"}
            ]}
            """
        XCTAssertEqual(
            issues(doc, ["OUT": "\(dir.path)/x\u{85}y"]),
            [
                "stages[0].paths[1]: expected a path without control characters, got \"\(dir.path)/b\\u0007.mp4\" (U+0007)",
                "stages[1].output: expected a path without control characters, got \"\(dir.path)/merged\\u0000.mp4\" (U+0000)",
                "stages[2].output: expected a path without control characters, got \"\(dir.path)/x\\u0085y/c.jpg\" (U+0085)",
                "stages[3].path: expected a path without control characters, got \"\(dir.path)/pub\\u007f\" (U+007F)"
            ])
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), ["a.mp4"], "nothing created")
    }

    // MARK: outputs against inputs and each other (points 2 and 3)

    func testOutputsThatAreInputsOrEachOtherAreRefused() throws {
        let real = dir.appendingPathComponent("real"), link = dir.appendingPathComponent("link")
        try FileManager.default.createDirectory(at: real, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: real)
        let x = try clip("real/x.mp4"), b = try clip("b.mp4")
        try FileManager.default.linkItem(atPath: b, toPath: dir.appendingPathComponent("hard.jpg").path)
        let doc = """
            {"version": 1, "stages": [
              {"id": "clips", "kind": "files", "paths": ["\(x)", "\(b)"]},
              {"id": "j", "kind": "join", "inputs": ["clips"], "output": "\(link.path)/x.mp4"},
              {"id": "c", "kind": "cover", "inputs": ["j"], "output": "\(dir.path)/hard.jpg"},
              {"id": "c2", "kind": "cover", "inputs": ["j"], "output": "\(dir.path)/./out/../out.jpg"},
              {"id": "c3", "kind": "cover", "inputs": ["j"], "output": "\(dir.path)/out.jpg"},
              {"id": "d", "kind": "directory", "inputs": ["clips"], "path": "\(link.path)"}
            ]}
            """
        XCTAssertEqual(
            issues(doc),
            [
                "stages[1].output: '\(link.path)/x.mp4' is the same file as stages[0].paths[0] '\(x)'; inputs are never overwritten",
                "stages[2].output: '\(dir.path)/hard.jpg' is the same file as stages[0].paths[1] '\(b)'; inputs are never overwritten",
                "stages[4].output: '\(dir.path)/out.jpg' is the same file as stages[3].output '\(dir.path)/./out/../out.jpg'; give each output its own file",
                "stages[5].path: would write '\(link.path)/x.mp4' (the copy of '\(x)'), which is the same file as stages[0].paths[0] '\(x)'; inputs are never overwritten"
            ])
    }

    /// A `directory` sink in link mode, run again: its earlier hard link of the same file is no clash.
    func testAnEarlierHardLinkCopyOfTheSameFileIsNoClash() throws {
        let a = try clip("a.mp4")
        let pub = dir.appendingPathComponent("pub")
        try FileManager.default.createDirectory(at: pub, withIntermediateDirectories: true)
        try FileManager.default.linkItem(atPath: a, toPath: pub.appendingPathComponent("a.mp4").path)
        let doc = """
            {"version": 1, "stages": [
              {"id": "clips", "kind": "files", "paths": ["\(a)", "\(a)"]},
              {"id": "d", "kind": "directory", "inputs": ["clips"], "path": "\(pub.path)", "mode": "link"}
            ]}
            """
        XCTAssertEqual(issues(doc), [])
    }

    func testFileIdentitySeesThroughSymlinksDotDotAndHardLinks() throws {
        let real = dir.appendingPathComponent("real"), link = dir.appendingPathComponent("link")
        try FileManager.default.createDirectory(at: real, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: real)
        let x = try clip("real/x.mp4")
        let cwd = FileManager.default.currentDirectoryPath
        XCTAssertTrue(FileManager.default.changeCurrentDirectoryPath(dir.path))
        defer { _ = FileManager.default.changeCurrentDirectoryPath(cwd) }
        XCTAssertEqual(FileIdentity(path: "link/x.mp4"), FileIdentity(path: x))
        XCTAssertEqual(FileIdentity(path: "link/../real/./x.mp4").entry, FileIdentity(path: x).entry)
        // Not yet existing: the real folder plus the name, even below folders still to be made.
        XCTAssertNil(FileIdentity(path: "link/new/deeper/y.mp4").file)
        XCTAssertEqual(FileIdentity(path: "link/new/deeper/y.mp4").entry, FileIdentity(path: "real/new/deeper/y.mp4").entry)
        XCTAssertEqual(FileIdentity(path: "link/new/../y.mp4").entry, FileIdentity(path: "\(real.path)/y.mp4").entry)
        XCTAssertNotEqual(FileIdentity(path: "link/y.mp4").entry, FileIdentity(path: "link/z.mp4").entry)
        try FileManager.default.linkItem(atPath: x, toPath: dir.appendingPathComponent("h.mp4").path)
        XCTAssertEqual(FileIdentity(path: "h.mp4").file, FileIdentity(path: x).file)
        XCTAssertNotEqual(FileIdentity(path: "h.mp4").entry, FileIdentity(path: x).entry)
        let clashes = OutputSafety.clashes(
            inputs: [.init(path: x, label: "input 1")],
            outputs: [
                .init(path: "h.mp4", label: "-o"), .init(path: "t.jpg", label: "--thumbnail"),
                .init(path: "./t.jpg", label: "--other")
            ])
        XCTAssertEqual(
            clashes.map(\.description),
            [
                "-o 'h.mp4' is the same file as input 1 '\(x)'; inputs are never overwritten",
                "--other './t.jpg' is the same file as --thumbnail 't.jpg'; give each output its own file"
            ])
    }

    // MARK: long lists (point 10)

    /// 100,000 copies of one input: a handful of lines, then one summary; linear time (this took
    /// 20 s and printed 99,999 lines).
    func testManyDuplicateInputsAreSummarisedQuickly() throws {
        let inputs = Array(repeating: "\"s\"", count: 100_000).joined(separator: ",")
        let doc = "{\"version\": 1, \"stages\": [{\"id\": \"s\", \"kind\": \"synthetic\"}, {\"id\": \"n\", \"kind\": \"null\", \"inputs\": [\(inputs)]}]}"
        let start = Date()
        let found = issues(doc)
        XCTAssertLessThan(Date().timeIntervalSince(start), 10, "linear, not quadratic")
        XCTAssertEqual(found.count, PipelineValidator.summaryLimit + 1)
        XCTAssertEqual(found.first, "stages[1].inputs[1]: \"s\" is listed twice")
        XCTAssertEqual(found.last, "stages[1].inputs: ... and 99994 more inputs listed twice")
        // A long chain of stages is checked for cycles without deep recursion.
        var stages = ["{\"id\": \"s0\", \"kind\": \"synthetic\"}"]
        for k in 1..<20_000 { stages.append("{\"id\": \"s\(k)\", \"kind\": \"null\", \"inputs\": [\"s\(k - 1)\"]}") }
        XCTAssertEqual(issues("{\"version\": 1, \"stages\": [\(stages.joined(separator: ",\n"))]}").filter { $0.contains("sink") }.count, 19_998)
    }

    /// 5,000 stages each naming an unknown input: each message lists a few known ids, not all
    /// 5,000 (which made the output quadratic in the number of stages).
    func testUnknownInputsAmongManyStagesGetShortMessages() throws {
        var stages = ["{\"id\": \"s\", \"kind\": \"synthetic\"}"]
        for k in 1..<5_000 { stages.append("{\"id\": \"n\(k)\", \"kind\": \"null\", \"inputs\": [\"missing\(k)\"]}") }
        let start = Date()
        let found = issues("{\"version\": 1, \"stages\": [\(stages.joined(separator: ",\n"))]}")
        XCTAssertLessThan(Date().timeIntervalSince(start), 10)
        XCTAssertEqual(found.count, 4_999)
        XCTAssertEqual(
            found.first,
            "stages[1].inputs[0]: unknown stage id \"missing1\"; known ids: n1, n10, n100, n1000, n1001, n1002, n1003, n1004, n1005, n1006, ... (5000 in all)")
        XCTAssertLessThan(found.map(\.count).max() ?? 0, 200)
    }
}
