import Foundation
import ClipFlowCore

/// Where uploads go and how, as plain settings that can be written to the queue file and read back
/// by a later process. Holds NO secrets: credentials come from `credentials` (the environment, a
/// command or a URL) each time an upload starts or the server refuses them.
public struct UploadDestination: Codable, Sendable, Equatable {
    public enum Method: String, Codable, Sendable, CaseIterable {
        /// Plain TUS 1.0: `endpoint` is the creation URL (e.g. https://host/files).
        case tus
        /// Gcore-style video hosting: `endpoint` is the API base; the file goes by TUS to the
        /// server the API names.
        case gcore
        /// S3/OSS multipart: `endpoint` is the service URL, with `bucket` and `region`.
        case s3
        /// `clipflow serve`: `endpoint` is the server's URL. Its hosting API is Gcore's (`gcore`);
        /// a token is needed only when the server has an API key, and a result names the video's
        /// watch page.
        case clipflow
    }

    public var method: Method
    public var endpoint: String
    public var bucket: String?
    public var region: String?
    /// S3 object key prefix (the key is prefix + file name).
    public var keyPrefix: String?
    /// S3 addressing: "path" (endpoint/bucket/key) or "virtual" (bucket.endpoint/key).
    public var addressing: S3Options.AddressingStyle?
    /// Gcore: where the TUS upload goes; `{hostname}` is replaced by the server the API names (nil:
    /// `GcoreOptions.defaultUploadURLTemplate`).
    public var uploadURLTemplate: String?
    /// TUS chunk size / S3 part size in bytes (nil: automatic).
    public var chunkSize: Int64?
    /// The backend's smallest part (S3 5 MiB, OSS 100 KB).
    public var minimumPartSize: Int64?
    /// TUS checksum: "auto" (sha256, else sha1, when the server offers it), "off", "sha1", "sha256".
    public var checksum: TUSOptions.Checksum?
    /// Seconds without a byte moving before a request is abandoned and retried.
    public var stallTimeout: Int?
    /// Seconds an answer may take once its request is sent (bytes arriving do not extend it).
    public var responseTimeout: Double?
    /// Failed requests in a row, without progress, before the upload fails.
    public var maxRetries: Int?
    /// First retry delay in seconds (doubles per failure, jittered, capped at 30 s).
    public var retryDelay: Double?
    /// TLS verification (default on). Off only for test servers with self-signed certificates.
    public var verifyTLS: Bool?
    /// Extra CA bundle to trust.
    public var caBundle: String?
    public var credentials: CredentialSource

    public init(method: Method, endpoint: String, credentials: CredentialSource = CredentialSource()) {
        self.method = method
        self.endpoint = endpoint
        self.credentials = credentials
    }

    /// A stable name for the resume store and messages (no secrets, no query).
    public var name: String {
        var s = "\(method.rawValue) \(displayURL(endpoint))"
        if let bucket { s += " bucket \(bucket)" }
        if let keyPrefix, !keyPrefix.isEmpty { s += " prefix \(keyPrefix)" }
        return s
    }

    public var retryPolicy: RetryPolicy {
        var p = RetryPolicy()
        if let maxRetries { p.maxAttemptsWithoutProgress = maxRetries }
        if let retryDelay { p.baseDelay = retryDelay; p.maxDelay = max(p.maxDelay, retryDelay) }
        return p
    }

    public var transportSettings: TransportSettings {
        var t = TransportSettings()
        if let stallTimeout { t.stallTimeout = stallTimeout }
        if let responseTimeout { t.responseTimeout = responseTimeout }
        if let verifyTLS { t.verifyTLS = verifyTLS }
        t.caBundle = caBundle
        return t
    }

