import Foundation
import Synchronization

/// Keeps secrets (tokens, keys, signatures, passwords) out of everything a person or a log can read.
/// Every credential the upload module learns is registered here; `redact` replaces each occurrence
/// with `***` in messages, events and logs. Also strips the values of well-known secret-bearing
/// query parameters and headers. Thread-safe; one shared instance per process (`Secrets.shared`).
public final class Secrets: Sendable {
    public static let shared = Secrets()
    /// Registered values, oldest first; at most `capacity` (old credentials have expired long
    /// before 512 refreshes), so redaction stays cheap in a long-running process.
    private let values = Mutex<[String]>([])
    static let capacity = 512

    public init() {}

    /// Registers a secret value, with the forms it takes inside URLs and JSON (percent-encoded,
    /// `/` escaped). Values shorter than 4 characters are ignored (they would redact ordinary text
    /// and are not credentials anyway).
    public func register(_ value: String?) {
        guard let value, value.count >= 4 else { return }
        var forms = [value]
        if let p = value.addingPercentEncoding(withAllowedCharacters: .alphanumerics), p != value { forms.append(p) }
        let json = value.replacingOccurrences(of: "/", with: "\\/")
        if json != value { forms.append(json) }
        values.withLock { list in
            for f in forms where !list.contains(f) { list.append(f) }
            if list.count > Secrets.capacity { list.removeFirst(list.count - Secrets.capacity) }
        }
    }

    /// Header names whose values are always secret.
    public static let secretHeaders: Set<String> = [
        "authorization", "proxy-authorization", "x-amz-security-token", "x-oss-security-token",
        "cookie", "set-cookie", "x-api-key"
    ]
    /// Query parameter names whose values are always secret.
    public static let secretQueryNames: Set<String> = [
        "x-amz-signature", "x-amz-security-token", "x-amz-credential", "signature", "token",
        "access_token", "refresh_token", "securitytoken", "accesskeyid"
    ]

    /// `text` with every registered secret, and every value of a secret query parameter, replaced
    /// by `***`.
    public func redact(_ text: String) -> String {
        var out = text
        // Longest first so a secret containing another is replaced whole.
        let known = values.withLock { $0 }.sorted { $0.count > $1.count }
        for secret in known where out.contains(secret) {
            out = out.replacingOccurrences(of: secret, with: "***")
        }
        return Secrets.redactQuery(out)
    }

    static func redactQuery(_ text: String) -> String {
        guard text.contains("=") else { return text }
        var result = ""
        var rest = Substring(text)
        // Scan for name=value pairs introduced by ? or &, and blank the values of secret names.
        while let sep = rest.firstIndex(where: { $0 == "?" || $0 == "&" }) {
            result += rest[...sep]
            rest = rest[rest.index(after: sep)...]
            guard let eq = rest.firstIndex(of: "=") else { continue }
            let name = rest[..<eq]
            if name.contains(where: { " \n\t&?/".contains($0) }) { continue }
            if secretQueryNames.contains(name.lowercased()) {
                result += name + "=***"
                let end = rest[eq...].firstIndex(where: { "& \n\t\"'".contains($0) }) ?? rest.endIndex
                rest = rest[end...]
            }
        }
        return result + rest
    }
}
