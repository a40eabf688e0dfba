import Foundation

/// How the body of a signed request is declared in `x-amz-content-sha256`.
public enum PayloadSigning: String, Codable, Sendable, Equatable {
    /// The real SHA-256 of the body (for file parts computed by streaming the part's byte range,
    /// in 1 MiB blocks). The server recomputes it and refuses a body that does not match, which
    /// catches corruption on the way; costs one extra read of each part.
    case signed
    /// `UNSIGNED-PAYLOAD`: the body is not covered by the signature (TLS still protects it).
    /// Saves the extra read; use with HTTPS only.
    case unsigned
}

/// AWS Signature Version 4 for S3-compatible services (AWS S3, Alibaba OSS's S3 endpoint, MinIO).
/// A pure value: given the same request, credentials and time it always produces the same headers.
///
/// What `sign` does to a request (written from the AWS SigV4 documentation):
/// 1. sets `Host` (from the URL), `x-amz-date`, `x-amz-content-sha256` and, for STS session
///    credentials, `x-amz-security-token`;
/// 2. builds the canonical request: method, canonical URI (each path segment percent-decoded and
///    re-encoded with the S3 rules, so an already encoded path is not encoded twice), canonical
///    query (names and values encoded strictly, sorted), canonical headers (every header the
///    request carries except `Expect`/`User-Agent`, names lower-cased, values trimmed with inner
///    runs of spaces collapsed, sorted), the signed-header list and the payload hash;
/// 3. the string to sign (`AWS4-HMAC-SHA256`, timestamp, scope `date/region/service/aws4_request`,
///    SHA-256 of the canonical request), the signing key (HMAC chain from `"AWS4" + secret`), and
///    the `Authorization` header.
///
/// The secret key never leaves this type; the signature is not registered with `Secrets` (it is
/// bound to one request and expires in 15 minutes) but is never put into a message either.
public struct SigV4Signer: Sendable {
    public var credentials: AWSCredentials
    public var region: String
    public var service: String

    /// SHA-256 of the empty string.
    public static let emptyPayloadHash = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    public static let unsignedPayload = "UNSIGNED-PAYLOAD"

    /// Headers never signed (proxies and curl may add or drop them).
    static let unsignedHeaders: Set<String> = ["expect", "user-agent", "authorization", "x-amzn-trace-id", "content-length"]

    public init(credentials: AWSCredentials, region: String, service: String = "s3") {
        self.credentials = credentials
        self.region = region
        self.service = service
    }

    /// The SHA-256 (hex) of a small in-memory body.
    public static func payloadHash(_ data: Data) -> String { Digest.hash(.sha256, data).hex }

    /// The SHA-256 (hex) of a body as `HTTPBody` describes it; a file range is hashed by streaming
    /// (bounded memory).
    public static func payloadHash(_ body: HTTPBody) throws -> String {
        switch body {
        case .empty: return emptyPayloadHash
        case .bytes(let d): return payloadHash(d)
        case .file(let path, let offset, let length):
            return try Digest.hash(.sha256, file: path, offset: offset, length: length).hex
        }
    }

