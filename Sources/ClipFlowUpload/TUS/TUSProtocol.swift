import Foundation

// TUS wire formats: Upload-Metadata and HTTP dates (Upload-Expires).

/// `Upload-Metadata`: comma-separated `key base64(value)` pairs, keys sorted. Keys with spaces or
/// commas (not allowed by TUS) have them replaced by `_`.
public func encodeMetadata(_ metadata: [String: String]) -> String {
    metadata.sorted { $0.key < $1.key }.map { k, v in
        let key = String(k.map { $0 == " " || $0 == "," ? "_" : $0 })
        return v.isEmpty ? key : "\(key) \(Data(v.utf8).base64EncodedString())"
    }.joined(separator: ",")
}

/// Decodes `Upload-Metadata` (for tests and servers of ours).
public func decodeMetadata(_ header: String) -> [String: String] {
    var out: [String: String] = [:]
    for pair in header.split(separator: ",") {
        let parts = pair.trimmingCharacters(in: .whitespaces).split(separator: " ", maxSplits: 1)
        guard let k = parts.first else { continue }
        let v = parts.count > 1 ? Data(base64Encoded: String(parts[1])).map { String(decoding: $0, as: UTF8.self) } ?? "" : ""
        out[String(k)] = v
    }
    return out
}

/// Parses an HTTP date (RFC 7231 IMF-fixdate, as in `Upload-Expires`).
func parseHTTPDate(_ value: String?) -> Date? {
    guard let value = value?.trimmingCharacters(in: .whitespaces), !value.isEmpty else { return nil }
    let f = DateFormatter()
    f.locale = Locale(identifier: "en_US_POSIX")
    f.timeZone = TimeZone(identifier: "GMT")
    for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
        f.dateFormat = format
        if let d = f.date(from: value) { return d }
    }
    return ISO8601DateFormatter().date(from: value)
}
