import XCTest
import ClipFlowTestSupport
import ClipFlowCore
@testable import ClipFlowUpload

final class UploadModelTests: XCTestCase {
    func testRetryBackoffGrowsJittersCapsAndResetsOnProgress() {
        var r = RetryState(policy: RetryPolicy(baseDelay: 1, maxDelay: 8, maxAttemptsWithoutProgress: 5))
        // random() = 1 gives the ceiling, 0 gives half of it.
        XCTAssertEqual(r.failure(at: 0, random: { 0.999999 })!, 1, accuracy: 1e-4)
        XCTAssertEqual(r.failure(at: 0, random: { 0 }), 1)  // ceiling 2, half
        XCTAssertEqual(r.failure(at: 0, random: { 0 }), 2)  // ceiling 4
        XCTAssertEqual(r.failure(at: 0, random: { 0 }), 4)  // ceiling 8
        XCTAssertEqual(r.failure(at: 0, random: { 0 }), 4)  // capped at 8
        XCTAssertNil(r.failure(at: 0, random: { 0 }))  // 6th failure without progress: give up
        // Progress since the last failure resets the count.
        var s = RetryState(policy: RetryPolicy(baseDelay: 1, maxDelay: 8, maxAttemptsWithoutProgress: 2))
        XCTAssertNotNil(s.failure(at: 0, random: { 0 }))
        XCTAssertNotNil(s.failure(at: 0, random: { 0 }))
        XCTAssertEqual(s.failure(at: 100, random: { 0 }), 0.5)  // moved: first failure again
        XCTAssertNotNil(s.failure(at: 100, random: { 0 }))
        XCTAssertNil(s.failure(at: 100, random: { 0 }))
        XCTAssertEqual(s.attempts, 5)
        // Retry-After is honoured.
        var t = RetryState(policy: RetryPolicy(baseDelay: 1, maxDelay: 8))
        XCTAssertEqual(t.failure(at: 0, retryAfter: 5, random: { 0 }), 5)
    }

    func testRetryableStatuses() {
        XCTAssertEqual([500, 502, 503, 423, 429, 408].map(isRetryableStatus), [true, true, true, true, true, true])
        XCTAssertEqual([400, 401, 403, 404, 409, 410, 460].map(isRetryableStatus), [false, false, false, false, false, false, false])
    }

    func testProgressNeverGoesBackwardsAndReportsRateAndETA() {
        var t = 0.0
        let m = ProgressMeter(total: 1000, interval: 0, now: { t })
        _ = m.acknowledge(0, force: true)
        t = 1
        let a = m.acknowledge(400)!
        XCTAssertEqual(a.acknowledged, 400)
        XCTAssertEqual(a.bytesPerSecond, 400, accuracy: 1e-9)
        XCTAssertEqual(a.eta!, 1.5, accuracy: 1e-9)
        t = 2
        XCTAssertNil(m.acknowledge(300))  // a resume HEAD reporting less: nothing published
        XCTAssertEqual(m.acknowledged, 400)
        XCTAssertEqual(m.acknowledge(300, force: true)?.acknowledged, 400)
        t = 3
        XCTAssertEqual(m.acknowledge(1000)?.eta, 0)
    }

