import ClipFlowCore
import ClipFlowUpload
import Foundation

/// The server's tokens, signed with a secret kept in the data folder (made once, mode 0600), so
/// they outlive a restart and need no table:
/// - access tokens for the management API (`POST /auth/refresh` with the API key as the refresh
///   token issues one; the API key itself is accepted too), valid `accessLifetime` seconds;
/// - upload tokens, each scoped to one video and valid `uploadLifetime` seconds (what
///   `GET /videos/{id}/upload` hands out and a TUS upload carries in its metadata).
/// - playback tokens, each for one video's media (`/media/ID/`) or a folder below it, valid until
///   the expiry the API gave it (`POST /videos/{id}/token`), the only way to a `signed` video.
/// A token is `KIND.SUBJECT.EXPIRY.SIGNATURE` (HMAC-SHA256, base64url). Thread-safe; `Sendable`.
final class Tokens: Sendable {
    private let secret: [UInt8]
    let apiKey: String?
    let accessLifetime: Double
    let uploadLifetime: Double

    /// Tokens signed with the secret in `DATA/token-secret`.
    convenience init(data: URL, apiKey: String?, accessLifetime: Double = 3600, uploadLifetime: Double = 24 * 3600) throws {
        try self.init(secret: Self.secret(in: data), apiKey: apiKey, accessLifetime: accessLifetime, uploadLifetime: uploadLifetime)
    }

    /// Tokens signed with `secret` (servers sharing a PostgreSQL database share it there).
    init(secret: [UInt8], apiKey: String?, accessLifetime: Double = 3600, uploadLifetime: Double = 24 * 3600) {
        self.apiKey = (apiKey ?? "").isEmpty ? nil : apiKey
        self.accessLifetime = accessLifetime
        self.uploadLifetime = uploadLifetime
        self.secret = secret
        if let k = self.apiKey { Secrets.shared.register(k) }
    }

