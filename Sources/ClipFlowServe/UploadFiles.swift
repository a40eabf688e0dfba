import ClipFlowCore
import Foundation

/// The bytes of uploads on disk: one file per upload in `folder`, named by its id (ids are made
/// here, never taken from a request, so a name cannot leave the folder). Blocking file work runs
/// on a Dispatch queue of its own, never on the server's event loops or Swift's cooperative
/// threads. Thread-safe (every call stands alone); `Sendable`.
final class UploadFiles: Sendable {
    let folder: URL
    /// Who holds each upload (a request writing or removing it).
    let locks = UploadLocks()
    private let io = DispatchQueue(label: "clipflow.serve.files", attributes: .concurrent)

    init(folder: URL) throws {
        self.folder = folder
        do { try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true) } catch {
            throw ClipFlowError.output("cannot create '\(folder.path)': \(error.localizedDescription)")
        }
    }

    func path(_ id: String) -> String { folder.appendingPathComponent(id).path }

    /// An empty file for a new upload.
    func create(_ id: String) async throws {
        let p = path(id)
        try await io.perform {
            let fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw UploadFileError(operation: "create an upload file", code: errno) }
            Glibc.close(fd)
        }
    }

    /// The upload's file open for writing (close it with `close`).
    func openForWriting(_ id: String) async throws -> Int32 {
        let p = path(id)
        return try await io.perform {
            let fd = open(p, O_WRONLY | O_CLOEXEC)
            guard fd >= 0 else { throw UploadFileError(operation: "open an upload file", code: errno) }
            return fd
        }
    }

    /// Writes `bytes` at `offset` (all of them), and starts writing them back to the disk without
    /// waiting (sync_file_range), so that the fsync that records them finds little left to do.
    func write(_ fd: Int32, _ bytes: [UInt8], at offset: Int64) async throws {
        try await io.perform {
            defer { DurableFiles.startWriteBack(fd, offset, Int64(bytes.count)) }
            try bytes.withUnsafeBytes { raw in
                var done = 0
                while done < raw.count {
                    let n = pwrite(fd, raw.baseAddress! + done, raw.count - done, off_t(offset) + off_t(done))
                    if n < 0, errno == EINTR { continue }
                    guard n > 0 else { throw UploadFileError(operation: "write an upload", code: n == 0 ? EIO : errno) }
                    done += n
                }
            }
        }
    }

    /// Makes what was written so far durable.
    func sync(_ fd: Int32) async throws {
        try await io.perform { try Self.makeDurable(fd) }
    }

    /// Makes what was written durable, then closes.
    func syncAndClose(_ fd: Int32) async throws {
        try await io.perform {
            defer { Glibc.close(fd) }
            try Self.makeDurable(fd)
        }
    }

    func close(_ fd: Int32) { Glibc.close(fd) }

    func remove(_ id: String) async throws {
        let p = path(id)
        try await io.perform {
            guard unlink(p) == 0 || errno == ENOENT else { throw UploadFileError(operation: "remove an upload file", code: errno) }
        }
    }

    /// Removes upload `id`: its file first, then its row (so that a full disk, which may refuse
    /// the database's write, is freed first), holding the upload (a request writing it is
    /// interrupted and records what it made durable first). False when the upload stayed busy.
    func discard(_ id: String, from database: any ServeStore) async throws -> Bool {
        let done: Void? = try await locks.holding(id) {
            try await self.remove(id)
            try await database.delete(id)
        }
        return done != nil
    }

    /// Whether `error` is a file operation that found no space left (ENOSPC, EDQUOT).
    static func isDiskFull(_ error: Error) -> Bool {
        guard let e = error as? UploadFileError else { return false }
        return e.code == ENOSPC || e.code == EDQUOT
    }

    private static func makeDurable(_ fd: Int32) throws {
        guard fsync(fd) == 0 else { throw UploadFileError(operation: "make an upload durable", code: errno) }
    }
}

/// A file operation on an upload that failed, with its errno (no path: the message may reach a
/// client).
struct UploadFileError: Error, CustomStringConvertible {
    var operation: String
    var code: Int32
    var description: String { "cannot \(operation): \(String(cString: strerror(code)))" }
}

extension DispatchQueue {
    /// Runs blocking `body` on this queue and waits for it without holding a thread of Swift's
    /// cooperative pool or an event loop.
    func perform<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { c in async { c.resume(with: Result { try body() }) } }
    }
}