    func testDigestsMatchKnownVectors() {
        XCTAssertEqual(Digest.hash(.sha256, Data("abc".utf8)).hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        XCTAssertEqual(Digest.hash(.sha1, Data("abc".utf8)).hex, "a9993e364706816aba3e25717850c26c9cd0d89d")
        XCTAssertEqual(Digest.hash(.md5, Data()).hex, "d41d8cd98f00b204e9800998ecf8427e")
        // RFC 4231 test case 2.
        XCTAssertEqual(
            Digest.hmacSHA256(key: Array("Jefe".utf8), Data("what do ya want for nothing?".utf8)).hex,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
    }

    func testFileRangeDigestAgreesWithSha256sum() throws {
        let dir = Fixtures.shared.scratch("digest")
        let f = dir.appendingPathComponent("x.bin")
        try Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 * 7) }).write(to: f)
        let ours = try Digest.hash(.sha256, file: f.path, offset: 0, length: 3_000_000).hex
        XCTAssertEqual(ours, try sha256sum(f.path))
        XCTAssertThrowsError(try Digest.hash(.sha256, file: f.path, offset: 2_000_000, length: 2_000_000))
    }

    func testRangeDigesterServesPrefetchedDigestsOnceAndHashesOthersInline() throws {
        let dir = Fixtures.shared.scratch("digest-ahead")
        let f = dir.appendingPathComponent("x.bin")
        try Data((0..<3_000_000).map { UInt8(truncatingIfNeeded: $0 * 13) }).write(to: f)
        func inline(_ o: Int64, _ n: Int64) throws -> [String] {
            try Digest.hash([.sha256, .md5], file: f.path, offset: o, length: n).map(\.hex)
        }
        let d = RangeDigester(path: f.path, algorithms: [.sha256, .md5])
        d.prefetch(offset: 1_000_000, length: 1_500_000)
        XCTAssertEqual(try d.digests(offset: 1_000_000, length: 1_500_000).map(\.hex), try inline(1_000_000, 1_500_000))
        XCTAssertEqual(d.prefetchHits, 1)
        // Used once: asking again (a resend) hashes anew; another range than the prefetched one too.
        XCTAssertEqual(try d.digests(offset: 1_000_000, length: 1_500_000).map(\.hex), try inline(1_000_000, 1_500_000))
        d.prefetch(offset: 0, length: 10)
        XCTAssertEqual(try d.digests(offset: 5, length: 10).map(\.hex), try inline(5, 10))
        XCTAssertEqual(d.inlineHashes, 2)
        XCTAssertEqual(try d.digests(offset: 0, length: 10).map(\.hex), try inline(0, 10))
        XCTAssertEqual(d.prefetchHits, 2)
        // A prefetch past the end fails in the background; the error comes from the inline redo.
        d.prefetch(offset: 2_500_000, length: 1_000_000)
        XCTAssertThrowsError(try d.digests(offset: 2_500_000, length: 1_000_000))
        d.stop()
        d.prefetch(offset: 0, length: 10)  // ignored once stopped
        XCTAssertEqual(try d.digests(offset: 0, length: 10).map(\.hex), try inline(0, 10))
        XCTAssertEqual(d.prefetchHits, 2)
    }

    func testFingerprintChangesWithContentSizeOrTime() throws {
        let dir = Fixtures.shared.scratch("fingerprint")
        let f = dir.appendingPathComponent("v.mp4")
        try Data(repeating: 1, count: 200_000).write(to: f)
        let a = try FileFingerprint.of(f.path)
        XCTAssertEqual(a, try FileFingerprint.of(f.path))
        // Same size and mtime but a different tail: still a different fingerprint.
        let h = try FileHandle(forWritingTo: f)
        try h.seek(toOffset: 199_000)
        try h.write(contentsOf: Data([9]))
        try h.close()
        var times = [timespec(tv_sec: 0, tv_nsec: 0), timespec(tv_sec: Int(a.mtimeNanos / 1_000_000_000), tv_nsec: Int(a.mtimeNanos % 1_000_000_000))]
        times[0] = times[1]
        XCTAssertEqual(utimensat(AT_FDCWD, f.path, &times, 0), 0)
        let b = try FileFingerprint.of(f.path)
        XCTAssertEqual(b.mtimeNanos, a.mtimeNanos)
        XCTAssertEqual(b.size, a.size)
        XCTAssertNotEqual(a, b)
        XCTAssertNotEqual(a.key(destination: "d"), b.key(destination: "d"))
    }

    func testResumeStorePersistsAcrossInstancesAndFindsStaleRecords() throws {
        let dir = Fixtures.shared.scratch("resumestore")
        let f = dir.appendingPathComponent("a.mp4")
        try Data(repeating: 3, count: 1000).write(to: f)
        let fp = try FileFingerprint.of(f.path)
        let path = dir.appendingPathComponent("state/resume.json").path
        try ResumeStore(path: path).save(ResumeRecord(method: "tus", fingerprint: fp, destination: "tus x", uploadURL: "http://h/files/1"))
        let again = try ResumeStore(path: path)
        XCTAssertEqual(again.record(for: fp, destination: "tus x")?.uploadURL, "http://h/files/1")
        XCTAssertNil(again.record(for: fp, destination: "tus y"))
        try Data(repeating: 4, count: 1001).write(to: f)
        let fp2 = try FileFingerprint.of(f.path)
        XCTAssertNil(again.record(for: fp2, destination: "tus x"))
        XCTAssertEqual(again.staleRecords(path: f.path, destination: "tus x", current: fp2).count, 1)
        try again.remove(again.all[0])
        XCTAssertTrue(try ResumeStore(path: path).all.isEmpty)
        // A damaged store is refused with its path named, not silently replaced.
        try Data("{oops".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertThrowsError(try ResumeStore(path: path)) { XCTAssertTrue("\($0)".contains(path)) }
    }

    func testCredentialsJSONShapes() throws {
        let sts =
            #"{"Credentials": {"AccessKeyId": "ASIAKEY1", "SecretAccessKey": "secret/one", "SessionToken": "tok1", "Expiration": "2026-11-23T12:00:00Z"}}"#
        let a = try parseCredentials(Data(sts.utf8), source: "t").aws!
        XCTAssertEqual(a.accessKeyID, "ASIAKEY1")
        XCTAssertEqual(a.sessionToken, "tok1")
        XCTAssertNotNil(a.expiration)
        let snake = #"{"access_key_id": "K2", "secret_access_key": "S2-secret"}"#
        XCTAssertEqual(try parseCredentials(Data(snake.utf8), source: "t").aws?.secretAccessKey, "S2-secret")
        XCTAssertEqual(
            try parseCredentials(Data(#"{"access": "acc-tok", "refresh": "ref-tok"}"#.utf8), source: "t"),
            .bearer(token: "acc-tok", refreshToken: "ref-tok"))
        XCTAssertThrowsError(try parseCredentials(Data("[]".utf8), source: "cmd x")) { XCTAssertTrue("\($0)".contains("cmd x")) }
        XCTAssertThrowsError(try parseCredentials(Data(#"{"a": 1}"#.utf8), source: "cmd y"))
        // Secrets parsed are redacted from then on.
        XCTAssertEqual(Secrets.shared.redact("x secret/one y ref-tok"), "x *** y ***")
    }

    /// Keys in any case, snake case or not, nested under "credentials" (in any case) or not; only
    /// non-empty strings count; the errors for what is not a JSON object and for one without
    /// credentials. (Values shorter than 4 characters, so none is registered as a secret.)
    func testCredentialsJSONKeysInAnyCaseNestedOrNot() throws {
        func parse(_ json: String) throws -> Credentials { try parseCredentials(Data(json.utf8), source: "src") }
        func aws(_ key: String, _ secret: String, _ token: String? = nil) -> Credentials {
            .aws(AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: token))
        }
        for json in [
            #"{"AccessKeyId": "K", "SecretAccessKey": "S", "SessionToken": "T"}"#,
            #"{"accesskeyid": "K", "SECRETACCESSKEY": "S", "sessionTOKEN": "T"}"#,
            #"{"access_key_id": "K", "secret_access_key": "S", "session_token": "T"}"#,
            #"{"ACCESS_KEY_ID": "K", "Secret_Access_Key": "S", "Session_Token": "T"}"#,
            #"{"AccessKeyId": "K", "SecretAccessKey": "S", "SecurityToken": "T"}"#,
            #"{"CREDENTIALS": {"accessKeyId": "K", "secretAccessKey": "S", "sessionToken": "T"}}"#,
            #"{"credentials": {"access_key_id": "K", "secret_access_key": "S", "session_token": "T"}, "AccessKeyId": "top"}"#,
            #"{"AssumedRoleUser": {"Arn": "a"}, "Credentials": {"AccessKeyId": "K", "SecretAccessKey": "S", "SessionToken": "T"}}"#,
            // An empty string or another type counts as absent: the next name is read.
            #"{"AccessKeyId": "", "access_key_id": "K", "SecretAccessKey": "S", "SessionToken": 7, "session_token": "T"}"#,
            // A "credentials" that is not an object is an ordinary member.
            #"{"Credentials": "x", "AccessKeyId": "K", "SecretAccessKey": "S", "SessionToken": "T", "ExtraField": [1, null]}"#,
            // AWS keys and a token: the AWS keys are read.
            #"{"AccessKeyId": "K", "SecretAccessKey": "S", "SessionToken": "T", "token": "tok"}"#
        ] {
            XCTAssertEqual(try parse(json), aws("K", "S", "T"), json)
        }
        XCTAssertEqual(try parse(#"{"AccessKeyId": "K", "SecretAccessKey": "S", "security_token": "T"}"#), aws("K", "S"))
        XCTAssertEqual(try parse(#"{"AccessKeyId": "K", "SecretAccessKey": "S", "SessionToken": null}"#), aws("K", "S"))
        // Bearer tokens; a key without its secret is not AWS credentials.
        XCTAssertEqual(try parse(#"{"TOKEN": "t", "REFRESH_TOKEN": "r"}"#), .bearer(token: "t", refreshToken: "r"))
        XCTAssertEqual(try parse(#"{"Access_Token": "a", "Refresh": "", "refresh_token": "r"}"#), .bearer(token: "a", refreshToken: "r"))
        XCTAssertEqual(try parse(#"{"token": 1, "access": "", "access_token": "a"}"#), .bearer(token: "a", refreshToken: nil))
        XCTAssertEqual(try parse(#"{"AccessKeyId": "K", "token": "t"}"#), .bearer(token: "t", refreshToken: nil))
        XCTAssertEqual(try parse(#"{"credentials": {"token": "in"}, "token": "out"}"#), .bearer(token: "in", refreshToken: nil))
        // Of keys that differ only in case, the first in code point order is read.
        XCTAssertEqual(try parse(#"{"token": "b", "Token": "a", "TOKEN": "c"}"#), .bearer(token: "c", refreshToken: nil))
        XCTAssertEqual(try parse(#"{"token": "b", "Token": "a"}"#), .bearer(token: "a", refreshToken: nil))
        // Other encodings JSON is written in: UTF-16 and UTF-32, with a byte order mark or not.
        for encoding: String.Encoding in [.utf16, .utf16BigEndian, .utf16LittleEndian, .utf32, .utf32BigEndian, .utf32LittleEndian] {
            let data = try XCTUnwrap(#"{"token": "t"}"#.data(using: encoding))
            XCTAssertEqual(try parseCredentials(data, source: "src"), .bearer(token: "t", refreshToken: nil), "\(encoding)")
        }

        func message(_ json: String) -> String? {
            do { _ = try parse(json) } catch { return (error as? UploadError)?.message }
            return nil
        }
        let notJSON = "src: did not return a JSON object with credentials"
        for json in ["", "[]", #"[{"token": "t"}]"#, #""token""#, "42", "null", "not json", #"{"token": "t"} x"#] {
            XCTAssertEqual(message(json), notJSON, json)
        }
        // A broken string anywhere spoils the whole answer.
        XCTAssertEqual(message(#"{"token": "t", "x": "\ud800"}"#), notJSON)
        let none = "src: the JSON has no credentials (expected AccessKeyId/SecretAccessKey[/SessionToken] or token)"
        for json in [
            "{}", #"{"a": 1}"#, #"{"token": ""}"#, #"{"token": true}"#, #"{"token": ["t"]}"#, #"{"data": {"token": "t"}}"#,
            #"{"AccessKeyId": "K", "SecretAccessKey": 5}"#,
            // Only the nested object is read, and only one level down.
            #"{"Credentials": {}, "token": "t"}"#, #"{"Credentials": {"Credentials": {"token": "t"}}}"#
        ] {
            XCTAssertEqual(message(json), none, json)
        }
    }

    /// `Expiration` is an ISO 8601 time with a zone, with or without fractional seconds; any other
    /// value leaves it unknown, and the credentials are still read.
    func testCredentialsExpirationFormats() throws {
        func expiration(_ value: String) throws -> Date? {
            let json = #"{"AccessKeyId": "K", "SecretAccessKey": "S", "Expiration": \#(value)}"#
            return try XCTUnwrap(parseCredentials(Data(json.utf8), source: "src").aws, value).expiration
        }
        let noon = try XCTUnwrap(ISO8601DateFormatter().date(from: "2026-11-23T12:00:00Z"))
        XCTAssertEqual(try expiration(#""2026-11-23T12:00:00Z""#), noon)
        XCTAssertEqual(try expiration(#""2026-11-23T14:00:00+02:00""#), noon)
        XCTAssertEqual(try expiration(#""2026-11-23T12:00:00+00:00""#), noon)
        let fraction = try XCTUnwrap(try expiration(#""2026-11-23T12:00:00.250Z""#))
        XCTAssertEqual(fraction.timeIntervalSince(noon), 0.25, accuracy: 0.001)
        let offsetFraction = try XCTUnwrap(try expiration(#""2026-11-23T17:30:00.5+05:30""#))
        XCTAssertEqual(offsetFraction.timeIntervalSince(noon), 0.5, accuracy: 0.001)
        for unknown in [#""2026-11-23 12:00:00""#, #""2026-11-23T12:00:00""#, #""20261123T120000Z""#, #""""#, "1795435200", "null"] {
            XCTAssertNil(try expiration(unknown), unknown)
        }
    }

    func testCommandCredentialProviderRunsTheCommandAndReportsFailures() throws {
        let dir = Fixtures.shared.scratch("credcmd")
        let script = dir.appendingPathComponent("creds.sh")
        try """
        #!/bin/sh
        echo "reason=$CLIPFLOW_REFRESH_REASON" >> "\(dir.path)/calls"
        echo '{"AccessKeyId": "AK", "SecretAccessKey": "SK-from-cmd", "SessionToken": "ST-from-cmd"}'
        """.write(to: script, atomically: true, encoding: .utf8)
        chmod(script.path, 0o755)
        let c = try CommandCredentialProvider(command: [script.path]).refresh(reason: "expired")
        XCTAssertEqual(c.aws?.sessionToken, "ST-from-cmd")
        XCTAssertEqual(try String(contentsOf: dir.appendingPathComponent("calls"), encoding: .utf8), "reason=expired\n")
        XCTAssertThrowsError(try CommandCredentialProvider(command: ["sh", "-c", "echo nope >&2; exit 3"]).refresh(reason: "r")) {
            XCTAssertTrue("\($0)".contains("exit 3") && "\($0)".contains("nope"), "\($0)")
        }
    }

    func testDestinationProblemsNameTheField() {
        var d = UploadDestination(method: .s3, endpoint: "ftp://x")
        let fields = d.problems().map(\.field)
        XCTAssertEqual(fields, ["endpoint", "bucket"])
        d.endpoint = "http://127.0.0.1:9000"
        d.bucket = "b"
        d.uploadURLTemplate = "https://host/upload"
        XCTAssertEqual(d.problems().map(\.field), ["upload-url"])
    }

    func testControlPauseResumeCancel() throws {
        let c = UploadControl()
        XCTAssertNoThrow(try c.check())
        c.pause()
        XCTAssertThrowsError(try c.check()) { XCTAssertEqual($0 as? UploadError, .paused) }
        c.resume()
        XCTAssertFalse(c.shouldStop)
        c.cancel()
        c.resume()  // a cancel is final
        XCTAssertThrowsError(try c.sleep(1)) { XCTAssertEqual($0 as? UploadError, .cancelled) }
        let flag = CancellationFlag()
        let d = UploadControl(external: flag)
        flag.cancel()
        XCTAssertTrue(d.isPaused)
    }

    private func sha256sum(_ path: String) throws -> String {
        let r = try Run.run(["sha256sum", path])
        return String(r.out.prefix(64))
    }

    func testAnErrorConcerningAFileNamesItOnceAtTheStartAndPauseAndCancelStayAsTheyAre() {
        let e = UploadError(.protocol, message: "HEAD http://h/files/1: no valid Upload-Offset", retryable: true)
        let located = e.concerning("/v/a.mp4")
        XCTAssertEqual(located.file, "/v/a.mp4")
        XCTAssertEqual(located.message, "/v/a.mp4: HEAD http://h/files/1: no valid Upload-Offset")
        XCTAssertEqual(located.kind, .protocol)
        XCTAssertTrue(located.retryable)
        XCTAssertEqual(located.concerning("/v/a.mp4"), located, "named once")
        let named = UploadError(.fileChanged, message: "/v/a.mp4: the file changed").concerning("/v/a.mp4")
        XCTAssertEqual(named.message, "/v/a.mp4: the file changed")
        XCTAssertEqual(UploadError.paused.concerning("/v/a.mp4"), UploadError.paused)
        XCTAssertEqual(UploadError.cancelled.concerning("/v/a.mp4"), UploadError.cancelled)
    }
}
