import XCTest
import Foundation
import ClipFlowTestSupport
@testable import ClipFlowUpload

/// What the S3 uploader tests share whichever server they run against (S3UploaderTests on
/// SeaweedFS, S3Tests on moto): a folder per test, files of pseudo-random bytes, the fault proxy in
/// front of the server and its record, and checks for progress and leaked secrets. A subclass
/// starts its servers and names its proxy.
class S3UploaderTestCase: XCTestCase {
    static let noSuchUpload = "<?xml version=\"1.0\"?><Error><Code>NoSuchUpload</Code><Message>The specified upload does not exist.</Message></Error>"

    /// The fault proxy in front of the subclass's server.
    var proxy: FaultProxy { fatalError("a subclass of S3UploaderTestCase names its proxy") }
    var dir = ""

    override func setUpWithError() throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("s3test-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try proxy.clearRules()
        try proxy.resetStats()
    }

    override func tearDownWithError() throws {
        try? proxy.clearRules()
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// "testX" from XCTest's name ("S3Tests.testX" on Linux, "-[S3Tests testX]" on Darwin).
    var testName: String {
        String(name.split(whereSeparator: { $0 == " " || $0 == "." }).last!.filter { $0 != "]" })
    }

    func makeFile(_ name: String, size: Int, seed: UInt64 = 1) throws -> String {
        var state = seed &* 0x9E3779B97F4A7C15 | 1
        var bytes = [UInt8](repeating: 0, count: size)
        bytes.withUnsafeMutableBytes { raw in
            let words = raw.bindMemory(to: UInt64.self)
            for i in words.indices { state ^= state << 13; state ^= state >> 7; state ^= state << 17; words[i] = state }
            for i in (words.count * 8)..<size { state ^= state << 13; state ^= state >> 7; state ^= state << 17; raw[i] = UInt8(truncatingIfNeeded: state) }
        }
        let path = dir + "/" + name
        try Data(bytes).write(to: URL(fileURLWithPath: path))
        return path
    }

    func store() throws -> ResumeStore { try ResumeStore(path: dir + "/resume.json") }

    func upload(
        _ uploader: S3Uploader, _ file: String, metadata: [String: String] = [:], control: UploadControl = UploadControl(),
        observer: UploadObserver
    ) throws -> UploadResult {
        try uploader.upload(file: file, id: "u1", metadata: metadata, control: control, observer: observer)
    }

    func progressNeverGoesBackwards(_ log: UploadEventLog, total: Int64, line: UInt = #line) {
        var last: Int64 = -1
        for case .progress(_, let p) in log.all {
            XCTAssertGreaterThanOrEqual(p.acknowledged, last, line: line)
            last = p.acknowledged
        }
        XCTAssertEqual(last, total, "final progress", line: line)
    }

    /// The proxy's stats once `done` holds (it records a forwarded request only when the upstream
    /// closed, which can be a moment after the client got its answer), or after 3 s.
    func stats(when done: (ProxyStats) -> Bool) throws -> ProxyStats {
        var s = try proxy.stats()
        for _ in 0..<60 where !done(s) {
            Thread.sleep(forTimeInterval: 0.05)
            s = try proxy.stats()
        }
        return s
    }

    /// The final CompleteMultipartUpload was forwarded and answered 200.
    let completed: (ProxyStats) -> Bool = { s in
        s.requests.contains { $0.method == "POST" && $0.target.contains("uploadId=") && $0.outcome == "200" }
    }

    func partPUTs(_ stats: ProxyStats) -> [ProxyStats.Entry] {
        stats.requests.filter { $0.method == "PUT" && $0.target.contains("partNumber=") }
    }

    func lines(_ path: String) -> Int {
        ((try? String(contentsOfFile: path, encoding: .utf8)) ?? "").split(separator: "\n").count
    }

    /// No event text or error message carries a credential secret or a signature.
    func assertNoSecrets(_ texts: [String], secrets: [String], line: UInt = #line) {
        for t in texts {
            for s in secrets where !s.isEmpty { XCTAssertFalse(t.contains(s), "secret leaked in: \(t)", line: line) }
            XCTAssertFalse(t.contains("Signature="), "signature leaked in: \(t)", line: line)
        }
    }

    func texts(_ log: UploadEventLog, _ error: Error? = nil) -> [String] {
        var out = log.all.map { "\($0)" }
        if let error { out += ["\(error)", (error as? UploadError)?.message ?? ""] }
        return out
    }
}
