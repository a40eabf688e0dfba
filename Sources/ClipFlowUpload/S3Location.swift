import Foundation

/// An object or a folder of objects in S3-compatible storage, as the AWS tools write it:
/// `s3://bucket/key`. `key` is an object's key, or "" / a prefix ending in "/" for a folder.
public struct S3Location: Sendable, Equatable, Hashable, CustomStringConvertible {
    public var bucket: String
    public var key: String

    public init(bucket: String, key: String) {
        self.bucket = bucket
        self.key = key
    }

    /// Parses `s3://bucket[/key]`. Nil when `url` is not an s3:// URL or names no bucket. The key
    /// is everything after the first "/" following the bucket, as written (no decoding).
    public init?(url: String) {
        guard Self.isS3URL(url) else { return nil }
        let rest = url.dropFirst(Self.scheme.count)
        let bucket = rest.prefix(while: { $0 != "/" })
        guard !bucket.isEmpty else { return nil }
        self.bucket = String(bucket)
        self.key = String(rest.dropFirst(bucket.count + 1))
    }

    static let scheme = "s3://"

    /// Whether `s` is written as an s3:// URL.
    public static func isS3URL(_ s: String) -> Bool { s.hasPrefix(scheme) }

    /// `s3://bucket/key`
    public var description: String { "\(Self.scheme)\(bucket)/\(key)" }

    /// Whether `key` names a folder (empty, or ending in "/").
    public var isPrefix: Bool { key.isEmpty || key.hasSuffix("/") }
}
