import XCTest
import Foundation
import ClipFlowTestSupport

/// Hostile pipeline documents into `clipflow validate`, made by a seeded mutator from the
/// examples in `pipelines/`: numbers no integer holds, NaN and infinities through `${VAR}`,
/// negative and wrong-typed values, control characters, dropped, duplicated and misspelt keys,
/// long duplicated lists, deep nesting, truncated and corrupted text.
///
/// Each case must: end (a 20 s limit per run) without a crash; exit 0 with the "valid" line, or
/// exit 1 with every problem on its own line at `FILE:LINE:COLUMN: PATH: MESSAGE` (or a syntax
/// error at its place) followed by the count; print no raw control character; create nothing;
/// leave the inputs as they were.
///
/// `swift test` runs `CLIPFLOW_FUZZ_CASES` cases (default 60) from `CLIPFLOW_FUZZ_SEED`
/// (default 12); `scripts/fuzz-pipeline` runs many more. A failing case is kept, with the command
/// that reproduces it, under the folder printed in the failure.
final class PipelineFuzzTests: XCTestCase {
    let fx = Fixtures.shared
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func testMutatedPipelinesAreReportedNeverCrashOrHang() throws {
        let env = ProcessInfo.processInfo.environment
        let cases = env["CLIPFLOW_FUZZ_CASES"].flatMap(Int.init) ?? 60
        let seed = env["CLIPFLOW_FUZZ_SEED"].flatMap(UInt64.init) ?? 12
        let examples = try FileManager.default.contentsOfDirectory(atPath: Self.root.appendingPathComponent("pipelines").path)
            .filter { $0.hasSuffix(".json") }.sorted()
            .map { try Data(contentsOf: Self.root.appendingPathComponent("pipelines/\($0)")) }
            .map { try JSONDecoder().decode(Doc.self, from: $0) }
        XCTAssertGreaterThanOrEqual(examples.count, 5)

        // Inputs the examples name (validate checks they are readable files, not that they are video).
        let work = fx.scratch("fuzz")
        let clips = work.appendingPathComponent("clips")
        try FileManager.default.createDirectory(at: clips, withIntermediateDirectories: true)
        for i in 0..<3 { try Data("fragment \(i)".utf8).write(to: clips.appendingPathComponent("fragment\(i).mp4")) }
        let snapshot = try Self.listing(work)

        let failures = Failures()
        let started = Date(), binary = self.binary
        DispatchQueue.concurrentPerform(iterations: cases) { n in
            var rng = SplitMix64(seed: seed &+ UInt64(n) &* 0x9E37_79B9_7F4A_7C15)
            let mutated = Mutator(clips: clips.path, out: work.appendingPathComponent("out").path)
                .make(from: examples[Int(rng.next() % UInt64(examples.count))], &rng)
            let file = work.appendingPathComponent("case-\(n).json").path
            do {
                try mutated.text.write(to: URL(fileURLWithPath: file))
                let args = ["validate"] + mutated.variables.sorted { $0.key < $1.key }.flatMap { ["--set", "\($0.key)=\($0.value)"] } + [file]
                let r = try Run.run(["timeout", "-s", "KILL", "20", binary] + args, check: false)
                failures.count(valid: r.status == 0)
                if let problem = Self.judge(r, file: file) {
                    failures.add("case \(n) (seed \(seed)): \(problem)\n  reproduce: \(binary) \(args.map { "'\($0)'" }.joined(separator: " "))")
                } else {
                    try? FileManager.default.removeItem(atPath: file)
                }
            } catch {
                failures.add("case \(n): \(error)")
            }
        }
        for f in failures.all.prefix(20) { XCTFail(f) }
        XCTAssertEqual(try Self.listing(work).filter { !$0.hasPrefix("case-") }, snapshot, "validate created or changed files")
        print(
            "pipeline fuzz: \(cases) cases from seed \(seed) in \(String(format: "%.1f", Date().timeIntervalSince(started))) s, \(failures.validCount) valid, \(failures.all.count) failed; kept in \(work.path)"
        )
    }

