import Foundation
import HTTPTypes
import Hummingbird

/// What a web page the user visits may not do to this server, checked before every route:
/// - Without an API key (the server then listens on loopback only), `Host` must name loopback
///   (`Loopback.isName`) or be the name the server was told to listen on, with any port: a page
///   whose own name was rebound to 127.0.0.1 (DNS rebinding) is answered 421. A request without
///   `Host` (no browser sends one) passes.
/// - A write (any method but GET, HEAD and OPTIONS) that a browser sends for another site is
///   refused (403): `Sec-Fetch-Site` other than `same-origin` or `none`, or an `Origin` other than
///   this server's own (`http://` or, behind a proxy that ends TLS, `https://`, and the request's
///   `Host`). Clients that are not browsers send neither header.
struct RequestGuard<Context: RequestContext>: RouterMiddleware {
    /// Whether `Host` is checked (the server has no API key).
    let checksHost: Bool
    /// The `--listen` name, accepted in `Host` as well.
    let listenName: String

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        if checksHost, let problem = BrowserChecks.hostProblem(request.head.authority, listenName: listenName) {
            return Self.refusal(.misdirectedRequest, problem)
        }
        if let problem = BrowserChecks.crossSiteProblem(
            method: request.method, origin: request.headers[.origin], fetchSite: request.headers[.secFetchSite], authority: request.head.authority)
        {
            return Self.refusal(.forbidden, problem)
        }
        return try await next(request, context)
    }

    private static func refusal(_ status: HTTPResponse.Status, _ reason: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; charset=utf-8"
        headers[.cacheControl] = "no-store"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: reason + "\n")))
    }
}

/// The checks of `RequestGuard`, as pure functions.
enum BrowserChecks {
    /// Why `authority` (the `Host` header) is refused on a server without an API key; nil: it is not.
    static func hostProblem(_ authority: String?, listenName: String) -> String? {
        guard let authority else { return nil }
        let refused = "Host \(authority.prefix(100)): this server has no API key and answers only loopback names (localhost, 127.0.0.1, [::1])"
        guard let name = hostName(authority) else { return refused }
        return Loopback.isName(name) || name == listenName.lowercased() ? nil : refused
    }

    /// The name in a `Host` value (lowercased, an IPv6 address without its brackets), or nil when
    /// it is not `NAME[:PORT]` or `[IPV6][:PORT]`.
    static func hostName(_ authority: String) -> String? {
        var name = Substring(authority.lowercased()), port: Substring = ""
        if name.hasPrefix("[") {
            guard let close = name.firstIndex(of: "]") else { return nil }
            port = name[name.index(after: close)...]
            name = name[name.index(after: name.startIndex)..<close]
        } else if let colon = name.firstIndex(of: ":") {
            port = name[colon...]
            name = name[..<colon]
        }
        if !port.isEmpty {
            let digits = port.dropFirst()
            guard port.first == ":", !digits.isEmpty, digits.count <= 5, digits.allSatisfy(\.isASCII), digits.allSatisfy(\.isNumber) else { return nil }
        }
        return name.isEmpty ? nil : String(name)
    }

    /// Why a request is taken for a browser's write on behalf of another site; nil: it is not.
    static func crossSiteProblem(method: HTTPRequest.Method, origin: String?, fetchSite: String?, authority: String?) -> String? {
        guard ![.get, .head, .options].contains(method) else { return nil }
        if let site = fetchSite?.lowercased(), site != "same-origin", site != "none" {
            return "Sec-Fetch-Site \(site.prefix(40)): \(method) from another site is refused"
        }
        if let origin {
            guard let authority, ["http", "https"].contains(where: { origin.lowercased() == "\($0)://\(authority.lowercased())" }) else {
                return "Origin \(origin.prefix(100)): \(method) from another origin is refused"
            }
        }
        return nil
    }
}

/// Loopback, by name or address.
enum Loopback {
    /// `localhost` and its subdomains (RFC 6761), an IPv4 address in 127.0.0.0/8 written as four
    /// decimal numbers, or `::1`. Names are not resolved: a name that merely starts with `127.` is
    /// not loopback.
    static func isName(_ host: String) -> Bool {
        let h = host.lowercased()
        if h == "localhost" || h.hasSuffix(".localhost") || h == "::1" { return true }
        let parts = h.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4, parts[0] == "127" else { return false }
        return parts.allSatisfy { p in p.count <= 3 && !p.isEmpty && p.allSatisfy { $0.isASCII && $0.isNumber } && (Int(p) ?? 256) <= 255 }
    }
}

extension HTTPField.Name {
    static let secFetchSite = Self("Sec-Fetch-Site")!
}
