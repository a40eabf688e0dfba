import XCTest
import Foundation
import ClipFlowTestSupport
@testable import ClipFlowUpload

/// Pure pieces of the S3 uploader: part sizes, metadata encoding, URLs, S3 XML.
final class S3TestsWithoutServer: XCTestCase {
    func testAutomaticPartSizeRespectsMinimumPartCountAndMiB() throws {
        let mib: Int64 = 1 << 20
        let aws = S3Options(endpoint: "https://s3.amazonaws.com", region: "us-east-1", bucket: "b")
        XCTAssertEqual(try aws.partSize(forFileSize: 1), 5 * mib)
        XCTAssertEqual(try aws.partSize(forFileSize: 80 * mib), 5 * mib)  // a sixteenth is 5 MiB
        XCTAssertEqual(try aws.partSize(forFileSize: 512_000_000), 31 * mib)  // a sixteenth, up to whole MiB: 17 parts
        XCTAssertEqual(try aws.partSize(forFileSize: 40_000 * mib), 64 * mib)  // capped at the 64 MiB target: 625 parts
        XCTAssertEqual(try aws.partSize(forFileSize: 640_000 * mib), 64 * mib)  // exactly 10,000 parts of 64 MiB
        XCTAssertEqual(try aws.partSize(forFileSize: 700_000 * mib), 70 * mib)  // 10,000 parts: grows past the target
        let big = try aws.partSize(forFileSize: 1 << 40)  // 1 TiB
        XCTAssertEqual(big % mib, 0)
        XCTAssertLessThanOrEqual((Int64(1) << 40 + big - 1) / big, 10_000)
        var oss = aws
        oss.minimumPartSize = S3Options.ossMinimumPartSize
        XCTAssertEqual(try oss.partSize(forFileSize: 3 * mib), mib)
        var explicit = aws
        explicit.minimumPartSize = 10_240
        explicit.partSize = 10_240
        XCTAssertEqual(try explicit.partSize(forFileSize: 12_288_000), 10_240)  // 1200 parts, as given
        XCTAssertEqual(try explicit.partSize(forFileSize: 200_000_000), 20_000)  // raised to fit 10,000
        explicit.partSize = 1000
        XCTAssertThrowsError(try explicit.partSize(forFileSize: 1)) { XCTAssertEqual(($0 as? UploadError)?.code, "bad-input") }
    }

    func testKeysURLsAndContentTypes() {
        var o = S3Options(endpoint: "http://127.0.0.1:9000/", region: "r", bucket: "bk", keyPrefix: "videos/2025 ")
        XCTAssertEqual(o.objectKey(for: "/tmp/a b.mp4"), "videos/2025 a b.mp4")
        XCTAssertEqual(o.objectURL(key: "videos/2025 a+b.mp4"), "http://127.0.0.1:9000/bk/videos/2025%20a%2Bb.mp4")
        XCTAssertEqual(o.contentType(for: "x.MOV"), "video/quicktime")
        o.addressingStyle = .virtual
        o.endpoint = "https://oss-cn-hangzhou.aliyuncs.com"
        XCTAssertEqual(o.objectURL(key: "k.mp4"), "https://bk.oss-cn-hangzhou.aliyuncs.com/k.mp4")
        o.key = "fixed/name.mp4"
        XCTAssertEqual(o.objectKey(for: "/tmp/a.mp4"), "fixed/name.mp4")
    }

