import Foundation

// TUS wire formats: HTTP dates (Upload-Expires). Upload-Metadata: `TUSMetadata`.

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
