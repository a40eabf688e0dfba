import XCTest
import ClipFlowCore
@testable import ClipFlowMedia
import ClipFlowTestSupport

/// fMP4 segments cut where asked, judged by ffprobe/ffmpeg.
final class FragmentWriterTests: XCTestCase {
    let fx = Fixtures.shared

    func testSegmentsCutAtKeyframesDecodeAloneAndTogether() throws {
        let src = try fx.clip(
            "frag-src.mp4", ["-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30", "-t", "6", "-c:v", "libx264", "-preset", "ultrafast", "-g", "60", "-bf", "2"]
        )
        let dmx = try Demuxer(path: src)
        let st = dmx.stream(0)
        let w = try FragmentWriter(copying: st.pointee.codecpar, timeBase: st.pointee.time_base, what: "test")
        let dir = fx.scratch("fragments")
        func save(_ name: String, _ b: [UInt8]) throws -> String {
            let p = dir.appendingPathComponent(name).path
            try Data(b).write(to: URL(fileURLWithPath: p))
            return p
        }
        let initPath = try save("init.mp4", try w.header())
        var segments: [String] = []
        let pkt = try Packet()
        var first = true
        while try dmx.read(into: pkt) {
            if pkt.isKeyframe, !first { segments.append(try save("seg-\(segments.count).m4s", try w.cut())) }
            first = false
            try w.write(pkt, in: st.pointee.time_base)
        }
        segments.append(try save("seg-\(segments.count).m4s", try w.finish()))
        XCTAssertEqual(segments.count, 3)
        for s in segments {
            let b = [UInt8](try Data(contentsOf: URL(fileURLWithPath: s)).prefix(8))
            XCTAssertEqual(String(bytes: b[4..<8], encoding: .ascii), "moof", s)
            // Each segment decodes after the init alone, starting on a keyframe.
            let one = dir.appendingPathComponent("one.mp4").path
            try Data((try [initPath, s].map { try Data(contentsOf: URL(fileURLWithPath: $0)) }).joined()).write(to: URL(fileURLWithPath: one))
            XCTAssertEqual(try Probe.decodeErrors(one), "", s)
            XCTAssertEqual(try Probe.videoFrames(one), 60, s)
            let key = try Run.run([
                "ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "frame=key_frame", "-read_intervals", "%+#1", "-of", "csv=p=0", one
            ]).out
            XCTAssertEqual(key.split(separator: "\n").first?.split(separator: ",").first, "1", "\(s): the first picture is a keyframe (\(key))")
        }
        let all = dir.appendingPathComponent("all.mp4").path
        try Data((try ([initPath] + segments).map { try Data(contentsOf: URL(fileURLWithPath: $0)) }).joined()).write(to: URL(fileURLWithPath: all))
        XCTAssertEqual(try Probe.decodeErrors(all), "")
        XCTAssertEqual(try Probe.videoFrames(all), 180)
    }
}
