import ClipFlowCore
import Foundation
import Synchronization

/// The one client of S3-compatible storage (AWS S3, Alibaba OSS's S3 endpoint, MinIO, SeaweedFS,
/// moto): `clipflow upload --to s3` (through `S3Uploader`, its `FileUploader` adapter),
/// `clipflow batch`'s `s3://` paths and `clipflow serve`'s bucket all hold one.
///
/// What it owns:
/// - the connection settings (`access`: endpoint, region, addressing, network, retries; one
///   value, made from the flags by `S3Options.access` or from the environment by
///   `S3Access.fromEnvironment`);
/// - the credentials in use and their renewal through `access.provider` (when the server refuses
///   them as expired, or they expire within `access.credentialRefreshMargin`), shared by every
///   call: a refresh made by one is used by all;
/// - signing (`SigV4Signer`), URL building, the request loop (`Call.send`: `RequestExecutor`'s
///   retries with backoff, credential refusals) and the mapping of S3's answers to `UploadError`s;
/// - the operations on objects (`S3Client+Objects.swift`: list, head, get, download, put, copy,
///   delete, pending uploads) and on multipart uploads (`S3Client+Multipart.swift`: create, part,
///   list parts, complete, abort), and the one multipart driver of a file (`FileUpload`: digests,
///   resume from a `ResumeStore` record, complete, abort), which `upload(file:)` and
///   `S3Uploader` run.
///
/// Every call blocks the caller's thread with a `CurlTransport` of its own (`Call`); calls may run
/// at once from several threads. The body bytes calls move are counted (`traffic`). No message
/// holds a secret key, session token or signature.
public final class S3Client: Sendable {
    public let access: S3Access
    /// Keys asked for per ListObjectsV2 page (S3 answers at most 1000).
    let pageSize: Int
    /// Bytes per part of `upload(file:)`; nil: `S3Options.partSize(forFileSize:)` decides.
    let partSize: Int64?
    /// The `ResumeStore` file of `upload(file:)`: a later upload of the same (unchanged) file to
    /// the same key continues the parts an interrupted one left on the server.
    let resumeStorePath: String
    private let credentialsBox: Mutex<AWSCredentials>
    /// When the last proactive (expiration-driven) refresh happened, to ask at most every 30 s.
    private let lastProactiveRefresh = Mutex<Date?>(nil)
    /// The resume store of `upload(file:)`, opened on first use.
    let uploadRecords = Mutex<ResumeStore?>(nil)
    /// The body bytes this client's calls moved.
    public let traffic = S3Traffic()
    /// How many parts of one multipart upload are sent at once (`upload(file:)`, `clipflow
    /// serve`'s uploads): one at a time leaves the link idle while each part's answer is awaited
    /// and the server stores it. Each holds a connection (and, for serve, the part's bytes).
    public static let partsInFlight = 4

    /// Resume records of `upload(file:)` go to `$TMPDIR/clipflow-s3-objectstore-<uid>/resume.json`.
    public convenience init(access: S3Access) {
        self.init(access: access, pageSize: 1000, partSize: nil, resumeStorePath: nil)
    }

    init(access: S3Access, pageSize: Int, partSize: Int64?, resumeStorePath: String?) {
        self.access = access
        self.pageSize = max(1, min(1000, pageSize))
        self.partSize = partSize
        self.resumeStorePath =
            resumeStorePath
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("clipflow-s3-objectstore-\(getuid())/resume.json").path
        credentialsBox = Mutex(access.credentials)
    }

    // MARK: Credentials

    /// The credentials currently in use (after any refresh).
    public var credentials: AWSCredentials { credentialsBox.withLock { $0 } }

    public var provider: CredentialProvider? { access.provider }

    /// Asks the provider for fresh credentials. Returns false when there is no provider.
    func refreshCredentials(reason: String) throws -> Bool {
        guard let provider = access.provider else { return false }
        let fresh = try provider.refresh(reason: reason)
        guard let aws = fresh.aws else {
            throw UploadError(.credentials, message: "the credential provider returned a bearer token; S3 needs AccessKeyId/SecretAccessKey")
        }
        credentialsBox.withLock { $0 = aws }
        return true
    }