    func testMetadataHeadersEncodeNamesAndNonASCIIValues() throws {
        let h = try S3Uploader.metadataHeaders([
            "title": "Plain title", "cover URL": "https://x/c.jpg",
            "description": "Ünïcode\nline two", "Tags": "a,b", "empty": " "
        ])
        let d = Dictionary(uniqueKeysWithValues: h.map { ($0.name, $0.value) })
        XCTAssertEqual(d["x-amz-meta-title"], "Plain title")
        XCTAssertEqual(d["x-amz-meta-cover-url"], "https://x/c.jpg")
        XCTAssertEqual(d["x-amz-meta-tags"], "a,b")
        XCTAssertNil(d["x-amz-meta-empty"])
        XCTAssertEqual(d["x-amz-meta-description"], "=?UTF-8?B?\(Data("Ünïcode\nline two".utf8).base64EncodedString())?=")
        XCTAssertEqual(S3Uploader.decodeMetadataValue(d["x-amz-meta-description"]!), "Ünïcode\nline two")
        XCTAssertEqual(S3Uploader.encodeMetadataValue("=?looks encoded"), "=?UTF-8?B?PT9sb29rcyBlbmNvZGVk?=")
        XCTAssertThrowsError(try S3Uploader.metadataHeaders(["description": String(repeating: "x", count: 2100)]))
    }

    func testXMLReadingOfListPartsAndErrors() {
        let list = """
            <?xml version="1.0" encoding="UTF-8"?><ListPartsResult><Bucket>b</Bucket><IsTruncated>true</IsTruncated>
            <NextPartNumberMarker>2</NextPartNumberMarker><Part><PartNumber>1</PartNumber><ETag>&quot;aa&quot;</ETag><Size>5</Size></Part>
            <Part><PartNumber>2</PartNumber><ETag>"bb"</ETag><Size>6</Size></Part></ListPartsResult>
            """
        let parts = XML.all("Part", in: list)
        XCTAssertEqual(parts.count, 2)
        XCTAssertEqual(XML.first("ETag", in: parts[0]), "\"aa\"")
        XCTAssertEqual(XML.first("PartNumber", in: parts[1]), "2")
        XCTAssertEqual(XML.first("IsTruncated", in: list), "true")
        XCTAssertEqual(XML.first("NextPartNumberMarker", in: list), "2")
        let err = HTTPResponse(
            status: 403, body: Data("<Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message><Token-0>secret</Token-0></Error>".utf8))
        XCTAssertEqual(S3ErrorInfo(err).code, "ExpiredToken")
        XCTAssertTrue(S3ErrorInfo(err).isExpiry)
        XCTAssertFalse(S3ErrorInfo(HTTPResponse(status: 403, body: Data("<Error><Code>SignatureDoesNotMatch</Code></Error>".utf8))).isExpiry)
        XCTAssertTrue(S3ErrorInfo(HTTPResponse(status: 503, body: Data("<Error><Code>SlowDown</Code></Error>".utf8))).isRetryable)
        XCTAssertEqual(S3Client.FileUpload.plainMD5("\"0123456789abcdef0123456789ABCDEF\""), "0123456789abcdef0123456789abcdef")
        XCTAssertNil(S3Client.FileUpload.plainMD5("\"0123456789abcdef0123456789abcdef-3\""))
    }
}

/// S3Uploader against real moto (signature checking on for every request, STS session
/// credentials), directly or through the fault-injecting proxy, for what SeaweedFS
/// (S3UploaderTests) cannot show: STS session credentials (AssumeRole, refresh through a command,
/// unknown tokens, InvalidAccessKeyId renewal) and ListParts paging past 1000 parts (1200 parts
/// of 10 KiB through moto's S3_UPLOAD_PART_MIN_SIZE; SeaweedFS refuses parts under 5 MiB and
/// answers ListParts with up to 10,000 parts a page). Every test judges the
/// server's view: the object downloaded independently (boto3) and hashed, ListMultipartUploads,
/// the proxy's record of what it forwarded and which faults it applied.
final class S3Tests: S3UploaderTestCase {
    nonisolated(unsafe) static var moto: MotoServer?
    nonisolated(unsafe) static var motoProxy: FaultProxy?
    static let partMin = 10_240

    /// Why the servers did not start, reported by every test (a failure, not a skip).
    nonisolated(unsafe) static var startError: Error?

    override class func setUp() {
        super.setUp()
        do {
            let m = try MotoServer.start(bucket: "clipflow-test", partMinSize: partMin, maxSeconds: 900)
            moto = m
            motoProxy = try FaultProxy.start(upstream: m.endpoint, maxSeconds: 900)
        } catch {
            startError = error
        }
    }

