import XCTest
import Foundation
import ClipFlowTestSupport

/// `clipflow hls` and `clipflow hls lint` as a user runs them.
final class HLSCLITests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func clipflow(_ args: [String]) throws -> Run { try Run.run([binary] + args, check: false) }

    func source(seconds: Int = 6) throws -> String {
        try fx.clip(
            "cli-hls-src-\(seconds).mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "\(seconds)", "-c:v", "libx264",
                "-preset", "ultrafast", "-c:a", "aac"
            ])
    }

    /// A folder served over HTTP on 127.0.0.1 (`scripts/static_server.py`: a web server's files and
    /// byte ranges).
    final class WebFolder {
        let process = Process()
        let port: Int
        init(_ folder: String) throws {
            let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = ["python3", root.appendingPathComponent("scripts/static_server.py").path, folder]
            let out = Pipe()
            process.standardOutput = out
            try process.run()
            var line = Data()
            while !line.contains(UInt8(ascii: "\n")) {
                let d = out.fileHandleForReading.availableData
                if d.isEmpty { break }
                line += d
            }
            guard let p = Int(String(decoding: line, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)) else {
                process.terminate()
                throw NSError(domain: "static_server", code: 1, userInfo: [NSLocalizedDescriptionKey: "no port"])
            }
            port = p
        }
        func stop() {
            process.terminate()
            process.waitUntilExit()
        }
    }

    func testLadderRunsAsAGraphAndLintsOverHTTP() throws {
        let parent = fx.scratch("cli-hls")
        let out = parent.appendingPathComponent("video").path
        let r = try clipflow([
            "hls", try source(), "-o", out, "--ladder", "720,360", "--segment", "2", "--single-file", "--encoder-preset", "ultrafast", "--events", "json"
        ])
        XCTAssertEqual(r.status, 0, r.stderr)
        let events = r.out.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        // One decode, one stage per rendition, the ladder at the end: each a stage of the engine.
        let stages = Set(events.compactMap { $0["stage"] as? String })
        XCTAssertTrue(stages.isSuperset(of: ["files", "hls.decode", "hls.720p", "hls.360p", "hls.audio", "hls"]), "\(stages)")
        let progress = events.filter { $0["stage"] as? String == "hls.decode" && $0["event"] as? String == "progress" }
        XCTAssertFalse(progress.isEmpty)
        XCTAssertTrue(progress.allSatisfy { $0["speed"] is Double }, "\(progress)")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: parent.path), ["video"], "no temporary folder left")

        let web = try WebFolder(parent.path)
        defer { web.stop() }
        let url = "http://127.0.0.1:\(web.port)/video/master.m3u8"
        let clean = try clipflow(["hls", "lint", url])
        XCTAssertEqual(clean.status, 0, clean.out + clean.stderr)
        XCTAssertTrue(clean.out.contains("\"errors\":0"), clean.out)
        // A rendition's file cut short: its last byte range cannot be read.
        let file = parent.appendingPathComponent("video/360p.mp4")
        let h = try FileHandle(forWritingTo: file)
        try h.truncate(atOffset: try h.seekToEnd() - 1000)
        try h.close()
        let broken = try clipflow(["hls", "lint", url + "?token=not-for-logs"])
        XCTAssertEqual(broken.status, 1, broken.out + broken.stderr)
        XCTAssertTrue(broken.out.contains("\"code\":\"missing-segment\""), broken.out)
        XCTAssertFalse((broken.out + broken.stderr).contains("not-for-logs"))
        let missing = try clipflow(["hls", "lint", "http://127.0.0.1:\(web.port)/nothing/master.m3u8"])
        XCTAssertNotEqual(missing.status, 0)
        XCTAssertTrue(missing.stderr.contains("cannot read the master playlist (HTTP 404"), missing.stderr)
    }

    func testInterruptLeavesNoLadder() throws {
        let parent = fx.scratch("cli-hls-sigint")
        let out = parent.appendingPathComponent("video").path
        let (status, text) = try Run.interrupt(binary, ["hls", try source(seconds: 60), "-o", out, "--encoder-preset", "ultrafast"], after: "hls.decode: ")
        XCTAssertFalse(text.contains("wrote "), "the ladder finished before the signal; make it longer")
        XCTAssertEqual(status, 130, text)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: parent.path), [], "nothing left behind")
    }

    func testBadChoicesFailClearly() throws {
        let src = try source()
        let parent = fx.scratch("cli-hls-bad")
        let out = parent.appendingPathComponent("video").path
        let cases: [([String], String)] = [
            (["--ladder", "720,721", src], "--ladder: expected auto, copy, or even heights"),
            (["--ladder", "auto,720", src], "--ladder: expected"),
            (["--profile", "live", src], "--profile must be vod or feed"),
            (["--ladder", "copy", src, src], "copy passes one video through; got 2 inputs")
        ]
        for (args, message) in cases {
            let r = try clipflow(["hls", "-o", out, "--quiet"] + args)
            XCTAssertNotEqual(r.status, 0, "\(args)")
            XCTAssertTrue(r.stderr.contains(message), "\(args): \(r.stderr)")
        }
        try FileManager.default.createDirectory(atPath: out, withIntermediateDirectories: true)
        let exists = try clipflow(["hls", "-o", out, "--quiet", src])
        XCTAssertNotEqual(exists.status, 0)
        XCTAssertTrue(exists.stderr.contains("error: -o '\(out)' exists; give -y (--overwrite) to replace it"), exists.stderr)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: parent.path), ["video"])
    }
}
