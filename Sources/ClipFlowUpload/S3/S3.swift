import Foundation
import ClipFlowCore
import Synchronization

/// Uploads files to S3-compatible storage with multipart upload, resumable across processes.
///
/// One `upload` call runs on the caller's thread, with its own `CurlTransport` (one connection,
/// reused between requests). Several uploads may run at once on one `S3Uploader`; they share the
/// current credentials (a refresh made by one is used by all).
///
/// Flow: CreateMultipartUpload (the UploadId, key and part size are saved in the `ResumeStore`
/// at once) -> UploadPart for each part not yet on the server (body streamed from the file range,
/// signed with its real SHA-256 unless `payloadSigning` is `.unsigned`; the returned ETag is
/// checked against the part's MD5 when it is a plain MD5) -> CompleteMultipartUpload -> record
/// dropped. A later call for the same file and destination asks ListParts (all pages) and sends
/// only what is missing; a record whose upload the server no longer knows (404 NoSuchUpload)
/// starts anew. A zero-byte file is sent with one PutObject (multipart needs at least one part).
///
/// Failures: network errors, stalls, 5xx, 503 SlowDown and 429 are retried per `RetryPolicy`
/// (`retryStarted`/`retryResumed` events). 401 and 400/403 `ExpiredToken`, `InvalidToken`,
/// `TokenRefreshRequired`, `SecurityTokenExpired` (OSS) ask the `CredentialProvider` for fresh
/// credentials (`credentialsExpired` event) and continue the same UploadId; so does an `expiration`
/// closer than `credentialRefreshMargin`. `InvalidAccessKeyId` (which OSS answers for expired STS
/// keys) gets one refresh when a provider is configured, then fails with code `credentials`;
/// `SignatureDoesNotMatch` fails at once (a wrong key is not fixed by asking again), and so does
/// `RequestTimeTooSkewed` (code `clock-skew`). Messages show access key ids masked (`AKIA…WXYZ`).
/// Cancel aborts the multipart
/// upload and drops the record; a file that changes mid-upload (size or mtime) does the same and
/// fails with `file-changed`. No message or event contains a secret key, session token or
/// signature.
public final class S3Uploader: FileUploader, Sendable {
    public let options: S3Options
    public let store: ResumeStore
    public let provider: CredentialProvider?
    private let credentialsBox: Mutex<AWSCredentials>
    /// When the last proactive (expiration-driven) refresh happened, to ask at most every 30 s.
    private let lastProactiveRefresh = Mutex<Date?>(nil)

    public init(options: S3Options, store: ResumeStore, credentials: AWSCredentials, provider: CredentialProvider? = nil) {
        self.options = options
        self.store = store
        self.provider = provider
        self.credentialsBox = Mutex(credentials)
    }

    /// The credentials currently in use (after any refresh).
    public var credentials: AWSCredentials { credentialsBox.withLock { $0 } }

    public var destination: String {
        "s3 \(options.trimmedEndpoint) bucket=\(options.bucket) key=\(options.key ?? options.keyPrefix + "<file name>")"
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

    // MARK: FileUploader

    public func upload(
        file: String, id: String, metadata: [String: String], control: UploadControl,
        observer: UploadObserver
    ) throws -> UploadResult {
        let path = URL(fileURLWithPath: file).standardizedFileURL.path
        let session: S3Session
        do {
            session = try S3Session(uploader: self, path: path, id: id, control: control, observer: observer)
        } catch let e as UploadError {
            let e = e.concerning(path)
            observer.upload(.failed(id: id, code: e.code, message: e.message))
            throw e
        }
        do {
            let merged = options.metadata.merging(metadata) { _, new in new }
            let result = try session.run(metadata: merged)
            observer.upload(.finished(id: id, result))
            return result
        } catch let e as UploadError {
            let e = e.concerning(path)
            switch e.kind {
            case .cancelled:
                session.abandon()
                observer.upload(.cancelled(id: id))
            case .paused:
                observer.upload(.paused(id: id))
            case .fileChanged:
                session.abandon()
                observer.upload(.failed(id: id, code: e.code, message: e.message))
            default:
                observer.upload(.failed(id: id, code: e.code, message: e.message))
            }
            throw e
        } catch {
            let e = UploadError(.internal, message: "S3 upload: \(error)").concerning(path)
            observer.upload(.failed(id: id, code: e.code, message: e.message))
            throw e
        }
    }

    public func discard(file: String) throws {
        let path = URL(fileURLWithPath: file).standardizedFileURL.path
        var records: [ResumeRecord] = []
        if let fp = try? FileFingerprint.of(path) {
            if let r = store.record(for: fp, destination: destination) { records.append(r) }
            records += store.staleRecords(path: path, destination: destination, current: fp)
        } else {
            records = store.all.filter { $0.fingerprint.path == path && $0.destination == destination }
        }
        for r in records {
            if let uploadID = r.uploadID, let key = r.objectKey { abortQuietly(key: key, uploadID: uploadID) }
            try? store.remove(r)
        }
    }

    // MARK: Shared plumbing (used by S3Session)

    func currentCredentials() -> AWSCredentials { credentialsBox.withLock { $0 } }

    /// Asks the provider for fresh credentials. Returns false when there is no provider.
    func refreshCredentials(reason: String) throws -> Bool {
        guard let provider else { return false }
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
        guard provider != nil, let exp = currentCredentials().expiration,
            exp.timeIntervalSinceNow < options.credentialRefreshMargin
        else { return false }
        return lastProactiveRefresh.withLock { last in
            if let l = last, Date().timeIntervalSince(l) < 30 { return false }
            last = Date()
            return true
        }
    }

    func sign(_ request: inout HTTPRequest, payloadHash: String) {
        SigV4Signer(credentials: currentCredentials(), region: options.region).sign(&request, payloadHash: payloadHash)
    }

    /// AbortMultipartUpload with a transport of its own (the upload's is stopped by the cancel),
    /// best effort: a short timeout, errors ignored.
    func abortQuietly(key: String, uploadID: String) {
        var settings = options.network
        settings.connectTimeout = 5
        settings.stallTimeout = 10
        guard let transport = try? CurlTransport(settings: settings) else { return }
        var req = HTTPRequest(method: "DELETE", url: options.objectURL(key: key) + "?uploadId=" + SigV4Signer.uriEncode(uploadID, keepSlash: false))
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