    override class func tearDown() {
        motoProxy?.stop()
        moto?.stop()
        super.tearDown()
    }

    var moto: MotoServer { S3Tests.moto! }
    override var proxy: FaultProxy { S3Tests.motoProxy! }

    override func setUpWithError() throws {
        if let e = S3Tests.startError { throw e }
        try super.setUpWithError()
    }

    // MARK: Helpers

    /// The STS session credentials moto_setup.py made (ClipFlowTestSupport has its own
    /// AWSCredentials type, hence the qualified name).
    var session: ClipFlowUpload.AWSCredentials {
        let c = moto.sessionCredentials
        return ClipFlowUpload.AWSCredentials(accessKeyID: c.accessKeyID, secretAccessKey: c.secretAccessKey, sessionToken: c.sessionToken)
    }

    func options(via proxied: Bool = false, key: String? = nil, partSize: Int64 = 64 << 10, stall: Int = 30) -> S3Options {
        var o = S3Options(
            endpoint: proxied ? proxy.url : moto.endpoint, region: moto.region, bucket: moto.bucket,
            key: key, keyPrefix: "t/\(testName)/", partSize: partSize,
            minimumPartSize: Int64(S3Tests.partMin), retry: .fast)
        o.network.stallTimeout = stall
        o.network.connectTimeout = 5
        return o
    }

    /// Asserts the object at `key` has the file's bytes (downloaded with boto3, hashed by sha256sum).
    func assertObjectMatches(_ key: String, _ file: String, line: UInt = #line) throws {
        XCTAssertEqual(try moto.objectSHA256(key: key), try sha256(ofFile: file), "object \(key)", line: line)
    }

    /// A script that calls STS AssumeRole on moto with the IAM user's key and prints the
    /// credentials as `aws sts assume-role` does; each call appends a line to `counter`.
    func assumeRoleCommand(counter: String) throws -> [String] {
        let script = dir + "/assume_role.py"
        try """
        import json, sys, boto3
        from botocore.config import Config
        endpoint, key, secret, counter = sys.argv[1:5]
        sts = boto3.client("sts", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id=key,
                           aws_secret_access_key=secret, config=Config(retries={"max_attempts": 1}))
        r = sts.assume_role(RoleArn="arn:aws:iam::123456789012:role/clipflow-upload-role", RoleSessionName="clipflow-refresh")
        c = r["Credentials"]
        open(counter, "a").write("refresh\\n")
        print(json.dumps({"Credentials": {"AccessKeyId": c["AccessKeyId"], "SecretAccessKey": c["SecretAccessKey"],
                          "SessionToken": c["SessionToken"], "Expiration": c["Expiration"].strftime("%Y-%m-%dT%H:%M:%SZ")}}))
        """.write(toFile: script, atomically: true, encoding: .utf8)
        return ["python3", script, moto.endpoint, moto.userCredentials.accessKeyID, moto.userCredentials.secretAccessKey, counter]
    }

    // MARK: Tests

