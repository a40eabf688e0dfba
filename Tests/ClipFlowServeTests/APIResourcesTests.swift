import ClipFlowMedia
import Foundation
import XCTest

@testable import ClipFlowServe

/// The hosting API's answers as a client parses them (Foundation's JSON reader, not our types).
final class APIResourcesTests: XCTestCase {
    private func parsed(_ value: some Encodable) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: try JSONEncoder().encode(value)) as? [String: Any])
    }

    func testAVideoShowsEveryFieldAndAbsentValuesAsNull() throws {
        let pending = VideoResource(
            id: 7, name: "a", description: nil, clientID: 1, status: .pending, mode: .ladder, error: nil, duration: nil, screenshot: "", hlsURL: "",
            renditions: [], progress: 0, createdAt: 1.5, access: .public)
        let v = try parsed(pending)
        XCTAssertEqual(
            Set(v.keys),
            [
                "id", "name", "description", "client_id", "status", "mode", "error", "duration", "screenshot", "hls_url", "renditions", "progress",
                "created_at", "access"
            ])
        for key in ["description", "error", "duration"] { XCTAssertTrue(v[key] is NSNull, "\(key): \(v[key] ?? "absent")") }
        XCTAssertEqual(v["id"] as? Int, 7)
        XCTAssertEqual(v["status"] as? String, "pending")
        XCTAssertEqual(v["mode"] as? String, "ladder")
        XCTAssertEqual(v["access"] as? String, "public")
        var processing = pending
        processing.renditions = [.init(name: "copy", status: "ready"), .init(name: "ladder", status: "processing", progress: 0.25)]
        let renditions = try XCTUnwrap(try parsed(processing)["renditions"] as? [[String: Any]])
        XCTAssertEqual(renditions.count, 2)
        XCTAssertNil(renditions[0]["progress"], "a ready rendition has no progress")
        XCTAssertEqual(renditions[1]["progress"] as? Double, 0.25)
    }

    func testAFeedEntryIsTheManifestsRebasedWithTheVideosIdNameAndStatus() throws {
        let manifest = """
            {"videos":[{"audio":{"bandwidth":130000,"codecs":"mp4a.40.2","init":"audio.mp4","name":"audio","playlist":"audio.m3u8","segment":"audio-0.m4s"},\
            "cover":"poster.jpg","covers":[{"size":320,"uri":"poster-320.jpg"}],"duration":6.0,"id":"a1-0000000a-first","master":"master.m3u8",\
            "prefetch":[{"init":"360p.mp4","segment":"360p-0.m4s"}],"renditions":[{"bandwidth":900000,"codecs":"avc1.64001e","height":360,\
            "init":"360p.mp4","name":"360p","playlist":"360p.m3u8","segment":"360p-0.m4s","width":640}],"storyboard":"storyboard.vtt"}]}
            """
        let entry = try XCTUnwrap(try JSONDecoder().decode(FeedManifest.self, from: Data(manifest.utf8)).videos.first)
        let hosted = HostedFeed(videos: [.init(id: 3, name: "clip", status: .viewable, media: entry.rebased("/media/3/F/"))])
        let e = try XCTUnwrap((try parsed(hosted)["videos"] as? [[String: Any]])?.first)
        XCTAssertEqual(e["id"] as? Int, 3, "the video's id, not the folder's")
        XCTAssertEqual(e["name"] as? String, "clip")
        XCTAssertEqual(e["status"] as? String, "viewable")
        XCTAssertEqual(e["master"] as? String, "/media/3/F/master.m3u8")
        XCTAssertEqual(e["cover"] as? String, "/media/3/F/poster.jpg")
        XCTAssertEqual(e["storyboard"] as? String, "/media/3/F/storyboard.vtt")
        XCTAssertEqual((e["covers"] as? [[String: Any]])?.first?["uri"] as? String, "/media/3/F/poster-320.jpg")
        XCTAssertEqual((e["prefetch"] as? [[String: String]])?.first, ["init": "/media/3/F/360p.mp4", "segment": "/media/3/F/360p-0.m4s"])
        let rung = try XCTUnwrap((e["renditions"] as? [[String: Any]])?.first)
        XCTAssertEqual(rung["playlist"] as? String, "/media/3/F/360p.m3u8")
        XCTAssertEqual(rung["width"] as? Int, 640)
        XCTAssertEqual(rung["bandwidth"] as? Int, 900_000)
        XCTAssertEqual((e["audio"] as? [String: Any])?["segment"] as? String, "/media/3/F/audio-0.m4s")
        XCTAssertEqual(e["duration"] as? Double, 6)
    }

    /// A folder published before feed.json listed covers, prefetch and renditions still reads.
    func testAnOlderManifestWithoutTheLaterFieldsReads() throws {
        let old = #"{"videos":[{"id":"a1","cover":"poster.jpg","master":"master.m3u8","duration":4.0}]}"#
        let entry = try XCTUnwrap(try JSONDecoder().decode(FeedManifest.self, from: Data(old.utf8)).videos.first)
        XCTAssertEqual(entry.master, "master.m3u8")
        XCTAssertEqual(entry.renditions.count, 0)
        XCTAssertEqual(entry.covers.count, 0)
        XCTAssertNil(entry.audio)
        XCTAssertEqual(entry.rebased("/media/1/a1/").cover, "/media/1/a1/poster.jpg")
    }
}