    /// True when the credentials expire within the margin and a proactive refresh is due (at most
    /// one every 30 s, so a provider that hands out short-lived credentials cannot loop us).
    func proactiveRefreshDue() -> Bool {
        guard access.provider != nil, let exp = credentials.expiration, exp.timeIntervalSinceNow < access.credentialRefreshMargin else {
            return false
        }
        return lastProactiveRefresh.withLock { last in
            if let l = last, Date().timeIntervalSince(l) < 30 { return false }
            last = Date()
            return true
        }
    }

    func currentExpired() -> Bool {
        guard let exp = credentials.expiration else { return false }
        return exp.timeIntervalSinceNow <= 0
    }

    func sign(_ request: inout HTTPRequest, payloadHash: String) {
        SigV4Signer(credentials: credentials, region: access.region).sign(&request, payloadHash: payloadHash)
    }

    // MARK: URLs

    /// The object's URL (no query), with the key encoded for the path.
    func objectURL(_ bucket: String, _ key: String) -> String { access.options(bucket: bucket).objectURL(key: key) }

    /// The object's URL with `query` (names and values encoded as SigV4 wants them).
    func objectURL(_ bucket: String, _ key: String, query: [(String, String?)]) -> String {
        Self.adding(query, to: objectURL(bucket, key))
    }

    /// The bucket's URL with `query`.
    func bucketURL(_ bucket: String, query: [(String, String?)]) -> String {
        var url = access.options(bucket: bucket).objectURL(key: "")
        if access.addressingStyle == .path, url.hasSuffix("/") { url.removeLast() }
        return Self.adding(query, to: url)
    }

    static func adding(_ query: [(String, String?)], to url: String) -> String {
        let q = query.map { name, value in
            let n = SigV4Signer.uriEncode(name, keepSlash: false)
            return value.map { n + "=" + SigV4Signer.uriEncode($0, keepSlash: false) } ?? n
        }
        return q.isEmpty ? url : url + "?" + q.joined(separator: "&")
    }

    // MARK: Metadata

    /// `x-amz-meta-*` headers for `metadata`. Names are lower-cased and every character outside
    /// `a-z 0-9 -` becomes `-` (`cover URL` -> `x-amz-meta-cover-url`). Values of printable ASCII
    /// are sent as they are; any other value (non-ASCII, control characters such as newlines, or
    /// one that itself starts with `=?`) is sent as one RFC 2047 encoded word,
    /// `=?UTF-8?B?<base64 of the UTF-8>?=` — the form AWS S3 itself uses when it returns non-ASCII
    /// metadata, and which readers decode with any MIME library. Empty values are skipped. S3
    /// limits user metadata to 2 KB (names plus values, as sent); more is refused up front.
    public static func metadataHeaders(_ metadata: [String: String]) throws -> [(name: String, value: String)] {
        var out: [(String, String)] = []
        var total = 0
        for (rawName, rawValue) in metadata.sorted(by: { $0.key < $1.key }) {
            let value = rawValue.trimmingCharacters(in: .whitespaces)
            if value.isEmpty { continue }
            var name = String(
                rawName.lowercased().unicodeScalars.map { s -> Character in
                    (s >= "a" && s <= "z") || (s >= "0" && s <= "9") || s == "-" ? Character(s) : "-"
                })
            while name.contains("--") { name = name.replacingOccurrences(of: "--", with: "-") }
            name = name.trimmingCharacters(in: CharacterSet(charactersIn: "-"))
            if name.isEmpty { continue }
            let encoded = encodeMetadataValue(value)
            total += name.utf8.count + encoded.utf8.count
            out.append(("x-amz-meta-\(name)", encoded))
        }
        if total > 2048 {
            throw UploadError(.badInput, message: "S3 user metadata is \(total) bytes as sent; S3 allows 2048 (shorten the description or tags)")
        }
        return out
    }

    /// See `metadataHeaders`.
    public static func encodeMetadataValue(_ value: String) -> String {
        let plain = value.unicodeScalars.allSatisfy { $0.value >= 0x20 && $0.value <= 0x7E } && !value.hasPrefix("=?")
        if plain { return value }
        return "=?UTF-8?B?\(Data(value.utf8).base64EncodedString())?="
    }

