import XCTest
import Foundation
import ClipFlowTestSupport

/// Hostile HTTP answers into `clipflow upload` (TUS, the Gcore flow, S3), seeded: each case plans
/// Tests/Servers/hostile_http.py with a seed (each answer bent with some probability: wrong
/// statuses and offsets, Locations elsewhere, giant/endless headers and bodies, truncated and
/// dripped answers, hangs, malformed JSON/XML) and runs one upload with short timeouts.
///
/// Each case: no crash, no hang (killed after 60 s), exit 0 with the file stored intact (unless the
/// server lied about what it stored) or exit 1 with an error naming the file once; no secret in
/// the output; no secret at the other origin; the queue and resume files readable JSON with no
/// upload left running and nothing else left in the queue folder; the input unchanged.
///
/// `swift test` runs CLIPFLOW_FUZZ_CASES (default 4) cases per protocol from CLIPFLOW_FUZZ_SEED
/// (default 1); `scripts/fuzz-http` runs more.
final class UploadFuzzCLITests: XCTestCase {
    let fx = Fixtures.shared
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }
    static let env = ProcessInfo.processInfo.environment
    static let cases = Int(env["CLIPFLOW_FUZZ_CASES"] ?? "") ?? 4
    static let firstSeed = Int(env["CLIPFLOW_FUZZ_SEED"] ?? "") ?? 1
    static let rate = Double(env["CLIPFLOW_FUZZ_RATE"] ?? "") ?? 0.3

    let secrets = [
        "CLIPFLOW_UPLOAD_TOKEN": "tok-fuzz-5ecret-api-0123456789",
        "AWS_ACCESS_KEY_ID": "AKIAFUZZFUZZFUZZ0001",
        "AWS_SECRET_ACCESS_KEY": "fuzzSecretAccessKey0123456789abcdefGHIJ",
        "AWS_SESSION_TOKEN": "fuzz-session-token-0123456789-secret"
    ]

    func testHostileAnswersIntoTUS() throws { try fuzz("tus") }
    func testHostileAnswersIntoGcore() throws { try fuzz("gcore") }
    func testHostileAnswersIntoS3() throws { try fuzz("s3") }

    func fuzz(_ method: String) throws {
        let foreign = try HostileServer.start(host: "127.0.0.2")
        defer { foreign.stop() }
        let server = try HostileServer.start(foreign: foreign.hostPort)
        defer { server.stop() }
        var outcomes: [String: Int] = [:]
        for i in 0..<Self.cases {
            let seed = Self.firstSeed + i * 7919 + method.utf8.reduce(0) { $0 &* 31 &+ Int($1) } % 1000
            let outcome = try oneCase(method, seed: seed, server: server, foreign: foreign)
            outcomes[outcome, default: 0] += 1
        }
        print("fuzz \(method): \(Self.cases) cases from seed \(Self.firstSeed): \(outcomes.sorted { $0.key < $1.key })")
    }

    func oneCase(_ method: String, seed: Int, server: HostileServer, foreign: HostileServer) throws -> String {
        let tag = "\(method) seed \(seed)"
        var rng = SplitMix64(seed: UInt64(seed))
        let size = [0, 1, 65_535, 65_536, 150_000, 300_001][Int(rng.next() % 6)]
        let dir = fx.scratch("upload-fuzz-\(method)-\(seed)").path
        let file = dir + "/in-\(seed).bin"
        var bytes = [UInt8](repeating: 0, count: size)
        for j in bytes.indices { bytes[j] = UInt8(truncatingIfNeeded: rng.next()) }
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        let before = try sha256(ofFile: file)
        let queue = dir + "/queue"

        try foreign.plan(rules: [])
        try server.plan(seed: seed, rate: Self.rate)
        var args = [
            binary, "upload", file, "--to", method, "--queue", queue, "--chunk-size", "65536",
            "--stall-timeout", "1", "--response-timeout", "2", "--retries", "2", "--retry-delay", "0.01", "--events", "json"
        ]
        switch method {
        case "tus": args += ["--endpoint", server.url + "/files"]
        case "gcore": args += ["--endpoint", server.url + "/api", "--upload-url", "http://{hostname}/files"]
        default: args += ["--endpoint", server.url, "--bucket", "bkt", "--min-part-size", "65536"]
        }
        let start = Date()
        let r = try Run.run(["timeout", "-s", "KILL", "60"] + args, env: secrets, check: false)
        let elapsed = Date().timeIntervalSince(start)
        let mutations = try server.mutations()
        let context = "\(tag): status \(r.status) after \(String(format: "%.1f", elapsed)) s, mutations \(mutations)\nstderr: \(r.stderr.suffix(1500))"

        XCTAssertNotEqual(r.status, 137, "hang: \(context)")
        XCTAssertTrue(r.status == 0 || r.status == 1, "exit status: \(context)")
        for (name, secret) in secrets where name != "AWS_ACCESS_KEY_ID" {
            XCTAssertFalse(r.stderr.contains(secret) || r.out.contains(secret), "\(name) printed: \(context)")
            for req in try foreign.requests() {
                XCTAssertFalse(req.headers.values.contains { $0.contains(secret) }, "\(name) sent to another origin (\(req.method) \(req.path)): \(context)")
            }
        }
        XCTAssertFalse(r.stderr.lowercased().contains("out of memory"), context)
        XCTAssertFalse(r.stderr.contains("internal"), context)
        XCTAssertEqual(try sha256(ofFile: file), before, "input changed: \(context)")

        // Queue and resume store: readable, nothing left running, nothing else in the folder.
        let names = Set((try? FileManager.default.contentsOfDirectory(atPath: queue)) ?? [])
        XCTAssertTrue(
            names.isSubset(of: ["queue.json", "queue.json.lock", "resume.json", "resume.json.lock"]), "left in the queue folder: \(names.sorted()) \(context)")
        let queueDoc = try XCTUnwrap(
            try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: queue + "/queue.json"))) as? [String: Any], context)
        let states = ((queueDoc["uploads"] as? [[String: Any]]) ?? []).compactMap { $0["state"] as? String }
        XCTAssertEqual(states.count, 1, context)
        if names.contains("resume.json") {
            XCTAssertNotNil(try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: queue + "/resume.json"))), "resume store: \(context)")
        }

        if r.status == 0 {
            XCTAssertEqual(states, ["finished"], context)
            // A server that lied about what it stored (a wrong offset or status) can fool any client.
            let lied = mutations.contains { ["offset", "status", "bad-xml"].contains($0.last ?? "") }
            if !lied {
                let stored = try server.objects().values.contains(before) || (try foreign.objects().values.contains(before))
                XCTAssertTrue(stored, "exit 0 but the file is not stored intact: \(context)")
            }
            return "finished"
        }
        XCTAssertEqual(states, ["failed"], context)
        let line = r.stderr.split(separator: "\n").first { $0.hasPrefix("error:") }.map(String.init) ?? ""
        XCTAssertTrue(line.hasPrefix("error: \(file): "), "the error names the file: \(context)")
        XCTAssertEqual(line.components(separatedBy: file).count - 1, 1, "the file is named once: \(context)")
        let code =
            (r.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
                .last { $0["event"] as? String == "failed" && $0["item"] != nil }?["code"] as? String) ?? "?"
        return "failed:\(code)"
    }
}