    /// Signs `request` in place for `date`. `payloadHash` is the hex SHA-256 of the body or
    /// `UNSIGNED-PAYLOAD`.
    public func sign(_ request: inout HTTPRequest, payloadHash: String, date: Date = Date()) {
        let stamp = SigV4Signer.timestamp(date)
        let day = String(stamp.prefix(8))
        if let host = SigV4Signer.hostHeader(request.url) { request.setHeader("Host", host) }
        request.setHeader("x-amz-date", stamp)
        request.setHeader("x-amz-content-sha256", payloadHash)
        if let token = credentials.sessionToken, !token.isEmpty {
            request.setHeader("x-amz-security-token", token)
        } else {
            request.headers.removeAll { $0.name.lowercased() == "x-amz-security-token" }
        }
        let canonical = canonicalRequest(request, payloadHash: payloadHash)
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        let toSign = ["AWS4-HMAC-SHA256", stamp, scope, Digest.hash(.sha256, Data(canonical.text.utf8)).hex].joined(separator: "\n")
        let signature = Digest.hmacSHA256(key: signingKey(day: day), Data(toSign.utf8)).hex
        request.setHeader(
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=\(credentials.accessKeyID)/\(scope), SignedHeaders=\(canonical.signedHeaders), Signature=\(signature)")
    }

    /// The canonical request text and the signed-header list (exposed for tests).
    public func canonicalRequest(_ request: HTTPRequest, payloadHash: String) -> (text: String, signedHeaders: String) {
        let (path, query) = SigV4Signer.splitURL(request.url)
        var grouped: [String: [String]] = [:]
        for (name, value) in request.headers {
            let n = name.lowercased().trimmingCharacters(in: .whitespaces)
            if SigV4Signer.unsignedHeaders.contains(n) { continue }
            grouped[n, default: []].append(SigV4Signer.canonicalHeaderValue(value))
        }
        let names = grouped.keys.sorted()
        let headerLines = names.map { "\($0):\(grouped[$0]!.joined(separator: ","))\n" }.joined()
        let signed = names.joined(separator: ";")
        let text = [
            request.method.uppercased(), SigV4Signer.canonicalURI(path), SigV4Signer.canonicalQuery(query),
            headerLines, signed, payloadHash
        ].joined(separator: "\n")
        return (text, signed)
    }

    func signingKey(day: String) -> [UInt8] {
        var key = Digest.hmacSHA256(key: Array("AWS4\(credentials.secretAccessKey)".utf8), Data(day.utf8))
        key = Digest.hmacSHA256(key: key, Data(region.utf8))
        key = Digest.hmacSHA256(key: key, Data(service.utf8))
        return Digest.hmacSHA256(key: key, Data("aws4_request".utf8))
    }

    // MARK: - Pieces (pure, table-tested)

    /// `yyyyMMdd'T'HHmmss'Z'` in UTC.
    public static func timestamp(_ date: Date) -> String {
        var t = time_t(floor(date.timeIntervalSince1970))
        var parts = tm()
        gmtime_r(&t, &parts)
        return String(
            format: "%04d%02d%02dT%02d%02d%02dZ", Int(parts.tm_year) + 1900, Int(parts.tm_mon) + 1,
            Int(parts.tm_mday), Int(parts.tm_hour), Int(parts.tm_min), Int(parts.tm_sec))
    }

    /// RFC 3986 percent-encoding as SigV4 wants it: everything but `A-Z a-z 0-9 - _ . ~` is
    /// encoded as `%XX` (upper-case hex) of its UTF-8 bytes; `/` is kept when `keepSlash`.
    public static func uriEncode(_ s: String, keepSlash: Bool) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"),
                UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "-"), UInt8(ascii: "_"),
                UInt8(ascii: "."), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            case UInt8(ascii: "/") where keepSlash:
                out.append("/")
            default:
                out += String(format: "%%%02X", b)
            }
        }
        return out
    }

    /// Decodes `%XX` escapes (invalid escapes are kept literally). `+` stays `+`.
    static func percentDecode(_ s: Substring) -> String {
        guard s.contains("%") else { return String(s) }
        var bytes: [UInt8] = []
        var it = Array(s.utf8)[...]
        while let b = it.first {
            it = it.dropFirst()
            if b == UInt8(ascii: "%"), it.count >= 2,
                let v = UInt8(String(decoding: it.prefix(2), as: UTF8.self), radix: 16)
            {
                bytes.append(v)
                it = it.dropFirst(2)
            } else {
                bytes.append(b)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// S3's canonical URI: each segment decoded once and encoded once (so `/a%20b` and `/a b`
    /// both give `/a%20b`, never `%2520`); an empty path is `/`.
    public static func canonicalURI(_ rawPath: String) -> String {
        if rawPath.isEmpty { return "/" }
        return rawPath.split(separator: "/", omittingEmptySubsequences: false)
            .map { uriEncode(percentDecode($0), keepSlash: false) }
            .joined(separator: "/")
    }

    /// Canonical query: each `name[=value]` decoded and strictly re-encoded, sorted by name then
    /// value; a parameter without a value gets `name=`.
    public static func canonicalQuery(_ rawQuery: String) -> String {
        if rawQuery.isEmpty { return "" }
        let pairs: [(String, String)] = rawQuery.split(separator: "&").map { item in
            if let eq = item.firstIndex(of: "=") {
                return (
                    uriEncode(percentDecode(item[..<eq]), keepSlash: false),
                    uriEncode(percentDecode(item[item.index(after: eq)...]), keepSlash: false)
                )
            }
            return (uriEncode(percentDecode(item), keepSlash: false), "")
        }
        return pairs.sorted { $0.0 != $1.0 ? $0.0 < $1.0 : $0.1 < $1.1 }
            .map { "\($0.0)=\($0.1)" }.joined(separator: "&")
    }

    /// Trims and collapses runs of spaces/tabs into one space.
    static func canonicalHeaderValue(_ v: String) -> String {
        var out = ""
        var space = false
        for ch in v.trimmingCharacters(in: .whitespaces) {
            if ch == " " || ch == "\t" {
                space = true
            } else {
                if space { out.append(" ") }
                space = false
                out.append(ch)
            }
        }
        return out
    }

    /// The raw (still percent-encoded) path and query of a URL, without parsing it into a form
    /// that might re-encode or decode them.
    static func splitURL(_ url: String) -> (path: String, query: String) {
        var rest = Substring(url)
        if let scheme = rest.range(of: "://") {
            rest = rest[scheme.upperBound...]
            if let slash = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) {
                rest = rest[slash...]
            } else {
                return ("/", "")
            }
        }
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        if let q = rest.firstIndex(of: "?") {
            return (String(rest[..<q]), String(rest[rest.index(after: q)...]))
        }
        return (String(rest), "")
    }

    /// The `Host` header for a URL: host, plus the port when it is not the scheme's default.
    static func hostHeader(_ url: String) -> String? {
        guard let c = URLComponents(string: url), let host = c.percentEncodedHost, !host.isEmpty else { return nil }
        let scheme = c.scheme?.lowercased()
        if let port = c.port, !(scheme == "http" && port == 80) && !(scheme == "https" && port == 443) {
            return "\(host):\(port)"
        }
        return host
    }
}
