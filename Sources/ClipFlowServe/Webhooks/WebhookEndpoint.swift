import ClipFlowCore
import Foundation

/// A webhook receiver's URL (`--webhook`), checked when the server starts, and where it may be
/// reached: an `http`/`https` URL with a host and no user or password; a host written as an IP
/// address is reached there (the operator named it); a host name is resolved before each
/// delivery, and a name that resolves to a loopback, private, link-local or unspecified address
/// is refused unless private addresses are allowed (`--webhook-allow-private`), so a name
/// pointed at the server's own network cannot turn the server against it. The request then
/// connects to the address checked, never to the name resolved again, and no redirect is
/// followed.
struct WebhookEndpoint: Sendable, Equatable {
    let url: String
    let host: String
    let port: Int
    /// The URL without its query, as log lines show it (a query may hold a receiver's token).
    let display: String

    init(_ text: String) throws {
        guard let c = URLComponents(string: text), let scheme = c.scheme?.lowercased(), scheme == "http" || scheme == "https",
            let host = c.host, !host.isEmpty
        else { throw ClipFlowError.badInput("--webhook '\(Self.shown(text))': expected an http:// or https:// URL with a host") }
        guard c.user == nil, c.password == nil else {
            throw ClipFlowError.badInput("--webhook '\(Self.shown(text))': a user or password in the URL is not taken; the signature authenticates the server")
        }
        url = text
        self.host = host
        port = c.port ?? (scheme == "https" ? 443 : 80)
        display = Self.shown(text)
    }

    /// `text` without its query and fragment.
    static func shown(_ text: String) -> String {
        String(text.prefix { $0 != "?" && $0 != "#" }.prefix(200))
    }

    /// Whether the host is written as an IP address.
    var isAddress: Bool { Self.parse(host) != nil }

    /// The addresses to connect to: none for a host written as an address (curl connects
    /// there); for a name, every address it resolves to, refused (throws) when one of them is
    /// not public and `allowPrivate` is false.
    func connectAddresses(allowPrivate: Bool) throws -> [String] {
        if isAddress { return [] }
        var addresses = Self.resolve(host)
        guard !addresses.isEmpty else { throw WebhookRefusal("\(host) does not resolve") }
        if !allowPrivate, let inner = addresses.first(where: { !Self.isPublic($0) }) {
            throw WebhookRefusal("\(host) resolves to \(Self.text(inner)), not a public address (--webhook-allow-private allows it)")
        }
        var seen = Set<[UInt8]>()
        addresses = addresses.filter { seen.insert($0).inserted }
        return addresses.map(Self.text)
    }

    /// A numeric address's bytes (4 or 16), or nil.
    static func parse(_ text: String) -> [UInt8]? {
        let t = text.hasPrefix("[") && text.hasSuffix("]") ? String(text.dropFirst().dropLast()) : text
        var v4 = in_addr()
        if inet_pton(AF_INET, t, &v4) == 1 { return withUnsafeBytes(of: &v4) { Array($0) } }
        var v6 = in6_addr()
        if inet_pton(AF_INET6, t, &v6) == 1 { return withUnsafeBytes(of: &v6) { Array($0) } }
        return nil
    }

    static func text(_ bytes: [UInt8]) -> String {
        var out = [CChar](repeating: 0, count: Int(INET6_ADDRSTRLEN))
        bytes.withUnsafeBytes { b in _ = inet_ntop(bytes.count == 4 ? AF_INET : AF_INET6, b.baseAddress, &out, socklen_t(out.count)) }
        return String(cString: out)
    }

    /// Every address `host` resolves to (TCP), each as 4 or 16 bytes.
    static func resolve(_ host: String) -> [[UInt8]] {
        var hints = addrinfo()
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        guard getaddrinfo(host, nil, &hints, &list) == 0 else { return [] }
        defer { freeaddrinfo(list) }
        var out: [[UInt8]] = []
        var node = list
        while let n = node {
            if let a = n.pointee.ai_addr {
                if n.pointee.ai_family == AF_INET {
                    var sin = a.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
                    out.append(withUnsafeBytes(of: &sin) { Array($0) })
                } else if n.pointee.ai_family == AF_INET6 {
                    var sin6 = a.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
                    out.append(withUnsafeBytes(of: &sin6) { Array($0) })
                }
            }
            node = n.pointee.ai_next
        }
        return out
    }

    /// Whether an address is reachable on the public internet: not loopback, private (RFC 1918,
    /// unique local), carrier-grade NAT, benchmarking, IETF protocol assignments, link-local,
    /// unspecified or multicast, nor one of those in IPv6 clothing (mapped, compatible, NAT64,
    /// 6to4).
    static func isPublic(_ a: [UInt8]) -> Bool {
        if a.count == 16 {
            if a[0..<10].allSatisfy({ $0 == 0 }) && a[10] == 0xff && a[11] == 0xff { return isPublic(Array(a[12...])) }  // IPv4-mapped
            if a[0..<12].allSatisfy({ $0 == 0 }) { return false }  // ::, ::1 and IPv4-compatible
            if a[0..<12] == [0x00, 0x64, 0xff, 0x9b, 0, 0, 0, 0, 0, 0, 0, 0] { return isPublic(Array(a[12...])) }  // NAT64
            if a[0] == 0x20 && a[1] == 0x02 { return isPublic(Array(a[2..<6])) }  // 6to4
            if a[0] & 0xfe == 0xfc { return false }  // fc00::/7
            if a[0] == 0xfe && a[1] & 0xc0 == 0x80 { return false }  // fe80::/10
            if a[0] == 0xff { return false }
            return true
        }
        guard a.count == 4 else { return false }
        switch (a[0], a[1]) {
        case (0, _), (10, _), (127, _), (169, 254), (192, 168): return false
        case (172, 16...31), (100, 64...127), (198, 18...19): return false
        case (192, 0) where a[2] == 0: return false
        case (224...255, _): return false
        default: return true
        }
    }
}

/// Why a delivery was not attempted (its receiver's address is refused, or unknown).
struct WebhookRefusal: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
