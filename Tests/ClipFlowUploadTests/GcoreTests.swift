import Foundation
import XCTest
@testable import ClipFlowUpload

/// A credential provider that counts its calls (the first answer, and any re-asks).
final class CountingProvider: CredentialProvider, @unchecked Sendable {
    let lock = NSLock()
    var calls = 0
    let credentials: Credentials
    init(_ c: Credentials) { credentials = c }
    func refresh(reason: String) throws -> Credentials { lock.lock(); calls += 1; lock.unlock(); return credentials }
}

final class GcoreTests: XCTestCase {
    var dir = ""
    var tus: LocalTUS!
    var api: LocalGcore!
    let access = "acc-initial-\(UUID().uuidString.prefix(8))"
    let refresh = "ref-initial-\(UUID().uuidString.prefix(8))"

    override func setUpWithError() throws {
        dir = NSTemporaryDirectory() + "gcore-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        tus = try LocalTUS(directory: dir + "/tus")
        api = try LocalGcore(tusHost: tus.hostPort, directory: dir, access: access, refresh: refresh)
    }

    override func tearDownWithError() throws {
        tus?.stop()
        try? FileManager.default.removeItem(atPath: dir)
    }

    func makeFile(_ name: String, bytes: Int) throws -> String {
        let path = dir + "/" + name
        var data = Data(count: bytes)
        for i in 0..<bytes { data[i] = UInt8(truncatingIfNeeded: i &* 2654435761 >> 7) }
        try data.write(to: URL(fileURLWithPath: path))
        return path
    }

    func uploader(_ provider: CredentialProvider, store: String = "resume.json", apiBase: String? = nil) throws -> GcoreUploader {
        var t = TUSOptions(endpoint: "", chunkSize: 256 << 10, retry: .fast)
        t.progressInterval = 0
        let o = GcoreOptions(apiBase: apiBase ?? api.apiBase, uploadURLTemplate: "http://{hostname}/files", description: "a test clip", tus: t)
        return GcoreUploader(options: o, store: try ResumeStore(path: dir + "/" + store), credentials: provider)
    }

    /// POST /videos, GET upload info, TUS to the template URL with filename/client_id/video_id/token
    /// metadata; the result names the video and its HLS URL; the upload token never shows in events.
    func testUploadCreatesAVideoAndSendsTheBytesByTUSWithTokenMetadata() throws {
        let file = try makeFile("holiday.mp4", bytes: 900_000)
        let up = try uploader(StaticCredentialProvider(.bearer(token: access, refreshToken: refresh)))
        let log = UploadEventLog()
        let result = try up.upload(file: file, id: "g1", metadata: [:], control: UploadControl(), observer: log)

        let state = try api.state()
        let videos = state["videos"] as? [[String: Any]] ?? []
        XCTAssertEqual(videos.count, 1)
        let video = try XCTUnwrap(videos.first)
        XCTAssertEqual(video["name"] as? String, "holiday.mp4")
        XCTAssertEqual(video["description"] as? String, "a test clip")
        let vid = "\(video["id"]!)"
        XCTAssertEqual(result.method, "gcore")
        XCTAssertEqual(result.videoID, vid)
        XCTAssertEqual(result.playbackURL, video["hls_url"] as? String)
        let url = try XCTUnwrap(result.url)
        XCTAssertTrue(url.hasPrefix("http://\(tus.hostPort)/files/"), url)
        XCTAssertEqual(try fileSHA256(tus.storedPath(url)), try fileSHA256(file))

        let token = try XCTUnwrap((state["upload_tokens"] as? [String: String])?[vid])
        let r = try CurlTransport().perform(HTTPRequest(method: "HEAD", url: url, headers: [("Tus-Resumable", "1.0.0")]))
        let meta = try TUSMetadata.decode(r.header("upload-metadata") ?? "")
        XCTAssertEqual(meta["filename"], "holiday.mp4")
        XCTAssertEqual(meta["video_id"], vid)
        XCTAssertEqual(meta["client_id"], "1234")
        XCTAssertEqual(meta["token"], token)
        XCTAssertEqual(Secrets.shared.redact("t=\(token)"), "t=***", "the upload token is a registered secret")
        XCTAssertFalse(log.all.contains { "\($0)".contains(token) || "\($0)".contains(access) })
        XCTAssertEqual(log.named("finished").count, 1)
    }

    /// The API refuses the access token (expired): the refresh token buys a new one, a
    /// credentials-expired event is emitted and the call is repeated once.
    func testExpiredAccessTokenIsRefreshedOnceAndTheCallRepeated() throws {
        try api.expireAccess()
        let provider = CountingProvider(.bearer(token: access, refreshToken: refresh))
        let up = try uploader(provider)
        let file = try makeFile("r.mp4", bytes: 300_000)
        let log = UploadEventLog()
        let result = try up.upload(file: file, id: "g2", metadata: [:], control: UploadControl(), observer: log)
        let state = try api.state()
        XCTAssertEqual(state["refreshes"] as? Int, 1, "one POST /auth/refresh")
        XCTAssertEqual(log.named("credentials-expired").count, 1)
        XCTAssertEqual(provider.calls, 1, "the refresh token sufficed; the provider was asked only at first use")
        let requests = requestLines(state)
        XCTAssertEqual(requests.filter { $0.hasPrefix("POST /videos") }, ["POST /videos 401", "POST /videos 201"])
        XCTAssertEqual(try fileSHA256(tus.storedPath(result.url!)), try fileSHA256(file))
    }

