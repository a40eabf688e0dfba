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
        // What the segments say about themselves: 2 s each (timescale 15360), back to back, a sync
        // sample first; the I-frame byte range after the init decodes to one keyframe.
        var expectedStart: UInt64 = 0
        for s in segments {
            let bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: s)))
            let info = try XCTUnwrap(FragmentInfo(bytes), s)
            XCTAssertEqual(info.sampleCount, 60)
            XCTAssertEqual(info.duration, 30720)
            XCTAssertEqual(info.baseDecodeTime, expectedStart)
            XCTAssertTrue(info.startsWithSyncSample)
            expectedStart += info.duration
            let iframe = dir.appendingPathComponent("iframe.mp4").path
            let range = info.firstSampleRange
            try Data(try Data(contentsOf: URL(fileURLWithPath: initPath)) + Data(bytes[range.offset..<(range.offset + range.length)]))
                .write(to: URL(fileURLWithPath: iframe))
            // The mdat's header still declares every sample ("partial file" to a demuxer, as for
            // any byte-range request); the one sample it holds decodes as a keyframe.
            XCTAssertEqual(try Probe.videoFrames(iframe), 1, s)
        }
        let all = dir.appendingPathComponent("all.mp4").path
        try Data((try ([initPath] + segments).map { try Data(contentsOf: URL(fileURLWithPath: $0)) }).joined()).write(to: URL(fileURLWithPath: all))
        XCTAssertEqual(try Probe.decodeErrors(all), "")
        XCTAssertEqual(try Probe.videoFrames(all), 180)
    }
}
