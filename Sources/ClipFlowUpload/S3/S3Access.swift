import Foundation

/// How an `S3Client` reaches an S3-compatible service: the endpoint, region and addressing, the
/// first credentials and what renews them, the network and retry settings. The one type both
/// ways of configuring S3 resolve into: from the flags of `clipflow upload --to s3`
/// (`S3Options.access`, via `UploadDestination.makeUploader`) and from the AWS tools' variables
/// (`fromEnvironment`: `batch`, `serve`, `run`). A value; the secret inside `credentials` is
/// registered for redaction when it is made.
public struct S3Access: Sendable {
    public var endpoint: String
    public var region: String
    public var addressingStyle: S3Options.AddressingStyle
    /// The keys the first request is signed with.
    public var credentials: AWSCredentials
    /// Asked for fresh keys when the server refuses the current ones as expired (nil: nothing to ask).
    public var provider: CredentialProvider?
    public var network: TransportSettings
    public var retry: RetryPolicy
    /// Credentials whose `expiration` is closer than this many seconds are renewed (through the
    /// provider) before the next request.
    public var credentialRefreshMargin: Double

    public init(
        endpoint: String, region: String, addressingStyle: S3Options.AddressingStyle = .path, credentials: AWSCredentials,
        provider: CredentialProvider? = nil, network: TransportSettings = TransportSettings(), retry: RetryPolicy = RetryPolicy(),
        credentialRefreshMargin: Double = 60
    ) {
        self.endpoint = endpoint
        self.region = region
        self.addressingStyle = addressingStyle
        self.credentials = credentials
        self.provider = provider
        self.network = network
        self.retry = retry
        self.credentialRefreshMargin = credentialRefreshMargin
    }

    /// The variables read by `fromEnvironment`, in the order they are looked at.
    public static let endpointVariables = ["AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"]
    public static let regionVariables = ["AWS_REGION", "AWS_DEFAULT_REGION"]

    /// The endpoint from `AWS_ENDPOINT_URL_S3`, else `AWS_ENDPOINT_URL`, else
    /// `https://s3.<region>.amazonaws.com`; virtual-host addressing for amazonaws.com, path
    /// addressing for any other endpoint (MinIO, SeaweedFS, Ceph). The region from `AWS_REGION`,
    /// else `AWS_DEFAULT_REGION`, else us-east-1. The keys from `AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`, or, when `credentialsCommand` is given,
    /// from that shell command's JSON (run again when the server refuses the keys as expired), as
    /// `clipflow upload --credentials-command` does. `AWS_MAX_ATTEMPTS` bounds the tries of a
    /// request that makes no progress (default 8, backing off up to 30 s). Errors name the
    /// variable to set and never hold a secret.
    public static func fromEnvironment(_ env: [String: String], credentialsCommand: String? = nil) throws -> S3Access {
        func value(_ names: [String]) -> (name: String, value: String)? {
            for n in names { if let v = env[n]?.trimmingCharacters(in: .whitespaces), !v.isEmpty { return (n, v) } }
            return nil
        }
        let region = value(regionVariables)?.value ?? "us-east-1"
        var endpoint = "https://s3.\(region).amazonaws.com"
        if let given = value(endpointVariables) {
            guard let url = URLComponents(string: given.value), let scheme = url.scheme?.lowercased(),
                ["http", "https"].contains(scheme), let host = url.host, !host.isEmpty
            else {
                throw UploadError(.badInput, message: "\(given.name): '\(displayURL(given.value))' is not an http(s) URL")
            }
            endpoint = given.value
        }
        let host = URLComponents(string: endpoint)?.host?.lowercased() ?? ""
        let style: S3Options.AddressingStyle = host == "amazonaws.com" || host.hasSuffix(".amazonaws.com") ? .virtual : .path
        let network = TransportSettings()
        var retry = RetryPolicy()
        if let attempts = value(["AWS_MAX_ATTEMPTS"]) {
            guard let n = Int(attempts.value), n >= 1 else {
                throw UploadError(.badInput, message: "AWS_MAX_ATTEMPTS: '\(attempts.value)' is not a whole number of 1 or more")
            }
            retry.maxAttemptsWithoutProgress = n
        }

        if let credentialsCommand {
            let source = CredentialSource(command: ["/bin/sh", "-c", credentialsCommand])
            if let p = source.problems().first { throw UploadError(.badInput, message: "--\(p.field): \(p.message)") }
            guard let provider = source.provider(for: .s3, settings: network) else {
                throw UploadError(.credentials, message: "S3: the credentials command gave no credential source")
            }
            guard case .aws(let keys) = try provider.refresh(reason: "start") else {
                throw UploadError(.credentials, message: "S3: the credentials command gave a token, not access keys (AccessKeyId/SecretAccessKey)")
            }
            return S3Access(endpoint: endpoint, region: region, addressingStyle: style, credentials: keys, provider: provider, network: network, retry: retry)
        }

        let missing = ["AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"].filter { value([$0]) == nil }
        guard missing.isEmpty, let keyID = value(["AWS_ACCESS_KEY_ID"])?.value, let secret = value(["AWS_SECRET_ACCESS_KEY"])?.value else {
            throw UploadError(
                .credentials,
                message:
                    "S3: no credentials: \(missing.joined(separator: " and ")) \(missing.count == 1 ? "is" : "are") not set; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials), or give --credentials-command"
            )
        }
        let keys = AWSCredentials(accessKeyID: keyID, secretAccessKey: secret, sessionToken: value(["AWS_SESSION_TOKEN"])?.value)
        return S3Access(endpoint: endpoint, region: region, addressingStyle: style, credentials: keys, network: network, retry: retry)
    }

    /// `S3Options` for one object (`bucket`, `key`) at this endpoint.
    func options(bucket: String, key: String? = nil) -> S3Options {
        var o = S3Options(endpoint: endpoint, region: region, bucket: bucket, key: key, addressingStyle: addressingStyle, retry: retry)
        o.network = network
        o.credentialRefreshMargin = credentialRefreshMargin
        return o
    }
}
