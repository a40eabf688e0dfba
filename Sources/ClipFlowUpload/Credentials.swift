import Foundation
import Synchronization
import ClipFlowCore

/// Credentials an upload presents. Every secret field is registered with `Secrets.shared` when
/// the value is made, so it is redacted from every message from then on.
public enum Credentials: Sendable, Equatable {
    /// A bearer token (Gcore-style hosting API), with an optional refresh token.
    case bearer(token: String, refreshToken: String?)
    /// AWS/OSS-style keys; `sessionToken` for STS temporary credentials.
    case aws(AWSCredentials)

    public var aws: AWSCredentials? { if case .aws(let c) = self { return c } else { return nil } }
}

public struct AWSCredentials: Sendable, Equatable {
    public var accessKeyID: String
    public var secretAccessKey: String
    public var sessionToken: String?
    /// When the STS credentials expire, if known.
    public var expiration: Date?

    public init(accessKeyID: String, secretAccessKey: String, sessionToken: String? = nil, expiration: Date? = nil) {
        self.accessKeyID = accessKeyID
        self.secretAccessKey = secretAccessKey
        self.sessionToken = sessionToken
        self.expiration = expiration
        Secrets.shared.register(secretAccessKey)
        Secrets.shared.register(sessionToken)
    }
}

/// Supplies fresh credentials when the server refuses the current ones (401/403/ExpiredToken).
/// Called on the upload's worker thread; may block (runs a command, calls a URL).
public protocol CredentialProvider: Sendable {
    /// Returns fresh credentials. `reason` says why (for the provider's logs; never a secret).
    func refresh(reason: String) throws -> Credentials
}

/// Parses the JSON a credential command or URL returns. Accepted shapes (keys case-insensitive):
/// - STS style: `{"AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration"}`, also nested in
///   `{"Credentials": {...}}` (the `aws sts assume-role` output);
/// - snake case: `{"access_key_id", "secret_access_key", "session_token", "expiration"}`;
/// - bearer: `{"token"|"access"|"access_token", "refresh"|"refresh_token"}`.
///
/// Only string values count (an empty one as absent); `Expiration` is an ISO 8601 time with or
/// without fractional seconds, and one that does not parse is left unknown.
public func parseCredentials(_ data: Data, source: String) throws -> Credentials {
    guard let top = (try? JSONDecoder().decode(CodableJSON.self, from: utf8FromUTF32(data)))?.object else {
        throw UploadError(.credentials, message: "\(source): did not return a JSON object with credentials")
    }
    let o = lowercasedKeys(lowercasedKeys(top)["credentials"]?.object ?? top)
    func field(_ names: String...) -> String? {
        for n in names { if let v = o[n]?.string, !v.isEmpty { return v } }
        return nil
    }
    if let key = field("accesskeyid", "access_key_id"), let secret = field("secretaccesskey", "secret_access_key") {
        var expiration: Date? = nil
        if let e = field("expiration") {
            let f = ISO8601DateFormatter()
            expiration = f.date(from: e)
            if expiration == nil {
                f.formatOptions = [.withInternetDateTime, .withFractionalSeconds]
                expiration = f.date(from: e)
            }
        }
        return .aws(
            AWSCredentials(
                accessKeyID: key, secretAccessKey: secret,
                sessionToken: field("sessiontoken", "session_token", "securitytoken"), expiration: expiration))
    }
    if let token = field("token", "access", "access_token") {
        let refresh = field("refresh", "refresh_token")
        Secrets.shared.register(token)
        Secrets.shared.register(refresh)
        return .bearer(token: token, refreshToken: refresh)
    }
    throw UploadError(.credentials, message: "\(source): the JSON has no credentials (expected AccessKeyId/SecretAccessKey[/SessionToken] or token)")
}

/// `object` with its keys in lower case. Of keys that differ only in case, the first in code
/// point order is read ("AccessKeyId" before "accessKeyId").
private func lowercasedKeys(_ object: [String: CodableJSON]) -> [String: CodableJSON] {
    var out: [String: CodableJSON] = [:]
    for (key, value) in object.sorted(by: { $0.key < $1.key }) where out[key.lowercased()] == nil { out[key.lowercased()] = value }
    return out
}

