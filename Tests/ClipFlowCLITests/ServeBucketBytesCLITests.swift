import ClipFlowTestSupport
import Foundation
import XCTest

/// `clipflow serve --storage s3://…` moves each byte of an upload once: what its processing reads
/// from the bucket is the upload (its ladder step, on the server of its playable step, reads it
/// from there), and what it writes is what it publishes, a rendition the ladder takes over being
/// copied by the bucket. Counted by the server's own `/metrics`
/// (`clipflow_bucket_bytes_read_total`, `…_written_total`); the bucket judged by boto3 against a
/// real S3 server (SeaweedFS).
final class ServeBucketBytesCLITests: XCTestCase {
    let fx = Fixtures.shared
    let key = "bucket-bytes-key"
    let prefix = "bytes/"

    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }

    func url(_ s: ServerProcess, _ path: String) -> String { "http://127.0.0.1:\(s.port)\(path)" }

    func get(_ s: ServerProcess, _ path: String) throws -> Any { try s.apiGet(path, key: key) }

    /// The server's counts of bytes read from and written to the bucket.
    func counted(_ s: ServerProcess) throws -> (read: Int, written: Int) {
        let text = try HTTP.request("GET", url(s, "/metrics")).text
        func value(_ name: String) throws -> Int {
            let line = try XCTUnwrap(text.split(separator: "\n").first { $0.hasPrefix(name + " ") }, "\(name) in:\n\(text)")
            return try XCTUnwrap(Int(line.split(separator: " ").last ?? ""))
        }
        return (try value("clipflow_bucket_bytes_read_total"), try value("clipflow_bucket_bytes_written_total"))
    }

    /// Every object under `prefix`: size and ETag by key (boto3).
    func objects(_ weed: SeaweedFS, under prefix: String) throws -> [String: (size: Int, etag: String)] {
        let script = """
            import boto3, json, os, sys
            from botocore.config import Config
            s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL_S3"], config=Config(s3={"addressing_style": "path"}))
            out = {}
            for page in s3.get_paginator("list_objects_v2").paginate(Bucket=sys.argv[1], Prefix=sys.argv[2]):
                for o in page.get("Contents", []): out[o["Key"]] = [o["Size"], o["ETag"]]
            print(json.dumps(out))
            """
        let r = try Run.run(["python3", "-c", script, weed.bucket, prefix], env: weed.environment)
        let listed = try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(r.out.utf8)) as? [String: [Any]])
        return listed.mapValues { (size: $0[0] as? Int ?? -1, etag: $0[1] as? String ?? "") }
    }

    func waitReady(_ s: ServerProcess, _ id: Int, seconds: Double = 240) throws -> [String: Any] {
        try s.waitForVideo(id, key: key, seconds: seconds)
    }

    /// 8 s of 1280x720 with sound, about 3 MB; keyframes every `gop` frames (300: too sparse to
    /// be copied, so the playable step makes the smallest rung).
    func clip(_ name: String, gop: Int) throws -> String {
        try fx.clip(
            name,
            [
                "-f", "lavfi", "-i", "testsrc2=size=1280x720:rate=30,noise=alls=20:allf=t", "-f", "lavfi", "-i", "sine=r=48000", "-t", "8",
                "-c:v", "libx264", "-preset", "ultrafast", "-g", String(gop), "-b:v", "3M", "-maxrate", "3M", "-bufsize", "2M", "-pix_fmt", "yuv420p",
                "-c:a", "aac"
            ])
    }

    func testProcessingReadsTheUploadOnceAndWritesOnlyWhatItPublishes() throws {
        let weed = try SeaweedFS.start()
        defer { weed.stop() }
        let data = fx.scratch("serve-bucket-bytes")
        var environment = weed.environment
        environment["CLIPFLOW_API_KEY"] = key
        let s = ServerProcess.clipflowServe(binary: binary, data: data, ["--storage", "s3://\(weed.bucket)/\(prefix)"], environment: environment)
        try s.start(timeout: 60)
        defer { s.stop() }

        // A copyable upload (the ladder takes its audio and poster over), then one that is not
        // (the ladder takes the smallest rung and the audio over).
        let uploads = [
            (try clip("bytes-copy.mp4", gop: 30), ["audio.m3u8", "poster.jpg"]), (try clip("bytes-sparse.mp4", gop: 300), ["360p.m3u8", "audio.m3u8"])
        ]
        for (n, (clip, taken)) in uploads.enumerated() {
            let size = Int(try XCTUnwrap(try FileManager.default.attributesOfItem(atPath: clip)[.size] as? NSNumber).int64Value)
            let before = try counted(s)
            let up = try Run.run(
                [binary, "upload", clip, "--to", "gcore", "--endpoint", url(s, ""), "--queue", fx.scratch("bucket-bytes-queue-\(n)").path],
                env: ["CLIPFLOW_UPLOAD_TOKEN": key], check: false)
            XCTAssertEqual(up.status, 0, up.stderr)
            let id = try XCTUnwrap((try get(s, "/videos") as? [[String: Any]])?.first?["id"] as? Int)
            let v = try waitReady(s, id)
            XCTAssertEqual(v["status"] as? String, "ready", "\(v)")
            // The ladder step ran here, on the folder its playable step kept: when it ends, nothing
            // is left of either.
            let deadline = Date().addingTimeInterval(10)
            func left() -> [String] {
                ["scratch", "kept"].flatMap { (try? FileManager.default.contentsOfDirectory(atPath: data.appendingPathComponent($0).path)) ?? [] }
            }
            while Date() < deadline, !left().isEmpty { usleep(100_000) }
            XCTAssertEqual(left(), [], "no scratch and nothing kept once the job is done")
            let after = try counted(s)
            let read = after.read - before.read, written = after.written - before.written

            // The video's two folders: the playable step's, then the ladder's, which supersedes it
            // (kept for its grace).
            let media = prefix + "media/\(id)/"
            let listed = try objects(weed, under: media)
            let folders = Set(listed.keys.map { String($0.dropFirst(media.count).prefix { $0 != "/" }) })
            XCTAssertEqual(folders.count, 2, "\(folders)")
            let full = try XCTUnwrap(folders.first { $0.hasSuffix("-full") }), first = try XCTUnwrap(folders.first { !$0.hasSuffix("-full") })
            func files(_ folder: String) -> [String: (size: Int, etag: String)] {
                Dictionary(
                    uniqueKeysWithValues: listed.filter { $0.key.hasPrefix(media + folder + "/") }.map {
                        (String($0.key.dropFirst(media.count + folder.count + 1)), $0.value)
                    })
            }
            let firstFiles = files(first), fullFiles = files(full)
            // What the ladder took over: the same file, byte for byte, in both folders.
            let reused = fullFiles.filter { name, o in firstFiles[name].map { $0.size == o.size && $0.etag == o.etag } ?? false }
            for name in taken { XCTAssertNotNil(reused[name], "\(name) taken over: \(reused.keys.sorted())") }
            let reusedBytes = reused.values.reduce(0) { $0 + $1.size }
            let firstBytes = firstFiles.values.reduce(0) { $0 + $1.size }, fullBytes = fullFiles.values.reduce(0) { $0 + $1.size }
            let published = firstBytes + fullBytes - reusedBytes
            print(
                "bucket bytes, \(URL(fileURLWithPath: clip).lastPathComponent): upload \(size), read \(read) (\(Double(read) / Double(size))x), "
                    + "written \(written) = upload + \(written - size) for \(published) published (\(firstBytes) + \(fullBytes) - \(reusedBytes) taken over)")

            XCTAssertGreaterThanOrEqual(read, size, "the upload is read")
            XCTAssertLessThanOrEqual(Double(read), 1.05 * Double(size), "read \(read) bytes for an upload of \(size)")
            // Written: the upload (its parts, and the small body that completes it) and what was
            // published, each once; nothing of what the ladder took over (or made again byte for
            // byte, as the storyboard).
            XCTAssertGreaterThan(reusedBytes, 16 << 10)
            XCTAssertGreaterThanOrEqual(written, size + published)
            XCTAssertLessThanOrEqual(written, size + published + 4096, "written \(written): the \(reusedBytes) bytes taken over went again?")

            // The ladder plays from the bucket, its renditions taken over included.
            let hls = try XCTUnwrap(v["hls_url"] as? String)
            for name in taken where name.hasSuffix(".m3u8") {
                let variant = hls.replacingOccurrences(of: "master.m3u8", with: name)
                let r = try Run.run(["ffprobe", "-v", "error", "-show_entries", "format=duration", "-of", "csv=p=0", variant], check: false)
                XCTAssertEqual(r.status, 0, r.stderr)
                XCTAssertEqual(Double(r.out.trimmingCharacters(in: .whitespacesAndNewlines)) ?? 0, 8, accuracy: 0.5, "\(name): \(r.out)")
            }
            XCTAssertEqual(try HTTP.request("DELETE", url(s, "/videos/\(id)"), headers: ["Authorization": "Bearer \(key)"]).status, 204)
        }
        XCTAssertEqual(try weed.keys(prefix: prefix + "media/"), [])
    }
}