    /// Without a refresh token the provider is asked again; a provider that still returns a
    /// refused token makes the call fail with http-401 after one refresh.
    func testRefusedAfterRefreshFailsWith401() throws {
        try api.expireAccess()
        let provider = CountingProvider(.bearer(token: access, refreshToken: nil))
        let up = try uploader(provider)
        let file = try makeFile("n.mp4", bytes: 1000)
        let log = UploadEventLog()
        XCTAssertThrowsError(try up.upload(file: file, id: "g3", metadata: [:], control: UploadControl(), observer: log)) { e in
            XCTAssertEqual((e as? UploadError)?.code, "http-401")
            XCTAssertFalse("\(e)".contains(self.access))
        }
        XCTAssertEqual(provider.calls, 2)
        XCTAssertEqual(log.named("credentials-expired").count, 1)
    }

    /// A paused Gcore upload resumed by a new uploader continues the same TUS upload and never
    /// makes a second video (the video id is in the resume record).
    func testResumedUploadDoesNotCreateASecondVideo() throws {
        let file = try makeFile("long.mp4", bytes: 2_000_000)
        let control = UploadControl()
        let up1 = try uploader(StaticCredentialProvider(.bearer(token: access, refreshToken: refresh)))
        XCTAssertThrowsError(try up1.upload(file: file, id: "g4", metadata: [:], control: control, observer: Trigger(after: 400_000) { control.pause() }))
        let record = try XCTUnwrap(try ResumeStore(path: dir + "/resume.json").all.first)
        XCTAssertNotNil(record.extra["video_id"])
        XCTAssertFalse(try String(contentsOfFile: dir + "/resume.json", encoding: .utf8).contains("token\""), "no token in the resume store")
        let paused = try XCTUnwrap(tus.head(record.uploadURL!).offset)
        XCTAssertLessThan(paused, 2_000_000)

        let up2 = try uploader(StaticCredentialProvider(.bearer(token: access, refreshToken: refresh)))
        let log = UploadEventLog()
        let result = try up2.upload(file: file, id: "g4", metadata: [:], control: UploadControl(), observer: log)
        XCTAssertEqual(result.url, record.uploadURL)
        XCTAssertEqual(result.videoID, record.extra["video_id"])
        guard case .started(_, _, _, let resumedAt) = log.all.first else { return XCTFail("no started") }
        XCTAssertEqual(resumedAt, paused)
        XCTAssertEqual((try api.state()["videos"] as? [Any])?.count, 1, "one video only")
        XCTAssertEqual(try fileSHA256(tus.storedPath(result.url!)), try fileSHA256(file))
    }

    /// An upload server behind a fault proxy that answers the first creation POST with `status`,
    /// an API that names the proxy, and an uploader for that API.
    func behindProxy(failingCreation status: Int, _ body: String) throws -> (LocalProxy, LocalGcore, GcoreUploader) {
        let proxy = try LocalProxy(upstreamPort: tus.port, directory: dir)
        try proxy.rules([["method": "POST", "times": 1, "action": "status", "status": status, "body": body]])
        let api2 = try LocalGcore(tusHost: "127.0.0.1:\(proxy.port)", directory: dir, access: access, refresh: refresh)
        let up = try uploader(StaticCredentialProvider(.bearer(token: access, refreshToken: refresh)), apiBase: api2.apiBase)
        return (proxy, api2, up)
    }

    /// The API's request log from its state: "METHOD path status" lines.
    func requestLines(_ state: [String: Any]) -> [String] {
        (state["requests"] as? [[Any]] ?? []).map { "\($0[0]) \($0[1]) \($0[2])" }
    }

    /// The TUS creation POST fails once (503 from a proxy in front of the upload server) and is
    /// retried: the retry reuses the video and upload token it already has, so the hosting API
    /// holds exactly one video.
    func testRetriedCreationDoesNotMakeASecondVideo() throws {
        let (proxy, api2, up) = try behindProxy(failingCreation: 503, "busy")
        let file = try makeFile("retry.mp4", bytes: 600_000)
        let log = UploadEventLog()
        let result = try up.upload(file: file, id: "g5", metadata: [:], control: UploadControl(), observer: log)
        XCTAssertEqual(try proxy.outcomes("POST").filter { $0 == "status:503" }.count, 1)
        XCTAssertEqual(up.tus.lastRun.requests["POST"], 2, "the creation was sent twice")
        XCTAssertEqual((try api2.state()["videos"] as? [Any])?.count, 1, "one video only")
        XCTAssertEqual(try fileSHA256(tus.storedPath(result.url!)), try fileSHA256(file))
    }

