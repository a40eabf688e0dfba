import Foundation
import ClipFlowCore

/// Where and how `S3Uploader` puts files: an S3-compatible endpoint (AWS S3, Alibaba OSS's S3
/// endpoint, MinIO, moto), the bucket and key, and how the multipart upload is cut and signed.
/// Holds no secret (credentials are passed to `S3Uploader` separately), so it can be written into
/// a pipeline file. The flags (`clipflow upload --to s3 ...`, `UploadDestination.makeUploader`)
/// make one; its connection settings become the client's `S3Access` through `access`, the same
/// value `S3Access.fromEnvironment` makes from the AWS tools' variables.
public struct S3Options: Codable, Sendable, Equatable {
    public enum AddressingStyle: String, Codable, Sendable, Equatable, CaseIterable {
        /// `https://endpoint/bucket/key` (MinIO, moto, any endpoint).
        case path
        /// `https://bucket.endpoint/key` (AWS's default, required by OSS).
        case virtual
    }

    /// e.g. `https://s3.eu-central-1.amazonaws.com`, `https://oss-cn-hangzhou.aliyuncs.com`,
    /// `http://127.0.0.1:9000`. A trailing `/` is ignored.
    public var endpoint: String
    public var region: String
    public var bucket: String
    /// The object key. nil: `keyPrefix` + the file's name.
    public var key: String?
    /// Prepended to the file name when `key` is nil (e.g. `videos/2025/`).
    public var keyPrefix: String
    public var addressingStyle: AddressingStyle
    /// Bytes per part. nil: automatic (see `partSize(forFileSize:)`).
    public var partSize: Int64?
    /// The backend's smallest allowed part (all parts but the last): 5 MiB for AWS S3, 100 KB
    /// for OSS; moto's `S3_UPLOAD_PART_MIN_SIZE`.
    public var minimumPartSize: Int64
    /// The backend's largest part count (10,000 for S3 and OSS).
    public var maximumParts: Int
    /// nil: from the file extension (`video/mp4`, `video/quicktime`, ...).
    public var contentType: String?
    /// User metadata sent as `x-amz-meta-<name>` with every upload (title, description, tags,
    /// category, cover-url, ...); the per-upload metadata given to `upload` is merged over it.
    /// See `S3Client.metadataHeaders` for how names and non-ASCII values are encoded.
    public var metadata: [String: String]
    public var retry: RetryPolicy
    /// Timeouts (stall, connect) and TLS.
    public var network: TransportSettings
    public var payloadSigning: PayloadSigning
    /// On resume, re-read each part the server already has and compare its MD5 with the part's
    /// ETag (skipped for ETags that are not a plain MD5, e.g. SSE-KMS); a mismatch re-uploads it.
    public var verifyResumedParts: Bool
    /// Credentials whose `expiration` is closer than this many seconds are refreshed (through the
    /// provider) before the next request.
    public var credentialRefreshMargin: Double

    public static let awsMinimumPartSize: Int64 = 5 << 20
    public static let ossMinimumPartSize: Int64 = 100 << 10

    public init(
        endpoint: String, region: String, bucket: String, key: String? = nil, keyPrefix: String = "",
        addressingStyle: AddressingStyle = .path, partSize: Int64? = nil,
        minimumPartSize: Int64 = S3Options.awsMinimumPartSize, maximumParts: Int = 10_000,
        contentType: String? = nil, metadata: [String: String] = [:], retry: RetryPolicy = RetryPolicy(),
        network: TransportSettings = TransportSettings(), payloadSigning: PayloadSigning = .signed,
        verifyResumedParts: Bool = true, credentialRefreshMargin: Double = 60
    ) {
        self.endpoint = endpoint
        self.region = region
        self.bucket = bucket
        self.key = key
        self.keyPrefix = keyPrefix
        self.addressingStyle = addressingStyle
        self.partSize = partSize
        self.minimumPartSize = minimumPartSize
        self.maximumParts = maximumParts
        self.contentType = contentType
        self.metadata = metadata
        self.retry = retry
        self.network = network
        self.payloadSigning = payloadSigning
        self.verifyResumedParts = verifyResumedParts
        self.credentialRefreshMargin = credentialRefreshMargin
    }

