import ClipFlowCore
import Foundation

/// The bytes of uploads on disk: one file per upload in `folder`, named by its key. Blocking file
/// work runs on a Dispatch queue of its own, never on the server's event loops or Swift's
/// cooperative threads. A writer writes at the offset and makes its bytes durable with fsync.
final class UploadFiles: UploadStorage {
    let folder: URL
    let locks = UploadLocks()
    private let io = DispatchQueue(label: "clipflow.serve.files", attributes: .concurrent)

    init(folder: URL) throws {
        self.folder = folder
        do { try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true) } catch {
            throw ClipFlowError.output("cannot create '\(folder.path)': \(error.localizedDescription)")
        }
    }

    func path(_ id: String) -> String { folder.appendingPathComponent(id).path }

    func create(_ key: String, length: Int64) async throws {
        let p = path(key)
        try await io.perform {
            let fd = open(p, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw UploadFileError(operation: "create an upload file", code: errno) }
            Glibc.close(fd)
        }
    }

    func writer(for upload: UploadRow) async throws -> any UploadWriter {
        let p = path(upload.id)
        let fd = try await io.perform {
            let fd = open(p, O_WRONLY | O_CLOEXEC)
            guard fd >= 0 else { throw UploadFileError(operation: "open an upload file", code: errno) }
            return fd
        }
        return FileWriter(fd: fd, end: upload.offset, io: io)
    }

    func remove(_ key: String) async throws {
        let p = path(key)
        try await io.perform {
            guard unlink(p) == 0 || errno == ENOENT else { throw UploadFileError(operation: "remove an upload file", code: errno) }
        }
    }

    func localFile(_ key: String, scratch: URL) async throws -> String { path(key) }

    /// Whether `error` is a file operation that found no space left (ENOSPC, EDQUOT).
    static func isDiskFull(_ error: Error) -> Bool {
        guard let e = error as? UploadFileError else { return false }
        return e.code == ENOSPC || e.code == EDQUOT
    }
}

/// Writes one request's bytes into an upload's file at its offset. Each write starts writing
/// back to the disk without waiting (sync_file_range), so that the fsync that makes it durable
/// finds little left to do.
private actor FileWriter: UploadWriter {
    private let fd: Int32
    private var end: Int64
    private var open = true
    private let io: DispatchQueue

    init(fd: Int32, end: Int64, io: DispatchQueue) {
        self.fd = fd
        self.end = end
        self.io = io
    }

    deinit { if open { Glibc.close(fd) } }

    func append(_ bytes: [UInt8]) async throws {
        let (fd, offset) = (self.fd, end)
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
        end += Int64(bytes.count)
    }

    func checkpoint() async throws -> UploadMark {
        let fd = self.fd
        try await io.perform { try Self.makeDurable(fd) }
        return UploadMark(offset: end)
    }

    func finish() async throws -> UploadMark {
        let fd = self.fd
        open = false
        try await io.perform {
            defer { Glibc.close(fd) }
            try Self.makeDurable(fd)
        }
        return UploadMark(offset: end)
    }

    /// Bytes past the recorded offset are overwritten by the next request: nothing to remove.
    func recorded(_ mark: UploadMark, taken: Bool) async {}

    func abandon() async {
        if open { Glibc.close(fd) }
        open = false
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
