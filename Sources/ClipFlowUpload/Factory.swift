import Foundation
import Synchronization

extension UploadDestination {
    /// TUS settings from these settings (shared by the plain TUS and the Gcore flow).
    var tusOptions: TUSOptions {
        var o = TUSOptions(endpoint: endpoint)
        if let chunkSize { o.chunkSize = chunkSize }
        switch checksum {
        case "off": o.checksum = .off
        default: o.checksum = .auto
        }
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
            var headers: (@Sendable () throws -> [String: String])? = nil
            if credentials.command != nil || credentials.url != nil
                || EnvironmentCredentialProvider(method: .tus, environment: ProcessInfo.processInfo.environment).isAvailable,
               let provider = credentials.provider(for: .tus, settings: settings) {
                let cache = Mutex<String?>(nil)
                headers = {
                    if let token = cache.withLock({ $0 }) { return ["Authorization": "Bearer \(token)"] }
                    guard case .bearer(let token, _) = try provider.refresh(reason: "TUS upload") else {
                        throw UploadError(code: "credentials", message: "TUS upload: the credentials source gave keys, not a token")
                    }
                    cache.withLock { $0 = token }
                    return ["Authorization": "Bearer \(token)"]
                }
            }
            return TUSUploader(options: tusOptions, store: store, headers: headers)
        case .gcore:
            guard let provider = credentials.provider(for: .gcore, settings: settings) else {
                throw UploadError(code: "credentials", message: "gcore upload: no credentials source")
            }
            var o = GcoreOptions(apiBase: endpoint.hasSuffix("/") ? String(endpoint.dropLast()) : endpoint)
            if let t = uploadURLTemplate { o.uploadURLTemplate = t }
            o.tus = tusOptions
            return GcoreUploader(options: o, store: store, credentials: provider)
        case .s3:
            guard let provider = credentials.provider(for: .s3, settings: settings) else {
                throw UploadError(code: "credentials", message: "s3 upload: no credentials source")
            }
            var o = S3Options(endpoint: endpoint, region: region ?? "us-east-1", bucket: bucket ?? "", keyPrefix: keyPrefix ?? "",
                              addressingStyle: addressing == "virtual" ? .virtual : .path, partSize: chunkSize,
                              minimumPartSize: minimumPartSize ?? S3Options.awsMinimumPartSize, retry: retryPolicy)
            o.network = S3Options.Network(connectTimeout: settings.connectTimeout, stallTimeout: settings.stallTimeout,
                                          verifyTLS: settings.verifyTLS, caBundle: settings.caBundle)
            // The first credentials come from the same source that refreshes them.
            guard case .aws(let keys) = try provider.refresh(reason: "start of upload") else {
                throw UploadError(code: "credentials", message: "s3 upload: the credentials source gave a token, not access keys")
            }
            return S3Uploader(options: o, store: store, credentials: keys, provider: provider)
        }
    }
}
