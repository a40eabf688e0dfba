import XCTest
import Foundation
@testable import ClipFlowUpload

/// SigV4 against two oracles we did not write: the signatures AWS publishes in the S3 SigV4
/// documentation ("Examples of signature calculations", credentials AKIAIOSFODNN7EXAMPLE, bucket
/// examplebucket, 24 May 2013), and the curl CLI's own `--aws-sigv4` implementation, which signs
/// the same requests independently (given the same X-Amz-Date it must produce the same
/// Authorization). Servers that check are the third oracle: SeaweedFS in S3UploaderTests and
/// S3ObjectStoreTests, moto in S3Tests.
final class SigV4Tests: XCTestCase {
    let docsCredentials = AWSCredentials(accessKeyID: "AKIAIOSFODNN7EXAMPLE", secretAccessKey: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY")
    let may24 = Date(timeIntervalSince1970: 1_369_353_600)  // 2013-05-24T00:00:00Z

    func signature(_ r: HTTPRequest) -> String {
        let auth = r.headers.first { $0.name == "Authorization" }?.value ?? ""
        return String(auth.split(separator: "=").last ?? "")
    }

    func header(_ r: HTTPRequest, _ name: String) -> String? {
        r.headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }

    func testTimestampAndEncodingRules() {
        XCTAssertEqual(SigV4Signer.timestamp(may24), "20130524T000000Z")
        XCTAssertEqual(SigV4Signer.timestamp(Date(timeIntervalSince1970: 1_700_000_000.9)), "20231114T221320Z")
        XCTAssertEqual(SigV4Signer.uriEncode("a b/c~d$é+", keepSlash: true), "a%20b/c~d%24%C3%A9%2B")
        XCTAssertEqual(SigV4Signer.uriEncode("a/b", keepSlash: false), "a%2Fb")
        // Already encoded paths are not encoded twice; raw ones are encoded once.
        XCTAssertEqual(SigV4Signer.canonicalURI("/test%24file.text"), "/test%24file.text")
        XCTAssertEqual(SigV4Signer.canonicalURI("/test$file.text"), "/test%24file.text")
        XCTAssertEqual(SigV4Signer.canonicalURI("/b/a%20b/c d"), "/b/a%20b/c%20d")
        XCTAssertEqual(SigV4Signer.canonicalURI(""), "/")
        XCTAssertEqual(SigV4Signer.canonicalQuery("uploads"), "uploads=")
        XCTAssertEqual(
            SigV4Signer.canonicalQuery("uploadId=a%2Fb&partNumber=10&partNumber=2"),
            "partNumber=10&partNumber=2&uploadId=a%2Fb")
        XCTAssertEqual(SigV4Signer.canonicalQuery("prefix=J&max-keys=2"), "max-keys=2&prefix=J")
        XCTAssertEqual(SigV4Signer.canonicalHeaderValue("  a   b\t c  "), "a b c")
        XCTAssertEqual(SigV4Signer.hostHeader("http://127.0.0.1:9000/b/k"), "127.0.0.1:9000")
        XCTAssertEqual(SigV4Signer.hostHeader("https://examplebucket.s3.amazonaws.com:443/x"), "examplebucket.s3.amazonaws.com")
        XCTAssertEqual(SigV4Signer.splitURL("http://h:1/a%20b?x=1&y").path, "/a%20b")
        XCTAssertEqual(SigV4Signer.splitURL("http://h:1/a%20b?x=1&y").query, "x=1&y")
        XCTAssertEqual(SigV4Signer.splitURL("http://h").path, "/")
    }

    /// AWS docs, "GET Object": Range header, empty payload.
    func testAWSExampleGetObject() {
        var r = HTTPRequest(method: "GET", url: "https://examplebucket.s3.amazonaws.com/test.txt", headers: [("Range", "bytes=0-9")])
        SigV4Signer(credentials: docsCredentials, region: "us-east-1").sign(&r, payloadHash: SigV4Signer.emptyPayloadHash, date: may24)
        XCTAssertEqual(
            header(r, "Authorization"),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        )
        XCTAssertEqual(header(r, "x-amz-date"), "20130524T000000Z")
        XCTAssertEqual(header(r, "Host"), "examplebucket.s3.amazonaws.com")
        XCTAssertNil(header(r, "x-amz-security-token"))
    }

    /// AWS docs, "Authenticating Requests: Using Query Parameters": the presigned GET of test.txt,
    /// valid 86400 s, with the signature the docs print.
    func testAWSExamplePresignedGet() {
        let url = SigV4Signer(credentials: docsCredentials, region: "us-east-1")
            .presign(method: "GET", url: "https://examplebucket.s3.amazonaws.com/test.txt", expires: 86400, date: may24)
        XCTAssertEqual(
            url,
            "https://examplebucket.s3.amazonaws.com/test.txt?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404"
        )
        XCTAssertFalse(url.contains(docsCredentials.secretAccessKey))
    }

    /// AWS docs, "PUT Object": a `$` in the key, a Date and a storage-class header, signed payload.
    func testAWSExamplePutObject() throws {
        let body = Data("Welcome to Amazon S3.".utf8)
        let hash = try SigV4Signer.payloadHash(.bytes(body))
        XCTAssertEqual(hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072")
        var r = HTTPRequest(
            method: "PUT", url: "https://examplebucket.s3.amazonaws.com/test$file.text",
            headers: [("Date", "Fri, 24 May 2013 00:00:00 GMT"), ("x-amz-storage-class", "REDUCED_REDUNDANCY")],
            body: .bytes(body))
        SigV4Signer(credentials: docsCredentials, region: "us-east-1").sign(&r, payloadHash: hash, date: may24)
        XCTAssertTrue(header(r, "Authorization")!.contains("SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class,"))
        XCTAssertEqual(signature(r), "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd")
    }

    /// AWS docs, "GET Bucket Lifecycle" (a query parameter without a value) and "Get Bucket (List
    /// Objects)" (query parameters that must be sorted).
    func testAWSExampleBucketQueries() {
        let signer = SigV4Signer(credentials: docsCredentials, region: "us-east-1")
        var lifecycle = HTTPRequest(method: "GET", url: "https://examplebucket.s3.amazonaws.com/?lifecycle")
        signer.sign(&lifecycle, payloadHash: SigV4Signer.emptyPayloadHash, date: may24)
        XCTAssertEqual(signature(lifecycle), "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543")
        var list = HTTPRequest(method: "GET", url: "https://examplebucket.s3.amazonaws.com/?prefix=J&max-keys=2")
        signer.sign(&list, payloadHash: SigV4Signer.emptyPayloadHash, date: may24)
        XCTAssertEqual(signature(list), "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7")
    }

    func testStreamedFileRangeHashEqualsInMemoryHash() throws {
        let dir = try tempDir()
        let file = dir + "/f.bin"
        var bytes = [UInt8](repeating: 0, count: 3 << 20)
        for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: i &* 31 &+ i >> 9) }
        try Data(bytes).write(to: URL(fileURLWithPath: file))
        let offset = 1_234_567, length = 1_500_001
        XCTAssertEqual(
            try SigV4Signer.payloadHash(.file(path: file, offset: Int64(offset), length: Int64(length))),
            SigV4Signer.payloadHash(Data(bytes[offset..<(offset + length)])))
        XCTAssertEqual(try SigV4Signer.payloadHash(.empty), SigV4Signer.emptyPayloadHash)
    }

