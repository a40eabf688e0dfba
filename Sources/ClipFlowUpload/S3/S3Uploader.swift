import ClipFlowCore
import Foundation

/// `clipflow upload --to s3`: the `FileUploader` adapter of an `S3Client`. It resolves each
/// file's key and runs the client's multipart driver (`S3Client.FileUpload`) with the queue's
/// resume store, control (pause, cancel) and observer (events, progress); everything else (the
/// requests, their retries, the credentials and their renewal, signing) is the client's.
///
/// Several uploads may run at once on one `S3Uploader`, each on its caller's thread with a
/// transport of its own; they share the client's credentials (a refresh made by one is used by all).
///
/// Failures: network errors, stalls, 5xx, 503 SlowDown and 429 are retried per `RetryPolicy`
/// (`retryStarted`/`retryResumed` events). 401 and 400/403 `ExpiredToken`, `InvalidToken`,
/// `TokenRefreshRequired`, `SecurityTokenExpired` (OSS) ask the `CredentialProvider` for fresh
/// credentials (`credentialsExpired` event) and continue the same UploadId; so does an `expiration`
/// closer than `credentialRefreshMargin`. `InvalidAccessKeyId` (which OSS answers for expired STS
/// keys) gets one refresh when a provider is configured, then fails with code `credentials`;
/// `SignatureDoesNotMatch` fails at once (a wrong key is not fixed by asking again), and so does
/// `RequestTimeTooSkewed` (code `clock-skew`). Messages show access key ids masked (`AKIA…WXYZ`).
/// Cancel aborts the multipart upload and drops the record; a file that changes mid-upload (size
/// or mtime) does the same and fails with `file-changed`. No message or event contains a secret
/// key, session token or signature.
public final class S3Uploader: FileUploader, Sendable {
    public let options: S3Options
    public let store: ResumeStore
    public let client: S3Client

    /// A client for `options`' endpoint (`S3Options.access`), signing with `credentials` first.
    public init(options: S3Options, store: ResumeStore, credentials: AWSCredentials, provider: CredentialProvider? = nil) {
        self.options = options
        self.store = store
        client = S3Client(access: options.access(credentials: credentials, provider: provider))
    }

    /// The credentials currently in use (after any refresh).
    public var credentials: AWSCredentials { client.credentials }
    public var provider: CredentialProvider? { client.provider }

    public var destination: String { options.destination }

    /// See `S3Client.metadataHeaders`.
    public static func metadataHeaders(_ metadata: [String: String]) throws -> [(name: String, value: String)] {
        try S3Client.metadataHeaders(metadata)
    }

    public static func encodeMetadataValue(_ value: String) -> String { S3Client.encodeMetadataValue(value) }

    public static func decodeMetadataValue(_ value: String) -> String { S3Client.decodeMetadataValue(value) }

    public func upload(
        file: String, id: String, metadata: [String: String], control: UploadControl,
        observer: UploadObserver
    ) throws -> UploadResult {
        try client.upload(file: file, options: options, id: id, metadata: metadata, store: store, control: control, observer: observer)
    }

    public func discard(file: String) throws {
        client.discardUploads(file: file, bucket: options.bucket, destination: destination, store: store)
    }

    /// AbortMultipartUpload of `uploadID` at `key` of the bucket, best effort.
    func abortQuietly(key: String, uploadID: String) {
        client.abortQuietly(bucket: options.bucket, key: key, uploadID: uploadID)
    }
}
