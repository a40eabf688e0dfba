import ClipFlowTestSupport
import Foundation
import XCTest

/// The studio (`/studio`) in chromium as a person uses it (scripts/studio-check): an upload from
/// the page, the page reloaded mid-upload and the same file added again goes on from what the
/// server has; the video becomes ready in the list; renamed, made private, its link copied with a
/// token, deleted. The page is behind the key, and the API it calls takes no Basic password, so
/// another site cannot act through the browser.
final class ServeStudioCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "studio-test-key"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    var root: URL { URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent() }

    func testUploadReloadResumeReadyRenamePrivateLinkDelete() throws {
        let s = ServerProcess.clipflowServe(binary: binary, data: fx.scratch("serve-studio"), environment: ["CLIPFLOW_API_KEY": key])
        try s.start()
        defer { s.stop() }
        let base = "http://127.0.0.1:\(s.port)"
        // Large enough that an upload at 2 MB/s takes a few seconds.
        let clip = try fx.clip(
            "studio-clip.mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "8", "-c:v", "libx264", "-preset",
                "ultrafast", "-b:v", "8M", "-c:a", "aac"
            ])
        let run = try Run.run(["python3", root.appendingPathComponent("scripts/studio-check").path, base, "--key", key, "--file", clip], check: false)
        XCTAssertEqual(run.status, 0, run.out + run.stderr)
        let report = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(run.out.utf8)) as? [String: Any], run.out + run.stderr)
        let size = try XCTUnwrap(report["size"] as? Int)
        let resumed = try XCTUnwrap(report["resumed_offset"] as? Int)
        XCTAssertTrue(resumed > 0 && resumed < size, "went on from \(resumed) of \(size)")
        let video = try XCTUnwrap(report["video"] as? Int)
        XCTAssertEqual(report["viewers"] as? String, "no views yet", "the row shows its viewers' figures")
        XCTAssertTrue((report["link"] as? String)?.hasPrefix("\(base)/v/\(video)?token=play.\(video).") ?? false, "\(report)")
        XCTAssertEqual(try HTTP.request("GET", "\(base)/videos/\(video)", headers: ["Authorization": "Bearer \(key)"]).status, 404, "deleted")
        // One upload, made once: the reload did not start a second.
        XCTAssertEqual(s.stderrText.components(separatedBy: "method=POST path=/files ").count - 1, 1, s.stderrText)

        // The page needs the key; a Basic password, which a browser sends by itself, opens the
        // pages only, never the API.
        // (curl: Foundation's client would wait for credentials on the Basic challenge.)
        let refused = try Run.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code} %header{www-authenticate}", "\(base)/studio"])
        XCTAssertTrue(refused.out.hasPrefix("401 Basic"), refused.out)
        let basic = "Basic " + Data("someone:\(key)".utf8).base64EncodedString()
        let page = try HTTP.request("GET", "\(base)/studio", headers: ["Authorization": basic])
        XCTAssertEqual(page.status, 200)
        XCTAssertEqual(page.header("X-Frame-Options"), "DENY", "no other site frames it")
        XCTAssertTrue(page.header("Content-Security-Policy")?.contains("frame-ancestors 'none'") ?? false)
        XCTAssertEqual(page.header("Cache-Control"), "no-store", "it carries a token")
        let made = try HTTP.request("POST", "\(base)/videos", headers: ["Authorization": basic], json: ["name": "forged"])
        XCTAssertEqual(made.status, 401, "the API takes no Basic password")
    }
}