    /// Requests shaped like ours (multipart query strings, a session token, user metadata, a key
    /// with spaces, `+`, `$` and non-ASCII) signed by us and by `curl --aws-sigv4` with the same
    /// X-Amz-Date: the Authorization headers must be identical. Measured quirks of curl 7.88 that
    /// the cases avoid (AWS's own examples above show our behaviour is the documented one): it
    /// does not sort query parameters, and it signs a valueless `?uploads` as `uploads` rather
    /// than `uploads=`; so queries here are given sorted and with `=`.
    func testMatchesCurlAWSSigV4() throws {
        let creds = AWSCredentials(
            accessKeyID: "ASIATESTKEY0000EXAMPLE", secretAccessKey: "sEcReT/with+chars=0123456789abcdefghij",
            sessionToken: "FQoGZXIvYXdzEXAMPLE//session+token=")
        let signer = SigV4Signer(credentials: creds, region: "eu-central-1")
        let key = "videos/2025 clips/a+b$c/été.mp4"
        let base = "http://bucket-1.example.test:9000/" + SigV4Signer.uriEncode(key, keepSlash: true)
        let cases: [(String, String, [(name: String, value: String)], String)] = [
            ("PUT", base + "?partNumber=12&uploadId=2~abc%2Fdef-ghi_jkl.mno%2B%3D", [], "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b4b0b822cd15d6c15b0f00a08"),
            (
                "POST", base + "?uploads=",
                [
                    ("Content-Type", "video/mp4"), ("x-amz-meta-title", "My clip"),
                    ("x-amz-meta-description", S3Uploader.encodeMetadataValue("Über\nlines"))
                ], SigV4Signer.emptyPayloadHash
            ),
            ("GET", base + "?part-number-marker=1000&uploadId=xyz", [], SigV4Signer.emptyPayloadHash),
            ("PUT", base + "?partNumber=1&uploadId=xyz", [], SigV4Signer.unsignedPayload)
        ]
        for (method, url, headers, hash) in cases {
            var ours = HTTPRequest(method: method, url: url, headers: headers)
            signer.sign(&ours, payloadHash: hash, date: may24)
            let theirs = try curlAuthorization(
                method: method, url: url, creds: creds, region: "eu-central-1",
                headers: headers + [
                    ("X-Amz-Date", "20130524T000000Z"), ("x-amz-content-sha256", hash),
                    ("x-amz-security-token", creds.sessionToken!)
                ])
            XCTAssertEqual(header(ours, "Authorization"), theirs, "\(method) \(url)")
            XCTAssertTrue(header(ours, "Authorization")!.contains("x-amz-security-token"))
        }
    }

