import ClipFlowCore
import Foundation
import XCTest

@testable import ClipFlowMedia
import ClipFlowTestSupport

/// Every kind of sound in `fixtures/join-kinds.json` (pure tones at several frequencies, rates and
/// channel counts, hum, a chord with noise, pink noise, speech), recorded continuously, cut by the
/// ffmpeg CLI off the video frame grid (each clip's pictures last up to a frame longer than its
/// sound, as the CLI writes them), merged, and every join judged by `scripts/join-metrics` against
/// the master's same instant: energy above 3 kHz within 6 dB of the master's (with a continuous
/// AAC encode's noise as its floor), peak second difference within 2x.
final class JoinKindsTests: XCTestCase {
    let fx = Fixtures.shared

    struct Kinds: Decodable {
        struct Kind: Decodable {
            var name: String
            var audio: String?
            var speech: String?
            var rate: Int
            var channels: Int
        }
        var offset: Double
        var durations: [Double]
        var kinds: [Kind]
    }

    static let kinds: Kinds = {
        let url = JoinRepairTests.root.appendingPathComponent("fixtures/join-kinds.json")
        return try! JSONDecoder().decode(Kinds.self, from: Data(contentsOf: url))
    }()

    /// The continuous master of `kind` (PCM in MOV, with pictures) and its clips (H.264 + AAC).
    func fragments(_ kind: Kinds.Kind, tag: String) throws -> (master: String, clips: [String]) {
        var input = ["-f", "lavfi", "-i", kind.audio ?? "anullsrc"]
        if let sentence = kind.speech {
            let wav = fx.scratch("kinds-\(tag)-speech").appendingPathComponent("speech.wav").path
            try Run.run(["espeak-ng", "-w", wav, sentence])
            input = ["-stream_loop", "-1", "-i", wav]
        }
        let master = try fx.clip(
            "kinds-\(tag)-master.mov",
            input + [
                "-f", "lavfi", "-i", "testsrc2=size=160x120:rate=30", "-t", "14", "-map", "0:a", "-map", "1:v",
                "-ar", "\(kind.rate)", "-ac", "\(kind.channels)", "-c:a", "pcm_s16le"
            ] + Fixtures.x264)
        var start = Self.kinds.offset
        var clips: [String] = []
        for (i, d) in Self.kinds.durations.enumerated() {
            clips.append(
                try fx.clip(
                    "kinds-\(tag)-\(i).mp4",
                    ["-ss", String(format: "%.4f", start), "-i", master, "-t", String(format: "%.4f", d)] + Fixtures.x264 + [
                        "-c:a", "aac", "-b:a", "128k"
                    ]))
            start += d
        }
        return (master, clips)
    }

    func testEveryKindOfSoundJoinsAsCleanlyAsItsMaster() throws {
        for (k, kind) in Self.kinds.kinds.enumerated() {
            let (master, clips) = try fragments(kind, tag: "\(k)")
            let out = fx.scratch("kinds-\(k)").appendingPathComponent("merged.mp4")
            _ = try Merger(inputs: clips, options: MergeOptions(output: out)).run()
            XCTAssertEqual(try Probe.decodeErrors(out.path), "", kind.name)
            let sound = try clips.map { Double(try Probe.stream($0, "a:0", "duration")) ?? 0 }
            let pictures = try clips.map { Double(try Probe.stream($0, "v:0", "duration")) ?? 0 }
            XCTAssertTrue(zip(sound, pictures).contains { $0 < $1 - 0.005 }, "\(kind.name): clips cut off the frame grid")
            let m = try JoinRepairTests.metrics(out.path, source: master, offset: Self.kinds.offset, durations: sound, placed: pictures)
            XCTAssertEqual(m.joins.count, clips.count - 1, kind.name)
            for j in m.joins {
                let label = "\(kind.name), join at \(j.at) s"
                XCTAssertLessThanOrEqual(j.hf_db, 6, "\(label): \(j.hf_db) dB more energy above 3 kHz than the master (a click)")
                XCTAssertLessThanOrEqual(j.d2_ratio, 2, "\(label): second difference \(j.d2_ratio)x the master's (a click)")
            }
            print(
                "\(kind.name): worst join \(m.joins.map(\.hf_db).max() ?? 0) dB above 3 kHz, "
                    + "second difference \(m.joins.map(\.d2_ratio).max() ?? 0)x")
        }
    }
}