    /// The 32-byte secret in `DATA/token-secret`, made when missing or not 32 bytes. A new secret
    /// is private from its first byte: written to a new temporary file opened 0600 with O_EXCL,
    /// made durable, then linked to its name (another server sharing the folder that made one
    /// first wins, and both use it) or renamed over a damaged one. An existing secret readable by
    /// others is made 0600.
    static func secret(in data: URL) throws -> [UInt8] {
        let path = data.appendingPathComponent("token-secret").path
        for _ in 0..<3 {
            if let existing = try readSecret(path) { return existing }
            let fresh = (0..<32).map { _ in UInt8.random(in: 0...255) }
            let temporary = "\(path).clipflow-tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            defer { unlink(temporary) }
            try writePrivate(temporary, fresh)
            if link(temporary, path) != 0 {
                guard errno == EEXIST else { throw failure("cannot write", path) }
                // Present but damaged (readSecret found no 32 bytes): replace it, unless another
                // server has just made a good one (read again first).
                if try readSecret(path) == nil, rename(temporary, path) != 0 { throw failure("cannot write", path) }
            }
            let folder = open(data.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
            if folder >= 0 {
                _ = fsync(folder)
                close(folder)
            }
        }
        guard let made = try readSecret(path) else { throw ClipFlowError.output("'\(path)': the token secret keeps changing; is another program writing it?") }
        return made
    }

    /// The secret at `path` (nil: missing, or not 32 bytes), made 0600 when it was looser.
    private static func readSecret(_ path: String) throws -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC)
        guard fd >= 0 else {
            if errno == ENOENT { return nil }
            throw failure("cannot read", path)
        }
        defer { close(fd) }
        var st = stat()
        guard fstat(fd, &st) == 0 else { throw failure("cannot read", path) }
        guard (st.st_mode & S_IFMT) == S_IFREG, st.st_size == 32 else { return nil }
        if st.st_mode & 0o077 != 0, fchmod(fd, 0o600) != 0 { throw failure("cannot make private (chmod 0600)", path) }
        var bytes = [UInt8](repeating: 0, count: 32)
        let n = bytes.withUnsafeMutableBytes { pread(fd, $0.baseAddress, 32, 0) }
        return n == 32 ? bytes : nil
    }

    /// A new file at `path` holding `bytes`, mode 0600 from its creation, durable when this returns.
    private static func writePrivate(_ path: String, _ bytes: [UInt8]) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw failure("cannot create", path) }
        defer { close(fd) }
        let written = bytes.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
        guard written == bytes.count, fsync(fd) == 0 else { throw failure("cannot write", path) }
    }

    private static func failure(_ what: String, _ path: String) -> ClipFlowError {
        ClipFlowError.output("\(what) the token secret '\(path)': \(String(cString: strerror(errno)))")
    }

    enum Check: Equatable {
        case valid
        /// Not one of ours, or for something else (403).
        case wrong
        /// Ours, for this, but out of date (401: get a fresh one).
        case expired
    }

    func access(now: Double = Date().timeIntervalSince1970) -> String { make("access", "api", expires: now + accessLifetime) }

    func upload(video: Int64, now: Double = Date().timeIntervalSince1970) -> String { make("upload", String(video), expires: now + uploadLifetime) }

    /// A playback token for video `video`'s media under `prefix` (a path starting with
    /// `/media/ID/`; nil: all of it), valid until `expires`. Its subject is the video id, and the
    /// prefix below `/media/ID/` in base64url after a `~` when there is one.
    func playback(video: Int64, prefix: String? = nil, expires: Double) -> String {
        let base = "\(MediaServing.prefix)\(video)/"
        let below = prefix.map { String($0.dropFirst(base.count)) } ?? ""
        return make("play", below.isEmpty ? String(video) : "\(video)~\(Self.base64url(Array(below.utf8)))", expires: expires)
    }

    /// Whether `token` opens the media file at `path` (`/media/ID/...`): a playback token of this
    /// server for that video whose prefix holds the path.
    func checkPlayback(_ token: String, path: String, now: Double = Date().timeIntervalSince1970) -> Check {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return .wrong }
        let subject = String(parts[1])
        let check = check(token, kind: "play", subject: subject, now: now)
        guard check != .wrong else { return .wrong }
        let pieces = subject.split(separator: "~", maxSplits: 1)
        guard let video = Int64(pieces[0]) else { return .wrong }
        var prefix = "\(MediaServing.prefix)\(video)/"
        if pieces.count == 2 {
            guard let below = Self.fromBase64url(String(pieces[1])) else { return .wrong }
            prefix += String(decoding: below, as: UTF8.self)
        }
        return path.hasPrefix(prefix) ? check : .wrong
    }

    /// A management API bearer: the API key, or an access token of ours. Without an API key the
    /// API is open (the server then listens on loopback only).
    func checkBearer(_ bearer: String?, now: Double = Date().timeIntervalSince1970) -> Check {
        guard let key = apiKey else { return .valid }
        guard let b = bearer, !b.isEmpty else { return .wrong }
        if constantTimeEqual(b, key) { return .valid }
        return check(b, kind: "access", subject: "api", now: now)
    }

    /// Whether `text` is the API key (compared in constant time).
    func isAPIKey(_ text: String) -> Bool {
        guard let key = apiKey else { return false }
        return constantTimeEqual(text, key)
    }

    func checkUpload(_ token: String?, video: Int64, now: Double = Date().timeIntervalSince1970) -> Check {
        guard let t = token else { return .wrong }
        return check(t, kind: "upload", subject: String(video), now: now)
    }

    private func make(_ kind: String, _ subject: String, expires: Double) -> String {
        let body = "\(kind).\(subject).\(Int64(expires))"
        return body + "." + Self.base64url(Digest.hmacSHA256(key: secret, Data(body.utf8)))
    }

    private func check(_ token: String, kind: String, subject: String, now: Double) -> Check {
        let parts = token.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, let expires = Int64(parts[2]) else { return .wrong }
        let body = parts[0...2].joined(separator: ".")
        guard constantTimeEqual(String(parts[3]), Self.base64url(Digest.hmacSHA256(key: secret, Data(body.utf8)))) else { return .wrong }
        guard parts[0] == kind, parts[1] == subject else { return .wrong }
        return Double(expires) < now ? .expired : .valid
    }

    private func constantTimeEqual(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        guard x.count == y.count else { return false }
        var diff: UInt8 = 0
        for i in x.indices { diff |= x[i] ^ y[i] }
        return diff == 0
    }

    static func fromBase64url(_ text: String) -> Data? {
        var t = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while t.count % 4 != 0 { t += "=" }
        return Data(base64Encoded: t)
    }

    static func base64url(_ b: [UInt8]) -> String {
        Data(b).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