    /// Decodes a value made by `encodeMetadataValue` (returns other values unchanged).
    public static func decodeMetadataValue(_ value: String) -> String {
        guard value.hasPrefix("=?UTF-8?B?"), value.hasSuffix("?="),
            let data = Data(base64Encoded: String(value.dropFirst(10).dropLast(2)))
        else { return value }
        return String(decoding: data, as: UTF8.self)
    }
}

// MARK: - The request loop

extension S3Client {
    /// Whom a call's answers and errors are for, where they differ: the object operations
    /// (`batch`, `serve`: a missing object is bad input; an interruption is `.cancelled`), or the
    /// multipart upload of a file (`S3Uploader`: a pause stays a pause for the queue; a refusal of
    /// expired credentials with nothing to renew them is final).
    enum Audience {
        case objects
        case fileUpload
    }

    /// The requests of one client operation (or of one file's multipart upload) on one object or
    /// prefix: its transport (one connection, reused), its retry and credential-renewal decisions
    /// (`RequestExecutor`), its control (pause, cancel; a caller's abort poll turns into a pause)
    /// and observer. Confined to the caller's thread.
    final class Call {
        let client: S3Client
        let location: S3Location
        /// Starts every message: the location, or the file and where it goes.
        let what: String
        let audience: Audience
        let transport: CurlTransport
        let control: UploadControl
        let observer: UploadObserver
        let id: String
        let requests: RequestExecutor
        /// The bytes acknowledged so far (progress resets the count of failed attempts), and the
        /// offset a `retryResumed` event reports (nil: none is reported).
        var progress: () -> Int64 = { 0 }
        var resumedAt: () -> Int64? = { nil }
        /// The file a multipart upload reads, and how it was when the upload began: a read error
        /// is a changed file when it changed.
        var file: (path: String, stamp: FileStamp)?
        private let watch: AbortWatch?

        /// `maxResponseBody`: the largest answer held in memory (nil: the network settings').
        init(
            client: S3Client, location: S3Location, what: String? = nil, audience: Audience = .objects, id: String? = nil,
            control: UploadControl = UploadControl(), observer: UploadObserver = NoUploadObserver(),
            shouldAbort: (@Sendable () -> Bool)? = nil, maxResponseBody: Int? = nil
        ) throws {
            self.client = client
            self.location = location
            self.what = what ?? location.description
            self.audience = audience
            self.control = control
            self.observer = observer
            self.id = id ?? location.description
            requests = RequestExecutor(policy: client.access.retry, id: self.id, control: control, observer: observer)
            do {
                var network = client.access.network
                if let maxResponseBody { network.maxResponseBody = max(network.maxResponseBody, maxResponseBody) }
                transport = try CurlTransport(settings: network, shouldAbort: { control.shouldStop })
            } catch let e as TransportError {
                throw UploadError(.libraries, message: "\(location): \(e.message)")
            }
            watch = shouldAbort.map { AbortWatch(control: control, shouldAbort: $0) }
        }

        deinit { watch?.stop() }

        func finish() { watch?.stop() }

        var interrupted: UploadError { UploadError(.cancelled, message: "\(location): interrupted") }

        /// Sends the request `request` builds (built and signed afresh for each attempt) until
        /// `read` accepts an answer or throws. Transport failures, throttling, 5xx and expired
        /// credentials are handled here; every other answer goes to `read`. `payloadHash`: the
        /// body's SHA-256 or `UNSIGNED-PAYLOAD` (nil: hashed from the body). `progress`: the call's
        /// when nil.
        @discardableResult
        func send<T>(
            _ step: String, payloadHash: String? = nil, progress: (() -> Int64)? = nil, request: () throws -> HTTPRequest,
            read: (HTTPResponse) throws -> Verdict<T>
        ) throws -> T {
            do {
                return try requests.perform(progress: progress ?? self.progress, resumedAt: resumedAt) {
                    try refreshIfExpiring()
                    var req = try request()
                    client.sign(&req, payloadHash: try payloadHash ?? SigV4Signer.payloadHash(req.body))
                    let r: HTTPResponse
                    do {
                        r = try transport.perform(req)
                        client.traffic.count(read: Int64(r.body.count) + r.bodyBytesWritten, written: r.bytesSent)
                    } catch let e as TransportError {
                        return try transportFailure(e, step: step)
                    }
                    if r.isSuccess { return try read(r) }
                    let info = S3ErrorInfo(r)
                    // A HEAD answer has no body to name its error: with a provider, a bare 400/403
                    // there may be expired keys, and gets the one renewal allowed.
                    let bareHeadRefusal = req.method == "HEAD" && info.code.isEmpty && [400, 403].contains(r.status) && client.provider != nil
                    if info.isExpiry || bareHeadRefusal {
                        return .refused(
                            Refused(refresh: refresh("\(step): \(info.code.isEmpty ? "HTTP \(info.status)" : info.code)")) { [self] why in
                                expiredRefusal(why, info: info, step: step)
                            })
                    }
                    if info.code == "InvalidAccessKeyId", client.provider != nil {
                        // OSS answers this for expired STS keys: ask once for fresh ones; `failure`
                        // reports it if the server still refuses them.
                        return .refused(Refused(refresh: refresh("\(step): \(info.code)")) { [self] _ in failure(r, step: step) })
                    }
                    if info.isRetryable {
                        return .retryable(retryable("\(step): \(info.summary)", retryAfter: retryAfterSeconds(r), code: .http(r.status)))
                    }
                    return try read(r)
                }
            } catch let e as UploadError where audience == .objects && (e.kind == .paused || e.kind == .cancelled) {
                throw interrupted
            }
        }

