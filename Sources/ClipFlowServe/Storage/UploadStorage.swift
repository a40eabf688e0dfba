import ClipFlowCore
import Foundation

/// Where the bytes of TUS uploads are kept: files in the data folder (`UploadFiles`, the default)
/// or objects in a bucket (`BucketUploads`). The database's mark (offset, and in a bucket the
/// partial part's object) is the truth either way: a writer makes bytes durable before the mark
/// that covers them is recorded, and what it kept past the recorded mark is overwritten by the
/// next request or never read. Upload keys are made by the server (`TUSServer.key`), never taken
/// from a request. Implementations are thread-safe.
protocol UploadStorage: Sendable {
    /// Who holds each upload on this server (a request writing or removing it).
    var locks: UploadLocks { get }
    /// Makes room for a new upload of `length` bytes (a zero-length upload is whole at once).
    func create(_ key: String, length: Int64) async throws
    /// A writer that appends to the upload from its recorded mark.
    func writer(for upload: UploadRow) async throws -> any UploadWriter
    /// Removes everything kept of upload `key` (absent already: nothing to do).
    func remove(_ key: String) async throws
    /// The complete upload as a local file for processing: a bucket's is downloaded into
    /// `scratch`, a data folder's is read where it is.
    func localFile(_ key: String, scratch: URL) async throws -> String
}

extension UploadStorage {
    /// Removes upload `id`: its bytes first, then its row (so that a full disk, which may refuse
    /// the database's write, is freed first), holding the upload (a request writing it is
    /// interrupted and records what it made durable first). False when the upload stayed busy.
    func discard(_ id: String, from database: any ServeStore) async throws -> Bool {
        let done: Void? = try await locks.holding(id) {
            try await self.remove(id)
            try await database.delete(id)
        }
        return done != nil
    }
}

/// One request's writes into an upload, from its recorded mark on. Confined to the request.
protocol UploadWriter: AnyObject, Sendable {
    /// Appends `bytes` after what was appended before. A failure may leave them taken but not
    /// written yet (`finish` writes them, or fails): they are never to be appended again.
    func append(_ bytes: [UInt8]) async throws
    /// The mark up to which what was appended is durable now, made so at a cost fit for every
    /// `TUSServer.commitEvery` bytes (a file: fsync; a bucket: the whole parts sent).
    func checkpoint() async throws -> UploadMark
    /// Makes everything appended durable and lets go; returns the mark of the end. A failure here
    /// leaves nothing past the recorded mark known durable.
    func finish() async throws -> UploadMark
    /// Told, after `mark` (from `checkpoint` or `finish`) was offered to the row, whether the row
    /// took it (`taken`: what it named before is superseded and may go) or had been moved by
    /// another request (what was written for `mark` alone is never read and may go).
    func recorded(_ mark: UploadMark, taken: Bool) async
    /// Lets go without making anything more durable.
    func abandon() async
}
