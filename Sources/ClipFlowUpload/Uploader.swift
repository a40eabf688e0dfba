import Foundation
import ClipFlowCore

/// One file upload to one destination. Implementations: `TUSUploader` (plain TUS 1.0),
/// `GcoreUploader` (hosting API + TUS), `S3Uploader` (multipart). Each call runs on the caller's
/// thread and blocks until the upload finished, failed, was paused or cancelled; it resumes
/// whatever the `ResumeStore` knows about the same file and destination.
public protocol FileUploader: Sendable {
    /// A stable description of where uploads go (no secrets): the resume store's destination key.
    var destination: String { get }
    /// Uploads `file`. `id` tags the events. `metadata` is user metadata (title, description,
    /// tags, ...), each protocol sending what it can. Throws `UploadError` (`.paused` and
    /// `.cancelled` included).
    func upload(
        file: String, id: String, metadata: [String: String], control: UploadControl,
        observer: UploadObserver
    ) throws -> UploadResult
    /// Forgets a not-finished upload of `file`: deletes it on the server when the protocol can
    /// (TUS termination, S3 abort) and drops its resume record. Best effort; never throws for a
    /// server that is gone.
    func discard(file: String) throws
}