    /// Problems with these settings, each naming the field (for the CLI and pipeline validation).
    public func problems() -> [(field: String, message: String)] {
        var out: [(String, String)] = []
        if let url = URL(string: endpoint), let scheme = url.scheme?.lowercased(), ["http", "https"].contains(scheme), url.host != nil {
        } else {
            out.append(("endpoint", "'\(displayURL(endpoint))' is not an http(s) URL"))
        }
        if let what = literalSecret(inURL: endpoint) {
            out.append(
                (
                    "endpoint",
                    "holds \(what); the endpoint is kept in the upload queue file, so a secret must not be part of it. Give credentials through the environment, --credentials-command or --credentials-url"
                ))
        }
        if method == .s3 {
            if (bucket ?? "").isEmpty { out.append(("bucket", "an S3 upload needs a bucket")) }
        }
        if let c = chunkSize, c < 1 { out.append(("chunk-size", "must be at least 1 byte")) }
        if let s = stallTimeout, s < 1 { out.append(("stall-timeout", "must be at least 1 second")) }
        if let s = responseTimeout, !(s >= 1 && s <= 86400) { out.append(("response-timeout", "must be from 1 to 86400 seconds")) }
        if let t = uploadURLTemplate, !t.contains("{hostname}") { out.append(("upload-url", "must contain {hostname}")) }
        out.append(contentsOf: credentials.problems())
        return out
    }
}

/// Where credentials come from. Exactly one source is used: a command, a URL, or the environment
/// (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/`AWS_SESSION_TOKEN` for S3,
/// `CLIPFLOW_UPLOAD_TOKEN`/`CLIPFLOW_UPLOAD_REFRESH_TOKEN` for bearer tokens). No values are stored.
public struct CredentialSource: Codable, Sendable, Equatable {
    /// argv of a command printing credentials JSON (run again when they expire).
    public var command: [String]?
    /// A URL returning credentials JSON (called again when they expire).
    public var url: String?

    public init(command: [String]? = nil, url: String? = nil) {
        self.command = command
        self.url = url
    }

    public func problems() -> [(field: String, message: String)] {
        if command != nil && url != nil { return [("credentials", "give a credentials command or a credentials URL, not both")] }
        if let c = command, c.isEmpty { return [("credentials-command", "is empty")] }
        if let c = command, let what = literalSecret(inCommand: c.last ?? "") {
            return [
                (
                    "credentials-command",
                    "holds \(what) written out; the command is kept in the upload queue file, so a secret must not be part of it. Put the secret in an environment variable and refer to it (e.g. $MY_TOKEN), or in a file the command reads"
                )
            ]
        }
        if let u = url, let what = literalSecret(inURL: u) {
            return [("credentials-url", "holds \(what); the URL is kept in the upload queue file, so a secret must not be part of it")]
        }
        return []
    }

    /// The provider to ask for (fresh) credentials, for `method`.
    public func provider(
        for method: UploadDestination.Method, settings: TransportSettings,
        environment: [String: String] = ProcessInfo.processInfo.environment
    ) -> CredentialProvider? {
        if let command { return CommandCredentialProvider(command: command) }
        if let url { return URLCredentialProvider(url: url, settings: settings) }
        return EnvironmentCredentialProvider(method: method, environment: environment)
    }
}

/// Reads credentials from environment variables (a refresh reads them again).
public struct EnvironmentCredentialProvider: CredentialProvider {
    public var method: UploadDestination.Method
    public var environment: [String: String]

    public init(method: UploadDestination.Method, environment: [String: String]) {
        self.method = method
        self.environment = environment
    }

    /// Whether the environment holds anything for this method.
    public var isAvailable: Bool {
        switch method {
        case .s3: return environment["AWS_ACCESS_KEY_ID"] != nil
        case .tus, .gcore, .clipflow: return environment["CLIPFLOW_UPLOAD_TOKEN"] != nil
        }
    }

