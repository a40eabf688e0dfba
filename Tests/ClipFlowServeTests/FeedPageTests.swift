import ClipFlowMedia
import Foundation
import XCTest

@testable import ClipFlowServe

/// The feed page as the server sends it: its style and script inline, and the feed itself carried
/// in `feed-doc`, where no text of the feed (a video's name) can end the element.
final class FeedPageTests: XCTestCase {
    func testThePageCarriesTheFeedAndNoNameEndsItsElement() throws {
        let name = "</script><script>alert(1)</script><!-- é"
        let feed = try JSONSerialization.data(withJSONObject: ["videos": [["id": 7, "name": name]]])
        let page = FeedPage.page(feed: feed)
        XCTAssertEqual(page.components(separatedBy: "</script>").count - 1, 2, "the feed's element and the script's end, nothing else")
        XCTAssertFalse(page.contains("alert(1)</script>"))
        let start = try XCTUnwrap(page.range(of: #"<script id="feed-doc" type="application/json">"#))
        let end = try XCTUnwrap(page.range(of: "</script>", range: start.upperBound..<page.endIndex))
        let carried = try XCTUnwrap(
            try JSONSerialization.jsonObject(with: Data(page[start.upperBound..<end.lowerBound].utf8)) as? [String: [[String: Any]]])
        XCTAssertEqual(carried["videos"]?.first?["name"] as? String, name)
        XCTAssertTrue(page[end.upperBound...].hasPrefix("\n<script>\n"), "the page's script follows, and reads it")
        XCTAssertTrue(page.contains("getElementById('feed-doc')"))
    }

    /// The page asks, in its head, for what the first video's player fetches first before anything
    /// is measured: the smallest H.264 rendition's init and first segment, and the audio's; with AV1
    /// rungs (which the script takes only where the browser decodes AV1), the audio's alone.
    func testThePagePreloadsTheFirstVideosFirstFetches() throws {
        let entry = try JSONDecoder().decode(
            FeedEntry.self,
            from: Data(
                #"""
                {"id": "v", "cover": "/m/poster.jpg", "covers": [], "master": "/m/master.m3u8", "duration": 6, "prefetch": [],
                 "renditions": [
                   {"name": "copy", "playlist": "/m/copy.m3u8", "codecs": "avc1.640028", "bandwidth": 8000000, "init": "/m/copy/init.mp4", "segment": "/m/copy/seg-0.m4s"},
                   {"name": "720p", "playlist": "/m/720p.m3u8", "codecs": "avc1.64001f", "bandwidth": 3000000, "init": "/m/720p/init.mp4", "segment": "/m/720p/seg-0.m4s"},
                   {"name": "360p", "playlist": "/m/360p.m3u8", "codecs": "avc1.64001e", "bandwidth": 800000, "init": "/m/360p/init.mp4", "segment": "/m/360p/seg-0.m4s"}],
                 "audio": {"name": "audio", "playlist": "/m/audio.m3u8", "codecs": "mp4a.40.2", "bandwidth": 130000, "init": "/m/audio/init.mp4", "segment": "/m/audio/seg-0.m4s"}}
                """#.utf8))
        let first = FeedPage.firstFetches(entry)
        XCTAssertEqual(first, ["/m/360p/init.mp4", "/m/360p/seg-0.m4s", "/m/audio/init.mp4", "/m/audio/seg-0.m4s"])
        let page = FeedPage.page(feed: Data(#"{"videos": []}"#.utf8), preload: first)
        let head = try XCTUnwrap(page.components(separatedBy: "</head>").first)
        for path in first { XCTAssertTrue(head.contains(#"<link rel="preload" as="fetch" crossorigin href="\#(path)">"#), path) }

        var withAV1 = entry
        var av1 = entry.renditions[2]
        av1.name = "360p-av1"
        av1.codecs = "av01.0.01M.08"
        av1.bandwidth = 400000
        withAV1.renditions.append(av1)
        XCTAssertEqual(FeedPage.firstFetches(withAV1), ["/m/audio/init.mp4", "/m/audio/seg-0.m4s"])
    }
}
