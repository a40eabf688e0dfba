import Foundation

/// Why an upload failed, as a type. `rawValue` is the stable spelling shown in messages, `failed`
/// events (`--events json`) and the queue file's `errorCode`; `init(rawValue:)` reads it back.
public enum UploadErrorCode: Sendable, Hashable, CustomStringConvertible {
    /// A file or setting that cannot be used as given (missing, unreadable, out of range).
    case badInput
    /// The file changed (size or modification time) while it was being uploaded.
    case fileChanged
    case fileRead
    case cancelled
    case paused
    case `internal`
    /// libcurl or libcrypto cannot be loaded.
    case libraries
    /// A local file of ours (queue, resume store) cannot be written.
    case output
    /// A transport failure the protocol did not classify further.
    case transport
    case network
    case stalled
    /// An answer too large to be a real answer.
    case badResponse
    case tls
    case invalid
    /// The server lacks something the upload needs (a TUS version, a checksum algorithm).
    case unsupported
    case tooLarge
    /// An answer that does not follow the protocol.
    case `protocol`
    case checksumMismatch
    /// A TUS server put the upload on another origin.
    case crossOrigin
    /// The TUS upload vanished on the server, also after creating it anew.
    case gone
    case conflict
    /// A TUS PATCH was accepted but stored nothing.
    case noProgress
    case credentials
    case credentialsExpired
    case clockSkew
    /// S3: retries without progress ran out.
    case retry
    /// Gcore: the hosting API kept failing.
    case api
    /// The queue's wrapper for an error that was not an `UploadError`.
    case failure
    /// S3: the multipart upload is no longer known to the server.
    case s3NoSuchUpload
    /// An HTTP status the protocol does not handle.
    case http(Int)
    /// An S3 error `<Code>` the uploader does not handle.
    case s3(String)

    private static let named: [(UploadErrorCode, String)] = [
        (.badInput, "bad-input"), (.fileChanged, "file-changed"), (.fileRead, "file-read"), (.cancelled, "cancelled"),
        (.paused, "paused"), (.internal, "internal"), (.libraries, "libraries"), (.output, "output"),
        (.transport, "transport"), (.network, "network"), (.stalled, "stalled"), (.badResponse, "bad-response"),
        (.tls, "tls"), (.invalid, "invalid"), (.unsupported, "unsupported"), (.tooLarge, "too-large"),
        (.protocol, "protocol"), (.checksumMismatch, "checksum-mismatch"), (.crossOrigin, "cross-origin"),
        (.gone, "gone"), (.conflict, "conflict"), (.noProgress, "no-progress"), (.credentials, "credentials"),
        (.credentialsExpired, "credentials-expired"), (.clockSkew, "clock-skew"), (.retry, "retry"), (.api, "api"),
        (.failure, "failure"), (.s3NoSuchUpload, "s3-no-such-upload")
    ]

    public var rawValue: String {
        switch self {
        case .http(let status): return "http-\(status)"
        case .s3(let code): return "s3-\(code)"
        default: return Self.named.first { $0.0 == self }?.1 ?? "internal"
        }
    }

    public init?(rawValue: String) {
        if let n = Self.named.first(where: { $0.1 == rawValue }) {
            self = n.0
        } else if rawValue.hasPrefix("http-"), let status = Int(rawValue.dropFirst(5)) {
            self = .http(status)
        } else if rawValue.hasPrefix("s3-"), rawValue.count > 3 {
            self = .s3(String(rawValue.dropFirst(3)))
        } else {
            return nil
        }
    }

    public var description: String { rawValue }
}
