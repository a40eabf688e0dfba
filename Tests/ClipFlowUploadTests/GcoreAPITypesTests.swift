import ClipFlowUpload
import Foundation
import XCTest

/// The Gcore API's bodies (`Gcore`), shared by the upload client and `clipflow serve`: answers read
/// leniently (as Gcore's own answers must be), requests strictly, and written as the server answers.
final class GcoreAPITypesTests: XCTestCase {
    private func decode<T: Decodable>(_ type: T.Type, _ json: String) throws -> T { try JSONDecoder().decode(T.self, from: Data(json.utf8)) }

    private func object(_ value: some Encodable) throws -> [String: Any] {
        try XCTUnwrap(try JSONSerialization.jsonObject(with: try JSONEncoder().encode(value)) as? [String: Any])
    }

    /// A video as Gcore answers it: fields clipflow does not know are ignored, and fields shaped
    /// otherwise (a date for `created_at`, null for `screenshot`) read as absent.
    func testAGcoreVideoReads() throws {
        let v = try decode(
            Gcore.Video.self,
            #"""
            {"id": 4021, "name": "holiday", "description": "", "client_id": 1234, "status": "empty", "duration": 12000,
             "screenshot": null, "hls_url": "https://demo-files.gvideo.io/videos/4021/master.m3u8", "created_at": "2024-05-01T10:00:00Z",
             "converted_videos": [{"name": "vod720n", "progress": 100}], "origin_size": 0, "poster": {"x": 1}}
            """#)
        XCTAssertEqual(v.id, .number(4021))
        XCTAssertEqual(v.id.description, "4021")
        XCTAssertEqual(v.clientID?.description, "1234")
        XCTAssertEqual(v.hlsURL, "https://demo-files.gvideo.io/videos/4021/master.m3u8")
        XCTAssertEqual(v.screenshot, "")
        XCTAssertNil(v.createdAt)
        XCTAssertEqual(v.duration, 12000)
        XCTAssertEqual(v.renditions, [])
    }

    func testAVideoNeedsAnIdAsANumberOrAString() throws {
        XCTAssertEqual(try decode(Gcore.Video.self, #"{"id": "v-9"}"#).id, .text("v-9"))
        XCTAssertEqual(try decode(Gcore.Video.self, #"{"id": 9007199254740993}"#).id, .number(9_007_199_254_740_993))
        for bad in [#"{}"#, #"{"id": null}"#, #"{"id": ""}"#, #"{"id": {"a": 1}}"#, #"{"id": [1]}"#] {
            XCTAssertThrowsError(try decode(Gcore.Video.self, bad), bad)
        }
    }

    /// As `clipflow serve` answers: every field, absent ones null; a number id stays a number, a
    /// text id text.
    func testAVideoIsWrittenWithEveryField() throws {
        let v = Gcore.Video(
            id: 7, name: "a", clientID: 1, status: "processing", mode: "ladder", renditions: [.init(name: "ladder", status: "processing", progress: 0.5)],
            progress: 0.5, createdAt: 1.5)
        let o = try object(v)
        XCTAssertEqual(
            Set(o.keys),
            [
                "id", "name", "description", "client_id", "status", "mode", "error", "duration", "screenshot", "hls_url", "renditions", "progress",
                "created_at", "access"
            ])
        XCTAssertEqual(o["id"] as? Int, 7)
        XCTAssertTrue(o["description"] is NSNull)
        XCTAssertEqual((o["renditions"] as? [[String: Any]])?.first?["progress"] as? Double, 0.5)
        XCTAssertEqual(try decode(Gcore.Video.self, String(decoding: try JSONEncoder().encode(v), as: UTF8.self)), v)
        XCTAssertEqual(try object(Gcore.Video(id: "x"))["id"] as? String, "x")
    }

    func testAnUploadTargetReadsLeniently() throws {
        let t = try decode(
            Gcore.UploadTarget.self,
            #"{"servers": [{"id": 1, "hostname": "upload.example.com"}, {"hostname": "b"}], "token": "tok", "video": {"id": 5, "name": "n", "client_id": 7}}"#)
        XCTAssertEqual(t.servers.map(\.hostname), ["upload.example.com", "b"])
        XCTAssertEqual(t.token, "tok")
        XCTAssertEqual(t.video?.clientID, 7)
        let odd = try decode(Gcore.UploadTarget.self, #"{"servers": "x", "token": 5}"#)
        XCTAssertEqual(odd.servers, [])
        XCTAssertEqual(odd.token, "5")
        XCTAssertNil(odd.video)
        XCTAssertEqual(try decode(Gcore.UploadTarget.self, "{}"), Gcore.UploadTarget(servers: [], token: "", video: nil))
        XCTAssertThrowsError(try decode(Gcore.UploadTarget.self, "[]"), "not an object")
        let written = try object(Gcore.UploadTarget(servers: [.init(id: 1, hostname: "h:1")], token: "t", video: .init(id: 3, clientID: 1)))
        XCTAssertEqual(written["token"] as? String, "t")
        XCTAssertEqual((written["servers"] as? [[String: Any]])?.first?["id"] as? Int, 1)
        XCTAssertEqual((written["video"] as? [String: Any])?["client_id"] as? Int, 1)
    }

    func testTokensReadEitherSpellingAndWriteAccessAlone() throws {
        XCTAssertEqual(try decode(Gcore.Tokens.self, #"{"access": "a", "refresh": "r"}"#), Gcore.Tokens(access: "a", refresh: "r"))
        let oauth = try decode(Gcore.Tokens.self, #"{"access_token": "a", "refresh_token": "r", "expires_in": 3600}"#)
        XCTAssertEqual(oauth, Gcore.Tokens(access: "a", refresh: "r"))
        XCTAssertEqual(try decode(Gcore.Tokens.self, #"{"detail": "no"}"#).access, "")
        XCTAssertEqual(String(decoding: try JSONEncoder().encode(Gcore.Tokens(access: "a")), as: UTF8.self), #"{"access":"a"}"#)
    }

    /// Requests are read strictly: a field of the wrong type fails naming the field (the server
    /// answers 400 naming it); absent optional fields are not written.
    func testRequestsAreReadStrictlyAndWrittenWithoutAbsentFields() throws {
        XCTAssertEqual(try decode(Gcore.NewVideo.self, #"{"name": "a", "client_id": 9007199254740993, "x": 1}"#).clientID, 9_007_199_254_740_993)
        for (json, field) in [
            (#"{"name": "a", "client_id": "7"}"#, "client_id"), (#"{"name": "a", "client_id": 1.5}"#, "client_id"),
            (#"{"name": "a", "description": 5}"#, "description"), (#"{"name": 5}"#, "name"), (#"{"description": "d"}"#, "name")
        ] {
            XCTAssertThrowsError(try decode(Gcore.NewVideo.self, json), json) { error in
                var path: [any CodingKey] = []
                switch error as? DecodingError {
                case .keyNotFound(let key, let c)?: path = c.codingPath + [key]
                case .typeMismatch(_, let c)?, .valueNotFound(_, let c)?, .dataCorrupted(let c)?: path = c.codingPath
                default: break
                }
                XCTAssertEqual(path.first?.stringValue, field, "\(json): \(error)")
            }
        }
        XCTAssertEqual(String(decoding: try JSONEncoder().encode(Gcore.NewVideo(name: "a")), as: UTF8.self), #"{"name":"a"}"#)
        XCTAssertEqual(try object(Gcore.NewVideo(name: "a", description: "d")) as NSDictionary, ["name": "a", "description": "d"])
        XCTAssertEqual(String(decoding: try JSONEncoder().encode(Gcore.Refresh(refresh: "r")), as: UTF8.self), #"{"refresh":"r"}"#)
        XCTAssertThrowsError(try decode(Gcore.Refresh.self, #"{"refresh": 5}"#))
    }
}