    /// Why a run's outcome is wrong, or nil.
    static func judge(_ r: Run, file: String) -> String? {
        let err = r.stderr
        if err.unicodeScalars.contains(where: { ($0.value < 0x20 && $0 != "\n") || (0x7F...0x9F).contains($0.value) }) {
            return "a raw control character in the output: \(err.debugDescription.prefix(400))"
        }
        switch r.status {
        case 0:
            return r.out.hasPrefix("\(file): valid (") ? nil : "exit 0 without the valid line: \(r.out.prefix(300)) \(err.prefix(300))"
        case 65:
            var lines = err.split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            if lines.last == "" { lines.removeLast() }
            guard let last = lines.popLast() else { return "exit 65 with no message" }
            if lines.isEmpty, last == "error: pipeline '\(file)' is not UTF-8 text" { return nil }
            guard last == "error: \(file): \(lines.count) problem\(lines.count == 1 ? "" : "s") found; nothing was run" else {
                return "exit 65, last line is not the count of \(lines.count) problems: \(last.prefix(300))"
            }
            for l in lines {
                // FILE:LINE:COLUMN: then a JSON path and a message, or a syntax error.
                guard l.hasPrefix("\(file):"), let m = l.dropFirst(file.count + 1).firstMatch(of: /^(\d+):(\d+): (.+)$/) else {
                    return "a problem line not at FILE:LINE:COLUMN: \(l.prefix(300))"
                }
                let rest = String(m.3)
                if rest.hasPrefix("JSON syntax error: ") { continue }
                guard rest.firstMatch(of: /^[^\s:]+: \S/) != nil || rest.hasPrefix("expected an object") || rest.hasPrefix("... and ") else {
                    return "a problem that names no field: \(l.prefix(300))"
                }
            }
            return nil
        default:
            return "exit status \(r.status) (crash, signal or hang): \(err.suffix(600))"
        }
    }

    static func listing(_ dir: URL) throws -> [String] {
        var out: [String] = []
        let e = FileManager.default.enumerator(atPath: dir.path)
        while let p = e?.nextObject() as? String {
            let full = dir.appendingPathComponent(p).path
            var isDir: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: full, isDirectory: &isDir)
            out.append(isDir.boolValue ? p + "/" : p + " " + ((try? sha256(ofFile: full)) ?? "?"))
        }
        return out.sorted()
    }

    final class Failures: @unchecked Sendable {
        private let lock = NSLock()
        private var list: [String] = []
        private var valid = 0
        func add(_ s: String) { lock.lock(); list.append(s); lock.unlock() }
        func count(valid v: Bool) { lock.lock(); if v { valid += 1 }; lock.unlock() }
        var validCount: Int { lock.lock(); defer { lock.unlock() }; return valid }
        var all: [String] { lock.lock(); defer { lock.unlock() }; return list }
    }
}

/// A JSON document that can also hold what Foundation would not write: numbers as raw text
/// (1e400, -0), duplicate keys, strings with any character.
indirect enum Doc: Decodable {
    case raw(String)
    case string(String)
    case array([Doc])
    case object([(String, Doc)])

    init(from decoder: Decoder) throws {
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .raw("null"); return }
        if let b = try? c.decode(Bool.self) { self = .raw(b ? "true" : "false"); return }
        if let d = try? c.decode(Double.self) { self = .raw(d == d.rounded() && abs(d) < 1e15 ? String(Int64(d)) : String(d)); return }
        if let s = try? c.decode(String.self) { self = .string(s); return }
        if let a = try? c.decode([Doc].self) { self = .array(a); return }
        let o = try c.decode([String: Doc].self)
        self = .object(o.sorted { $0.key < $1.key }.map { ($0.key, $0.value) })
    }

    var text: String {
        switch self {
        case .raw(let r): return r
        case .string(let s):
            var out = "\""
            for u in s.unicodeScalars {
                switch u {
                case "\"": out += "\\\""
                case "\\": out += "\\\\"
                default: if u.value < 0x20 { out += String(format: "\\u%04x", u.value) } else { out.unicodeScalars.append(u) }
                }
            }
            return out + "\""
        case .array(let a): return "[" + a.map(\.text).joined(separator: ", ") + "]"
        case .object(let o): return "{" + o.map { Doc.string($0.0).text + ": " + $0.1.text }.joined(separator: ", ") + "}"
        }
    }
}

/// Makes one hostile case from an example: one to four mutations of its tree, sometimes a
/// corruption of its text, and variables (some hostile) for `--set`.
struct Mutator {
    let clips: String
    let out: String

    struct Case {
        var text: Data
        var variables: [String: String]
    }

    static let numbers = [
        "1e19", "-1e19", "9223372036854775808", "1e308", "-1e300", "9007199254740993", "1e-400", "0.5", "-1", "-0", "0",
        "1e400", "2147483648", "4294967296", "90", "270"
    ]
    static let strings = [
        "${R}", "${NOPE}", "$", "${", "${R", "$$", "${1X}", "", "a\u{0}b", "\u{1}", "x\u{7F}y", "\u{85}", "\u{1B}[2J",
        "../../../../etc/passwd", "/dev/null", "/", ".", "${CLIPS}/fragment0.mp4", "${OUT}/merged.mp4",
        "${CLIPS}", "${OUT}/m\u{0}.mp4", String(repeating: "x", count: 5000), "clips", "merged", "inf", "NaN"
    ]
    static let variableValues = [
        "inf", "-inf", "nan", "NaN", "-1e300", "1e19", "90", "abc", "", "\u{1}", "${R}", "1e400", "0x10", " 90",
        "true", "/tmp/does-not-exist", "a\u{7F}b", "\u{1B}[31m"
    ]

