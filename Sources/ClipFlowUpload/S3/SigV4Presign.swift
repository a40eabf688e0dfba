import Foundation

extension SigV4Signer {
    /// `url` with SigV4 query authentication for `method` (the `X-Amz-*` parameters and the
    /// signature): anyone holding it may make that request until `expires` seconds after `date`
    /// (S3 accepts 1 to 604,800), no header needed. Only `host` is signed; the body is
    /// `UNSIGNED-PAYLOAD`. The URL carries the session token when there is one, never the secret.
    public func presign(method: String, url: String, expires: Int, date: Date = Date()) -> String {
        let stamp = SigV4Signer.timestamp(date)
        let day = String(stamp.prefix(8))
        let scope = "\(day)/\(region)/\(service)/aws4_request"
        var parameters: [(String, String)] = [
            ("X-Amz-Algorithm", "AWS4-HMAC-SHA256"), ("X-Amz-Credential", "\(credentials.accessKeyID)/\(scope)"), ("X-Amz-Date", stamp),
            ("X-Amz-Expires", String(max(1, min(604_800, expires)))), ("X-Amz-SignedHeaders", "host")
        ]
        if let token = credentials.sessionToken, !token.isEmpty { parameters.append(("X-Amz-Security-Token", token)) }
        let query = parameters.map { SigV4Signer.uriEncode($0.0, keepSlash: false) + "=" + SigV4Signer.uriEncode($0.1, keepSlash: false) }
        let (_, existing) = SigV4Signer.splitURL(url)
        let unsigned = url + (existing.isEmpty ? (url.contains("?") ? "" : "?") : "&") + query.joined(separator: "&")
        var request = HTTPRequest(method: method, url: unsigned)
        if let host = SigV4Signer.hostHeader(url) { request.setHeader("Host", host) }
        let canonical = canonicalRequest(request, payloadHash: SigV4Signer.unsignedPayload)
        let toSign = ["AWS4-HMAC-SHA256", stamp, scope, Digest.hash(.sha256, Data(canonical.text.utf8)).hex].joined(separator: "\n")
        return unsigned + "&X-Amz-Signature=" + Digest.hmacSHA256(key: signingKey(day: day), Data(toSign.utf8)).hex
    }
}
