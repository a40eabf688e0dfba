import Foundation

// What S3 answers with: error bodies and the flat XML of its replies.

/// The `<Code>` and `<Message>` of an S3 error body (other elements, such as the
/// `CanonicalRequest` some servers echo, are never read: they can carry the session token).
struct S3ErrorInfo {
    var status: Int
    var code: String
    var message: String

    init(_ r: HTTPResponse) {
        status = r.status
        code = XML.first("Code", in: r.text) ?? ""
        message = XML.first("Message", in: r.text) ?? ""
    }

    /// Credentials that expired or a token the server no longer takes: ask for fresh ones.
    var isExpiry: Bool {
        status == 401
            || [
                "ExpiredToken", "InvalidToken", "TokenRefreshRequired", "ExpiredTokenException",
                "RequestExpired", "SecurityTokenExpired"
            ].contains(code)
    }

    /// Throttling or a server error: try the same request again.
    var isRetryable: Bool {
        // RequestTimeTooSkewed is not here: the clock stays off however often we ask.
        code != "RequestTimeTooSkewed"
            && (isRetryableStatus(status) || ["SlowDown", "InternalError", "ServiceUnavailable", "RequestTimeout"].contains(code))
    }

    var summary: String {
        let c = code.isEmpty ? "" : " \(code)"
        let m = message.isEmpty ? "" : ": \(message)"
        return "HTTP \(status)\(c)\(m)"
    }
}

/// The little XML S3 answers with is flat and regular; these helpers read element texts by name
/// (entities decoded) without a DOM. Not a general XML parser.
enum XML {
    /// Inner texts of every `<tag>...</tag>` (or `<tag attr=...>`), in order.
    static func all(_ tag: String, in text: String) -> [String] {
        var out: [String] = []
        var rest = Substring(text)
        while let open = rest.range(of: "<\(tag)") {
            let after = rest[open.upperBound...]
            guard let next = after.first, next == ">" || next == " " || next == "/" else { rest = after; continue }
            guard let gt = after.firstIndex(of: ">") else { break }
            if gt > after.startIndex, after[after.index(before: gt)] == "/" { out.append(""); rest = after[gt...]; continue }
            let body = after[after.index(after: gt)...]
            guard let close = body.range(of: "</\(tag)>") else { break }
            out.append(decode(body[..<close.lowerBound]))
            rest = body[close.upperBound...]
        }
        return out
    }

    static func first(_ tag: String, in text: String) -> String? { all(tag, in: text).first }

    static func decode(_ s: Substring) -> String {
        guard s.contains("&") else { return String(s) }
        var out = String(s)
        for (entity, ch) in [("&quot;", "\""), ("&#34;", "\""), ("&apos;", "'"), ("&#39;", "'"), ("&lt;", "<"), ("&gt;", ">")] {
            out = out.replacingOccurrences(of: entity, with: ch)
        }
        return out.replacingOccurrences(of: "&amp;", with: "&")
    }

    static func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "&", with: "&amp;").replacingOccurrences(of: "<", with: "&lt;")
            .replacingOccurrences(of: ">", with: "&gt;").replacingOccurrences(of: "\"", with: "&quot;")
    }
}
