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

/// A streaming digest (one owner of an `EVP_MD_CTX`). Confined to one thread at a time.
public final class Digest {
    private let ctx: OpaquePointer
    public let algorithm: DigestAlgorithm

    public init(_ algorithm: DigestAlgorithm) {
        self.algorithm = algorithm
        ctx = EVP_MD_CTX_new()
        EVP_DigestInit_ex(ctx, algorithm.md, nil)
    }

    deinit { EVP_MD_CTX_free(ctx) }

    public func update(_ bytes: UnsafeRawBufferPointer) {
        if bytes.count > 0 { EVP_DigestUpdate(ctx, bytes.baseAddress, bytes.count) }
    }

    public func update(_ data: Data) { data.withUnsafeBytes { update($0) } }
    public func update(_ string: String) { update(Data(string.utf8)) }

    /// The digest; the object is spent afterwards.
    public func finish() -> [UInt8] {
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
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else {
            throw UploadError(code: "bad-input", message: "\(path): cannot open for reading: \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        let d = Digest(algorithm)
        let block = 1 << 20
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: block, alignment: 16)
        defer { buffer.deallocate() }
        var done: Int64 = 0
        while done < length {
            let want = Int(min(Int64(block), length - done))
            let n = pread(fd, buffer.baseAddress, want, off_t(offset + done))
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else {
                throw UploadError(code: "file-changed", message: "\(path): could not read bytes \(offset + done)..\(offset + length) (the file is shorter than expected)")
            }
            d.update(UnsafeRawBufferPointer(rebasing: buffer[0..<n]))
            done += Int64(n)
        }
        return d.finish()
    }

    /// HMAC-SHA256 of `data` under `key` (SigV4 key derivation and signature).
    public static func hmacSHA256(key: [UInt8], _ data: Data) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var n: UInt32 = 0
        key.withUnsafeBufferPointer { k in
            data.withUnsafeBytes { d in
                _ = HMAC(EVP_sha256(), k.baseAddress, Int32(k.count),
                         d.baseAddress?.assumingMemoryBound(to: UInt8.self), d.count, &out, &n)
            }
        }
        return Array(out.prefix(Int(n)))
    }
}

extension Array where Element == UInt8 {
    public var hex: String { map { String(format: "%02x", $0) }.joined() }
    public var base64: String { Data(self).base64EncodedString() }
}
