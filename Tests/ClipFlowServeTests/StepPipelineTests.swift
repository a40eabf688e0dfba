import ClipFlowCore
import ClipFlowMedia
import ClipFlowTestSupport
import Foundation
import XCTest

@testable import ClipFlowServe

/// A job's step as the server runs it: a pipeline (`StepPipeline`) that `clipflow serve-worker`
/// runs and `clipflow run` runs the same by hand; the worker's answer is `--events json` lines
/// (`WorkerEventLine`), a failure's kind among them (a full disk, known where the write failed).
final class StepPipelineTests: XCTestCase {
    let fx = Fixtures.shared

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    /// Runs `clipflow ARGS`; a `serve-worker` gets a stdin it can wait on, as the server gives it
    /// (at its end of file, the worker ends: the server is gone).
    func clipflow(_ args: [String]) throws -> (status: Int32, out: String, stderr: String) {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = args
        let input = Pipe(), output = Pipe(), errors = Pipe()
        (p.standardInput, p.standardOutput, p.standardError) = (input, output, errors)
        try p.run()
        let group = DispatchGroup()
        nonisolated(unsafe) var stderr = Data()
        group.enter()
        DispatchQueue.global().async {
            stderr = errors.fileHandleForReading.readDataToEndOfFile()
            group.leave()
        }
        let out = output.fileHandleForReading.readDataToEndOfFile()
        group.wait()
        p.waitUntilExit()
        try? input.fileHandleForWriting.close()
        return (p.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: stderr, as: UTF8.self))
    }

    // MARK: the worker's event lines

    func testEventLinesAreReadWithOneDecoder() throws {
        let progress = try XCTUnwrap(
            WorkerEventLine.read(#"{"time":1.25,"stage":"ladder.decode","event":"progress","completed":500,"total":2000,"unit":"ms","speed":3.5}"#))
        XCTAssertEqual(progress.stage, "ladder.decode")
        XCTAssertEqual(progress.fraction, 0.25)
        XCTAssertNil(progress.probe)

        let failed = try XCTUnwrap(
            WorkerEventLine.read(#"{"time":2,"stage":"ladder.360p","event":"failed","message":"cannot write: No space left on device","kind":"disk_full"}"#))
        XCTAssertEqual(failed.kind, .diskFull)
        XCTAssertEqual(failed.message, "cannot write: No space left on device")
        XCTAssertNil(failed.fraction)

        // A kind this server does not know is no kind; a failure without one (a stage stopped
        // because another failed) has none.
        XCTAssertNil(WorkerEventLine.read(#"{"time":2,"stage":"s","event":"failed","message":"m","kind":"meteor"}"#)?.kind)
        XCTAssertNil(WorkerEventLine.read(#"{"time":2,"stage":"s","event":"failed","message":"m"}"#)?.kind)

        let probe = InspectSummary(duration: 12.5, width: 1280, height: 720, frameRate: 30, copyRefusal: "its audio is mp3, not AAC")
        let line =
            #"{"time":0.5,"stage":"probe","event":"result","#
            + #""duration":12.5,"width":1280,"height":720,"frame_rate":30,"copy_refusal":"its audio is mp3, not AAC"}"#
        XCTAssertEqual(WorkerEventLine.read(line)?.probe, probe)
        // The same fields a stage's `result` event carries, and the row's JSON, read back.
        XCTAssertEqual(InspectSummary(fields: probe.fields), probe)
        XCTAssertEqual(InspectSummary(json: probe.json), probe)
        let bare = InspectSummary(duration: 0, width: 2, height: 2)
        XCTAssertEqual(InspectSummary(fields: bare.fields), bare)

        // Another stage's result is no probe; a line that is no event is nothing.
        XCTAssertNil(WorkerEventLine.read(#"{"time":3,"stage":"ladder","event":"result","renditions":2}"#)?.probe)
        XCTAssertNil(WorkerEventLine.read("not json"))
        XCTAssertNil(WorkerEventLine.read(#"{"progress":0.5}"#))
    }

    // MARK: a full disk is a kind of its own

    func testAFullDiskIsKnownWhereTheWriteFailed() {
        let full = ClipFlowError.output("cannot write 'x'", errno: ENOSPC)
        XCTAssertTrue(full.isDiskFull)
        XCTAssertEqual(full.kind, .output)
        XCTAssertEqual(full.failureKind, .diskFull)
        XCTAssertEqual(full.exitCode, 1, "the CLI's exit status of an output error")
        XCTAssertEqual(full.message, "cannot write 'x': \(String(cString: strerror(ENOSPC)))")
        XCTAssertTrue(ClipFlowError.output("q", errno: EDQUOT).isDiskFull)
        XCTAssertFalse(ClipFlowError.output("x", errno: EACCES).isDiskFull)
        XCTAssertEqual(ClipFlowError.output("x", errno: EACCES).failureKind, .output)

        XCTAssertTrue(ClipFlowError.output("w", writing: CocoaError(.fileWriteOutOfSpace)).isDiskFull)
        XCTAssertTrue(ClipFlowError.output("w", writing: POSIXError(.ENOSPC)).isDiskFull)
        XCTAssertTrue(ClipFlowError.output("w", writing: NSError(domain: NSPOSIXErrorDomain, code: Int(EDQUOT))).isDiskFull)
        XCTAssertFalse(ClipFlowError.output("w", writing: CocoaError(.fileWriteNoPermission)).isDiskFull)

        XCTAssertEqual(ClipFlowError.badInput("b").failureKind, .badInput)
        XCTAssertEqual(ClipFlowError.interrupted.failureKind, .interrupted)
        XCTAssertEqual(FailureKind.allCases.map(\.rawValue), ["bad_input", "incompatible", "interrupted", "output", "failure", "disk_full"])
    }

    /// A ladder written into a full tmpfs: `clipflow run --events json` says `"kind":"disk_full"`
    /// in its `failed` event (exit 1, as any output error), and `clipflow serve-worker` exits 75
    /// (`WorkerExit.diskFull`) with the same kind: no message is matched.
    func testAFullDiskFailsWithItsKind() throws {
        let disk = fx.scratch("step-full-disk")
        guard (try? Run.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", disk.path]))?.status == 0 else {
            throw XCTSkip("mounting a tmpfs needs root")
        }
        defer { _ = try? Run.run(["umount", "-l", disk.path], check: false) }
        let input = try fx.clip("step-full-720.mp4", seconds: 8, size: "1280x720")
        let pipelines = fx.scratch("step-full-pipelines")
        for (n, command) in [["run", "--events", "json"], ["serve-worker"]].enumerated() {
            let file = pipelines.appendingPathComponent("\(n).json")
            let text = StepPipeline.text(input: input, output: disk.appendingPathComponent("out\(n)").path, ladder: Self.rungs([720, 360]))
            try text.write(to: file, atomically: true, encoding: .utf8)
            let r = try clipflow(command + [file.path])
            XCTAssertEqual(r.status, n == 0 ? 1 : WorkerExit.diskFull.rawValue, r.stderr)
            let failed = r.out.split(separator: "\n").compactMap { WorkerEventLine.read(String($0)) }.filter { $0.event == "failed" && $0.kind != nil }
            XCTAssertEqual(failed.first?.kind, .diskFull, r.out)
            XCTAssertTrue(r.out.contains(#""kind":"disk_full""#), r.out)
            XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: disk.path).filter { !$0.hasPrefix(".") }, [], "nothing left behind")
        }
    }

    // MARK: a step by hand

    /// Standard rungs of these heights.
    static func rungs(_ heights: [Int]) -> LadderChoice { LadderChoice(rungs: LadderRung.standard.filter { heights.contains($0.height) }) }

    /// Every `.m3u8`, `.m4s` and `.mp4` under `folder`, by path, with its SHA-256.
    func contents(_ folder: URL) throws -> [String: String] {
        var all: [String: String] = [:]
        for name in try FileManager.default.subpathsOfDirectory(atPath: folder.path)
        where name.hasSuffix(".m3u8") || name.hasSuffix(".m4s") || name.hasSuffix(".mp4") {
            all[name] = String(try Run.run(["sha256sum", folder.appendingPathComponent(name).path]).out.prefix(64))
        }
        return all
    }

    /// Runs step pipeline `text` as the server does (`clipflow serve-worker FILE`) and, with
    /// `byHand`'s output, as a person does (`clipflow run FILE`, after `clipflow validate`);
    /// returns the worker's run and its event lines (every line one).
    func runBothWays(_ name: String, server: String, byHand: String) throws -> (status: Int32, out: String, stderr: String, events: [WorkerEventLine]) {
        let work = fx.scratch(name)
        let (serverFile, byHandFile) = (work.appendingPathComponent("server.json"), work.appendingPathComponent("by-hand.json"))
        try server.write(to: serverFile, atomically: true, encoding: .utf8)
        try byHand.write(to: byHandFile, atomically: true, encoding: .utf8)
        let r = try clipflow(["serve-worker", serverFile.path])
        let events = r.out.split(separator: "\n").map { WorkerEventLine.read(String($0)) }
        XCTAssertFalse(events.contains(nil), "every line is an event: \(r.out)")
        XCTAssertEqual(try clipflow(["validate", byHandFile.path]).status, 0)
        let run = try clipflow(["run", byHandFile.path])
        XCTAssertEqual(run.status, r.status == 0 ? 0 : 65, "by hand as by the worker: \(run.stderr)")
        return (r.status, r.out, r.stderr, events.compactMap { $0 })
    }

    /// The ladder step as the server runs it (`clipflow serve-worker PIPELINE`, the file
    /// `StepPipeline` writes) and the same pipeline run by hand with `clipflow run` give the same
    /// renditions: the same playlists and the same segments, byte for byte. The worker's answer
    /// is `--events json`: progress of the stage the ladder declares, then a clean end.
    func testAStepsPipelineRunByHandMakesTheSameRenditions() throws {
        let input = try fx.clip("step-by-hand.mp4", seconds: 4, size: "640x360")
        let work = fx.scratch("step-by-hand-out")
        let server = work.appendingPathComponent("server"), byHand = work.appendingPathComponent("by-hand")
        let choice = Self.rungs([360])
        let text = StepPipeline.text(input: input, output: server.path, ladder: choice)
        XCTAssertTrue(text.contains(#""kind" : "hls""#) && text.contains(#""ladder" : "360""#) && text.contains(#""profile" : "feed""#), text)
        XCTAssertFalse(text.contains(#""kind" : "inspect""#), "no probe asked for: \(text)")
        let r = try runBothWays("step-by-hand", server: text, byHand: StepPipeline.text(input: input, output: byHand.path, ladder: choice))
        XCTAssertEqual(r.status, 0, r.stderr)
        XCTAssertEqual(StepPipeline.progressStage(choice), "ladder.decode")
        XCTAssertFalse(r.events.compactMap { $0.stage == "ladder.decode" ? $0.fraction : nil }.isEmpty, r.out)
        XCTAssertFalse(r.events.contains { $0.event == "failed" })
        let made = try contents(server), again = try contents(byHand)
        XCTAssertTrue(made.keys.contains("360p.m3u8"), "\(made.keys.sorted())")
        XCTAssertGreaterThan(made.keys.filter { $0.hasSuffix(".m4s") }.count, 2)
        XCTAssertEqual(made, again)
    }

    /// The `playable` step of a job not yet probed: the upload's `inspect` stage, then its copy.
    /// By the worker and by hand: the same copy; the probe's `result` (stage `probe`) says what
    /// the upload is, and ffprobe agrees.
    func testAPlayableStepProbesThenCopies() throws {
        let input = try fx.clip(
            "step-playable.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "4", "-c:v", "libx264", "-preset",
                "ultrafast", "-g", "30", "-pix_fmt", "yuv420p", "-c:a", "aac"
            ])
        let work = fx.scratch("step-playable-out")
        let server = work.appendingPathComponent("server"), byHand = work.appendingPathComponent("by-hand")
        let inspect = StepPipeline.Inspection(limits: MediaLimits(), copyable: true)
        let copy = LadderChoice(rungs: [], copy: true)
        let text = StepPipeline.text(input: input, output: server.path, ladder: copy, inspect: inspect)
        XCTAssertTrue(text.contains(#""kind" : "inspect""#) && text.contains(#""copyable" : true"#), text)
        let r = try runBothWays(
            "step-playable", server: text, byHand: StepPipeline.text(input: input, output: byHand.path, ladder: copy, inspect: inspect))
        XCTAssertEqual(r.status, 0, r.stderr)
        let probe = try XCTUnwrap(r.events.compactMap(\.probe).first, r.out)
        XCTAssertEqual(probe.width, 640)
        XCTAssertEqual(probe.height, 360)
        XCTAssertEqual(probe.frameRate ?? 0, 30, accuracy: 0.01)
        let probed = try Run.run(["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", input]).out
        let duration = try XCTUnwrap(Double(probed.trimmingCharacters(in: .whitespacesAndNewlines)), probed)
        XCTAssertEqual(probe.duration, duration, accuracy: 0.05)
        XCTAssertNil(probe.copyRefusal)
        let made = try contents(server)
        XCTAssertTrue(made.keys.contains("copy.m3u8"), "\(made.keys.sorted())")
        XCTAssertEqual(made, try contents(byHand))
    }

    /// What the `inspect` stage refuses, it says before it refuses: an HEVC upload cannot be
    /// copied for every browser, an upload beyond the limits is refused whatever it is. The
    /// worker ends with the input's status (1), a `failed` event of kind `bad_input`, the probe's
    /// `result` with the reason, and no folder.
    func testAPlayableStepSaysWhyItRefusesACopy() throws {
        let hevc = try fx.clip(
            "step-refused-hevc.mov",
            [
                "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-t", "2", "-c:v", "libx265", "-preset", "ultrafast", "-x265-params",
                "log-level=error:keyint=30", "-tag:v", "hvc1"
            ])
        let long = try fx.clip("step-refused-long.mp4", seconds: 4, size: "640x360")
        var short = MediaLimits()
        short.maxDuration = 2
        let work = fx.scratch("step-refused-out")
        for (n, (input, inspect, reason)) in [
            (hevc, StepPipeline.Inspection(limits: MediaLimits(), copyable: true), "its video is hevc, and only H.264 plays in every browser"),
            (long, StepPipeline.Inspection(limits: short, copyable: false), "the video lasts 4 s, above this server's limit of 2 s")
        ].enumerated() {
            let (server, byHand) = (work.appendingPathComponent("server\(n)"), work.appendingPathComponent("by-hand\(n)"))
            let copy = LadderChoice(rungs: [], copy: true)
            let r = try runBothWays(
                "step-refused-\(n)", server: StepPipeline.text(input: input, output: server.path, ladder: copy, inspect: inspect),
                byHand: StepPipeline.text(input: input, output: byHand.path, ladder: copy, inspect: inspect))
            XCTAssertEqual(r.status, WorkerExit.failed.rawValue, r.stderr)
            XCTAssertTrue(r.stderr.contains(reason), r.stderr)
            let probe = try XCTUnwrap(r.events.compactMap(\.probe).first, r.out)
            XCTAssertEqual(n == 0 ? probe.copyRefusal : short.refusal(probe), reason)
            XCTAssertEqual(r.events.first { $0.event == "failed" && $0.kind != nil }?.kind, .badInput, r.out)
            XCTAssertFalse(FileManager.default.fileExists(atPath: server.path), "no folder")
            XCTAssertFalse(FileManager.default.fileExists(atPath: byHand.path), "no folder")
        }
    }

    // MARK: the probe travels in the job's row

    func testTheProbeIsKeptInTheJobsRowInSQLite() async throws {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("step-probe-\(UUID().uuidString).sqlite").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        try await checkKeptProbe(try SQLiteStore(path: path))
    }

    func testTheProbeIsKeptInTheJobsRowInPostgres() async throws {
        let server = try PostgresServer.start()
        defer { server.stop() }
        let store = try PostgresStore(login: PostgresLogin(url: server.url, source: "--database", environment: [:]))
        let connection = Task { await store.run() }
        defer { connection.cancel() }
        try await store.migrate()
        try await checkKeptProbe(store)
    }

    /// A job's first step records the probe; the job taken again (a retry, its ladder step)
    /// carries it.
    private func checkKeptProbe(_ store: any ServeStore) async throws {
        let video = try await store.insert(
            VideoRow(
                id: nil, name: "p", description: nil, clientID: 1, status: .pending, mode: .ladder, error: nil, duration: nil, uploadID: nil,
                published: "", renditions: "", createdAt: 1))
        try await store.uploaded(video: video.id!, upload: "u-probe", trace: nil)
        let first = try await store.takeJob(owner: "a", now: Date().timeIntervalSince1970, steps: [.playable], perClient: 0)
        let job = try XCTUnwrap(first)
        XCTAssertNil(job.probe, "not probed yet")
        let probe = InspectSummary(duration: 4, width: 640, height: 360, frameRate: 30, copyRefusal: nil)
        try await store.recordProbe(job.id!, probe: probe.json)
        try await store.retryJob(job.id!, counted: true)
        let again = try await store.takeJob(owner: "a", now: Date().timeIntervalSince1970, steps: [.playable], perClient: 0)
        XCTAssertEqual(again?.probe.flatMap(InspectSummary.init(json:)), probe)
        try await store.queueLadder(job.id!, plan: "{}")
        let ladder = try await store.takeJob(owner: "a", now: Date().timeIntervalSince1970, steps: [.ladder], perClient: 0)
        XCTAssertEqual(ladder?.probe.flatMap(InspectSummary.init(json:)), probe, "its ladder step carries it too")
    }
}
