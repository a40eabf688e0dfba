import Hummingbird
import XCTest

@testable import ClipFlowServe

/// The parts of private media and webhooks that are plain functions: a playlist carrying a
/// token on to its URIs, and which addresses a webhook may not reach.
final class MediaAccessTests: XCTestCase {
    func testAPlaylistCarriesTheTokenOnToItsRelativeURIsOnly() {
        let playlist = [
            "#EXTM3U", "#EXT-X-MAP:URI=\"360p/init.mp4\"", "#EXT-X-KEY:METHOD=AES-128,URI=\"data:text/plain;base64,AAAA\"", "#EXTINF:2.0,",
            "360p/seg-0.m4s", "#EXTINF:2.0,", "https://cdn.example/seg-1.m4s", "/media/1/a/seg-2.m4s", "seg-3.m4s?x=1", ""
        ].joined(separator: "\r\n")
        let carried = MediaAccess<BasicRequestContext>.carrying("T", in: playlist, playlist: true).components(separatedBy: "\r\n")
        XCTAssertEqual(
            carried,
            [
                "#EXTM3U", "#EXT-X-MAP:URI=\"360p/init.mp4?token=T\"", "#EXT-X-KEY:METHOD=AES-128,URI=\"data:text/plain;base64,AAAA\"", "#EXTINF:2.0,",
                "360p/seg-0.m4s?token=T", "#EXTINF:2.0,", "https://cdn.example/seg-1.m4s", "/media/1/a/seg-2.m4s", "seg-3.m4s?x=1&token=T", ""
            ])
        let storyboard = "WEBVTT\n\n00:00.000 --> 00:02.000\nstoryboard.jpg#xywh=0,0,160,90\n"
        XCTAssertEqual(
            MediaAccess<BasicRequestContext>.carrying("T", in: storyboard, playlist: false),
            "WEBVTT\n\n00:00.000 --> 00:02.000\nstoryboard.jpg?token=T#xywh=0,0,160,90\n")
    }

    func testAWebhookReachesPublicAddressesOnly() {
        func isPublic(_ text: String) -> Bool { WebhookEndpoint.isPublic(WebhookEndpoint.parse(text)!) }
        for inner in [
            "127.0.0.1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "198.18.0.1", "192.0.0.8", "224.0.0.1",
            "::1", "::", "fd00::1", "fe80::1", "::ffff:127.0.0.1", "::127.0.0.1", "64:ff9b::a9fe:a9fe", "2002:0a00:0001::1"
        ] {
            XCTAssertFalse(isPublic(inner), inner)
        }
        for outer in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "64:ff9b::808:808", "2002:0808:0808::1"] { XCTAssertTrue(isPublic(outer), outer) }
    }
}