    /// 1200 parts of 10 KiB: paused after more than 1000 parts, continued by a new uploader with
    /// a store re-read from disk. The second run finds the parts with ListParts over two pages
    /// (part-number-marker), uploads only the rest under the same UploadId, and no part is sent
    /// twice except at most the one the pause interrupted.
    func testResumeAfterPauseOver1000PartsUsesListPartsPagination() throws {
        let partSize = 10_240, count = 1200
        let file = try makeFile("many.bin", size: partSize * count - 3000, seed: 7)
        let size = Int64(partSize * count - 3000)
        let opts = options(via: true, partSize: Int64(partSize))
        let control = UploadControl()
        let first = UploadEventLog()
        let pauser = Hook { event in
            if case .progress(_, let p) = event, p.acknowledged >= Int64(1050 * partSize) { control.pause() }
        }
        let store1 = try store()
        XCTAssertThrowsError(
            try upload(
                S3Uploader(options: opts, store: store1, credentials: session), file,
                control: control, observer: Tee(first, pauser))
        ) {
            XCTAssertEqual(($0 as? UploadError)?.code, "paused")
        }
        XCTAssertEqual(first.named("paused").count, 1)
        let record = try XCTUnwrap(try ResumeStore(path: store1.path).all.first)
        XCTAssertEqual(record.partSize, Int64(partSize))
        let uploadID = try XCTUnwrap(record.uploadID)
        XCTAssertTrue(try moto.listMultipartUploads().contains(uploadID))
        let firstPUTs = partPUTs(try proxy.stats()).count
        XCTAssertGreaterThan(firstPUTs, 1000)
        XCTAssertLessThan(firstPUTs, count)

        let second = UploadEventLog()
        let result = try upload(S3Uploader(options: opts, store: try store(), credentials: session), file, observer: second)
        XCTAssertEqual(result.uploadID, uploadID)
        try assertObjectMatches(record.objectKey!, file)
        let stats = try stats(when: completed)
        XCTAssertEqual(stats.count("POST", pathContains: "?uploads"), 1, "one CreateMultipartUpload in all")
        let listParts = stats.requests.filter { $0.method == "GET" && $0.target.contains("uploadId=") }
        XCTAssertEqual(listParts.count, 2, "ListParts pages: \(listParts.map(\.target))")
        XCTAssertTrue(listParts.contains { $0.target.contains("part-number-marker=1000") })
        var perPart: [String: Int] = [:]
        for e in partPUTs(stats) {
            let n = e.target.components(separatedBy: "partNumber=")[1].prefix { $0.isNumber }
            perPart[String(n), default: 0] += 1
        }
        XCTAssertEqual(perPart.count, count)
        XCTAssertLessThanOrEqual(perPart.values.filter { $0 > 1 }.count, 1, "parts sent twice: \(perPart.filter { $0.value > 1 })")
        guard case .started(_, _, _, let resumedAt)? = second.named("started").first else { return XCTFail("no started") }
        XCTAssertGreaterThanOrEqual(resumedAt, Int64(1000 * partSize))
        progressNeverGoesBackwards(second, total: size)
        XCTAssertTrue(try store().all.isEmpty)
    }

    /// An injected `403 ExpiredToken` on part 3: `credentialsExpired`, the command provider runs
    /// (a fresh STS AssumeRole on moto), and the SAME multipart upload continues with the new
    /// session credentials. No secret of either session appears in any event.
    func testExpiredTokenRefreshesThroughCommandProviderAndKeepsTheUploadId() throws {
        let expired = "<?xml version=\"1.0\"?><Error><Code>ExpiredToken</Code><Message>The provided token has expired.</Message></Error>"
        try proxy.setRules([
            [
                "method": "PUT", "query_contains": "partNumber=3&", "action": "status", "status": 403, "body": expired,
                "headers": ["Content-Type": "application/xml"]
            ]
        ])
        let counter = dir + "/count"
        let file = try makeFile("exp.bin", size: 300_000)
        let log = UploadEventLog()
        let initial = session
        let up = S3Uploader(
            options: options(via: true), store: try store(), credentials: initial,
            provider: CommandCredentialProvider(command: try assumeRoleCommand(counter: counter)))
        let result = try upload(up, file, observer: log)
        XCTAssertEqual(try proxy.stats().count(outcome: "status:403"), 1)
        XCTAssertEqual(log.named("credentials-expired").count, 1)
        XCTAssertEqual(lines(counter), 1)
        let fresh = up.credentials
        XCTAssertNotEqual(fresh.accessKeyID, initial.accessKeyID)
        XCTAssertNotNil(fresh.sessionToken)
        let stats = try stats(when: completed)
        XCTAssertEqual(stats.count("POST", pathContains: "?uploads"), 1, "a refresh must not start a new multipart upload")
        XCTAssertTrue(
            stats.requests.filter { $0.method == "POST" && $0.target.contains("uploadId=") }
                .allSatisfy { $0.target.contains(SigV4Signer.uriEncode(result.uploadID!, keepSlash: false)) })
        try assertObjectMatches("t/testExpiredTokenRefreshesThroughCommandProviderAndKeepsTheUploadId/exp.bin", file)
        assertNoSecrets(texts(log), secrets: [initial.secretAccessKey, initial.sessionToken!, fresh.secretAccessKey, fresh.sessionToken!])
    }