    // MARK: - curl oracle

    /// Runs `curl --aws-sigv4` against a one-shot local listener and returns the Authorization
    /// header curl sent.
    func curlAuthorization(
        method: String, url: String, creds: AWSCredentials, region: String,
        headers: [(name: String, value: String)]
    ) throws -> String {
        let dir = try tempDir()
        let portFile = dir + "/port", capture = dir + "/req"
        let listener = Process()
        listener.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        listener.arguments = [
            "python3", "-c",
            """
            import socket, sys, os
            s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(1)
            open(sys.argv[1] + '.tmp', 'w').write(str(s.getsockname()[1])); os.replace(sys.argv[1] + '.tmp', sys.argv[1])
            s.settimeout(20); c, _ = s.accept(); c.settimeout(5); data = b''
            while b'\\r\\n\\r\\n' not in data:
                d = c.recv(65536)
                if not d: break
                data += d
            open(sys.argv[2], 'wb').write(data)
            c.sendall(b'HTTP/1.1 200 OK\\r\\nContent-Length: 0\\r\\nConnection: close\\r\\n\\r\\n'); c.close()
            """, portFile, capture
        ]
        try listener.run()
        defer { if listener.isRunning { listener.terminate() } }
        var port = ""
        for _ in 0..<200 where port.isEmpty {
            port = (try? String(contentsOfFile: portFile, encoding: .utf8)) ?? ""
            if port.isEmpty { Thread.sleep(forTimeInterval: 0.025) }
        }
        let host = URLComponents(string: url)!.host!
        let urlPort = URLComponents(string: url)!.port ?? 80
        var args = [
            "curl", "-s", "-o", "/dev/null", "--globoff", "--aws-sigv4", "aws:amz:\(region):s3",
            "--user", "\(creds.accessKeyID):\(creds.secretAccessKey)",
            "--connect-to", "\(host):\(urlPort):127.0.0.1:\(port)", "-X", method
        ]
        for (n, v) in headers { args += ["-H", "\(n): \(v)"] }
        if method == "PUT" || method == "POST" { args += ["--data-binary", ""] }
        args.append(url)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = args
        try p.run()
        p.waitUntilExit()
        listener.waitUntilExit()
        let text = try String(contentsOfFile: capture, encoding: .utf8)
        guard let line = text.split(separator: "\r\n").first(where: { $0.lowercased().hasPrefix("authorization:") }) else {
            XCTFail("curl sent no Authorization: \(text)")
            return ""
        }
        return String(line.dropFirst("authorization:".count)).trimmingCharacters(in: .whitespaces)
    }

    func tempDir() throws -> String {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("sigv4-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        addTeardownBlock { try? FileManager.default.removeItem(atPath: dir) }
        return dir
    }
}
