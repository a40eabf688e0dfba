import XCTest
@testable import ClipFlowMedia
import ClipFlowTestSupport

/// The playlists as PyPI `m3u8` reads them, and the numbers they carry.
final class HLSPlaylistsTests: XCTestCase {
    func track(_ name: String, sizes: [Int], codecs: String, w: Int = 0, h: Int = 0) -> HLSTrack {
        var t = HLSTrack(
            playlistURI: "\(name).m3u8", initURI: "\(name)/init.mp4",
            segments: sizes.enumerated().map {
                HLSSegment(uri: "\(name)/\($0.offset).m4s", seconds: 2, bytes: $0.element, iframe: ByteRange(offset: 0, length: $0.element / 10))
            },
            codecs: codecs)
        t.width = w
        t.height = h
        t.frameRate = 30
        if w > 0 { t.iframesURI = "\(name)-iframes.m3u8" } else { t.channels = 2 }
        return t
    }

    func testPlaylistsParseAndDeclareWhatTheSegmentsMeasure() throws {
        let v720 = track("720p", sizes: [500_000, 900_000, 400_000], codecs: "avc1.64001f", w: 1280, h: 720)
        let v360 = track("360p", sizes: [100_000, 200_000, 150_000], codecs: "avc1.64001e", w: 640, h: 360)
        let audio = track("audio", sizes: [32_000, 32_000, 32_000], codecs: "mp4a.40.2")
        let dir = Fixtures.shared.scratch("hls-playlists")
        let master = HLSPlaylists.master(video: [v720, v360], audio: audio)
        try master.write(to: dir.appendingPathComponent("master.m3u8"), atomically: true, encoding: .utf8)
        try HLSPlaylists.media(v720).write(to: dir.appendingPathComponent("720p.m3u8"), atomically: true, encoding: .utf8)
        try HLSPlaylists.iframes(v720).write(to: dir.appendingPathComponent("720p-iframes.m3u8"), atomically: true, encoding: .utf8)
        // Peak of 720p: its heaviest 2 s (900 kB) plus audio's (32 kB): 8 x 932000 / 2.
        XCTAssertTrue(
            master.contains(
                "BANDWIDTH=3728000,AVERAGE-BANDWIDTH=2528000,CODECS=\"avc1.64001f,mp4a.40.2\",RESOLUTION=1280x720,FRAME-RATE=30.000,AUDIO=\"audio\""), master)
        let script = """
            import json, m3u8, sys
            d = sys.argv[1]
            m = m3u8.load(d + '/master.m3u8')
            v = m.playlists[0].stream_info
            i = m.iframe_playlists[0]
            p = m3u8.load(d + '/720p.m3u8')
            f = m3u8.load(d + '/720p-iframes.m3u8')
            print(json.dumps({'variants': len(m.playlists), 'bandwidth': v.bandwidth, 'average': v.average_bandwidth,
              'codecs': v.codecs, 'frame_rate': v.frame_rate, 'resolution': list(v.resolution), 'audio': v.audio,
              'media': [x.type for x in m.media], 'independent': m.is_independent_segments, 'iframe_uri': i.uri,
              'target': p.target_duration, 'segments': len(p.segments), 'map': p.segment_map[0].uri, 'endlist': p.is_endlist,
              'iframes_only': f.is_i_frames_only, 'ranges': [s.byterange for s in f.segments]}))
            """
        let r = try Run.run(["python3", "-c", script, dir.path])
        let j = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.out.utf8)) as? [String: Any])
        XCTAssertEqual(j["variants"] as? Int, 2)
        XCTAssertEqual(j["bandwidth"] as? Int, 3_728_000)
        XCTAssertEqual(j["average"] as? Int, 2_528_000)
        XCTAssertEqual(j["codecs"] as? String, "avc1.64001f,mp4a.40.2")
        XCTAssertEqual(j["frame_rate"] as? Double, 30)
        XCTAssertEqual(j["resolution"] as? [Int], [1280, 720])
        XCTAssertEqual(j["media"] as? [String], ["AUDIO"])
        XCTAssertEqual(j["independent"] as? Bool, true)
        XCTAssertEqual(j["iframe_uri"] as? String, "720p-iframes.m3u8")
        XCTAssertEqual(j["target"] as? Int, 2)
        XCTAssertEqual(j["segments"] as? Int, 3)
        XCTAssertEqual(j["map"] as? String, "720p/init.mp4")
        XCTAssertEqual(j["endlist"] as? Bool, true)
        XCTAssertEqual(j["iframes_only"] as? Bool, true)
        XCTAssertEqual(j["ranges"] as? [String], ["50000@0", "90000@0", "40000@0"])
    }
}