    /// A session token moto does not know (its real answer: 400 InvalidToken) counts as expired:
    /// without a provider the upload fails with `credentials-expired` and no token in the message;
    /// with one, the refreshed session completes the upload.
    func testUnknownSessionTokenFailsClearlyOrIsRefreshed() throws {
        let file = try makeFile("tok.bin", size: 40_000)
        let badToken = "NotARealToken" + UUID().uuidString
        let bad = ClipFlowUpload.AWSCredentials(accessKeyID: session.accessKeyID, secretAccessKey: session.secretAccessKey, sessionToken: badToken)
        let log = UploadEventLog()
        XCTAssertThrowsError(try upload(S3Uploader(options: options(), store: try store(), credentials: bad), file, observer: log)) { error in
            XCTAssertEqual((error as? UploadError)?.code, "credentials-expired")
            XCTAssertTrue("\(error)".contains("InvalidToken"), "\(error)")
            assertNoSecrets(texts(log, error), secrets: [badToken, session.secretAccessKey])
        }
        let counter = dir + "/count"
        let up = S3Uploader(
            options: options(), store: try store(), credentials: bad,
            provider: CommandCredentialProvider(command: try assumeRoleCommand(counter: counter)))
        let log2 = UploadEventLog()
        _ = try upload(up, file, observer: log2)
        XCTAssertEqual(lines(counter), 1)
        XCTAssertEqual(log2.named("credentials-expired").count, 1)
        try assertObjectMatches("t/testUnknownSessionTokenFailsClearlyOrIsRefreshed/tok.bin", file)
    }

    /// Credentials whose `expiration` is within the margin are refreshed before the first request.
    func testCredentialsCloseToExpirationAreRefreshedFirst() throws {
        let counter = dir + "/count"
        let file = try makeFile("soon.bin", size: 30_000)
        var initial = session
        initial.expiration = Date().addingTimeInterval(20)
        let log = UploadEventLog()
        let up = S3Uploader(
            options: options(), store: try store(), credentials: initial,
            provider: CommandCredentialProvider(command: try assumeRoleCommand(counter: counter)))
        _ = try upload(up, file, observer: log)
        XCTAssertEqual(lines(counter), 1)
        XCTAssertEqual(log.all.first?.name, "credentials-expired")
        XCTAssertNotEqual(up.credentials.accessKeyID, initial.accessKeyID)
        XCTAssertGreaterThan(up.credentials.expiration ?? .distantPast, Date().addingTimeInterval(600))
        try assertObjectMatches("t/testCredentialsCloseToExpirationAreRefreshedFirst/soon.bin", file)
    }

}

/// Calls a closure for every event (tests use it to pause, cancel or change the file at a point).
final class Hook: UploadObserver, @unchecked Sendable {
    let body: (UploadEvent) -> Void
    init(_ body: @escaping (UploadEvent) -> Void) { self.body = body }
    func upload(_ event: UploadEvent) { body(event) }
}

struct Tee: UploadObserver {
    let a: UploadObserver, b: UploadObserver
    init(_ a: UploadObserver, _ b: UploadObserver) { self.a = a; self.b = b }
    func upload(_ event: UploadEvent) { a.upload(event); b.upload(event) }
}

extension S3TestsWithoutServer {
    func testMultipartETagIsTheMD5OfThePartMD5s() {
        // Oracle: python3 hashlib, md5(md5(b"part one") + md5(b"part two")) + "-2".
        XCTAssertEqual(
            S3Client.FileUpload.multipartETag(["\"3303e12af474ca11d85ed2966a932992\"", "3EA4E15B91A17DC76052C56CFCDF67A2"]),
            "0732917abc3288784e318ac0aab1757a-2")
        XCTAssertNil(S3Client.FileUpload.multipartETag(["\"3303e12af474ca11d85ed2966a932992\"", "\"kms-style\""]))
    }