    func make(from example: Doc, _ rng: inout SplitMix64) -> Case {
        var doc = example
        for _ in 0..<(1 + Int(rng.next() % 4)) { doc = mutate(doc, &rng, depth: 0) }
        var text = Data(doc.text.utf8)
        if rng.next() % 8 == 0 { text = corrupt(text, &rng) }
        var vars = [
            "CLIPS": clips, "OUT": out, "ROTATE": "90", "COUNT": "10", "DURATION": "2", "DEVICE": "/dev/video0",
            "TUS_ENDPOINT": "https://tus.example/files", "GCORE_API": "https://api.example/streaming",
            "GCORE_UPLOAD_URL": "https://{hostname}/upload", "S3_ENDPOINT": "https://s3.example", "BUCKET": "media",
            "R": pick(Self.variableValues, &rng)
        ]
        if rng.next() % 4 == 0 {
            let k = pick(["CLIPS", "OUT", "ROTATE", "COUNT", "DURATION", "DEVICE", "BUCKET"], &rng)
            vars[k] = pick(Self.variableValues + ["\(out)/\u{1}", "\(clips)/fragment0.mp4"], &rng)
        }
        if rng.next() % 10 == 0 { vars.removeValue(forKey: pick(Array(vars.keys).sorted(), &rng)) }
        return Case(text: text, variables: vars)
    }

    func pick<T>(_ list: [T], _ rng: inout SplitMix64) -> T { list[Int(rng.next() % UInt64(list.count))] }

    func hostileValue(_ rng: inout SplitMix64) -> Doc {
        switch rng.next() % 6 {
        case 0, 1: return .raw(pick(Self.numbers, &rng))
        case 2, 3: return .string(pick(Self.strings, &rng))
        case 4: return pick([.raw("true"), .raw("false"), .raw("null"), .array([]), .object([])], &rng)
        default:
            let depth = 1 + Int(rng.next() % 700)
            return .raw(String(repeating: "[", count: depth) + "1" + String(repeating: "]", count: depth))
        }
    }

    /// Changes one place in the tree, chosen by walking down at random.
    func mutate(_ d: Doc, _ rng: inout SplitMix64, depth: Int) -> Doc {
        let descend = depth < 6 && rng.next() % 3 != 0
        switch d {
        case .object(var o):
            if descend, !o.isEmpty {
                let i = Int(rng.next() % UInt64(o.count))
                o[i].1 = mutate(o[i].1, &rng, depth: depth + 1)
                return .object(o)
            }
            switch rng.next() % 6 {
            case 0 where !o.isEmpty: o.remove(at: Int(rng.next() % UInt64(o.count)))
            case 1 where !o.isEmpty:
                let e = o[Int(rng.next() % UInt64(o.count))]
                o.append((e.0, rng.next() % 2 == 0 ? e.1 : hostileValue(&rng)))
            case 2 where !o.isEmpty:
                let i = Int(rng.next() % UInt64(o.count))
                o[i].0 = String(o[i].0.dropLast()) + pick(["", "s", "_", "-", "\u{1}"], &rng)
            case 3:
                o.append((pick(["output", "rotate", "inputs", "queue", "paths", "glob", "id", "kind", "size", "version", "stages"], &rng), hostileValue(&rng)))
            case 4 where !o.isEmpty: o[Int(rng.next() % UInt64(o.count))].1 = hostileValue(&rng)
            default: return hostileValue(&rng)
            }
            return .object(o)
        case .array(var a):
            if descend, !a.isEmpty {
                let i = Int(rng.next() % UInt64(a.count))
                a[i] = mutate(a[i], &rng, depth: depth + 1)
                return .array(a)
            }
            switch rng.next() % 5 {
            case 0 where !a.isEmpty:
                let e = a[Int(rng.next() % UInt64(a.count))]
                a += Array(repeating: e, count: 1 + Int(rng.next() % 2000))
            case 1 where !a.isEmpty: a.remove(at: Int(rng.next() % UInt64(a.count)))
            case 2: a = []
            case 3: a.append(hostileValue(&rng))
            default: return hostileValue(&rng)
            }
            return .array(a)
        case .string, .raw:
            return hostileValue(&rng)
        }
    }

    /// Text-level damage: truncation, a flipped byte (maybe NUL or invalid UTF-8), inserted bytes.
    func corrupt(_ t: Data, _ rng: inout SplitMix64) -> Data {
        guard !t.isEmpty else { return t }
        var b = [UInt8](t)
        let at = Int(rng.next() % UInt64(b.count))
        switch rng.next() % 3 {
        case 0: b = Array(b.prefix(at))
        case 1: b[at] = pick([0x00, 0x01, 0x7F, 0xFF, 0xC3, 0x22, 0x5C, 0x2C, 0x7D, 0x5D], &rng)
        default: b.insert(contentsOf: Array(pick(["${", "\\u0000", ",", "]]]]", "\u{0}", "\"", "\u{FEFF}"], &rng).utf8), at: at)
        }
        return Data(b)
    }
}
