import Foundation
import ClipFlowCore

/// One HTTP request as the upload protocols build it. A value; no connection state.
public struct HTTPRequest: Sendable {
    public var method: String
    public var url: String
    /// Header lines in order. Names are sent as given.
    public var headers: [(name: String, value: String)]
    public var body: HTTPBody
    /// Where the body of a successful answer goes instead of memory (nil: memory).
    public var responseBodyFile: ResponseBodyFile?
    /// The numeric addresses to connect to for the URL's host, tried in turn (empty: resolve the
    /// name): a caller that checked where a name resolves connects to what it checked, not to
    /// what the name resolves to a moment later.
    public var connectAddresses: [String] = []

    public init(
        method: String, url: String, headers: [(name: String, value: String)] = [], body: HTTPBody = .empty,
        responseBodyFile: ResponseBodyFile? = nil
    ) {
        self.method = method
        self.url = url
        self.headers = headers
        self.body = body
        self.responseBodyFile = responseBodyFile
    }

    /// Sets (replaces) a header, matching names case-insensitively.
    public mutating func setHeader(_ name: String, _ value: String) {
        headers.removeAll { $0.name.lowercased() == name.lowercased() }
        headers.append((name, value))
    }
}

/// What a request sends. `.file` streams `length` bytes starting at `offset` straight from the file
/// (read in small blocks by the transport; never loaded whole), so memory stays bounded whatever
/// the size.
public enum HTTPBody: Sendable {
    case empty
    case bytes(Data)
    case file(path: String, offset: Int64, length: Int64)

    public var length: Int64 {
        switch self {
        case .empty: return 0
        case .bytes(let d): return Int64(d.count)
        case .file(_, _, let length): return length
        }
    }
}

/// A file that takes the body of a successful (2xx) answer, for answers too large to hold in
/// memory (an object download). The body of a 206 (partial content) answer is written from byte
/// `offset`, that of any other 2xx answer from byte 0; the file (created if missing) is cut to
/// that length when the answer's status line arrives. Answers that are not 2xx (an error's XML)
/// are kept in memory as usual. Bytes written stay when the transfer breaks off part-way, so a
/// later request can continue from the file's size.
public struct ResponseBodyFile: Sendable, Equatable {
    public var path: String
    public var offset: Int64

    public init(path: String, offset: Int64 = 0) {
        self.path = path
        self.offset = offset
    }
}

/// A response. Header names are lower-cased; repeated headers are joined with ", ". Upload
/// protocols only read small JSON/XML answers: a response whose headers exceed `maxHeaderBytes`
/// or whose body exceeds `TransportSettings.maxResponseBody` is abandoned
/// (`TransportError.Kind.oversized`).
public struct HTTPResponse: Sendable {
    /// The default limit on a body (`TransportSettings.maxResponseBody`).
    public static let maxBody = 4 << 20
    /// All header lines of one request's answers together (interim answers included).
    public static let maxHeaderBytes = 64 << 10
    public var status: Int
    public var headers: [String: String]
    public var body: Data
    /// Request-body bytes curl sent (not necessarily stored by the server).
    public var bytesSent: Int64
    /// Body bytes written to the request's `responseBodyFile` (the body is then not in `body`).
    public var bodyBytesWritten: Int64

    public init(status: Int, headers: [String: String] = [:], body: Data = Data(), bytesSent: Int64 = 0, bodyBytesWritten: Int64 = 0) {
        self.status = status
        self.headers = headers
        self.body = body
        self.bytesSent = bytesSent
        self.bodyBytesWritten = bodyBytesWritten
    }

    public func header(_ name: String) -> String? { headers[name.lowercased()] }
    public var text: String { String(decoding: body, as: UTF8.self) }
    public var isSuccess: Bool { (200..<300).contains(status) }
}

/// A request that got no HTTP response: the connection failed, was cut, stalled, or was cancelled.
/// `message` never contains credentials (it is built from curl's error text and the host only).
public struct TransportError: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        /// Could not connect / resolve / TLS handshake failed or certificate rejected.
        case connect
        /// TLS verification failed (certificate untrusted, wrong host). Not retried.
        case tls
        /// Connection dropped or reset mid-transfer, or an empty reply.
        case network
        /// No byte moved in either direction for the stall timeout, or the answer did not complete
        /// within the response timeout after the request was sent.
        case stalled
        /// The answer broke a size limit (headers over `HTTPResponse.maxHeaderBytes`, a body over
        /// `TransportSettings.maxResponseBody`, or one header line over curl's own limit). Not retried.
        case oversized
        /// Cancelled or paused by the caller.
        case cancelled
        /// The request's body file could not be read (or shrank while being sent), or the
        /// `responseBodyFile` could not be written.
        case fileRead
        /// A URL or option curl refused: a programming or configuration error. Not retried.
        case invalid
    }
    public var kind: Kind
    public var message: String
    public var bytesSent: Int64

    public init(_ kind: Kind, _ message: String, bytesSent: Int64 = 0) {
        self.kind = kind
        self.message = message
        self.bytesSent = bytesSent
    }

    public var description: String { message }

    /// Whether trying again later can help.
    public var isRetryable: Bool {
        switch kind {
        case .connect, .network, .stalled: return true
        case .tls, .cancelled, .fileRead, .invalid, .oversized: return false
        }
    }
}