    public func refresh(reason: String) throws -> Credentials {
        switch method {
        case .s3:
            guard let key = environment["AWS_ACCESS_KEY_ID"], let secret = environment["AWS_SECRET_ACCESS_KEY"] else {
                throw UploadError(
                    .credentials,
                    message:
                        "S3 upload: no credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, optionally AWS_SESSION_TOKEN, or give a credentials command or URL)"
                )
            }
            return .aws(AWSCredentials(accessKeyID: key, secretAccessKey: secret, sessionToken: environment["AWS_SESSION_TOKEN"]))
        case .tus, .gcore, .clipflow:
            guard let token = environment["CLIPFLOW_UPLOAD_TOKEN"] else {
                throw UploadError(
                    .credentials,
                    message:
                        "\(method.rawValue) upload: no token (set CLIPFLOW_UPLOAD_TOKEN, optionally CLIPFLOW_UPLOAD_REFRESH_TOKEN, or give a credentials command or URL)"
                )
            }
            let refresh = environment["CLIPFLOW_UPLOAD_REFRESH_TOKEN"]
            Secrets.shared.register(token)
            Secrets.shared.register(refresh)
            return .bearer(token: token, refreshToken: refresh)
        }
    }
}

// MARK: - Secrets written into a credential source

/// Names under which credentials travel (JSON keys, option names, variable names), lower case,
/// with `-` read as `_`.
private let credentialWords = [
    "token", "access_token", "refresh", "refresh_token", "access", "secret",
    "secretaccesskey", "secret_access_key", "aws_secret_access_key", "sessiontoken",
    "session_token", "aws_session_token", "securitytoken", "password", "passwd",
    "api_key", "apikey", "clipflow_upload_token", "clipflow_upload_refresh_token"
]

/// What looks like a credential written literally into a shell command (nil when nothing does):
/// a credential name followed by a value (`{"token":"abc"}`, `--token abc`, `--password=abc`,
/// `AWS_SECRET_ACCESS_KEY=abc`), `Bearer abc`, or a long random-looking word (an access key, a
/// token). A value that is a shell expansion (`$VAR`, `${VAR}`, `$(cmd)`) or a printf
/// placeholder (`%s`) is a reference, not a secret, and is fine.
func literalSecret(inCommand command: String) -> String? {
    let text = command.lowercased().replacingOccurrences(of: "-", with: "_")
    let names = credentialWords.joined(separator: "|")
    // name, optional closing quote, separator (: = or spaces), optional opening quote, first value char.
    let keyed = "(?:^|[^a-z0-9_])_*(\(names))\\\\?[\"']?\\s*(?:[:=]|\\s)\\s*\\\\?[\"']?([^\\s\"'$`{}(),;|&<>_%\\\\])"
    if let m = text.range(of: keyed, options: .regularExpression) {
        let found = String(text[m])
        if let name = credentialWords.sorted(by: { $0.count > $1.count }).first(where: { found.contains($0) }) {
            return "a value for '\(name)'"
        }
    }
    if text.range(of: "bearer\\s+[^\\s$\"']", options: .regularExpression) != nil { return "a bearer token" }
    for word in command.split(whereSeparator: { " \t\n\"'=:,;{}()[]<>|&`".contains($0) }) {
        if looksRandom(word) { return "what looks like a key or token ('\(word.prefix(4))...')" }
    }
    return nil
}

/// A credential in a URL: user info with a password, or a secret-named query parameter.
func literalSecret(inURL url: String) -> String? {
    guard let c = URLComponents(string: url) else { return nil }
    if c.password != nil { return "a password in its user info" }
    for item in c.queryItems ?? [] where Secrets.secretQueryNames.contains(item.name.lowercased()) || credentialWords.contains(item.name.lowercased()) {
        if let v = item.value, !v.isEmpty { return "a value for the query parameter '\(item.name)'" }
    }
    return nil
}

/// At least 20 characters of letters and digits (and `+/_.-`), mixing letters and digits, not a
/// path or a shell expansion: the shape of access keys, secrets and tokens.
private func looksRandom(_ word: Substring) -> Bool {
    guard word.count >= 20, !word.hasPrefix("/"), !word.hasPrefix("."), !word.hasPrefix("~"), !word.contains("$") else { return false }
    guard word.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "+/_.-".contains($0)) }) else { return false }
    let digits = word.filter(\.isNumber).count
    let letters = word.filter(\.isLetter).count
    // Paths and host names read as words separated by / . -: a secret has long unbroken runs.
    let longestRun = word.split(whereSeparator: { "/.-_".contains($0) }).map(\.count).max() ?? 0
    return digits >= 2 && letters >= 4 && longestRun >= 16
}
