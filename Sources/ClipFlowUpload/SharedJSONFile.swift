import Foundation

/// A small JSON document shared between processes (the upload queue, the resume store). Every
/// change is a read-modify-write under an exclusive `flock` on `path.lock`; the new text goes to a
/// temporary file that is fsync'd and renamed over the old one, and the directory is fsync'd, so
/// readers see the old or the new document, never a torn one, even after a power cut. Files are
/// created 0600 in a 0700 directory (they name files and endpoints). Thread-safe: the lock is taken
/// per call.
struct SharedJSONFile<Value: Codable>: Sendable where Value: Sendable {
    let path: String
    /// For messages: "the upload queue", "the resume store".
    let what: String
    let empty: Value

    init(path: String, what: String, empty: Value) throws {
        self.path = path
        self.what = what
        self.empty = empty
        let dir = (path as NSString).deletingLastPathComponent
        if !FileManager.default.fileExists(atPath: dir) {
            do {
                try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
            } catch {
                throw UploadError(.output, message: "\(dir): cannot create the directory for \(what): \(error.localizedDescription)")
            }
        }
    }

    /// The current document.
    func read() throws -> Value {
        try locked { try load() }
    }

    /// Loads, changes and (when changed) saves the document, all under the lock.
    @discardableResult
    func modify<T>(_ change: (inout Value) throws -> T) throws -> T where Value: Equatable {
        try locked {
            var value = try load()
            let before = value
            let result = try change(&value)
            if value != before { try save(value) }
            return result
        }
    }

    private func locked<T>(_ body: () throws -> T) throws -> T {
        let lockPath = path + ".lock"
        let fd = open(lockPath, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else {
            throw UploadError(.output, message: "\(lockPath): cannot open the lock of \(what): \(String(cString: strerror(errno)))")
        }
        defer { close(fd) }
        while flock(fd, LOCK_EX) != 0 {
            if errno != EINTR { throw UploadError(.output, message: "\(lockPath): cannot lock \(what): \(String(cString: strerror(errno)))") }
        }
        defer { flock(fd, LOCK_UN) }
        return try body()
    }

    private func load() throws -> Value {
        guard let data = FileManager.default.contents(atPath: path), !data.isEmpty else { return empty }
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .iso8601
        do {
            return try decoder.decode(Value.self, from: data)
        } catch {
            throw UploadError(.badInput, message: "\(path): \(what) is damaged (\(error)); move it away to start afresh")
        }
    }

    private func save(_ value: Value) throws {
        let encoder = JSONEncoder()
        encoder.dateEncodingStrategy = .iso8601
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let data = try encoder.encode(value)
        let tmp = path + ".\(getpid()).tmp"
        func fail(_ what2: String) -> UploadError {
            let reason = String(cString: strerror(errno))
            unlink(tmp)
            return UploadError(.output, message: "\(path): cannot save \(what) (\(what2): \(reason))")
        }
        let fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw fail("create") }
        let ok = data.withUnsafeBytes { raw -> Bool in
            var done = 0
            while done < raw.count {
                let n = write(fd, raw.baseAddress! + done, raw.count - done)
                if n < 0 { if errno == EINTR { continue }; return false }
                done += n
            }
            return true
        }
        guard ok, fsync(fd) == 0 else { close(fd); throw fail("write") }
        close(fd)
        guard rename(tmp, path) == 0 else { throw fail("rename") }
        let dirfd = open((path as NSString).deletingLastPathComponent, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if dirfd >= 0 { fsync(dirfd); close(dirfd) }
    }
}