/// Timeouts and TLS settings for a transport.
public struct TransportSettings: Sendable, Equatable {
    /// Seconds to establish a connection.
    public var connectTimeout: Double = 15
    /// A transfer that moves no byte (either direction) for this many seconds is abandoned as
    /// stalled.
    public var stallTimeout: Int = 30
    /// Seconds an answer may take, from the end of the request body to the last byte of the
    /// answer, even while bytes keep arriving (a server dripping an endless answer).
    public var responseTimeout: Double = 300
    /// Verify the server's TLS certificate and host name. On by default; turning it off is for
    /// test servers with self-signed certificates only.
    public var verifyTLS: Bool = true
    /// Extra CA bundle (PEM file) to trust, e.g. a private CA.
    public var caBundle: String? = nil
    /// curl's upload buffer (bytes read from a file per callback). Larger is faster on fast links.
    public var uploadBufferSize: Int = 1 << 20
    /// The largest answer body kept in memory; a larger answer fails the request. An API's
    /// answers are small; a media segment fetched whole (`hls lint URL`) is not.
    public var maxResponseBody: Int = HTTPResponse.maxBody

    public init() {}
}

/// Decodes missing keys as their defaults, so a config can name only what it changes.
extension TransportSettings: Codable {
    private enum CodingKeys: String, CodingKey { case connectTimeout, stallTimeout, responseTimeout, verifyTLS, caBundle, uploadBufferSize }

    public init(from decoder: Decoder) throws {
        self.init()
        let c = try decoder.container(keyedBy: CodingKeys.self)
        connectTimeout = try c.decodeIfPresent(Double.self, forKey: .connectTimeout) ?? connectTimeout
        stallTimeout = try c.decodeIfPresent(Int.self, forKey: .stallTimeout) ?? stallTimeout
        responseTimeout = try c.decodeIfPresent(Double.self, forKey: .responseTimeout) ?? responseTimeout
        verifyTLS = try c.decodeIfPresent(Bool.self, forKey: .verifyTLS) ?? verifyTLS
        caBundle = try c.decodeIfPresent(String.self, forKey: .caBundle)
        uploadBufferSize = try c.decodeIfPresent(Int.self, forKey: .uploadBufferSize) ?? uploadBufferSize
    }

    public func encode(to encoder: Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(connectTimeout, forKey: .connectTimeout)
        try c.encode(stallTimeout, forKey: .stallTimeout)
        try c.encode(responseTimeout, forKey: .responseTimeout)
        try c.encode(verifyTLS, forKey: .verifyTLS)
        try c.encodeIfPresent(caBundle, forKey: .caBundle)
        try c.encode(uploadBufferSize, forKey: .uploadBufferSize)
    }
}

/// Sends HTTP requests. One transport belongs to one upload at a time (it keeps a connection open
/// between requests) and is used from one thread at a time.
public protocol HTTPTransport: AnyObject {
    /// Performs `request`. `onSent` is called with the cumulative request-body bytes handed to the
    /// network (for rate display only; servers acknowledge bytes separately). Throws
    /// `TransportError` when no HTTP response arrived; any response (including 4xx/5xx) returns.
    func perform(_ request: HTTPRequest, onSent: ((Int64) -> Void)?) throws -> HTTPResponse
}

extension HTTPTransport {
    public func perform(_ request: HTTPRequest) throws -> HTTPResponse {
        try perform(request, onSent: nil)
    }
}

/// Resolves `reference` (absolute, scheme-relative or path-relative, as TUS servers return in
/// `Location`) against `base`.
public func resolveURL(_ reference: String, against base: String) -> String {
    if let url = URL(string: reference), url.scheme != nil { return reference }
    guard let baseURL = URL(string: base), let resolved = URL(string: reference, relativeTo: baseURL) else {
        return reference
    }
    return resolved.absoluteString
}

/// The host part of a URL for messages (never the query, which can carry signatures).
public func displayURL(_ url: String) -> String {
    guard var comps = URLComponents(string: url) else { return Secrets.shared.redact(url) }
    comps.query = nil
    comps.user = nil
    comps.password = nil
    return Secrets.shared.redact(comps.string ?? url)
}

/// The origin of an absolute http(s) URL: lower-cased scheme and host, and the port (the scheme's
/// default when absent), as `scheme://host:port`. Nil for anything else.
public func urlOrigin(_ url: String) -> String? {
    guard let c = URLComponents(string: url), let scheme = c.scheme?.lowercased(), ["http", "https"].contains(scheme),
        let host = c.host?.lowercased(), !host.isEmpty
    else { return nil }
    let port = c.port ?? (scheme == "https" ? 443 : 80)
    return "\(scheme)://\(host):\(port)"
}

/// Whether `url` is on the same origin as `base` (scheme, host and port) and names the same user
/// info as `base` (none, unless the endpoint the user gave has some): a server-given URL that adds
/// or changes user info is not where the user's credentials were meant to go.
public func isSameOrigin(_ url: String, _ base: String) -> Bool {
    guard let a = urlOrigin(url), let b = urlOrigin(base), a == b,
        let u = URLComponents(string: url), let v = URLComponents(string: base)
    else { return false }
    return u.user == v.user && u.password == v.password
}
