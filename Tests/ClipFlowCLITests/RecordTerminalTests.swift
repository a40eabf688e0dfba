import ClipFlowMedia
import ClipFlowTestSupport
import Foundation
import XCTest

@testable import clipflow

/// The test support's, not the `clipflow run` command.
private typealias Run = ClipFlowTestSupport.Run

/// `clipflow record` as a person at a terminal sees it: run in a pseudo-terminal and rendered by a
/// terminal emulator (pyte, `Tests/Terminal/pty_session.py`), key presses typed without Enter.
final class RecordTerminalTests: XCTestCase {
    let fx = Fixtures.shared
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }
    func session(_ steps: [[String: Any]], _ args: [String], env: [String: String] = [:]) throws -> TerminalSession {
        try TerminalSession.run(steps, [binary] + args, env: env)
    }

    /// The status line's numbers: fragment, seconds in it, total seconds, camera and queue drops.
    struct Shown: Equatable {
        var fragment: Int, elapsed: Double, total: Double, camera: Int, queue: Int
    }
    static let statusPattern = try? NSRegularExpression(
        pattern:
            #"^● REC clip-(\d{4})  (\d\d):(\d\d\.\d) / total (\d\d):(\d\d\.\d)  drops: camera (\d+), queue (\d+)(, audio \d+)?  audio (–|-?\d+ dB [▮▯]{6}|-∞ dB ▯{6})$"#
    )

    /// The whole line parsed as a recording's status line, or nil if it is anything else (an
    /// echoed key would make it something else).
    func shown(_ line: String) -> Shown? {
        let ns = line as NSString
        guard let m = Self.statusPattern?.firstMatch(in: line, range: NSRange(location: 0, length: ns.length)) else { return nil }
        func g(_ i: Int) -> Double { Double(ns.substring(with: m.range(at: i))) ?? -1 }
        return Shown(
            fragment: Int(g(1)), elapsed: g(2) * 60 + g(3), total: g(4) * 60 + g(5), camera: Int(g(6)), queue: Int(g(7)))
    }

    func clips(_ dir: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.hasSuffix(".mp4") }.sorted()
    }

    func videoSeconds(_ path: String) throws -> Double { Double(try Probe.stream(path, "v:0", "duration")) ?? -1 }

    /// One status line that agrees with itself and keys that act at once, unechoed: `s` splits
    /// (clip-0002 is shown), `d` deletes the last clip (its line above the status line names it,
    /// its seconds and the clip still being recorded; its seconds gone from the total), `l` lists
    /// above the status line, the clip being recorded too, `q` ends with a summary that counts
    /// only the clips that exist.
    func testStatusLineAndKeysInATerminal() throws {
        let dir = fx.scratch("term-record-keys").path
        let recording = #"^● REC clip-0001  00:0[1-9]\.\d / total"#
        let s = try session(
            [
                ["wait": recording, "timeout": 20], ["screen": "first"], ["termios": "running"],
                ["sleep": 0.6], ["screen": "later"],
                ["press": "s"], ["sleep": 0.05], ["screen": "key-pressed"],
                ["wait": #"^● REC clip-0002  "#, "timeout": 5], ["screen": "split"],
                ["wait": #"^● REC clip-0002  00:00\.[5-9]"#, "timeout": 5],
                ["press": "s"], ["wait": #"^● REC clip-0003  00:00\.[3-9]"#, "timeout": 5], ["screen": "before-delete"],
                ["press": "d"], ["wait": #"^deleted clip-0002\.mp4 \(\d+\.\d s\); still recording clip-0003\.mp4$"#, "timeout": 5], ["sleep": 0.3],
                ["screen": "deleted"],
                ["press": "l"], ["wait": #"^2 clips, \d+\.\d\d s, one being recorded$"#, "timeout": 5], ["screen": "listed"],
                ["press": "q"], ["exit": 20]
            ],
            ["record", "--interactive", "--size", "320x240", "-o", dir])
        XCTAssertNil(s.failed, s.raw)
        XCTAssertEqual(s.status, 0, s.raw)

        // The status line, and only one: elapsed and total advance, the total holds the fragment.
        for name in s.screenNames {
            XCTAssertLessThanOrEqual(s.screen(name).lines.filter { $0.contains("● REC") }.count, 1, "\(name): \(s.screen(name).lines)")
        }
        let first = try XCTUnwrap(shown(s.statusRow("first")), s.statusRow("first"))
        let later = try XCTUnwrap(shown(s.statusRow("later")), s.statusRow("later"))
        XCTAssertEqual(first.fragment, 1)
        XCTAssertEqual(later.fragment, 1)
        XCTAssertGreaterThan(later.elapsed, first.elapsed, "the fragment's time advances")
        XCTAssertGreaterThan(later.total, first.total, "the total advances")
        for v in [first, later] {
            XCTAssertEqual(v.total, v.elapsed, accuracy: 0.11, "one fragment: the total is its time")
            // The test pattern runs in real time: a machine starved by other tests may make it skip
            // a late picture, as a camera drops it (counted, shown); the queue never drops.
            XCTAssertLessThanOrEqual(v.camera, 3, "pictures the source skipped")
            XCTAssertEqual(v.queue, 0, "pictures the queue dropped")
        }
        // Raw mode while recording: no line editing, no echo, Ctrl-C still a signal.
        XCTAssertEqual(s.mode("running")["icanon"] as? Bool, false)
        XCTAssertEqual(s.mode("running")["echo"] as? Bool, false)
        XCTAssertEqual(s.mode("running")["isig"] as? Bool, true)
        // The key acted without Enter and was not echoed: the status line is the whole line.
        XCTAssertNotNil(shown(s.statusRow("key-pressed")), "an echoed key: \(s.statusRow("key-pressed"))")
        let split = try XCTUnwrap(shown(s.statusRow("split")), s.statusRow("split"))
        XCTAssertEqual(split.fragment, 2)
        XCTAssertGreaterThan(split.total, split.elapsed + 1, "the total keeps the closed clip")
        let splitScreen = s.screen("split")
        XCTAssertTrue(splitScreen.lines[..<splitScreen.cursor].contains { $0.hasPrefix("record: clip-0001.mp4: ") }, "\(splitScreen.lines)")

        // d: the answer above the status line; the deleted clip's seconds leave the total.
        let d1 = try videoSeconds("\(dir)/clip-0001.mp4")
        let beforeDelete = try XCTUnwrap(shown(s.statusRow("before-delete")), s.statusRow("before-delete"))
        let deleted = s.screen("deleted")
        let deletedLine = try XCTUnwrap(deleted.lines.firstIndex { $0.hasPrefix("deleted clip-0002.mp4 (") && $0.hasSuffix("; still recording clip-0003.mp4") })
        XCTAssertLessThan(deletedLine, deleted.cursor, "the answer prints above the status line")
        let afterDelete = try XCTUnwrap(shown(s.statusRow("deleted")), s.statusRow("deleted"))
        XCTAssertEqual(afterDelete.fragment, 3)
        XCTAssertGreaterThan(beforeDelete.total - beforeDelete.elapsed, d1 + 0.4, "clip-0001 and clip-0002 before the delete")
        XCTAssertEqual(afterDelete.total - afterDelete.elapsed, d1, accuracy: 0.11, "only clip-0001 closed and kept after it")
        // l: the listing above the status line, the clip being recorded counted.
        let listed = s.screen("listed")
        let count = try XCTUnwrap(listed.lines.firstIndex { $0.hasPrefix("2 clips, ") })
        XCTAssertLessThan(count, listed.cursor)
        XCTAssertTrue(listed.lines[count - 2].hasPrefix("clip-0001.mp4 "), listed.lines[count - 2])
        XCTAssertTrue(listed.lines[count - 1].hasPrefix("clip-0003.mp4 ") && listed.lines[count - 1].hasSuffix(" s  being recorded"), listed.lines[count - 1])
        XCTAssertNotNil(shown(s.statusRow("listed")), s.statusRow("listed"))

        // q: the summary counts the clips that exist, with their seconds.
        XCTAssertEqual(clips(dir), ["clip-0001.mp4", "clip-0003.mp4"])
        let total = try d1 + videoSeconds("\(dir)/clip-0003.mp4")
        let end = s.screen("end").lines
        XCTAssertTrue(end.contains { $0.hasPrefix("recorded 2 clips, ") }, "\(end)")
        // The summary as printed (on the screen a long directory name may wrap it), with the
        // pictures the source skipped after it when any were.
        let summary = String(format: "recorded 2 clips, %.2f s, into \(dir)", total)
        XCTAssertTrue(s.raw.contains(summary + "\r\n") || s.raw.contains(summary + "; "), "\(s.raw) (ffprobe: \(total) s)")
        XCTAssertFalse(end.contains { $0.contains("● REC") }, "the status line is gone at the end: \(end)")
        XCTAssertTrue(s.modeRestored, "before \(s.before), after \(s.after)")
    }

    /// Paused, the status line says so; Ctrl-C: "stopped" and the summary, exit 130, no
    /// "error:", the terminal as it was.
    func testCtrlCStopsWithoutAnErrorAndRestoresTheTerminal() throws {
        let dir = fx.scratch("term-record-ctrl-c").path
        let s = try session(
            [
                ["wait": #"^● REC clip-0001  00:0[1-9]\.\d"#, "timeout": 20], ["termios": "running"],
                ["press": "p"], ["wait": #"^❚❚ paused  total 00:0[1-9]\.\d  drops: "#, "timeout": 5], ["screen": "paused"],
                ["press": "\u{3}"], ["exit": 20]
            ],
            ["record", "--interactive", "--size", "320x240", "-o", dir])
        XCTAssertNil(s.failed, s.raw)
        XCTAssertEqual(s.status, 130, s.raw)
        XCTAssertEqual(s.mode("running")["echo"] as? Bool, false)
        XCTAssertTrue(s.statusRow("paused").hasPrefix("❚❚ paused  total "), s.statusRow("paused"))
        let end = s.screen("end").lines
        XCTAssertTrue(end.contains { $0.hasPrefix("stopped: recorded 1 clip, ") }, "\(end)")
        XCTAssertTrue(s.raw.contains("stopped: recorded 1 clip, "), s.raw)
        // Paused, no clip was open to finalise.
        XCTAssertTrue(s.raw.contains(", into \(dir)\r\n"), s.raw)
        XCTAssertFalse(s.raw.contains("the open clip was finalised"), s.raw)
        XCTAssertFalse(s.raw.contains("error:"), s.raw)
        XCTAssertEqual(clips(dir), ["clip-0001.mp4"])
        XCTAssertEqual(try Probe.decodeErrors("\(dir)/clip-0001.mp4"), "")
        XCTAssertTrue(s.modeRestored, "before \(s.before), after \(s.after)")
    }

    /// The terminal is given back on the other ways out: a second Ctrl-C (cancel) and an error
    /// (the camera unplugged).
    func testTheTerminalIsRestoredAfterASecondCtrlCAndAfterAnError() throws {
        let dir = fx.scratch("term-record-twice").path
        let twice = try session(
            [
                ["wait": #"^● REC clip-0001  00:0[1-9]\.\d"#, "timeout": 20], ["termios": "running"],
                ["press": "\u{3}"], ["sleep": 0.02], ["press": "\u{3}"], ["exit": 20]
            ],
            ["record", "--interactive", "--size", "320x240", "-o", dir])
        XCTAssertNil(twice.failed, twice.raw)
        XCTAssertEqual(twice.status, 130, twice.raw)
        XCTAssertEqual(twice.mode("running")["icanon"] as? Bool, false)
        XCTAssertTrue(twice.modeRestored, "before \(twice.before), after \(twice.after)")

        let unplugged = fx.scratch("term-record-unplug").path
        let failed = try session(
            [["wait": #"^● REC clip-0001  "#, "timeout": 20], ["termios": "running"], ["exit": 20]],
            ["record", "--source", "v4l2", "--interactive", "--size", "640x480", "--format", "mjpeg", "-o", unplugged],
            env: ["CLIPFLOW_V4L2_EMULATE": "unplug-after=45"])
        XCTAssertNil(failed.failed, failed.raw)
        XCTAssertEqual(failed.status, 1, failed.raw)
        XCTAssertEqual(failed.mode("running")["icanon"] as? Bool, false)
        XCTAssertTrue(failed.screen("end").lines.contains { $0.hasPrefix("error: /dev/video0: the camera went away") }, failed.raw)
        XCTAssertTrue(failed.modeRestored, "before \(failed.before), after \(failed.after)")
    }

    /// Without --interactive the status line is there too; the camera's drops it shows (a reader
    /// stalled for 2 s, longer than the capture buffers hold) are those the summary counts.
    func testCameraDropsOnTheStatusLineAreThoseOfTheSummary() throws {
        let dir = fx.scratch("term-record-drops").path
        let s = try session(
            [["wait": #"^● REC clip-0001  .*drops: camera [1-9]"#, "timeout": 20], ["screen": "dropped"], ["exit": 20]],
            ["record", "--source", "v4l2", "--size", "320x240", "--duration", "4", "-o", dir],
            env: ["CLIPFLOW_V4L2_EMULATE": "stall=10:2000"])
        XCTAssertNil(s.failed, s.raw)
        XCTAssertEqual(s.status, 0, s.raw)
        let shownDrops = try XCTUnwrap(shown(s.statusRow("dropped")), s.statusRow("dropped"))
        let dropped = 120 - (try Probe.videoFrames("\(dir)/clip-0001.mp4"))
        XCTAssertEqual(shownDrops.camera, dropped, "the pictures missing from the clip")
        XCTAssertEqual(shownDrops.queue, 0)
        // The summary as printed (on the screen a long directory name wraps it).
        XCTAssertTrue(s.raw.contains("; \(dropped) pictures dropped: \(dropped) by the camera (it was not read in time)\r\n"), s.raw)
        XCTAssertTrue(s.modeRestored, "not interactive: the mode is never changed")
    }

    /// With a microphone (through alsa-lib from a private PulseAudio, fed by the test): the status
    /// line shows its level, and counts the overrun once a quarter second of its audio is lost.
    func testTheStatusLineShowsTheMicrophonesLevelAndItsOverruns() throws {
        let server = try PulseAudioServer.start()
        defer { server.stop() }
        let feeder = MicrophoneFeeder(server: server)
        try feeder.start()
        defer { feeder.stop() }
        feeder.gap(at: MicrophoneFeeder.now() + 3, milliseconds: 250)
        let dir = fx.scratch("term-record-microphone").path
        var env = server.environment
        env["CLIPFLOW_V4L2_EMULATE"] = "1"
        let s = try session(
            [
                ["wait": #"^● REC clip-0001  .*, audio 0  audio -\d+ dB"#, "timeout": 20], ["screen": "level"],
                ["wait": #"^● REC clip-0001  .*, audio 1  audio -"#, "timeout": 20], ["screen": "overrun"], ["exit": 20]
            ],
            ["record", "--source", "v4l2", "--audio", PulseAudioServer.pipePCM, "--size", "320x240", "--duration", "6", "-o", dir],
            env: env)
        XCTAssertNil(s.failed, s.raw)
        XCTAssertEqual(s.status, 0, s.raw)
        for name in ["level", "overrun"] { XCTAssertNotNil(shown(s.statusRow(name)), "\(name): \(s.statusRow(name))") }
        XCTAssertTrue(s.raw.contains("audio lost 1 time (0.2"), s.raw)
        XCTAssertEqual(try Probe.stream("\(dir)/clip-0001.mp4", "a:0", "codec_name"), "aac")
    }

    /// Commands as lines (standard input not a terminal): a clip deleted with d is not counted in
    /// the summary, nor its seconds.
    func testADeletedClipIsNotCountedInTheSummary() throws {
        let dir = fx.scratch("term-record-delete").path
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = ["record", "-o", dir, "--size", "320x240", "--interactive"]
        let input = Pipe(), err = Pipe(), out = Pipe()
        p.standardInput = input
        p.standardError = err
        p.standardOutput = out
        try p.run()
        var seen = ""
        func waitFor(_ marker: String) {
            while !seen.contains(marker) {
                let d = err.fileHandleForReading.availableData
                if d.isEmpty { return }
                seen += String(decoding: d, as: UTF8.self)
            }
        }
        func send(_ s: String) { input.fileHandleForWriting.write(Data((s + "\n").utf8)) }
        waitFor("camera: test pattern")
        usleep(800_000)
        send("s")
        waitFor("clip-0001.mp4: ")
        usleep(500_000)
        send("s")
        waitFor("clip-0002.mp4: ")
        send("d")
        usleep(500_000)
        send("q")
        let rest = err.fileHandleForReading.readDataToEndOfFile()
        p.waitUntilExit()
        seen += String(decoding: rest, as: UTF8.self)
        let answers = String(decoding: out.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        XCTAssertEqual(p.terminationStatus, 0, seen)
        XCTAssertNotNil(
            answers.range(of: #"^deleted clip-0002\.mp4 \(\d+\.\d s\); still recording clip-0003\.mp4\n$"#, options: .regularExpression), answers)
        XCTAssertEqual(clips(dir), ["clip-0001.mp4", "clip-0003.mp4"])
        let total = try videoSeconds("\(dir)/clip-0001.mp4") + videoSeconds("\(dir)/clip-0003.mp4")
        // Pictures the test pattern could not make in time on a loaded machine are told on the same line.
        let summary = String(format: "recorded 2 clips, %.2f s, into \(dir)", total)
        XCTAssertTrue(seen.contains(summary + "\n") || seen.contains(summary + "; "), "\(seen) (ffprobe: \(total) s)")
    }

    /// `--encoder-preset` names the libx264 preset, as in `transcode`; `--preset`, its old name,
    /// still works but is not in the help; both together are refused.
    func testEncoderPresetAndItsHiddenOldName() throws {
        let dir = fx.scratch("term-record-preset").path
        func record(_ args: [String], into sub: String) throws -> Run {
            try Run.run(
                [binary, "record", "-o", "\(dir)/\(sub)", "--size", "320x240", "--duration", "1", "--fast", "--quiet"] + args, check: false)
        }
        let new = try record(["--encoder-preset", "ultrafast"], into: "new")
        XCTAssertEqual(new.status, 0, new.stderr)
        let old = try record(["--preset", "ultrafast"], into: "old")
        XCTAssertEqual(old.status, 0, old.stderr)
        // libx264 writes its settings into the stream: the preset took effect both ways.
        for sub in ["new", "old"] {
            let settings = try Run.run(["mediainfo", "--Inform=Video;%Encoded_Library_Settings%", "\(dir)/\(sub)/clip-0001.mp4"]).out
            XCTAssertTrue(settings.contains("subme=0"), "\(sub): ultrafast sets subme=0: \(settings)")
        }
        let both = try record(["--encoder-preset", "ultrafast", "--preset", "fast"], into: "both")
        XCTAssertEqual(both.status, 64, both.stderr)
        XCTAssertTrue(both.stderr.contains("--preset is the old name of --encoder-preset"), both.stderr)
        let unknown = try record(["--encoder-preset", "warp"], into: "warp")
        XCTAssertEqual(unknown.status, 65, unknown.stderr)
        XCTAssertTrue(unknown.stderr.contains("unknown preset 'warp'"), unknown.stderr)
        let help = try Run.run([binary, "record", "--help"], check: false).out
        XCTAssertTrue(help.contains("--encoder-preset"), help)
        XCTAssertTrue(help.contains("libx264 speed preset"), help)
        XCTAssertFalse(help.contains("--preset"), help)
    }

    /// The status line's words for each state of a recording.
    func testStatusLineText() {
        var st = RecordStatus.Snapshot()
        st.fragment = 3
        st.fragmentSeconds = 12.46
        st.totalSeconds = 62.79
        var line = RecordStatusLine(status: st)
        XCTAssertEqual(line.text, "● REC clip-0003  00:12.4 / total 01:02.7  drops: camera 0, queue 0  audio –")
        line.status.audioLevel = -18.2
        line.status.audioOverruns = 2
        line.status.picturesMissing = 5
        line.queueDrops = 1
        XCTAssertEqual(line.text, "● REC clip-0003  00:12.4 / total 01:02.7  drops: camera 4, queue 1, audio 2  audio -18 dB ▮▮▮▮▯▯")
        line.deletedSeconds = 30
        XCTAssertEqual(line.totalSeconds, 32.79, accuracy: 1e-9, "a deleted clip leaves the total")
        line.deletedSeconds = 60
        XCTAssertEqual(line.totalSeconds, 12.46, "never less than the open fragment")
        line.status.paused = true
        line.status.fragment = nil
        line.status.audioLevel = -.infinity
        XCTAssertEqual(line.text, "❚❚ paused  total 00:12.4  drops: camera 4, queue 1, audio 2  audio -∞ dB ▯▯▯▯▯▯")
        XCTAssertEqual(RecordStatusLine.clock(3723.46), "1:02:03.4")
        XCTAssertEqual(RecordStatusLine.level(0), "audio 0 dB ▮▮▮▮▮▮")
        XCTAssertEqual(RecordStatusLine.level(-75), "audio -75 dB ▯▯▯▯▯▯")
    }

    /// Keys and lines mean the same commands; Enter and control bytes mean nothing.
    func testKeysAndLinesMapToCommands() {
        XCTAssertEqual("prsdlqx".utf8.map { RecordCommand(key: $0) }, [.pause, .resume, .split, .deleteLast, .list, .quit, .help])
        XCTAssertEqual([13, 10, 4, 27, 0xC3].map { RecordCommand(key: $0) }, [.none, .none, .none, .none, .none])
        XCTAssertEqual(["pause", " S ", "stop", "", "warp"].map { RecordCommand(line: $0) }, [.pause, .split, .quit, .none, .help])
    }
}
