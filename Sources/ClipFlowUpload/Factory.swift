import Foundation
import Synchronization

extension UploadDestination {
    /// TUS settings from these settings (shared by the plain TUS and the Gcore flow).
    var tusOptions: TUSOptions {
        var o = TUSOptions(endpoint: endpoint)
        if let chunkSize { o.chunkSize = chunkSize }
        o.checksum = checksum ?? .auto
        o.retry = retryPolicy
        o.transport = transportSettings
        return o
    }

    /// The uploader for this destination. Credentials are not read here but when an upload needs
    /// them (and again when the server refuses them).
    public func makeUploader(store: ResumeStore) throws -> FileUploader {
        let settings = transportSettings
        switch method {
        case .tus:
            // A plain TUS server may want a bearer token: from a command/URL when configured, or
            // CLIPFLOW_UPLOAD_TOKEN when set; otherwise no Authorization header.
            if credentials.command != nil || credentials.url != nil
                || EnvironmentCredentialProvider(method: .tus, environment: ProcessInfo.processInfo.environment).isAvailable,
                let provider = credentials.provider(for: .tus, settings: settings)
            {
                let auth = TUSBearerAuth(provider: provider)
                return TUSUploader(
                    options: tusOptions, store: store, headers: { try auth.headers() },
                    refreshHeaders: { try auth.refresh(reason: $0) })
            }
            return TUSUploader(options: tusOptions, store: store)
        case .gcore, .clipflow:
            // `clipflow serve` without an API key takes uploads without a token: with no command,
            // URL or CLIPFLOW_UPLOAD_TOKEN, none is sent (a server with a key refuses, and the
            // error says what to set).
            let tokenless =
                method == .clipflow && credentials.command == nil && credentials.url == nil
                && !EnvironmentCredentialProvider(method: method, environment: ProcessInfo.processInfo.environment).isAvailable
            let provider = tokenless ? nil : credentials.provider(for: method, settings: settings)
            if !tokenless, provider == nil { throw UploadError(.credentials, message: "\(method.rawValue) upload: no credentials source") }
            var o = GcoreOptions(apiBase: endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint, uploadURLTemplate: uploadURLTemplate)
            o.server = method == .clipflow ? .clipflow : .gcore
            o.tus = tusOptions
            return GcoreUploader(options: o, store: store, credentials: provider)
        case .s3:
            guard let provider = credentials.provider(for: .s3, settings: settings) else {
                throw UploadError(.credentials, message: "s3 upload: no credentials source")
            }
            // The first credentials come from the same source that refreshes them.
            guard case .aws(let keys) = try provider.refresh(reason: "start of upload") else {
                throw UploadError(.credentials, message: "s3 upload: the credentials source gave a token, not access keys")
            }
            // The client's settings: `s3Options.access`, as `S3Access.fromEnvironment` makes them
            // from the environment for `batch` and `serve`.
            return S3Uploader(options: s3Options, store: store, credentials: keys, provider: provider)
        }
    }

    /// The S3 settings these flags give (`--endpoint`, `--region`, `--bucket`, `--key-prefix`,
    /// `--addressing`, `--chunk-size`, `--min-part-size`, the retry and network flags): the
    /// upload's, and through `S3Options.access` the client's.
    public var s3Options: S3Options {
        var o = S3Options(
            endpoint: endpoint, region: region ?? "us-east-1", bucket: bucket ?? "", keyPrefix: keyPrefix ?? "",
            addressingStyle: addressing ?? .path, partSize: chunkSize,
            minimumPartSize: minimumPartSize ?? S3Options.awsMinimumPartSize, retry: retryPolicy)
        o.network = transportSettings
        return o
    }
}

/// The bearer token of a plain TUS destination: asked for on first use, kept, and asked for again
/// (the kept one dropped) when the server refuses it.
final class TUSBearerAuth: Sendable {
    let provider: CredentialProvider
    private let cache = Mutex<String?>(nil)

    init(provider: CredentialProvider) { self.provider = provider }

    func headers() throws -> [String: String] {
        if let token = cache.withLock({ $0 }) { return ["Authorization": "Bearer \(token)"] }
        return try fetch(reason: "TUS upload")
    }

    func refresh(reason: String) throws -> [String: String] {
        cache.withLock { $0 = nil }
        return try fetch(reason: reason)
    }

    private func fetch(reason: String) throws -> [String: String] {
        guard case .bearer(let token, _) = try provider.refresh(reason: reason) else {
            throw UploadError(.credentials, message: "TUS upload: the credentials source gave keys, not a token")
        }
        Secrets.shared.register(token)
        cache.withLock { $0 = token }
        return ["Authorization": "Bearer \(token)"]
    }
}