    func testMaskedKeyIDsAndErrorClasses() {
        XCTAssertEqual(maskAccessKeyID("AKIAIOSFODNN7EXAMPLE"), "AKIA…MPLE")
        XCTAssertEqual(maskAccessKeyID("LTAI5tABCD"), "…ABCD")
        XCTAssertEqual(maskAccessKeyID("abc"), "…")
        func info(_ status: Int, _ code: String) -> S3ErrorInfo {
            S3ErrorInfo(HTTPResponse(status: status, body: Data("<Error><Code>\(code)</Code></Error>".utf8)))
        }
        XCTAssertTrue(info(403, "SecurityTokenExpired").isExpiry)
        XCTAssertFalse(info(403, "RequestTimeTooSkewed").isRetryable)
        XCTAssertFalse(info(403, "RequestTimeTooSkewed").isExpiry)
    }
}

/// Review fixes against moto through the fault proxy (STS credentials).
extension S3Tests {
    /// OSS answers InvalidAccessKeyId for expired STS keys: with a provider, one refresh and the
    /// upload continues; without one it fails with code `credentials` and the key id masked.
    func testInvalidAccessKeyIdIsRefreshedOnceAndMaskedInMessages() throws {
        let body =
            "<?xml version=\"1.0\"?><Error><Code>InvalidAccessKeyId</Code><Message>The OSS Access Key Id you provided does not exist in our records.</Message></Error>"
        try proxy.setRules([
            [
                "method": "PUT", "query_contains": "partNumber=2&", "times": 1, "action": "status", "status": 403,
                "body": body, "headers": ["Content-Type": "application/xml"]
            ]
        ])
        let counter = dir + "/count"
        let file = try makeFile("oss.bin", size: 150_000)
        let log = UploadEventLog()
        let up = S3Uploader(
            options: options(via: true), store: try store(), credentials: session,
            provider: CommandCredentialProvider(command: try assumeRoleCommand(counter: counter)))
        _ = try upload(up, file, observer: log)
        XCTAssertEqual(lines(counter), 1)
        XCTAssertEqual(log.named("credentials-expired").count, 1)
        try assertObjectMatches("t/testInvalidAccessKeyIdIsRefreshedOnceAndMaskedInMessages/oss.bin", file)

        try proxy.setRules([
            [
                "method": "PUT", "query_contains": "partNumber=1&", "times": -1, "action": "status", "status": 403,
                "body": body, "headers": ["Content-Type": "application/xml"]
            ]
        ])
        let keyID = session.accessKeyID
        let file2 = try makeFile("oss2.bin", size: 150_000, seed: 3)
        XCTAssertThrowsError(
            try upload(
                S3Uploader(options: options(via: true), store: try store(), credentials: session), file2,
                observer: UploadEventLog())
        ) { e in
            let u = e as? UploadError
            XCTAssertEqual(u?.code, "credentials")
            XCTAssertFalse(u?.message.contains(keyID) ?? true, u?.message ?? "")
            XCTAssertTrue(u?.message.contains("…" + keyID.suffix(4)) ?? false, u?.message ?? "")
        }
        let log3 = UploadEventLog()
        XCTAssertThrowsError(
            try upload(
                S3Uploader(
                    options: options(via: true), store: try store(), credentials: session,
                    provider: CommandCredentialProvider(command: try assumeRoleCommand(counter: counter))),
                file2, observer: log3)
        ) { e in
            XCTAssertEqual((e as? UploadError)?.code, "credentials")
            XCTAssertTrue((e as? UploadError)?.message.contains("also after") ?? false, "\(e)")
        }
        XCTAssertEqual(log3.named("credentials-expired").count, 1, "one refresh only")
        _ = try stats { $0.count("POST", pathContains: "?uploads") == 3 }  // all recorded before the next test
    }

}
