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

    /// The first `.` or `..` segment of `key`, if it has one. Such keys are legal in S3 and are
    /// sent as written, but some servers refuse them and many tools rewrite them.
    public static func dotSegment(in key: String) -> String? {
        key.split(separator: "/", omittingEmptySubsequences: false).first { $0 == "." || $0 == ".." }.map(String.init)
    }

    /// The refusal of a request for `key` that a server answered `400` because of a `.`/`..`
    /// segment: bad input (asking again cannot help), naming the key and the segment. Nil when
    /// the answer is not a 400 or the key has no such segment.
    static func dotSegmentRefusal(key: String, status: Int, serverCode: String, what: String) -> UploadError? {
        guard status == 400, let segment = dotSegment(in: key) else { return nil }
        let answer = serverCode.isEmpty ? "" : " (\(serverCode))"
        return UploadError(
            .badInput,
            message:
                "\(what): the server refuses the key '\(key)'\(answer): it has a '\(segment)' segment, which this server does not accept; choose a key without '.' or '..' segments"
        )
    }
}
