import Foundation

#if canImport(Glibc)
    import Glibc
#endif

/// Writing many files fast and then making them durable at once. A writer puts each file down
/// with `write(_:to:)`, which starts the kernel writing it back to the disk and returns without
/// waiting; `sync(folder:)`, before the folder is renamed into place, waits for all of it (by then
/// mostly written back). So a folder of a hundred segments costs one wait, not a hundred.
public enum DurableFiles {
    /// Creates `path` (it must not exist) holding `bytes`, and starts its write-back. Throws the
    /// system's reason.
    public static func write(_ bytes: [UInt8], to path: String) throws {
        let fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o644)
        guard fd >= 0 else { throw ClipFlowError.output("cannot create '\(path)'", errno: errno) }
        defer { close(fd) }
        try bytes.withUnsafeBytes { try writeAll(fd, $0, naming: path) }
        startWriteBack(fd, 0, Int64(bytes.count))
    }

    /// Writes all of `raw` to `fd` (again after a short write or an interruption); a failure
    /// names `path`.
    public static func writeAll(_ fd: Int32, _ raw: UnsafeRawBufferPointer, naming path: String) throws {
        var done = 0
        while done < raw.count {
            let n = Glibc.write(fd, raw.baseAddress! + done, raw.count - done)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw ClipFlowError.output("cannot write '\(path)'", errno: errno) }
            done += n
        }
    }

    /// Starts writing `length` bytes at `offset` of `fd` back to the disk and returns at once
    /// (Linux's SYNC_FILE_RANGE_WRITE); durability still comes from an fsync that follows.
    public static func startWriteBack(_ fd: Int32, _ offset: Int64, _ length: Int64) {
        _ = syncFileRange?(fd, offset, length, 2)
    }

    /// Makes every file and folder under `folder` (itself included) durable: fsync on each, the
    /// folders after their contents. Throws naming the first that fails.
    public static func sync(folder: URL) throws {
        var folders = [folder.path]
        var index = 0
        while index < folders.count {
            let dir = folders[index]
            index += 1
            let names: [String]
            do { names = try FileManager.default.contentsOfDirectory(atPath: dir) } catch {
                throw ClipFlowError.output("cannot read the folder '\(dir)': \(error.localizedDescription)")
            }
            for name in names {
                let path = dir + "/" + name
                var st = stat()
                guard lstat(path, &st) == 0 else { continue }
                switch st.st_mode & S_IFMT {
                case S_IFDIR: folders.append(path)
                case S_IFREG: try fsync(path: path)
                default: break
                }
            }
        }
        for dir in folders.reversed() { try fsync(path: dir) }
    }

    private static func fsync(path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { throw ClipFlowError.output("cannot open '\(path)' to make it durable", errno: errno) }
        defer { close(fd) }
        guard Glibc.fsync(fd) == 0 else { throw ClipFlowError.output("cannot make '\(path)' durable", errno: errno) }
    }

    /// Linux's sync_file_range (glibc declares it only under _GNU_SOURCE, which Swift's Glibc
    /// module does not set), looked up once; nil where there is none.
    private static let syncFileRange: (@convention(c) (Int32, Int64, Int64, UInt32) -> Int32)? = {
        guard let sym = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "sync_file_range") else { return nil }
        return unsafeBitCast(sym, to: (@convention(c) (Int32, Int64, Int64, UInt32) -> Int32).self)
    }()
}