/// `data` as UTF-8 when it is UTF-32, which `JSONDecoder` does not read (it reads UTF-8 and
/// UTF-16) and `JSONSerialization` did: told as that told it, by a byte order mark or by three
/// zero bytes among the first four. Any other `data` as it is.
private func utf8FromUTF32(_ data: Data) -> Data {
    let b = Array(data.prefix(4))
    guard b.count == 4 else { return data }
    let encoding: String.Encoding, mark: Int
    switch (b[0], b[1], b[2], b[3]) {
    case (0, 0, 0xFE, 0xFF): (encoding, mark) = (.utf32BigEndian, 4)
    case (0xFF, 0xFE, 0, 0): (encoding, mark) = (.utf32LittleEndian, 4)
    case (0, 0, 0, _): (encoding, mark) = (.utf32BigEndian, 0)
    case (_, 0, 0, 0): (encoding, mark) = (.utf32LittleEndian, 0)
    default: return data
    }
    return String(data: data.dropFirst(mark), encoding: encoding).map { Data($0.utf8) } ?? data
}

/// Runs a command (argv, no shell) and reads credentials JSON from its standard output. Its
/// standard error is passed through (redacted) only in the failure message.
public struct CommandCredentialProvider: CredentialProvider {
    public var command: [String]
    public var timeout: Double

    public init(command: [String], timeout: Double = 60) {
        self.command = command
        self.timeout = timeout
    }

    public func refresh(reason: String) throws -> Credentials {
        guard let exe = command.first else {
            throw UploadError(.credentials, message: "credential command is empty")
        }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: exe.contains("/") ? exe : "/usr/bin/env")
        p.arguments = exe.contains("/") ? Array(command.dropFirst()) : command
        var env = ProcessInfo.processInfo.environment
        env["CLIPFLOW_REFRESH_REASON"] = reason
        p.environment = env
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        p.standardInput = FileHandle.nullDevice
        do { try p.run() } catch {
            throw UploadError(.credentials, message: "credential command \(exe): cannot run: \(error.localizedDescription)")
        }
        // What the two readers read (each writes its own field).
        let read = Mutex((out: Data(), err: Data()))
        let group = DispatchGroup()
        group.enter()
        DispatchQueue.global().async {
            let data = out.fileHandleForReading.readDataToEndOfFile()
            read.withLock { $0.out = data }
            group.leave()
        }
        group.enter()
        DispatchQueue.global().async {
            let data = err.fileHandleForReading.readDataToEndOfFile()
            read.withLock { $0.err = data }
            group.leave()
        }
        if group.wait(timeout: .now() + timeout) == .timedOut {
            p.terminate()
            // Its children may hold the pipes open: give the readers a moment, then go on (the
            // reader threads end when the last writer exits).
            _ = group.wait(timeout: .now() + 2)
            p.waitUntilExit()
            throw UploadError(.credentials, message: "credential command \(exe): no answer within \(Int(timeout)) s")
        }
        p.waitUntilExit()
        guard p.terminationStatus == 0 else {
            let text = String(decoding: read.withLock { $0.err }.prefix(400), as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
            throw UploadError(.credentials, message: "credential command \(exe) failed (exit \(p.terminationStatus)): \(text)")
        }
        return try parseCredentials(read.withLock { $0.out }, source: "credential command \(exe)")
    }
}

/// GETs credentials JSON from a URL (e.g. an app server that calls STS AssumeRole for us).
public struct URLCredentialProvider: CredentialProvider {
    public var url: String
    public var headers: [(name: String, value: String)]
    public var settings: TransportSettings

    public init(url: String, headers: [(name: String, value: String)] = [], settings: TransportSettings = TransportSettings()) {
        self.url = url
        self.headers = headers
        self.settings = settings
    }

    public func refresh(reason: String) throws -> Credentials {
        let transport = try CurlTransport(settings: settings)
        let response: HTTPResponse
        do {
            response = try transport.perform(HTTPRequest(method: "GET", url: url, headers: headers))
        } catch let e as TransportError {
            throw UploadError(.credentials, message: "credential URL \(displayURL(url)): \(e.message)", retryable: e.isRetryable)
        }
        guard response.isSuccess else {
            throw UploadError(
                .credentials, message: "credential URL \(displayURL(url)) answered HTTP \(response.status)",
                retryable: isRetryableStatus(response.status))
        }
        return try parseCredentials(response.body, source: "credential URL \(displayURL(url))")
    }
}

/// A fixed answer (library users who manage credentials themselves; tests).
public struct StaticCredentialProvider: CredentialProvider {
    public var credentials: Credentials
    public init(_ credentials: Credentials) { self.credentials = credentials }
    public func refresh(reason: String) throws -> Credentials { credentials }
}