    /// The automatic part size aims at this (files of 1 GiB and more), see `partSize(forFileSize:)`.
    public static let targetPartSize: Int64 = 64 << 20

    /// The part size for a file of `size` bytes. Automatic: a sixteenth of the file, but at most
    /// `targetPartSize` (64 MiB), rounded up to a multiple of 1 MiB, and never below
    /// `minimumPartSize` or so small that the file needs more than `maximumParts` parts (above
    /// 640 GiB the parts grow past 64 MiB). Each part ends with a
    /// wait for the answer, so few big parts keep a fast link busy (5 MiB parts at 1 Gbit/s and
    /// 30 ms RTT: ~60% busy; 64 MiB: ~95%); a sixteenth keeps mid-size files at ~16 parts, so a
    /// cut part (resent whole) costs at most ~6% of the file. An explicit `partSize`
    /// is used as given (it may be below 1 MiB, for backends that allow it) but raised when the
    /// file would need more than `maximumParts` parts; below `minimumPartSize` it is refused.
    public func partSize(forFileSize size: Int64) throws -> Int64 {
        let maxParts = Int64(max(1, maximumParts))
        let floorForCount = (size + maxParts - 1) / maxParts
        if let p = partSize {
            guard p >= minimumPartSize, p > 0 else {
                throw UploadError(
                    .badInput, message: "S3 part size \(p) is below the backend's minimum of \(minimumPartSize) bytes; raise partSize or lower minimumPartSize")
            }
            return max(p, floorForCount)
        }
        let mib: Int64 = 1 << 20
        let want = max(minimumPartSize, floorForCount, min(S3Options.targetPartSize, (size + 15) / 16), 1)
        return (want + mib - 1) / mib * mib
    }

    /// The key for `file`.
    public func objectKey(for file: String) -> String {
        key ?? (keyPrefix + URL(fileURLWithPath: file).lastPathComponent)
    }

    /// The client's settings for this endpoint: endpoint, region, addressing, network, retries
    /// and the refresh margin, with the first `credentials` and the `provider` that renews them.
    public func access(credentials: AWSCredentials, provider: CredentialProvider?) -> S3Access {
        S3Access(
            endpoint: endpoint, region: region, addressingStyle: addressingStyle, credentials: credentials, provider: provider, network: network,
            retry: retry, credentialRefreshMargin: credentialRefreshMargin)
    }

    /// What resume records of uploads to this destination are filed under.
    var destination: String { "s3 \(trimmedEndpoint) bucket=\(bucket) key=\(key ?? keyPrefix + "<file name>")" }

    var trimmedEndpoint: String {
        var e = endpoint
        while e.hasSuffix("/") { e.removeLast() }
        return e
    }

    /// The object's URL (no query), with the key encoded for the path.
    public func objectURL(key: String) -> String {
        let encodedKey = SigV4Signer.uriEncode(key, keepSlash: true)
        switch addressingStyle {
        case .path:
            return "\(trimmedEndpoint)/\(SigV4Signer.uriEncode(bucket, keepSlash: false))/\(encodedKey)"
        case .virtual:
            guard let r = trimmedEndpoint.range(of: "://") else { return "\(bucket).\(trimmedEndpoint)/\(encodedKey)" }
            return "\(trimmedEndpoint[..<r.upperBound])\(bucket).\(trimmedEndpoint[r.upperBound...])/\(encodedKey)"
        }
    }

    /// The content type to send for `file`.
    public func contentType(for file: String) -> String {
        contentType ?? mimeType(forExtension: URL(fileURLWithPath: file).pathExtension)
    }
}
