import ClipFlowCore
import ClipFlowUpload
import Foundation

/// The bucket a server keeps its uploads and media in (`--storage s3://BUCKET/PREFIX`): every key
/// it writes is under PREFIX (`uploads/…`, `media/ID/FOLDER/…`). Every request goes through one
/// `S3Client` (`store`), whose endpoint and credentials are the AWS tools' variables, or the keys
/// come from a credentials command (`S3Access.fromEnvironment`). S3 calls block, so they run on a
/// Dispatch queue of their own, never on an event loop or a thread of Swift's cooperative pool.
/// Thread-safe; `Sendable`.
final class ServeBucket: Sendable {
    let store: S3Client
    let name: String
    /// "" or a prefix ending in "/".
    let prefix: String
    private let io = DispatchQueue(label: "clipflow.serve.bucket", attributes: .concurrent)

    /// A request to the bucket that makes no progress is tried this many times, waiting at most
    /// `retryDelay` seconds between tries (the object store restarting is waited for; a client
    /// is not kept for minutes).
    static let attempts = 6
    static let retryDelay: Double = 4

    init(url: String, environment: [String: String], credentialsCommand: String? = nil) throws {
        guard let location = S3Location(url: url) else {
            throw ClipFlowError.badInput("--storage \(url): expected s3://BUCKET or s3://BUCKET/PREFIX")
        }
        var access: S3Access
        do { access = try S3Access.fromEnvironment(environment, credentialsCommand: credentialsCommand) } catch let e as UploadError {
            throw ClipFlowError.badInput("--storage \(url): \(e.message)")
        }
        access.retry.maxAttemptsWithoutProgress = min(access.retry.maxAttemptsWithoutProgress, Self.attempts)
        access.retry.maxDelay = Self.retryDelay
        store = S3Client(access: access)
        name = location.bucket
        prefix = location.key.isEmpty || location.key.hasSuffix("/") ? location.key : location.key + "/"
    }

    /// `s3://BUCKET/PREFIX`, as the start line shows it.
    var display: String { "s3://\(name)/\(prefix)" }

    func key(_ path: String) -> String { prefix + path }

    /// Runs blocking S3 work off the event loops and the cooperative pool; its result.
    @discardableResult
    func perform<T: Sendable>(_ body: @escaping @Sendable (S3Client, String) throws -> T) async throws -> T {
        let (store, name) = (self.store, self.name)
        return try await io.perform { try body(store, name) }
    }

    /// Checks that the bucket answers (a listing of one key), so that a wrong name, endpoint or
    /// key is an error at start, naming `--storage`.
    func check() async throws {
        let prefix = self.prefix
        do { _ = try await perform { s, b in try s.list(bucket: b, prefix: prefix + "uploads/") } } catch let e as UploadError {
            throw ClipFlowError.badInput("--storage \(display): \(e.message)")
        }
    }
}