        /// What a transport error means: an interruption, a changed file, a final error or a
        /// retryable one.
        private func transportFailure<T>(_ e: TransportError, step: String) throws -> Verdict<T> {
            if e.kind == .cancelled || control.shouldStop {
                try control.check()
                throw UploadError.cancelled
            }
            if e.kind == .fileRead, let file {
                try file.stamp.verifyUnchanged(file.path)
                throw UploadError(.fileChanged, message: "\(what): \(e.message)")
            }
            guard e.isRetryable else {
                let kind: UploadErrorCode =
                    switch e.kind {
                    case .tls: .tls
                    case .oversized: .badResponse
                    case .fileRead: .output
                    default: audience == .fileUpload ? .network : .invalid
                    }
                throw UploadError(kind, message: "\(what): \(step): \(e.message)")
            }
            return .retryable(retryable("\(step): \(e.message)", code: e.kind == .stalled ? .stalled : .network))
        }

        /// Renews the credentials before they expire (within the margin). A failed renewal is
        /// final only when the current credentials have already expired; else they are used, and
        /// renewed again on refusal.
        private func refreshIfExpiring() throws {
            guard client.proactiveRefreshDue() else { return }
            observer.upload(.credentialsExpired(id: id))
            do {
                _ = try client.refreshCredentials(reason: "credentials expire within \(Int(client.access.credentialRefreshMargin)) s")
            } catch let e as UploadError {
                if client.currentExpired() { throw e }
            }
        }

        /// Asks the credential provider for fresh keys; nil when there is no provider.
        private func refresh(_ reason: String) -> (() throws -> Void)? {
            guard client.provider != nil else { return nil }
            return { [client] in _ = try client.refreshCredentials(reason: reason) }
        }

        /// The error when the server refused the credentials as expired and they cannot be renewed.
        private func expiredRefusal(_ why: RequestDecisions.Refusal, info: S3ErrorInfo, step: String) -> UploadError {
            switch (why, audience) {
            case (.noProvider, .fileUpload):
                UploadError(
                    .credentialsExpired,
                    message:
                        "\(what): \(step): the server refused the credentials as expired (\(info.summary)) and no credential provider is configured to renew them",
                    retryable: false)
            case (.noProvider, .objects):
                UploadError(
                    .credentialsExpired,
                    message: "\(what): \(step): the server refused the credentials as expired (\(info.summary)); set fresh ones or give a credentials command",
                    retryable: true)
            default:
                UploadError(
                    .credentialsExpired,
                    message:
                        "\(what): \(step): the server refused the credentials (\(info.summary)) again right after they were renewed; check the credential provider",
                    retryable: true)
            }
        }

        /// A retryable failure; the policy's give-up error names the call and `reason`.
        func retryable(_ reason: String, retryAfter: Double? = nil, code: UploadErrorCode = .retry) -> Retryable {
            Retryable(reason: reason, retryAfter: retryAfter) { [what] retry in
                UploadError(
                    code, message: "\(what): \(reason); gave up after \(retry.policy.maxAttemptsWithoutProgress) attempts without progress",
                    retryable: true)
            }
        }

