import XCTest
import Foundation
import ClipFlowCore
import Synchronization
import ClipFlowTestSupport
@testable import ClipFlowUpload

/// `S3Client` against a real S3 server (SeaweedFS, signatures checked), judged by boto3
/// (Tests/Servers/s3_oracle.py) and sha256sum; faults come from the fault proxy in front of it.
final class S3ObjectStoreTests: XCTestCase {
    nonisolated(unsafe) static var s3: SeaweedFS?
    nonisolated(unsafe) static var proxy: FaultProxy?
    /// Why the servers did not start, reported by every test (a failure, not a skip).
    nonisolated(unsafe) static var startError: Error?

    override class func setUp() {
        super.setUp()
        do {
            let s = try SeaweedFS.start(buckets: ["clipflow", "other"])
            s3 = s
            proxy = try FaultProxy.start(upstream: s.endpoint, maxSeconds: 900)
        } catch {
            startError = error
        }
    }

    override class func tearDown() {
        proxy?.stop()
        s3?.stop()
        super.tearDown()
    }

    var s3: SeaweedFS { S3ObjectStoreTests.s3! }
    var proxy: FaultProxy { S3ObjectStoreTests.proxy! }
    var dir = ""

    override func setUpWithError() throws {
        if let e = S3ObjectStoreTests.startError { throw e }
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("s3store-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try proxy.clearRules()
        try proxy.resetStats()
    }

    override func tearDownWithError() throws {
        try? proxy.clearRules()
        try? FileManager.default.removeItem(atPath: dir)
    }

    // MARK: Helpers

    /// The server's endpoint and keys as the AWS tools take them; through the proxy if asked.
    func access(viaProxy: Bool = false, retry: RetryPolicy = .fast) throws -> S3Access {
        var env = s3.environment
        if viaProxy { env["AWS_ENDPOINT_URL_S3"] = proxy.url }
        var a = try S3Access.fromEnvironment(env)
        a.retry = retry
        a.network.connectTimeout = 5
        return a
    }

    func store(viaProxy: Bool = false, pageSize: Int = 1000, partSize: Int64? = nil, retry: RetryPolicy = .fast) throws -> S3Client {
        S3Client(access: try access(viaProxy: viaProxy, retry: retry), pageSize: pageSize, partSize: partSize, resumeStorePath: dir + "/resume.json")
    }

    /// `size` pseudo-random bytes (xorshift) in a file of the test folder, written 1 MiB at a time
    /// (so making a big file does not raise the process's memory).
    func makeFile(_ name: String, size: Int, seed: UInt64 = 1) throws -> URL {
        var state = seed &* 0x9E3779B97F4A7C15 | 1
        let url = URL(fileURLWithPath: dir).appendingPathComponent(name)
        guard FileManager.default.createFile(atPath: url.path, contents: nil) else { throw ServerError("cannot create \(url.path)") }
        let handle = try FileHandle(forWritingTo: url)
        defer { try? handle.close() }
        var left = size
        while left > 0 {
            var chunk = [UInt8](repeating: 0, count: min(left, 1 << 20))
            for i in chunk.indices {
                state ^= state << 13; state ^= state >> 7; state ^= state << 17
                chunk[i] = UInt8(truncatingIfNeeded: state)
            }
            try handle.write(contentsOf: chunk)
            left -= chunk.count
        }
        return url
    }

    /// A key of its own for each test.
    func key(_ name: String) -> String { "\(self.name.filter { $0.isLetter || $0.isNumber })/\(name)" }

    /// Names in the test folder other than `except`.
    func leftovers(except: Set<String> = []) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: dir).filter { !except.contains($0) && $0 != "resume.json" && !$0.hasPrefix("resume.json") }
    }

    /// The proxy's stats once `done` holds (it records a request when the upstream closed), or after 3 s.
    func stats(when done: (ProxyStats) -> Bool) throws -> ProxyStats {
        var s = try proxy.stats()
        for _ in 0..<60 where !done(s) {
            Thread.sleep(forTimeInterval: 0.05)
            s = try proxy.stats()
        }
        return s
    }

    func assertNoSecret(_ text: String, line: UInt = #line) {
        XCTAssertFalse(text.contains(s3.secretKey), "the secret key leaked: \(text)", line: line)
        XCTAssertFalse(text.contains("Signature="), "a signature leaked: \(text)", line: line)
    }

    // MARK: Locations

    func testS3LocationParsesBucketAndKey() {
        XCTAssertEqual(S3Location(url: "s3://media/in/day 1/"), S3Location(bucket: "media", key: "in/day 1/"))
        XCTAssertEqual(S3Location(url: "s3://media"), S3Location(bucket: "media", key: ""))
        XCTAssertEqual(S3Location(url: "s3://media/a/b.mp4")?.description, "s3://media/a/b.mp4")
        XCTAssertTrue(S3Location(url: "s3://media/in/")?.isPrefix ?? false)
        XCTAssertFalse(S3Location(url: "s3://media/in/a.mp4")?.isPrefix ?? true)
        XCTAssertNil(S3Location(url: "s3:///key"))
        XCTAssertNil(S3Location(url: "/local/path"))
        XCTAssertNil(S3Location(url: "S3://media/k"))
        XCTAssertTrue(S3Location.isS3URL("s3://x"))
        XCTAssertFalse(S3Location.isS3URL("https://x"))
    }

    // MARK: The environment

    /// Every variable the AWS tools read, in their order of precedence.
    func testFromEnvironmentReadsEveryVariable() throws {
        let keys = ["AWS_ACCESS_KEY_ID": "AKIAEXAMPLEKEY123456", "AWS_SECRET_ACCESS_KEY": "envSecret/Value+123"]
        var a = try S3Access.fromEnvironment(
            keys.merging([
                "AWS_ENDPOINT_URL_S3": "http://127.0.0.1:9000", "AWS_ENDPOINT_URL": "http://other:1", "AWS_REGION": "eu-central-1",
                "AWS_DEFAULT_REGION": "us-west-2", "AWS_SESSION_TOKEN": "envToken"
            ]) { a, _ in a })
        XCTAssertEqual(a.endpoint, "http://127.0.0.1:9000")
        XCTAssertEqual(a.region, "eu-central-1")
        XCTAssertEqual(a.addressingStyle, .path)
        XCTAssertEqual(a.credentials.accessKeyID, "AKIAEXAMPLEKEY123456")
        XCTAssertEqual(a.credentials.secretAccessKey, "envSecret/Value+123")
        XCTAssertEqual(a.credentials.sessionToken, "envToken")
        XCTAssertNil(a.provider)

        a = try S3Access.fromEnvironment(keys.merging(["AWS_ENDPOINT_URL": "https://minio.example:9000", "AWS_DEFAULT_REGION": "us-west-2"]) { a, _ in a })
        XCTAssertEqual(a.endpoint, "https://minio.example:9000")
        XCTAssertEqual(a.region, "us-west-2")
        XCTAssertEqual(a.addressingStyle, .path)
        XCTAssertNil(a.credentials.sessionToken)

        a = try S3Access.fromEnvironment(keys.merging(["AWS_REGION": "ap-southeast-2"]) { a, _ in a })
        XCTAssertEqual(a.endpoint, "https://s3.ap-southeast-2.amazonaws.com")
        XCTAssertEqual(a.addressingStyle, .virtual)

        a = try S3Access.fromEnvironment(keys)
        XCTAssertEqual(a.endpoint, "https://s3.us-east-1.amazonaws.com")
        XCTAssertEqual(a.region, "us-east-1")
        XCTAssertEqual(a.options(bucket: "media").objectURL(key: "a b.mp4"), "https://media.s3.us-east-1.amazonaws.com/a%20b.mp4")

        XCTAssertThrowsError(try S3Access.fromEnvironment(keys.merging(["AWS_ENDPOINT_URL_S3": "minio:9000"]) { a, _ in a })) { e in
            XCTAssertEqual((e as? UploadError)?.kind, .badInput)
            XCTAssertTrue("\(e)".contains("AWS_ENDPOINT_URL_S3"), "\(e)")
        }
    }

    /// Missing keys: the message names the variables to set and holds no secret that was set.
    func testMissingKeysNameTheVariablesWithoutASecret() {
        let secret = "onlyTheSecret/\(UUID().uuidString)"
        for (env, missing) in [
            ([:], ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"]), (["AWS_SECRET_ACCESS_KEY": secret], ["AWS_ACCESS_KEY_ID"]),
            (["AWS_ACCESS_KEY_ID": "AKIAONLYTHEKEYID1234", "AWS_SESSION_TOKEN": secret + "token"], ["AWS_SECRET_ACCESS_KEY"])
        ] as [([String: String], [String])] {
            XCTAssertThrowsError(try S3Access.fromEnvironment(env)) { e in
                let u = e as? UploadError
                XCTAssertEqual(u?.kind, .credentials)
                XCTAssertNotEqual(u?.asClipFlowError.kind, .badInput, "refused credentials are not bad input")
                let text = u?.message ?? ""
                XCTAssertTrue(text.hasPrefix("S3: no credentials: \(missing.joined(separator: " and "))"), text)
                for v in ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"] { XCTAssertTrue(text.contains(v), "\(v) in \(text)") }
                XCTAssertFalse(text.contains(secret), text)
            }
        }
    }

    /// `--credentials-command`: the upload command's provider (CommandCredentialProvider through
    /// `sh -c`) gives the first keys and stays to renew them; the keys work on the server.
    func testCredentialsCommandGivesTheKeysAndStaysAsTheProvider() throws {
        let json = URL(fileURLWithPath: dir + "/creds.json")
        try JSONSerialization.data(withJSONObject: ["AccessKeyId": s3.accessKey, "SecretAccessKey": s3.secretKey]).write(to: json)
        var env = s3.environment
        env["AWS_ACCESS_KEY_ID"] = nil
        env["AWS_SECRET_ACCESS_KEY"] = nil
        let a = try S3Access.fromEnvironment(env, credentialsCommand: "cat '\(json.path)'")
        XCTAssertEqual(a.credentials.accessKeyID, s3.accessKey)
        XCTAssertEqual((a.provider as? CommandCredentialProvider)?.command, ["/bin/sh", "-c", "cat '\(json.path)'"])
        XCTAssertNoThrow(try S3Client(access: a).list(bucket: s3.bucket, prefix: "nothing-here/"))

        XCTAssertThrowsError(try S3Access.fromEnvironment(env, credentialsCommand: "exit 3")) { e in
            XCTAssertEqual((e as? UploadError)?.kind, .credentials)
        }
    }

    /// The server refuses the keys as expired (400 ExpiredToken, once): the credentials command
    /// runs again and the same request goes through with what it printed.
    func testExpiredKeysAreRenewedThroughTheCredentialsCommand() throws {
        let json = dir + "/creds.json", counter = dir + "/count"
        try JSONSerialization.data(withJSONObject: ["AccessKeyId": s3.accessKey, "SecretAccessKey": s3.secretKey]).write(to: URL(fileURLWithPath: json))
        var env = s3.environment
        env["AWS_ENDPOINT_URL_S3"] = proxy.url
        var a = try S3Access.fromEnvironment(env, credentialsCommand: "echo run >> '\(counter)'; cat '\(json)'")
        a.retry = .fast
        let k = key("renewed.mp4")
        try s3.put(file: try makeFile("renewed.mp4", size: 321), key: k)
        try proxy.setRules([
            [
                "method": "HEAD", "action": "status", "status": 400, "times": 1, "headers": ["Content-Type": "application/xml"],
                "body": "<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>"
            ]
        ])
        let info = try S3Client(access: a).head(bucket: s3.bucket, key: k)
        XCTAssertEqual(info?.size, 321)
        XCTAssertEqual(try String(contentsOfFile: counter, encoding: .utf8), "run\nrun\n", "once at the start, once on the refusal")
        XCTAssertEqual(try stats { $0.requests.count >= 2 }.requests.map(\.outcome), ["status:400", "200"])
    }

    /// A wrong secret: refused by the server's signature check, reported as a credentials problem
    /// (retryable for a batch, not bad input), with neither secret nor signature in the message.
    func testWrongSecretIsACredentialsErrorWithoutSecrets() throws {
        var env = s3.environment
        let wrong = "wrongSecret/\(UUID().uuidString)"
        env["AWS_SECRET_ACCESS_KEY"] = wrong
        let store = S3Client(access: try S3Access.fromEnvironment(env))
        XCTAssertThrowsError(try store.list(bucket: s3.bucket, prefix: "")) { e in
            let u = e as? UploadError
            XCTAssertEqual(u?.kind, .credentials, "\(e)")
            XCTAssertNotEqual(u?.asClipFlowError.kind, .badInput)
            XCTAssertTrue(u?.message.contains("SignatureDoesNotMatch") ?? false, u?.message ?? "")
            XCTAssertFalse(u?.message.contains(wrong) ?? true)
            assertNoSecret(u?.message ?? "")
        }
    }

    /// Keys with `.` and `..` segments are legal S3 keys: the path goes out exactly as signed
    /// (libcurl would squash the segments and the server would answer SignatureDoesNotMatch, blamed
    /// on good credentials). SeaweedFS refuses such keys: that is bad input naming the key, never a
    /// credentials problem or a retryable one.
    func testKeysWithDotSegmentsGoOutAsSignedAndARefusalNamesTheKey() throws {
        let file = try makeFile("dots.bin", size: 1000)
        let store = try store(viaProxy: true)
        for (name, segment) in [("out/../x.mp4", ".."), ("./y.mp4", "."), ("a/./b/../c.mp4", ".")] {
            let k = key(name)
            try proxy.resetStats()
            XCTAssertThrowsError(try store.upload(file: file.path, bucket: s3.bucket, key: k)) { e in
                let u = e as? UploadError
                XCTAssertEqual(u?.kind, .badInput, "\(k): \(e)")
                XCTAssertEqual(u?.retryable, false, "\(k)")
                let message = u?.message ?? ""
                XCTAssertTrue(message.contains("'\(k)'") && message.contains("'\(segment)' segment"), message)
                XCTAssertFalse(message.contains("SignatureDoesNotMatch") || message.contains("credentials"), message)
                assertNoSecret(message)
            }
            let sent = try stats { !$0.requests.isEmpty }.requests
            XCTAssertTrue(sent.contains { $0.target.contains("/\(s3.bucket)/\(k)") }, "\(k) sent as written: \(sent.map(\.target))")
            XCTAssertFalse(sent.contains { $0.outcome == "403" }, "no signature refusal: \(sent)")
        }
        XCTAssertEqual(S3Location.dotSegment(in: "a/b.c/..d/e."), nil)
        XCTAssertEqual(S3Location.dotSegment(in: "a//../b"), "..")
    }

    // MARK: Listing

    /// Small pages (2 keys) prove the continuation: every key under the prefix, in key order, with
    /// sizes and ETags as boto3 sees them; with "/" the sub-folder rolls up into a prefix.
    func testListReadsEveryPageAndRollsUpPrefixes() throws {
        let root = key("")
        let names = ["a/1.mp4", "a/2.mp4", "a/b/3.mp4", "a/b/4.mp4", "a/ü é+&.mp4", "a0.mp4", "b/5.mp4"]
        for (i, n) in names.enumerated() { try s3.put(file: try makeFile("f\(i)", size: 100 + i), key: root + n) }
        let store = try store(viaProxy: true, pageSize: 2)
        let listed = try store.list(bucket: s3.bucket, prefix: root + "a/")
        let expected = try s3.keys(prefix: root + "a/")
        XCTAssertEqual(expected.count, 5)
        XCTAssertEqual(listed.objects.map(\.key), expected)
        XCTAssertEqual(listed.prefixes, [])
        for o in listed.objects {
            let head = try s3.head(key: o.key)
            XCTAssertEqual(o.size, Int64(head["size"] as? Int ?? -1), o.key)
            XCTAssertEqual(o.etag, head["etag"] as? String, o.key)
        }
        let pages = try stats { $0.count("GET", pathContains: "list-type=2") >= 3 }.count("GET", pathContains: "list-type=2")
        XCTAssertEqual(pages, 3, "5 keys in pages of 2")

        let folder = try store.list(bucket: s3.bucket, prefix: root + "a/", delimiter: "/")
        XCTAssertEqual(folder.objects.map(\.key), [root + "a/1.mp4", root + "a/2.mp4", root + "a/ü é+&.mp4"])
        XCTAssertEqual(folder.prefixes, [root + "a/b/"])
        XCTAssertEqual(try store.list(bucket: "other", prefix: root).objects.count, 0)
        XCTAssertThrowsError(try store.list(bucket: "no-such-bucket", prefix: "")) { e in
            XCTAssertEqual((e as? UploadError)?.message, "s3://no-such-bucket/: no such bucket")
            XCTAssertEqual((e as? UploadError)?.asClipFlowError.kind, .badInput)
        }
    }

    // MARK: Head

    /// Metadata boto3 put (an RFC 2047 word, as S3 returns non-ASCII) reads back decoded; our own
    /// upload's non-ASCII metadata reads back the same through boto3 and through `head`. A missing
    /// object is nil.
    func testHeadReturnsSizeETagAndDecodedMetadata() throws {
        let file = try makeFile("h.mp4", size: 1234)
        let k = key("h.mp4")
        let encoded = "=?UTF-8?B?\(Data("Über den Fluß 🌊".utf8).base64EncodedString())?="
        try s3.put(file: file, key: k, metadata: ["title": encoded, "plain": "just text"])
        let store = try store()
        let info = try XCTUnwrap(try store.head(bucket: s3.bucket, key: k))
        XCTAssertEqual(info.key, k)
        XCTAssertEqual(info.size, 1234)
        XCTAssertEqual(info.etag, try s3.head(key: k)["etag"] as? String)
        XCTAssertEqual(info.metadata, ["title": "Über den Fluß 🌊", "plain": "just text"])
        XCTAssertNil(try store.head(bucket: s3.bucket, key: k + ".missing"))

        let k2 = key("mine.mp4")
        try store.upload(file: file.path, bucket: s3.bucket, key: k2, metadata: ["Title": "Café ☕", "row": "7"])
        let oracle = try XCTUnwrap(try s3.head(key: k2)["metadata"] as? [String: String])
        XCTAssertEqual(oracle["row"], "7")
        XCTAssertEqual(oracle["title"].map(S3Uploader.decodeMetadataValue), "Café ☕")
        XCTAssertEqual(try store.head(bucket: s3.bucket, key: k2)?.metadata, ["title": "Café ☕", "row": "7"])
    }

    // MARK: Download

    /// 20 MiB put by boto3 streams to the file: the same sha256 as boto3's own download, nothing
    /// left but the file, and the process's peak memory (reset just before) does not grow by the
    /// object's size.
    func testDownloadStreams20MiBToTheFile() throws {
        let source = try makeFile("source.bin", size: 20 << 20, seed: 3)
        let k = key("big.bin")
        try s3.put(file: source, key: k)
        try FileManager.default.removeItem(at: source)
        let out = dir + "/big.bin"
        let store = try store()
        let before = try Memory.startPeak()
        let info = try store.download(bucket: s3.bucket, key: k, to: out)
        let grown = try Memory.peak() - before
        XCTAssertEqual(info.size, 20 << 20)
        XCTAssertEqual(info.etag, try s3.head(key: k)["etag"] as? String)
        XCTAssertEqual(try sha256(ofFile: out), try s3.objectSHA256(key: k))
        XCTAssertEqual(try leftovers(), ["big.bin"])
        XCTAssertLessThan(grown, 8 << 20, "peak memory grew by \(grown) bytes for a 20 MiB download")
    }

    /// The proxy cuts the answer after 3 MiB: the download continues with a Range request (the
    /// server answers 206) from the bytes already on disk, and the file is whole.
    func testDownloadCutPartWayContinuesWithARange() throws {
        let source = try makeFile("cut-source.bin", size: 9 << 20, seed: 5)
        let k = key("cut.bin")
        try s3.put(file: source, key: k)
        try proxy.setRules([["method": "GET", "path_contains": "cut.bin", "action": "cut_response", "after_bytes": 3 << 20, "times": 1]])
        let out = dir + "/cut.bin"
        _ = try store(viaProxy: true).download(bucket: s3.bucket, key: k, to: out)
        XCTAssertEqual(try sha256(ofFile: out), try sha256(ofFile: source))
        let stats = try stats { $0.count("GET", pathContains: "cut.bin") >= 2 }
        XCTAssertEqual(stats.requests.filter { $0.method == "GET" && $0.target.contains("cut.bin") }.map(\.outcome), ["cut_response", "206"])
        XCTAssertEqual(try leftovers(except: ["cut-source.bin"]), ["cut.bin"])
    }

    /// An answer whose bytes do not match the object's plain-MD5 ETag (the proxy answers once in
    /// the server's place with other bytes of the same length) is fetched again; the file is the
    /// object.
    func testDownloadWhoseMD5DoesNotMatchTheETagIsFetchedAgain() throws {
        let source = try makeFile("md5-source.bin", size: 1000, seed: 11)
        let k = key("md5.bin")
        try s3.put(file: source, key: k)
        let etag = try XCTUnwrap(try s3.head(key: k)["etag"] as? String)
        try proxy.setRules([
            [
                "method": "GET", "path_contains": "md5.bin", "action": "status", "status": 200, "times": 1,
                "body": String(repeating: "A", count: 1000), "headers": ["Content-Type": "application/octet-stream", "ETag": etag]
            ]
        ])
        let out = dir + "/md5.bin"
        let info = try store(viaProxy: true).download(bucket: s3.bucket, key: k, to: out)
        XCTAssertEqual(info.etag, etag)
        XCTAssertEqual(try sha256(ofFile: out), try sha256(ofFile: source))
        let stats = try stats { $0.count("GET", pathContains: "md5.bin") >= 2 }
        XCTAssertEqual(stats.requests.filter { $0.method == "GET" && $0.target.contains("md5.bin") }.map(\.outcome), ["status:200", "200"])
    }

    /// A multipart object (ETag not an MD5) downloads by size; a zero-byte object makes an empty file.
    func testDownloadOfAMultipartAndAnEmptyObject() throws {
        let source = try makeFile("mp.bin", size: (11 << 20) + 17, seed: 8)
        let k = key("mp.bin")
        let store = try store(partSize: 5 << 20)
        try store.upload(file: source.path, bucket: s3.bucket, key: k)
        let info = try store.download(bucket: s3.bucket, key: k, to: dir + "/mp-copy.bin")
        XCTAssertTrue(info.etag.hasSuffix("-3\""), info.etag)
        XCTAssertEqual(try sha256(ofFile: dir + "/mp-copy.bin"), try sha256(ofFile: source))

        let empty = try makeFile("empty.mp4", size: 0)
        try s3.put(file: empty, key: key("empty.mp4"))
        XCTAssertEqual(try store.download(bucket: s3.bucket, key: key("empty.mp4"), to: dir + "/empty-copy.mp4").size, 0)
        XCTAssertEqual(try Data(contentsOf: URL(fileURLWithPath: dir + "/empty-copy.mp4")).count, 0)
    }

    /// A missing object or bucket is bad input (a batch does not retry it) with the exact message,
    /// and nothing is left at the target.
    func testMissingObjectOrBucketIsBadInput() throws {
        let store = try store()
        let out = dir + "/never.mp4"
        XCTAssertThrowsError(try store.download(bucket: s3.bucket, key: "nope/missing.mp4", to: out)) { e in
            let u = e as? UploadError
            XCTAssertEqual(u?.kind, .badInput)
            XCTAssertEqual(u?.message, "s3://clipflow/nope/missing.mp4: no such object")
            XCTAssertEqual(u?.asClipFlowError.kind, .badInput)
        }
        XCTAssertThrowsError(try store.download(bucket: "no-such-bucket", key: "a.mp4", to: out)) { e in
            XCTAssertEqual((e as? UploadError)?.message, "s3://no-such-bucket/a.mp4: no such bucket")
            XCTAssertEqual((e as? UploadError)?.asClipFlowError.kind, .badInput)
        }
        XCTAssertEqual(try leftovers(), [])
    }

    /// 5xx that never ends and a server that is not there are retried per the policy and then
    /// fail as retryable kinds, never as bad input.
    func testServerErrorsAndNetworkFailuresAreNotBadInput() throws {
        let file = try makeFile("e.mp4", size: 100)
        let k = key("e.mp4")
        try s3.put(file: file, key: k)
        try proxy.setRules([["method": "GET", "action": "status", "status": 503, "times": -1]])
        let policy = RetryPolicy(baseDelay: 0.01, maxDelay: 0.02, maxAttemptsWithoutProgress: 2)
        XCTAssertThrowsError(try store(viaProxy: true, retry: policy).download(bucket: s3.bucket, key: k, to: dir + "/x")) { e in
            let u = e as? UploadError
            XCTAssertEqual(u?.kind, .http(503), "\(e)")
            XCTAssertNotEqual(u?.asClipFlowError.kind, .badInput)
        }
        XCTAssertEqual(try stats { $0.count(outcome: "status:503") >= 3 }.count(outcome: "status:503"), 3, "the first try and 2 retries")

        var a = try access(retry: policy)
        a.endpoint = "http://127.0.0.1:\(ServerProcess.freePort())"
        XCTAssertThrowsError(try S3Client(access: a).head(bucket: s3.bucket, key: k)) { e in
            let u = e as? UploadError
            XCTAssertEqual(u?.kind, .network, "\(e)")
            XCTAssertNotEqual(u?.asClipFlowError.kind, .badInput)
        }
    }

    /// `shouldAbort` stops a download at once: cancelled, and nothing at the target.
    func testAbortedDownloadLeavesNothing() throws {
        let file = try makeFile("slow.bin", size: 2 << 20)
        let k = key("slow.bin")
        try s3.put(file: file, key: k)
        try proxy.setRules([["method": "GET", "action": "delay", "seconds": 5, "times": -1]])
        let started = Date()
        XCTAssertThrowsError(
            try store(viaProxy: true).download(bucket: s3.bucket, key: k, to: dir + "/slow-copy.bin") { Date().timeIntervalSince(started) > 0.5 }
        ) { e in
            XCTAssertEqual((e as? UploadError)?.kind, .cancelled, "\(e)")
        }
        XCTAssertLessThan(Date().timeIntervalSince(started), 3)
        XCTAssertEqual(try leftovers(except: ["slow.bin"]), [])
    }

    /// One store used by several threads at once (as `--jobs N` does): every download is whole.
    func testCallsRunAtOnceFromSeveralThreads() throws {
        let sources = try (0..<4).map { try makeFile("par\($0).bin", size: 300_000 + $0, seed: UInt64(20 + $0)) }
        for (i, f) in sources.enumerated() { try s3.put(file: f, key: key("par\(i).bin")) }
        let store = try store()
        let failures = Mutex<[String]>([])
        let bucket = s3.bucket, keys = (0..<4).map { key("par\($0).bin") }, dir = self.dir
        DispatchQueue.concurrentPerform(iterations: 8) { n in
            do {
                _ = try store.download(bucket: bucket, key: keys[n % 4], to: dir + "/copy\(n).bin")
                _ = try store.list(bucket: bucket, prefix: keys[n % 4])
            } catch {
                failures.withLock { $0.append("\(error)") }
            }
        }
        XCTAssertEqual(failures.withLock { $0 }, [])
        for n in 0..<8 { XCTAssertEqual(try sha256(ofFile: dir + "/copy\(n).bin"), try sha256(ofFile: sources[n % 4]), "copy \(n)") }
    }

    // MARK: Upload

    /// 12 MiB in 5 MiB parts: three UploadPart requests, the object boto3 reads is the file, its
    /// ETag is a 3-part multipart ETag, the metadata arrives, and no multipart upload is left.
    func testUploadIsMultipartWithSeveralParts() throws {
        let file = try makeFile("clip.mp4", size: 12 << 20, seed: 4)
        let k = key("clip.mp4")
        try store(viaProxy: true, partSize: 5 << 20).upload(file: file.path, bucket: s3.bucket, key: k, metadata: ["title": "Morning", "row": "3"])
        let stats = try stats { $0.count("POST", pathContains: "uploadId=") >= 1 }
        XCTAssertEqual(stats.requests.filter { $0.method == "PUT" && $0.target.contains("partNumber=") }.count, 3)
        XCTAssertEqual(try s3.objectSHA256(key: k), try sha256(ofFile: file))
        let head = try s3.head(key: k)
        XCTAssertTrue((head["etag"] as? String)?.hasSuffix("-3\"") ?? false, "\(head)")
        XCTAssertEqual(head["content_type"] as? String, "video/mp4")
        XCTAssertEqual(head["metadata"] as? [String: String], ["title": "Morning", "row": "3"])
        XCTAssertEqual(try store(partSize: 5 << 20).pendingUploads(bucket: s3.bucket, prefix: k).count, 0)
    }

    /// Aborted after the first part: the object does not exist, the multipart upload is pending
    /// (seen by boto3 and by `pendingUploads`); the next upload of the same file continues it
    /// without sending part 1 again, and then nothing is pending.
    func testAbortedUploadIsPendingAndTheNextUploadContinuesIt() throws {
        let file = try makeFile("resume.mp4", size: 12 << 20, seed: 6)
        let k = key("resume.mp4")
        let store = try store(viaProxy: true, partSize: 5 << 20)
        try proxy.setRules([["method": "PUT", "query_contains": "partNumber=2&", "action": "delay", "seconds": 4, "times": 1]])
        let proxy = self.proxy
        XCTAssertThrowsError(
            try store.upload(file: file.path, bucket: s3.bucket, key: k) {
                ((try? proxy.stats())?.count("PUT", pathContains: "partNumber=1&") ?? 0) > 0
            }
        ) { e in
            XCTAssertEqual((e as? UploadError)?.kind, .cancelled, "\(e)")
        }
        XCTAssertFalse(try s3.keys(prefix: k).contains(k), "an interrupted upload must not make an object")
        XCTAssertNil(try store.head(bucket: s3.bucket, key: k))
        let pending = try store.pendingUploads(bucket: s3.bucket, prefix: key(""))
        XCTAssertEqual(pending.map(\.key), [k])
        let uploadID = try XCTUnwrap(pending.first?.uploadID)
        XCTAssertTrue(try s3.pendingMultipartUploadIDs().contains(uploadID), "boto3 sees the same pending upload")

        try proxy.clearRules()
        try store.upload(file: file.path, bucket: s3.bucket, key: k)
        XCTAssertEqual(try s3.objectSHA256(key: k), try sha256(ofFile: file))
        XCTAssertFalse(try s3.pendingMultipartUploadIDs().contains(uploadID))
        XCTAssertEqual(try store.pendingUploads(bucket: s3.bucket, prefix: key("")).count, 0)
        let stats = try stats { $0.count("POST", pathContains: "uploadId=") >= 1 }
        XCTAssertEqual(stats.count("PUT", pathContains: "partNumber=1&"), 1, "part 1 is not sent again")
        XCTAssertEqual(stats.count("POST", pathContains: "?uploads"), 1, "one multipart upload in all")
    }

    /// A missing file to upload is bad input; so is a missing bucket (SeaweedFS 4.48 makes a bucket
    /// on the first write to it, so the proxy gives S3's answer: 404 NoSuchBucket).
    func testUploadOfAMissingFileOrToAMissingBucketIsBadInput() throws {
        XCTAssertThrowsError(try store().upload(file: dir + "/absent.mp4", bucket: s3.bucket, key: key("absent.mp4"))) { e in
            XCTAssertEqual((e as? UploadError)?.kind, .badInput, "\(e)")
        }
        let noSuchBucket = "<?xml version=\"1.0\"?><Error><Code>NoSuchBucket</Code><Message>The specified bucket does not exist</Message></Error>"
        try proxy.setRules([
            [
                "method": "POST", "query_contains": "uploads", "action": "status", "status": 404, "body": noSuchBucket,
                "headers": ["Content-Type": "application/xml"]
            ]
        ])
        let file = try makeFile("x.mp4", size: 10)
        XCTAssertThrowsError(try store(viaProxy: true).upload(file: file.path, bucket: "no-such-bucket", key: "x.mp4")) { e in
            XCTAssertEqual((e as? UploadError)?.kind, .badInput, "\(e)")
            XCTAssertEqual((e as? UploadError)?.asClipFlowError.kind, .badInput)
        }
    }

    // MARK: Delete

    func testDeleteRemovesTheObject() throws {
        let k = key("gone.mp4")
        try s3.put(file: try makeFile("gone.mp4", size: 10), key: k)
        let store = try store()
        try store.delete(bucket: s3.bucket, key: k)
        XCTAssertEqual(try s3.keys(prefix: k), [])
        XCTAssertNoThrow(try store.delete(bucket: s3.bucket, key: k), "deleting a missing key succeeds, as S3 answers")
    }

    // MARK: Files put, objects copied, bytes counted

    /// 20 MiB put from a file in one PutObject, streamed (the process's peak memory does not grow
    /// by the file's size), with its type; then copied by the server: no body sent, the copy the
    /// same bytes and type. The store counts the bytes of the bodies it sent and received.
    func testPutOfAFileStreamsItAndACopyIsTheServers() throws {
        let file = try makeFile("put.bin", size: 20 << 20, seed: 9)
        let k = key("put.m4s"), c = key("copy.m4s")
        let store = try store(viaProxy: true)
        let before = try Memory.startPeak()
        try store.put(file: file.path, bucket: s3.bucket, key: k, contentType: "video/iso.segment")
        let grown = try Memory.peak() - before
        XCTAssertLessThan(grown, 8 << 20, "peak memory grew by \(grown) bytes for a 20 MiB put")
        XCTAssertEqual(store.traffic.written, 20 << 20)
        XCTAssertEqual(try s3.objectSHA256(key: k), try sha256(ofFile: file))
        XCTAssertEqual(try s3.head(key: k)["content_type"] as? String, "video/iso.segment")
        let sent = try stats { $0.count("PUT", pathContains: "put.m4s") >= 1 }
        XCTAssertEqual(sent.count("PUT", pathContains: "put.m4s"), 1, "one PutObject")

        try store.copy(bucket: s3.bucket, from: k, to: c)
        XCTAssertEqual(store.traffic.written, 20 << 20, "a copy sends no body")
        XCTAssertEqual(try s3.objectSHA256(key: c), try sha256(ofFile: file))
        XCTAssertEqual(try s3.head(key: c)["content_type"] as? String, "video/iso.segment")
        let copied = try stats { $0.count("PUT", pathContains: "copy.m4s") >= 1 }
        XCTAssertEqual(copied.count("PUT", pathContains: "copy.m4s"), 1)

        let read = store.traffic.read
        _ = try store.download(bucket: s3.bucket, key: c, to: dir + "/back.bin")
        XCTAssertEqual(store.traffic.read - read, 20 << 20, "a download counts the object's bytes")
        do {
            try store.copy(bucket: s3.bucket, from: key("missing"), to: key("nothing"))
            XCTFail("a copy of a missing object succeeded")
        } catch let e as UploadError {
            XCTAssertEqual(e.kind, .badInput, e.message)
            XCTAssertTrue(e.message.contains(key("missing")), e.message)
            assertNoSecret(e.message)
        }
        XCTAssertEqual(try s3.keys(prefix: key("nothing")), [])
    }
}

/// This process's memory from /proc/self/status: the resident set now and its peak since
/// `startPeak` (writing 5 to /proc/self/clear_refs resets the peak, VmHWM).
enum Memory {
    /// Resets the peak and returns the resident bytes now.
    static func startPeak() throws -> Int {
        try "5".write(toFile: "/proc/self/clear_refs", atomically: false, encoding: .utf8)
        return try field("VmRSS")
    }

    /// The peak resident bytes since `startPeak`.
    static func peak() throws -> Int { try field("VmHWM") }

    static func field(_ name: String) throws -> Int {
        let status = try String(contentsOfFile: "/proc/self/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix(name + ":") }),
            let kib = Int(line.dropFirst(name.count + 1).trimmingCharacters(in: .whitespaces).split(separator: " ").first ?? "")
        else { throw ServerError("/proc/self/status has no \(name)") }
        return kib * 1024
    }
}