    /// The upload server refuses the creation (401: the upload token expired, say): as for the
    /// API calls, the API token is renewed, then a fresh upload token is fetched for the same
    /// video and the creation repeated with it.
    func testUploadServerRefusalRenewsTheTokensAndRepeatsTheCreation() throws {
        let (proxy, api2, up) = try behindProxy(failingCreation: 401, "upload token expired")
        let file = try makeFile("refused.mp4", bytes: 600_000)
        let log = UploadEventLog()
        let result = try up.upload(file: file, id: "g6", metadata: [:], control: UploadControl(), observer: log)
        let state = try api2.state()
        XCTAssertEqual(try proxy.outcomes("POST").filter { $0 == "status:401" }.count, 1)
        XCTAssertEqual(up.tus.lastRun.requests["POST"], 2, "the creation was sent twice")
        XCTAssertEqual(state["refreshes"] as? Int, 1, "the API token was renewed")
        XCTAssertEqual(log.named("credentials-expired").count, 1)
        let requests = requestLines(state)
        XCTAssertEqual(requests.filter { $0.hasPrefix("GET /videos/") && $0.contains("/upload") }.count, 2, "a fresh upload token: \(requests)")
        XCTAssertEqual((state["videos"] as? [Any])?.count, 1, "one video only")
        let vid = try XCTUnwrap(result.videoID)
        let token = try XCTUnwrap((state["upload_tokens"] as? [String: String])?[vid])
        let url = try XCTUnwrap(result.url)
        let r = try CurlTransport().perform(HTTPRequest(method: "HEAD", url: url, headers: [("Tus-Resumable", "1.0.0")]))
        XCTAssertEqual(try TUSMetadata.decode(r.header("upload-metadata") ?? "")["token"], token, "created with the fresh upload token")
        XCTAssertEqual(try fileSHA256(tus.storedPath(url)), try fileSHA256(file))
    }

    /// Uploads a 2 MB file named `name` and applies `stop` to its control after 300 kB; the upload
    /// must end with the error code `expecting`.
    func stopMidway(_ name: String, expecting: String, _ stop: @escaping @Sendable (UploadControl) -> Void) throws -> (GcoreUploader, Trigger) {
        let up = try uploader(StaticCredentialProvider(.bearer(token: access, refreshToken: refresh)))
        let file = try makeFile(name, bytes: 2_000_000)
        let control = UploadControl()
        let t = Trigger(after: 300_000) { stop(control) }
        XCTAssertThrowsError(try up.upload(file: file, id: name, metadata: [:], control: control, observer: t)) {
            XCTAssertEqual(($0 as? UploadError)?.code, expecting, "\($0)")
        }
        return (up, t)
    }

    /// A running upload cancelled (`clipflow upload cancel`): the video it made is deleted on the
    /// hosting API, as a cancelled TUS upload is deleted on its server.
    func testCancelledUploadDeletesItsVideo() throws {
        let (_, t) = try stopMidway("cancel.mp4", expecting: "cancelled") { $0.cancel() }
        let state = try api.state()
        let requests = requestLines(state)
        XCTAssertEqual(requests.filter { $0.hasPrefix("DELETE /videos/") }.count, 1, "\(requests)")
        XCTAssertEqual((state["videos"] as? [Any])?.count, 0, "the video is gone")
        XCTAssertEqual(t.log.named("cancelled").count, 1)
    }

    /// A paused upload cancelled later (the queue discards it): its video is deleted too, found
    /// through the resume record.
    func testDiscardingAPausedUploadDeletesItsVideo() throws {
        let (up, _) = try stopMidway("paused.mp4", expecting: "paused") { $0.pause() }
        let file = dir + "/paused.mp4"
        XCTAssertEqual((try api.state()["videos"] as? [Any])?.count, 1, "a pause keeps the video")
        try up.discard(file: file)
        let state = try api.state()
        let requests = requestLines(state)
        XCTAssertEqual(requests.filter { $0.hasPrefix("DELETE /videos/") }, ["DELETE /videos/1000 204"])
        XCTAssertEqual((state["videos"] as? [Any])?.count, 0, "the video is gone")
    }

    /// Without `--upload-url`, uploads go to Gcore's `https://{hostname}/upload` for an `https://`
    /// API (Gcore's own), and over `http://` for an `http://` one (`clipflow serve` without TLS);
    /// a template given, or kept in a queue entry, is used as it is.
    func testDefaultUploadURLFollowsTheAPIScheme() throws {
        XCTAssertEqual(GcoreOptions(apiBase: "https://api.gcore.com/streaming").uploadURLTemplate, "https://{hostname}/upload")
        XCTAssertEqual(GcoreOptions(apiBase: "HTTP://127.0.0.1:8080").uploadURLTemplate, "http://{hostname}/upload")
        XCTAssertEqual(GcoreOptions(apiBase: "http://h", uploadURLTemplate: "https://{hostname}/x").uploadURLTemplate, "https://{hostname}/x")
        let decoded = try JSONDecoder().decode(GcoreOptions.self, from: Data(#"{"apiBase": "https://api.gcore.com/streaming"}"#.utf8))
        XCTAssertEqual(decoded.uploadURLTemplate, "https://{hostname}/upload")
    }
}
