import Foundation

/// Options of a TUS upload destination. Holds no secrets (credentials come through the
/// uploader's `headers` hook), so it can live in a pipeline spec.
public struct TUSOptions: Codable, Sendable, Equatable {
    public enum Checksum: String, Codable, Sendable, CaseIterable {
        /// sha256, else sha1, when the server offers the checksum extension with one of them.
        case auto
        case off
        /// Only this algorithm: the upload fails when the server does not offer it.
        case sha1
        case sha256
    }

    /// The creation URL (e.g. `https://tus.example.com/files/`).
    public var endpoint: String
    /// Bytes per PATCH. Memory does not depend on it: bodies are streamed from the file through the
    /// transport's upload buffer.
    ///
    /// Default 16 MiB. Every chunk ends with a wait for the server's answer (one round trip with
    /// the link idle, and TCP may shrink its window after the idle), so small chunks waste a
    /// large share of a fast link: at 1 Gbit/s and 30 ms RTT, 8 MiB chunks keep it busy ~70% of
    /// the time, 16 MiB ~80%, 64 MiB ~95%. Bigger is not free either: servers that store a chunk
    /// only when it arrives whole (PyPI resumable-upload; tusd keeps partial bytes) resend a cut
    /// chunk from its start, and some read a whole chunk into memory — a Python server then
    /// gets a fresh mmap per chunk from 32 MiB on (glibc's largest mmap threshold): measured over
    /// loopback, 16 and 24 MiB chunks were fastest (0.58 s for 512 MB), 32 MiB 0.82 s, 8 MiB 1.06 s.
    public static let defaultChunkSize: Int64 = 16 << 20
    public var chunkSize: Int64 = TUSOptions.defaultChunkSize
    public var checksum: Checksum = .auto
    /// Extra non-secret headers sent with every request.
    public var headers: [String: String] = [:]
    public var retry: RetryPolicy = RetryPolicy()
    public var transport: TransportSettings = TransportSettings()
    /// Send the first chunk in the creation POST when the server offers creation-with-upload.
    public var creationWithUpload: Bool = true
    /// On cancel, DELETE the upload on the server (termination extension) before dropping the record.
    public var deleteOnCancel: Bool = true
    /// Sends of one chunk the server rejects with 460 (checksum mismatch) before giving up.
    public var maxChecksumAttempts: Int = 3
    /// Minimum seconds between progress events (the last one is always sent).
    public var progressInterval: Double = 0.25

    public init(
        endpoint: String, chunkSize: Int64 = TUSOptions.defaultChunkSize, checksum: Checksum = .auto, headers: [String: String] = [:],
        retry: RetryPolicy = RetryPolicy(), transport: TransportSettings = TransportSettings(),
        creationWithUpload: Bool = true, deleteOnCancel: Bool = true, maxChecksumAttempts: Int = 3
    ) {
        self.endpoint = endpoint
        self.chunkSize = chunkSize
        self.checksum = checksum
        self.headers = headers
        self.retry = retry
        self.transport = transport
        self.creationWithUpload = creationWithUpload
        self.deleteOnCancel = deleteOnCancel
        self.maxChecksumAttempts = maxChecksumAttempts
    }

    private enum CodingKeys: String, CodingKey {
        case endpoint, chunkSize, checksum, headers, retry, transport, creationWithUpload, deleteOnCancel, maxChecksumAttempts, progressInterval
    }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(endpoint: try c.decode(String.self, forKey: .endpoint))
        chunkSize = try c.decodeIfPresent(Int64.self, forKey: .chunkSize) ?? chunkSize
        checksum = try c.decodeIfPresent(Checksum.self, forKey: .checksum) ?? checksum
        headers = try c.decodeIfPresent([String: String].self, forKey: .headers) ?? headers
        retry = try c.decodeIfPresent(RetryPolicy.self, forKey: .retry) ?? retry
        transport = try c.decodeIfPresent(TransportSettings.self, forKey: .transport) ?? transport
        creationWithUpload = try c.decodeIfPresent(Bool.self, forKey: .creationWithUpload) ?? creationWithUpload
        deleteOnCancel = try c.decodeIfPresent(Bool.self, forKey: .deleteOnCancel) ?? deleteOnCancel
        maxChecksumAttempts = try c.decodeIfPresent(Int.self, forKey: .maxChecksumAttempts) ?? maxChecksumAttempts
        progressInterval = try c.decodeIfPresent(Double.self, forKey: .progressInterval) ?? progressInterval
        guard chunkSize > 0 else {
            throw DecodingError.dataCorruptedError(forKey: .chunkSize, in: c, debugDescription: "chunkSize must be positive")
        }
    }
}

/// What the server said in answer to OPTIONS.
public struct TUSCapabilities: Sendable, Equatable {
    public var versions: [String]
    public var extensions: Set<String>
    public var checksumAlgorithms: [String]
    public var maxSize: Int64?

    public func offers(_ ext: String) -> Bool { extensions.contains(ext) }
}

/// Where a new TUS upload is created and what it carries. Plain TUS uses the options' endpoint;
/// the Gcore flow asks its API for a per-video URL and token.
public struct TUSTarget: Sendable {
    public var endpoint: String
    /// Upload-Metadata beyond filename/filetype (which the uploader adds unless present).
    public var metadata: [String: String]
    /// Kept in the resume record (e.g. the hosting's video id).
    public var extra: [String: String]

    public init(endpoint: String, metadata: [String: String] = [:], extra: [String: String] = [:]) {
        self.endpoint = endpoint
        self.metadata = metadata
        self.extra = extra
    }
}

/// Counters of the last `upload` call (diagnostics and tests).
public struct TUSRunStats: Sendable, Equatable {
    public var requests: [String: Int] = [:]
    public var checksumResends = 0
    public var recreated = 0
    public var credentialRefreshes = 0
    public var terminated: [String] = []
    public var checksumAlgorithm: String?
    public var uploadURL: String?
}
