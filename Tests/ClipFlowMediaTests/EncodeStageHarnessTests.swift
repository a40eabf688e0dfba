import ClipFlowCore
import ClipFlowTestSupport
import Foundation
import XCTest

@testable import ClipFlowMedia

/// The transcode's encoder stage alone in the harness: parameters in band, then raw pictures and
/// float audio in; one MP4 out, judged by ffprobe and ffmpeg.
final class EncodeStageHarnessTests: XCTestCase {
    let fx = Fixtures.shared
    let timeBase = Rational(1, 15360)

    func caps(width: Int = 160, height: Int = 128, rotation: Int = 0, audio: Bool = true) -> StreamParameters {
        StreamParameters(
            port: .frames, video: VideoParameters(width: width, height: height, pixelFormat: .yuv420p, frameRate: 30, timeBase: timeBase, rotation: rotation),
            audio: audio ? AudioParameters(sampleRate: 48_000, channels: 2) : nil)
    }

    /// Picture `n` of a 30 fps stream: a flat grey that changes with `n`, shown for 1/30 s.
    func picture(_ n: Int, width: Int = 160, height: Int = 128) -> VideoFrame {
        var data = Data(repeating: 128, count: width * height * 3 / 2)
        data[0..<(width * height)] = Data(repeating: UInt8(40 + n % 100), count: width * height)
        return VideoFrame(
            width: width, height: height, format: .yuv420p, data: data, time: Double(n * 512) / 15360, sequence: Int64(n), nominalRate: 30,
            duration: 512.0 / 15360)
    }

    /// `count` sample frames of a 440 Hz tone, from sample `first`.
    func tone(from first: Int, count: Int) -> AudioChunk {
        var samples = [Float](repeating: 0, count: count * 2)
        for i in 0..<count {
            let v = Float(sin(2 * Double.pi * 440 * Double(first + i) / 48_000)) * 0.5
            samples[2 * i] = v
            samples[2 * i + 1] = v
        }
        return AudioChunk(sampleRate: 48_000, channels: 2, samples: samples, firstSample: Int64(first))
    }

    func testItEncodesWhatItWasToldInBandIntoOneMP4() throws {
        let output = fx.scratch("encode-stage").appendingPathComponent("out.mp4").path
        let h = StageHarness(EncodeStage(id: "enc", output: output, settings: TranscodeSettings(), overwrite: false))
        try h.prepare()
        XCTAssertEqual(try h.negotiate([StreamParameters(port: .frames)]), StreamParameters(port: .video, container: "mp4"))
        XCTAssertEqual(try h.push(.parameters(caps(rotation: 90))), .ok)
        for second in 0..<2 {
            XCTAssertEqual(try h.push(.frame(.audio(tone(from: second * 48_000, count: 48_000)))), .ok)
            for n in (second * 30)..<(second * 30 + 30) { XCTAssertEqual(try h.push(.frame(.video(picture(n)))), .ok) }
        }
        XCTAssertEqual(try h.push(.parameters(caps(rotation: 90))), .ok, "the same parameters again change nothing")
        try h.endOfStream()
        let file = try XCTUnwrap(h.pull())
        XCTAssertEqual(file.path, output)
        XCTAssertEqual(h.finish().count, 0)
        XCTAssertEqual(try Probe.decodeErrors(output), "")
        XCTAssertEqual(try Probe.videoFrames(output), 60)
        // One field at a time: ffprobe's CSV appends the display matrix's side data to a stream's row.
        func field(_ stream: String, _ name: String) throws -> String { String(try Probe.stream(output, stream, name).split(separator: ",").first ?? "") }
        XCTAssertEqual(try [field("v:0", "codec_name"), field("v:0", "width"), field("v:0", "height")], ["h264", "160", "128"])
        XCTAssertEqual(try Probe.rotation(output), -90, "turned 90 degrees clockwise by its display matrix")
        XCTAssertEqual(Double(try field("v:0", "duration")) ?? 0, 2, accuracy: 0.001)
        XCTAssertEqual(try [field("a:0", "codec_name"), field("a:0", "sample_rate"), field("a:0", "channels")], ["aac", "48000", "2"])
        XCTAssertEqual(Double(try field("a:0", "duration")) ?? 0, 2, accuracy: 0.03)
        guard case .result(let fields) = try XCTUnwrap(h.events.last { if case .result = $0.kind { return true } else { return false } }?.kind) else {
            return XCTFail("no result")
        }
        XCTAssertEqual(fields.first { $0.key == "video_frames" }?.value.integer, 60)
    }