        /// The error for a final answer that is not a success. For object operations a missing
        /// object or bucket is `.badInput` ("s3://b/k: no such object"); nothing else is.
        func failure(_ r: HTTPResponse, step: String) -> UploadError {
            let info = S3ErrorInfo(r)
            if let refusal = S3Location.dotSegmentRefusal(key: location.key, status: r.status, serverCode: info.code, what: "\(what): \(step)") {
                return refusal
            }
            let keyID = maskAccessKeyID(client.credentials.accessKeyID)
            switch info.code {
            case "NoSuchBucket" where audience == .objects:
                return UploadError(.badInput, message: "\(what): no such bucket")
            case "NoSuchBucket":
                return UploadError(
                    .badInput,
                    message:
                        "\(what): \(step): the bucket '\(location.bucket)' does not exist at \(displayURL(client.access.options(bucket: "").trimmedEndpoint))")
            case "NoSuchKey" where audience == .objects:
                return UploadError(.badInput, message: "\(what): no such object")
            case "SignatureDoesNotMatch":
                return UploadError(
                    .credentials,
                    message:
                        "\(what): \(step): the server refused the request signature (\(info.code)): the secret access key for access key \(keyID) is wrong (or the region '\(client.access.region)' does not match the bucket's); check the credentials"
                )
            case "InvalidAccessKeyId":
                let renewed = requests.refreshedSinceAccepted ? ", also after asking the credential provider for fresh keys" : ""
                return UploadError(
                    .credentials, message: "\(what): \(step): the server does not know access key \(keyID) (\(info.code))\(renewed); check the credentials")
            case "RequestTimeTooSkewed":
                return UploadError(
                    .clockSkew,
                    message:
                        "\(what): \(step): the server refused the request time (\(info.summary)): this machine's clock is off; set it right (e.g. enable NTP) and try again"
                )
            case "AccessDenied":
                return UploadError(
                    .http(403), message: "\(what): \(step): access denied (\(info.summary)); the credentials lack permission for this bucket/key")
            default:
                if audience == .objects, r.status == 404, info.code.isEmpty { return UploadError(.badInput, message: "\(what): no such object") }
                return UploadError(.http(r.status), message: "\(what): \(step): \(info.summary)", retryable: isRetryableStatus(r.status))
            }
        }
    }

    /// AbortMultipartUpload with a transport of its own (the upload's is stopped by the cancel),
    /// best effort: a short timeout, errors ignored.
    func abortQuietly(bucket: String, key: String, uploadID: String) {
        var settings = access.network
        settings.connectTimeout = 5
        settings.stallTimeout = 10
        guard let transport = try? CurlTransport(settings: settings) else { return }
        var req = HTTPRequest(method: "DELETE", url: objectURL(bucket, key, query: [("uploadId", uploadID)]))
        for attempt in 0..<2 {
            sign(&req, payloadHash: SigV4Signer.emptyPayloadHash)
            guard let r = try? transport.perform(req) else { continue }
            if r.isSuccess || r.status == 404 { return }
            if attempt == 0, [400, 401, 403].contains(r.status), S3ErrorInfo(r).isExpiry {
                _ = try? refreshCredentials(reason: "abort refused: \(S3ErrorInfo(r).code)")
                continue
            }
            return
        }
    }
}

/// Turns a caller's `shouldAbort` poll into a pause of `control`, checked about every 50 ms
/// (`RepeatingTimer`), so that waits between retries stop too. `stop` ends the checks.
final class AbortWatch: Sendable {
    private let timer: RepeatingTimer

    init(control: UploadControl, shouldAbort: @escaping @Sendable () -> Bool) {
        timer = RepeatingTimer(every: 0.05, label: "clipflow.upload.abort-watch") {
            guard shouldAbort() else { return true }
            control.pause()
            return false
        }
    }

    func stop() { timer.stop() }
}

/// An access key id for messages: its first 4 characters (the key type, e.g. `AKIA`/`ASIA`/`STS.`)
/// and last 4, e.g. `AKIA…WXYZ`; only `…` and the last 4 for short ids.
func maskAccessKeyID(_ id: String) -> String {
    guard id.count > 4 else { return "…" }
    return id.count >= 12 ? "\(id.prefix(4))…\(id.suffix(4))" : "…\(id.suffix(4))"
}
