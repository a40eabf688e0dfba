import Foundation
import ClipFlowCore
import Synchronization
internal import CClipFlowCurl

/// Digest algorithms the upload protocols use (TUS checksum extension, SigV4, fingerprints).
public enum DigestAlgorithm: String, Sendable, Codable, CaseIterable {
    case sha1, sha256, md5

    fileprivate var md: OpaquePointer? {
        switch self {
        case .sha1: return EVP_sha1()
        case .sha256: return EVP_sha256()
        case .md5: return EVP_md5()
        }
    }
}

/// Throws when libcurl or libcrypto (loaded on first use by the C shim) cannot be loaded, naming
/// the library and what to install. Every upload checks it before its first digest or request;
/// without the libraries, digests come out empty and requests fail.
public func checkUploadLibraries() throws {
    if let e = cf_curl_load_error() {
        throw UploadError(
            .libraries,
            message: "cannot upload: \(String(cString: e)); install libcurl4 and libssl3 (apt-get install libcurl4 libssl3)")
    }
}

/// A streaming digest (one owner of an `EVP_MD_CTX`). Confined to one thread at a time. Without
/// libcrypto (see `checkUploadLibraries`) it yields an empty digest.
public final class Digest {
    private let ctx: OpaquePointer?
    public let algorithm: DigestAlgorithm

    public init(_ algorithm: DigestAlgorithm) {
        self.algorithm = algorithm
        ctx = EVP_MD_CTX_new()
        if let ctx { EVP_DigestInit_ex(ctx, algorithm.md, nil) }
    }

    deinit { if let ctx { EVP_MD_CTX_free(ctx) } }

    public func update(_ bytes: UnsafeRawBufferPointer) {
        if let ctx, bytes.count > 0 { EVP_DigestUpdate(ctx, bytes.baseAddress, bytes.count) }
    }

    public func update(_ data: Data) { data.withUnsafeBytes { update($0) } }
    public func update(_ string: String) { update(Data(string.utf8)) }

    /// The digest; the object is spent afterwards.
    public func finish() -> [UInt8] {
        guard let ctx else { return [] }
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var n: UInt32 = 0
        EVP_DigestFinal_ex(ctx, &out, &n)
        return Array(out.prefix(Int(n)))
    }

    public static func hash(_ algorithm: DigestAlgorithm, _ data: Data) -> [UInt8] {
        let d = Digest(algorithm)
        d.update(data)
        return d.finish()
    }

    /// Digest of `length` bytes of a file from `offset`, read in 1 MiB blocks (bounded memory).
    public static func hash(_ algorithm: DigestAlgorithm, file path: String, offset: Int64, length: Int64) throws -> [UInt8] {
        try hash([algorithm], file: path, offset: offset, length: length)[0]
    }

    /// Digests of `length` bytes of a file from `offset`, one per algorithm, from one read of the
    /// range in 1 MiB blocks (bounded memory). `stop` is polled per block; when it returns true
    /// the read ends with `DigestCancelled`.
    public static func hash(
        _ algorithms: [DigestAlgorithm], file path: String, offset: Int64, length: Int64,
        stop: (() -> Bool)? = nil
    ) throws -> [[UInt8]] {
        try checkUploadLibraries()
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw UploadError(.badInput, message: "\(path): cannot open for reading: \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        let digests = algorithms.map { Digest($0) }
        let block = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: block, alignment: 16)
        defer { buffer.deallocate() }
        var done: Int64 = 0
        while done < length {
            if let stop, stop() { throw DigestCancelled() }
            let want = Int(min(Int64(block), length - done))
            let n = pread(fd, buffer.baseAddress, want, off_t(offset + done))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                throw UploadError(
                    .fileChanged, message: "\(path): could not read bytes \(offset + done)..\(offset + length) (the file is shorter than expected)")
            }
            for d in digests { d.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n])) }
            done += Int64(n)
        }
        return digests.map { $0.finish() }
    }

    /// HMAC-SHA256 of `data` under `key` (SigV4 key derivation and signature).
    public static func hmacSHA256(key: [UInt8], _ data: Data) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var n: UInt32 = 0
        key.withUnsafeBufferPointer { k in
            data.withUnsafeBytes { d in
                _ = HMAC(
                    EVP_sha256(), k.baseAddress, Int32(k.count),
                    d.baseAddress?.assumingMemoryBound(to: UInt8.self), d.count, &out, &n)
            }
        }
        return Array(out.prefix(Int(n)))
    }
}