    /// A picture that carries its decoded frame (`DecodedPicture`, as the decode stage sends
    /// them) is encoded from a reference to that frame when the frame holds the picture's bytes;
    /// a frame that does not (a stage changed the picture and kept the fact) is passed over for
    /// the bytes. Judged by ffmpeg's signalstats: the first 15 pictures are the frame's light
    /// grey, the last 15 the bytes' darker greys.
    func testADecodedFrameIsEncodedByReferenceOnlyWhenItHoldsThePicture() throws {
        let output = fx.scratch("encode-stage-ref").appendingPathComponent("out.mp4").path
        let h = StageHarness(EncodeStage(id: "enc", output: output, settings: TranscodeSettings(), overwrite: false))
        try h.prepare()
        XCTAssertEqual(try h.push(.parameters(caps(audio: false))), .ok)
        let pool = try PicturePool(size: PictureSize(width: 160, height: 128), alignment: 1)
        let light = try pool.picture()
        let y = try XCTUnwrap(light.data(0))
        XCTAssertEqual(light.data(1), y + 160 * 128, "planes one after another")
        memset(y, 200, 160 * 128)
        memset(y + 160 * 128, 128, 160 * 128 / 2)
        for n in 0..<30 {
            let grey = picture(n)  // luma 40 + n
            let own = Data(bytesNoCopy: y, count: 160 * 128 * 3 / 2, deallocator: .custom { _, _ in withExtendedLifetime(light) {} })
            let v = VideoFrame(
                width: 160, height: 128, format: .yuv420p, data: n < 15 ? own : grey.data, time: grey.time, sequence: grey.sequence, nominalRate: 30,
                duration: grey.duration)
            var item = Item.frame(.video(v))
            item.facts[DecodedPicture.self] = DecodedPicture(frame: light)
            XCTAssertEqual(DecodedPicture(frame: light).holds(v), n < 15)
            XCTAssertEqual(try h.push(item), .ok)
        }
        try h.endOfStream()
        XCTAssertEqual(h.finish().count, 1)
        XCTAssertEqual(try Probe.videoFrames(output), 30)
        let stats = try Run.run([
            "ffmpeg", "-v", "error", "-i", output, "-vf", "signalstats,metadata=print:key=lavfi.signalstats.YAVG:file=-", "-f", "null", "-"
        ])
        let averages = stats.out.components(separatedBy: "YAVG=").dropFirst().compactMap { Double($0.prefix { "0123456789.".contains($0) }) }
        XCTAssertEqual(averages.count, 30, stats.out)
        for (n, a) in averages.enumerated() { XCTAssertEqual(a, n < 15 ? 200 : Double(40 + n), accuracy: 3, "picture \(n)") }
    }

    func testAnythingButItsOneShapeIsRefusedAndLeavesNothing() throws {
        let folder = fx.scratch("encode-stage-refused")
        let output = folder.appendingPathComponent("out.mp4").path
        let early = StageHarness(EncodeStage(id: "enc", output: output, settings: TranscodeSettings(), overwrite: false))
        try early.prepare()
        XCTAssertThrowsError(try early.push(.frame(.video(picture(0))))) { e in XCTAssertTrue("\(e)".contains("before its parameters"), "\(e)") }
        early.finish(.failed)

        let changed = StageHarness(EncodeStage(id: "enc", output: output, settings: TranscodeSettings(), overwrite: false))
        try changed.prepare()
        _ = try changed.push(.parameters(caps(audio: false)))
        for n in 0..<5 { _ = try changed.push(.frame(.video(picture(n)))) }
        XCTAssertThrowsError(try changed.push(.parameters(caps(width: 320, height: 240, audio: false)))) { e in
            XCTAssertTrue("\(e)".contains("enc") && "\(e)".contains("changed"), "\(e)")
        }
        XCTAssertThrowsError(try changed.push(.frame(.video(picture(5, width: 320, height: 240))))) { e in
            XCTAssertTrue("\(e)".contains("320x240"), "\(e)")
        }
        changed.finish(.failed)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder.path), [], "no output, no temporary")

        let stopped = StageHarness(EncodeStage(id: "enc", output: output, settings: TranscodeSettings(), overwrite: false))
        try stopped.prepare()
        _ = try stopped.push(.parameters(caps(audio: false)))
        for n in 0..<5 { _ = try stopped.push(.frame(.video(picture(n)))) }
        stopped.stop()
        XCTAssertEqual(try stopped.push(.frame(.video(picture(5)))), .flushing)
        try stopped.endOfStream()
        XCTAssertNil(stopped.pull(), "a stopped transcode passes nothing on")
        stopped.finish(.stopped)
        XCTAssertEqual(try FileManager.default.contentsOfDirectory(atPath: folder.path), [], "a stop leaves nothing")
    }
}
