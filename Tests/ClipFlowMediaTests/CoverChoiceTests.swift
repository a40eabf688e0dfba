import ClipFlowCore
import ClipFlowTestSupport
import Foundation
import XCTest

@testable import ClipFlowMedia

/// The cover chosen from pictures as they pass (a ladder's smallest rendition) and handed to the
/// ladder in the item that describes the rendition.
final class CoverChoiceTests: XCTestCase {
    let fx = Fixtures.shared

    /// A 64x36 yuv420p picture: flat grey `level`, or stripes of contrast `contrast` around mid grey.
    private func picture(at time: Double, level: UInt8 = 16, contrast: Int = 0) -> VideoFrame {
        let (w, h) = (64, 36)
        var data = Data(repeating: 128, count: w * h * 3 / 2)
        for y in 0..<h {
            for x in 0..<w {
                data[y * w + x] = contrast == 0 ? level : UInt8(clamping: 128 + ((x / 4) % 2 == 0 ? contrast : -contrast))
            }
        }
        return VideoFrame(width: w, height: h, format: .yuv420p, data: data, time: time, sequence: Int64(time * 2), nominalRate: 2)
    }

    func testTheMostDetailedPictureNearTheCandidateTimesWinsAndBlackIsPassedOver() throws {
        var choice = try PassingCoverChoice()
        choice.expect(duration: 10)  // candidates at 0.2, 1, 2.5, 4, 5.5, 7 and 8.5 s
        for n in 0..<20 {
            let t = Double(n) / 2
            switch t {
            case ..<3: try choice.look(at: picture(at: t))  // black
            case 7: try choice.look(at: picture(at: t, contrast: 90))
            case 6: try choice.look(at: picture(at: t, contrast: 120))  // the most detail, but no candidate time
            default: try choice.look(at: picture(at: t, contrast: 40))
            }
        }
        XCTAssertEqual(choice.chosen?.time, 7)
    }

    func testWithoutALengthOrAnyDetailThereIsStillACover() throws {
        var unknown = try PassingCoverChoice()
        for n in 0..<4 { try unknown.look(at: picture(at: Double(n), contrast: 50)) }
        XCTAssertEqual(unknown.chosen?.time, 0, "the first picture")
        var black = try PassingCoverChoice()
        black.expect(duration: 2)
        for n in 0..<4 { try black.look(at: picture(at: Double(n) / 2)) }
        XCTAssertNotNil(black.chosen, "a black video still gets its cover")
        XCTAssertNil(try PassingCoverChoice().chosen)
    }

    /// An encoded ladder's poster is the picture its rendition chose while encoding: it starts
    /// black (a fade in), and the poster is not (judged by ffmpeg's signalstats).
    func testAnEncodedLaddersPosterPassesOverABlackStart() throws {
        let src = try fx.clip(
            "black-start.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30:duration=6,fade=in:st=0:d=0.2,drawbox=t=fill:c=black:enable='lt(t,1.5)'",
                "-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p"
            ])
        let dir = fx.scratch("ladder-poster").appendingPathComponent("hls")
        try HLSLadder(output: dir.path, ladder: try XCTUnwrap(LadderChoice.parse("240")), encoderPreset: "ultrafast").write(inputs: [src])
        let poster = dir.appendingPathComponent("poster.jpg").path
        XCTAssertEqual(try Probe.stream(poster, "v:0", "width,height"), "320,240")
        let stats = try Run.run([
            "ffmpeg", "-v", "error", "-i", poster, "-vf", "signalstats,metadata=print:key=lavfi.signalstats.YAVG:file=-", "-f", "null", "-"
        ])
        let yavg = try XCTUnwrap(stats.out.components(separatedBy: "YAVG=").last.flatMap { Double($0.prefix { "0123456789.".contains($0) }) }, stats.out)
        XCTAssertGreaterThan(yavg, 40, "the poster is not the black start")
    }
}
