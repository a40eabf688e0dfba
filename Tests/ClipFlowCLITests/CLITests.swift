import XCTest
import Foundation
import ClipFlowTestSupport

/// The `clipflow` executable as a user runs it: exit codes, messages, files left behind.
final class CLITests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func clipflow(_ args: [String], as user: String? = nil) throws -> Run {
        var cmd = [binary] + args
        if let user { cmd = ["setpriv", "--reuid=\(user)", "--regid=\(user)", "--clear-groups"] + cmd }
        return try Run.run(cmd, check: false)
    }

    func sha(_ path: String) throws -> String {
        try Run.run(["sha256sum", path]).out.split(separator: " ").first.map(String.init) ?? ""
    }

    /// Every bad input: a clear error naming the file and the problem, non-zero exit, no output,
    /// no temporary file, and the good inputs untouched.
    func testBadInputsGiveClearErrorsAndLeaveNothingBehind() throws {
        let good = try fx.toneClip(0, seconds: 1)
        let dir = fx.scratch("bad")
        let empty = dir.appendingPathComponent("empty.mp4").path
        XCTAssertTrue(FileManager.default.createFile(atPath: empty, contents: Data()))
        let text = dir.appendingPathComponent("notes.mp4").path
        try "these are my notes, not a video\n".write(toFile: text, atomically: true, encoding: .utf8)
        // Truncated, moov at the end (lost) and moov at the front (sample data missing).
        let big = try fx.toneClip(1, seconds: 2)
        let fast = try fx.clip("faststart.mp4", ["-i", big, "-c", "copy", "-movflags", "+faststart"])
        func truncated(_ src: String, _ name: String) throws -> String {
            let d = try Data(contentsOf: URL(fileURLWithPath: src))
            let p = dir.appendingPathComponent(name).path
            try d.prefix(d.count * 6 / 10).write(to: URL(fileURLWithPath: p))
            return p
        }
        let cutTail = try truncated(big, "cut-moov-at-end.mp4")
        let cutFront = try truncated(fast, "cut-moov-at-front.mp4")
        let folder = dir.appendingPathComponent("afolder.mp4").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        let missing = dir.appendingPathComponent("missing.mp4").path

        let cases: [(String, String)] = [
            (missing, "input '\(missing)': no such file"),
            (empty, "input '\(empty)' is empty (0 bytes)"),
            (text, "input '\(text)' is not a video FFmpeg can read"),
            (cutTail, "input '\(cutTail)' is not a video FFmpeg can read"),
            (cutFront, "input '\(cutFront)' is truncated"),
            (folder, "input '\(folder)' is a directory")
        ]
        let before = try sha(good)
        for (bad, message) in cases {
            let out = dir.appendingPathComponent("out.mp4").path
            let r = try clipflow(["merge", "-o", out, good, bad])
            XCTAssertEqual(r.status, 65, bad)
            XCTAssertTrue(r.stderr.contains("error: " + message), "expected '\(message)' in: \(r.stderr)")
            XCTAssertFalse(FileManager.default.fileExists(atPath: out), "no output for \(bad)")
            let left = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.contains("clipflow-tmp") }
            XCTAssertEqual(left, [], "no temporary files")
        }
        XCTAssertEqual(try sha(good), before, "inputs are never modified")
    }

    func testUnreadableInputIsReportedAsPermissionDenied() throws {
        // We run as root in CI, which reads anything: drop to 'nobody' for this case
        // (setpriv is part of util-linux, which every Debian system has).
        let dir = fx.scratch("perm")
        let good = dir.appendingPathComponent("good.mp4").path
        try FileManager.default.copyItem(atPath: try fx.toneClip(0, seconds: 1), toPath: good)
        let secret = dir.appendingPathComponent("secret.mp4").path
        try FileManager.default.copyItem(atPath: good, toPath: secret)
        chmod(secret, 0o000)
        chmod(good, 0o644)
        let out = dir.appendingPathComponent("o.mp4").path
        let r = try clipflow(["merge", "-o", out, good, secret], as: "65534")
        XCTAssertEqual(r.status, 65)
        XCTAssertTrue(r.stderr.contains("input '\(secret)': permission denied"), r.stderr)
        XCTAssertFalse(FileManager.default.fileExists(atPath: out))
    }

    func testOutputProblemsAndUsageErrors() throws {
        let good = try fx.toneClip(0, seconds: 1)
        let r1 = try clipflow(["merge", "-o", "/nonexistent-dir/out.mp4", good])
        XCTAssertEqual(r1.status, 1)
        XCTAssertTrue(r1.stderr.contains("folder '/nonexistent-dir' does not exist"), r1.stderr)

        let r2 = try clipflow(["merge", "--rotate", "45", good])
        XCTAssertNotEqual(r2.status, 0)
        XCTAssertTrue(r2.stderr.contains("--rotate must be 0, 90, 180 or 270 (got 45)"), r2.stderr)

        let r3 = try clipflow(["merge"])
        XCTAssertNotEqual(r3.status, 0)
        XCTAssertTrue(r3.stderr.contains("give at least one input clip"), r3.stderr)

        let dir = fx.scratch("self")
        let copy = dir.appendingPathComponent("a.mp4").path
        try FileManager.default.copyItem(atPath: good, toPath: copy)
        let before = try sha(copy)
        let r4 = try clipflow(["merge", "-o", copy, copy])
        XCTAssertEqual(r4.status, 65)
        XCTAssertEqual(r4.stderr, "error: -o '\(copy)' is the same file as input 1 '\(copy)'; inputs are never overwritten\n")
        XCTAssertEqual(try sha(copy), before)
    }

    /// Issue 12, points 2 and 3: `--thumbnail` onto an input or onto `-o`, and `-o` through a
    /// symlinked folder or a hard link onto an input, used to exit 0 having replaced the input (or
    /// the video) with a JPEG. Each is refused before any work: exit 1, the clash named, every
    /// file as it was, nothing new in the folder.
    func testOutputsThatAreInputsOrEachOtherAreRefusedBeforeAnyWork() throws {
        let dir = fx.scratch("clash")
        let real = dir.appendingPathComponent("real"), link = dir.appendingPathComponent("link")
        try FileManager.default.createDirectory(at: real, withIntermediateDirectories: true)
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: real)
        let a = real.appendingPathComponent("x.mp4").path, b = dir.appendingPathComponent("b.mp4").path
        try FileManager.default.copyItem(atPath: try fx.toneClip(0, seconds: 1), toPath: a)
        try FileManager.default.copyItem(atPath: try fx.toneClip(1, seconds: 1), toPath: b)
        let hard = dir.appendingPathComponent("hard.mp4").path
        try FileManager.default.linkItem(atPath: b, toPath: hard)
        let out = dir.appendingPathComponent("out.mp4").path
        let cases: [(args: [String], message: String)] = [
            (["-o", out, "--thumbnail", a, a, b], "--thumbnail '\(a)' is the same file as input 1 '\(a)'; inputs are never overwritten"),
            (
                ["-o", out, "--thumbnail", "\(dir.path)/./b.mp4", a, b],
                "--thumbnail '\(dir.path)/./b.mp4' is the same file as input 2 '\(b)'; inputs are never overwritten"
            ),
            (["-o", out, "--thumbnail", out, a, b], "--thumbnail '\(out)' is the same file as -o '\(out)'; give each output its own file"),
            (["-o", "\(link.path)/x.mp4", a, b], "-o '\(link.path)/x.mp4' is the same file as input 1 '\(a)'; inputs are never overwritten"),
            (["-o", "\(link.path)/../real/x.mp4", a, b], "-o '\(link.path)/../real/x.mp4' is the same file as input 1 '\(a)'; inputs are never overwritten"),
            (["-o", hard, a, b], "-o '\(hard)' is the same file as input 2 '\(b)'; inputs are never overwritten")
        ]
        let before = try [a, b].map(sha)
        let listing = try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted()
        for c in cases {
            let r = try clipflow(["merge", "--quiet"] + c.args)
            XCTAssertEqual(r.status, 65, "\(c.args)")
            XCTAssertEqual(r.stderr, "error: \(c.message)\n", "\(c.args)")
            XCTAssertEqual(try [a, b].map(sha), before, "inputs untouched: \(c.args)")
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path).sorted(), listing, "nothing written: \(c.args)")
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: real.path), ["x.mp4"])
        }
        // Distinct files still merge with a cover.
        let ok = try clipflow(["merge", "--quiet", "-o", out, "--thumbnail", "\(link.path)/cover.jpg", a, b])
        XCTAssertEqual(ok.status, 0, ok.stderr)
        XCTAssertEqual(try Probe.stream("\(real.path)/cover.jpg", "v:0", "codec_name"), "mjpeg")
        XCTAssertEqual(try [a, b].map(sha), before)
    }

    /// Work that takes no time prints its summary alone; `--verbose` adds every stage's progress
    /// and queue statistics (plain lines when stderr is not a terminal); `--quiet` prints nothing.
    func testQuickWorkPrintsItsSummaryAloneVerboseShowsProgressAndQuietSilences() throws {
        let clips = try (0..<3).map { try fx.toneClip($0) }
        let dir = fx.scratch("progress")
        let r = try clipflow(["merge", "-o", dir.appendingPathComponent("a.mp4").path] + clips)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(r.stderr.split(separator: "\n").count, 1, r.stderr)
        XCTAssertTrue(r.stderr.hasPrefix("merged 3 clips into \(dir.appendingPathComponent("a.mp4").path) (360 video frames"), r.stderr)

        let v = try clipflow(["merge", "--verbose", "-o", dir.appendingPathComponent("v.mp4").path] + clips)
        XCTAssertEqual(v.status, 0, v.stderr)
        XCTAssertTrue(v.stderr.contains("files: 100% (3 of 3 files)\n"), v.stderr)
        XCTAssertTrue(v.stderr.contains("merge: 100%"), v.stderr)
        XCTAssertTrue(v.stderr.contains("merge.probe: queue from files: at most "), v.stderr)
        XCTAssertTrue(v.stderr.contains("merged 3 clips"), v.stderr)
        XCTAssertFalse(v.stderr.contains("\r"), "no bar redraws when stderr is not a terminal")

        let q = try clipflow(["merge", "--quiet", "-o", dir.appendingPathComponent("b.mp4").path] + clips)
        XCTAssertEqual(q.status, 0)
        XCTAssertEqual(q.stderr, "")
        XCTAssertEqual(try Probe.videoFrames(dir.appendingPathComponent("b.mp4").path), 360)
    }

    func testMergeWithCoverFromTheCommandLine() throws {
        let clips = try (0..<2).map { try fx.toneClip($0) }
        let dir = fx.scratch("cover")
        let out = dir.appendingPathComponent("m.mp4").path, jpg = dir.appendingPathComponent("c.jpg").path
        let r = try clipflow(["merge", "--rotate", "90", "--thumbnail", jpg, "--thumbnail-size", "200", "-o", out] + clips)
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(try Probe.stream(jpg, "v:0", "width") + "x" + (try Probe.stream(jpg, "v:0", "height")), "150x200")
        XCTAssertEqual(try Probe.rotation(out), -90)
    }

    /// SIGINT mid-merge: exit status 130, no output, no temporary file.
    func testInterruptLeavesNoPartialOutput() throws {
        let clip = try fx.toneClip(0)
        let inputs = Array(repeating: clip, count: 600)
        let dir = fx.scratch("sigint")
        let out = dir.appendingPathComponent("big.mp4").path
        // Interrupt once the first progress line shows the merge is really under way.
        let (status, text) = try Run.interrupt(binary, ["merge", "-o", out] + inputs, after: "merge: ")
        XCTAssertFalse(text.contains("merged 600 clips"), "the merge finished before the signal; make it longer")
        XCTAssertEqual(status, 130, text)
        XCTAssertTrue(text.hasSuffix("stopped: no output was written\n"), text)
        XCTAssertFalse(text.contains("error"), "a stop is not an error: \(text)")
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: dir.path), [], "nothing left behind")
    }
}
