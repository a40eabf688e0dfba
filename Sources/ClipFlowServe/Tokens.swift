import ClipFlowCore
import ClipFlowUpload
import Foundation

/// The server's tokens, signed with a secret kept in the data folder (made once, mode 0600), so
/// they outlive a restart and need no table:
/// - access tokens for the management API (`POST /auth/refresh` with the API key as the refresh
///   token issues one; the API key itself is accepted too), valid `accessLifetime` seconds;
/// - upload tokens, each scoped to one video and valid `uploadLifetime` seconds (what
///   `GET /videos/{id}/upload` hands out and a TUS upload carries in its metadata).
/// A token is `KIND.SUBJECT.EXPIRY.SIGNATURE` (HMAC-SHA256, base64url). Thread-safe; `Sendable`.
final class Tokens: Sendable {
    private let secret: [UInt8]
    let apiKey: String?
    let accessLifetime: Double
    let uploadLifetime: Double

    init(data: URL, apiKey: String?, accessLifetime: Double = 3600, uploadLifetime: Double = 24 * 3600) throws {
        self.apiKey = (apiKey ?? "").isEmpty ? nil : apiKey
        self.accessLifetime = accessLifetime
        self.uploadLifetime = uploadLifetime
        let path = data.appendingPathComponent("token-secret").path
        if let d = FileManager.default.contents(atPath: path), d.count == 32 {
            secret = [UInt8](d)
        } else {
            let fresh = (0..<32).map { _ in UInt8.random(in: 0...255) }
            guard FileManager.default.createFile(atPath: path, contents: Data(fresh), attributes: [.posixPermissions: 0o600]) else {
                throw ClipFlowError.output("cannot write the token secret in '\(data.path)'")
            }
            secret = fresh
        }
        if let k = self.apiKey { Secrets.shared.register(k) }
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

    static func base64url(_ b: [UInt8]) -> String {
        Data(b).base64EncodedString().replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_")
            .replacingOccurrences(of: "=", with: "")
    }
}
