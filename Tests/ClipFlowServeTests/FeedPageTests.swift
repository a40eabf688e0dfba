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
}