/// A range digest abandoned because its `RangeDigester` was stopped.
public struct DigestCancelled: Error {}

/// Digests of file ranges computed one range ahead on a background thread, so that hashing the
/// next chunk (TUS `Upload-Checksum`) or part (S3 `x-amz-content-sha256`, MD5 for the ETag)
/// overlaps with sending the current one instead of stalling the connection between requests.
///
/// Bounded: at most one range is being hashed ahead, and only its digests are kept (the bytes are
/// read in 1 MiB blocks and dropped); they are handed to the session's thread through a
/// `BoundedQueue` of one. `digests(offset:length:)` takes a matching prefetched result (waiting for
/// it if it is still running) or hashes inline; a result is used once, so a resend after a
/// checksum mismatch hashes the bytes again. Owned by one upload session; the session's thread
/// calls `prefetch`/`digests`, the hashing runs on a private serial queue.
public final class RangeDigester: Sendable {
    public let path: String
    public let algorithms: [DigestAlgorithm]
    private let worker = DispatchQueue(label: "clipflow.upload.digest-ahead", qos: .userInitiated)
    /// The digests of the range in `State.pending` (or the error computing them), once computed.
    private let ahead = BoundedQueue<Result<[[UInt8]], Error>>(capacity: 1)
    private let stopped = CancellationFlag()
    private struct Range: Equatable {
        var offset: Int64
        var length: Int64
    }
    private struct State {
        /// The range prefetched whose result is in `ahead` or on its way there, not yet taken.
        var pending: Range?
        var prefetchHits = 0
        var inlineHashes = 0
    }
    private let state = Mutex(State())

    /// Ranges served from a prefetch / hashed inline (diagnostics and tests).
    public var prefetchHits: Int { state.withLock { $0.prefetchHits } }
    public var inlineHashes: Int { state.withLock { $0.inlineHashes } }

    public init(path: String, algorithms: [DigestAlgorithm]) {
        self.path = path
        self.algorithms = algorithms
    }

    deinit { stop() }

    /// Starts hashing `length` bytes at `offset` in the background, unless a prefetch is still
    /// running (one range ahead at most) or the range is empty.
    public func prefetch(offset: Int64, length: Int64) {
        guard length > 0, !algorithms.isEmpty, !stopped.isCancelled else { return }
        let range = Range(offset: offset, length: length)
        let start = state.withLock { s -> Bool in
            if let p = s.pending {
                if p == range { return false }
                // Another range's result, unused: drop it, unless it is still being computed.
                if self.ahead.tryPull() == nil { return false }
            }
            s.pending = range
            return true
        }
        guard start else { return }
        let path = self.path, algorithms = self.algorithms, ahead = self.ahead, stopped = self.stopped
        worker.async {
            ahead.push(
                Result { try Digest.hash(algorithms, file: path, offset: offset, length: length, stop: { stopped.isCancelled }) })
        }
    }

    /// The digests of the range (in `algorithms` order): the prefetched ones when they match,
    /// else hashed now on the calling thread.
    public func digests(offset: Int64, length: Int64) throws -> [[UInt8]] {
        let range = Range(offset: offset, length: length)
        let prefetched = state.withLock { s -> Bool in
            guard s.pending == range else { return false }
            s.pending = nil
            return true
        }
        if prefetched, let p = ahead.pull(), case .success(let d) = p.element {
            state.withLock { $0.prefetchHits += 1 }
            return d
        }
        state.withLock { $0.inlineHashes += 1 }
        // A failed or cancelled prefetch is redone here, so its error is the current one.
        return try Digest.hash(algorithms, file: path, offset: offset, length: length)
    }

    /// Abandons any background work (it ends at its next 1 MiB block) and its result.
    public func stop() {
        stopped.cancel()
        ahead.flush()
    }
}

extension Array where Element == UInt8 {
    public var hex: String { map { String(format: "%02x", $0) }.joined() }
    public var base64: String { Data(self).base64EncodedString() }
}
