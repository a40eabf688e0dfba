import Foundation
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
/// read in 1 MiB blocks and dropped). `digests(offset:length:)` takes a matching prefetched result
/// (waiting for it if it is still running) or hashes inline; a result is used once, so a resend
/// after a checksum mismatch hashes the bytes again. Owned by one upload session; the session's
/// thread calls `prefetch`/`digests`, the work runs on a private serial queue.
public final class RangeDigester: @unchecked Sendable {
    public let path: String
    public let algorithms: [DigestAlgorithm]
    private let queue = DispatchQueue(label: "clipflow.upload.digest-ahead", qos: .userInitiated)
    private let cond = NSCondition()
    // Guarded by `cond`.
    private var key: (offset: Int64, length: Int64)?
    private var result: Result<[[UInt8]], Error>?
    private var running = false
    private var stopped = false
    /// Ranges served from a prefetch / hashed inline (diagnostics and tests).
    public private(set) var prefetchHits = 0
    public private(set) var inlineHashes = 0

    public init(path: String, algorithms: [DigestAlgorithm]) {
        self.path = path
        self.algorithms = algorithms
    }

    deinit { stop() }

    /// Starts hashing `length` bytes at `offset` in the background, unless a prefetch is still
    /// running (one range ahead at most) or the range is empty.
    public func prefetch(offset: Int64, length: Int64) {
        guard length > 0, !algorithms.isEmpty else { return }
        cond.lock()
        defer { cond.unlock() }
        if stopped || running { return }
        if let k = key, k.offset == offset, k.length == length, result != nil { return }
        key = (offset, length)
        result = nil
        running = true
        let path = self.path, algorithms = self.algorithms
        queue.async { [self] in
            let r = Result { try Digest.hash(algorithms, file: path, offset: offset, length: length, stop: { self.isStopped }) }
            cond.lock()
            result = r
            running = false
            cond.broadcast()
            cond.unlock()
        }
    }

    /// The digests of the range (in `algorithms` order): the prefetched ones when they match,
    /// else hashed now on the calling thread.
    public func digests(offset: Int64, length: Int64) throws -> [[UInt8]] {
        cond.lock()
        if let k = key, k.offset == offset, k.length == length {
            while running { cond.wait() }
            let r = result
            key = nil
            result = nil
            if let r, case .success(let d) = r {
                prefetchHits += 1
                cond.unlock()
                return d
            }
        }
        inlineHashes += 1
        cond.unlock()
        // A failed or cancelled prefetch is redone here, so its error is the current one.
        return try Digest.hash(algorithms, file: path, offset: offset, length: length)
    }

    private var isStopped: Bool {
        cond.lock()
        defer { cond.unlock() }
        return stopped
    }

    /// Abandons any background work (it ends at its next 1 MiB block).
    public func stop() {
        cond.lock()
        stopped = true
        cond.unlock()
    }
}

extension Array where Element == UInt8 {
    public var hex: String { map { String(format: "%02x", $0) }.joined() }
    public var base64: String { Data(self).base64EncodedString() }
}
