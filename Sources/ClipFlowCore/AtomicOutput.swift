import Foundation
import Synchronization
#if canImport(Glibc)
    import Glibc
#endif

/// An output file or folder written under a temporary name next to its target and renamed into
/// place only when complete, so no reader ever sees half a file. If the work fails or is interrupted, `discard()` (or
/// deinit) removes the temporary (a folder with everything in it), so a failed run leaves nothing
/// behind. Not thread-safe: one owner.
///
/// Temporaries outlive a writer that is killed (SIGKILL, power loss). So that they do not stay
/// forever, the temporary is created by `init` (named `.NAME.clipflow-tmp-PID-RANDOM`) and its
/// writer holds a shared `flock` on it (the file, or the folder itself) from creation to
/// `commit`/`discard`; the kernel drops the lock when the writer dies, however it dies. Each
/// process, the first time it writes into a folder, removes the temporaries there whose lock it
/// can take exclusively: their writers are gone. A live writer's lock blocks that, whichever its
/// PID (PIDs are reused, so `kill(pid, 0)` would not tell). Where the filesystem offers no locks, nothing is removed; on network and
/// FUSE filesystems (locks may be per machine) a temporary must also be an hour old.
///
/// Write the temporary in place (open it without `O_EXCL`, truncate, or use `write(_:)`);
/// replacing the file (a new file renamed over it) would leave it unlocked.
///
/// An existing target is replaced only when the writer was told to (`replacing`: `-y`,
/// `"overwrite": true`). Otherwise `init` refuses it, and `commit` refuses one that appeared
/// while the work ran (the new output is discarded, the file found is kept).
public final class AtomicOutput {
    public let target: URL
    public let temporary: URL
    public let replacing: Bool
    /// Holds the writer's lock on the temporary (see the type's comment); -1 once released.
    private var lockFD: Int32
    private var done = false

    /// Creates the temporary file; fails early with a clear error if the target's folder is
    /// missing or not writable, if the target is an existing directory, or if it exists and
    /// `replacing` is false.
    public convenience init(target: URL, label: String = "output", replacing: Bool) throws {
        do {
            try self.init(
                target: target, label: label, isFolder: false, replacing: replacing,
                make: { path in
                    let fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0o666)
                    if fd >= 0 { close(fd) }
                    return fd >= 0 ? 0 : errno
                })
        } catch let e as CannotCreate {
            throw ClipFlowError.output(e.description)
        }
    }

    /// An output folder: the temporary is an empty folder, to be filled and renamed onto `target`
    /// by `commit`. With `replacing`, an existing folder at `target` is replaced by it (and then
    /// removed); without, `commit` fails if `target` exists by then, unless it is an empty folder.
    /// Fails early with a clear error if `target` exists (without `replacing`; with it, if it is
    /// not a folder) or its parent is missing or not writable.
    public convenience init(folder target: URL, label: String = "an output folder", replacing: Bool) throws {
        var isDir: ObjCBool = false
        if FileManager.default.fileExists(atPath: target.path, isDirectory: &isDir), !replacing || !isDir.boolValue {
            throw ClipFlowError.output(
                replacing
                    ? "'\(target.path)' exists and is not a folder; \(label) is written as a folder (remove it or choose another)"
                    : "'\(target.path)' exists; \(label) is written into a new folder (\(AtomicOutput.replaceHint), or remove it, or choose another)")
        }
        do {
            try self.init(
                target: target, label: label, isFolder: true, replacing: replacing, make: { path in mkdir(path, 0o777) == 0 ? 0 : errno })
        } catch let e as CannotCreate {
            throw ClipFlowError.output(e.description)
        }
    }

    /// An output whose temporary is a hard link to `source` (no byte copied), or nil when the
    /// filesystem cannot link it there (another device, no hard links): copy instead.
    public static func hardLink(from source: String, target: URL, label: String = "output", replacing: Bool) throws -> AtomicOutput? {
        do {
            return try AtomicOutput(
                target: target, label: label, isFolder: false, replacing: replacing, make: { path in link(source, path) == 0 ? 0 : errno })
        } catch is CannotCreate {
            return nil
        }
    }

    /// `make` creates the file (or folder) at the path it is given, returning 0 or an errno.
    private init(target: URL, label: String, isFolder: Bool, replacing: Bool, make: (String) -> Int32) throws {
        self.target = target
        self.replacing = replacing
        let dir = target.deletingLastPathComponent()
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dir.path, isDirectory: &isDir), isDir.boolValue else {
            throw ClipFlowError.output("\(label) '\(target.path)': folder '\(dir.path)' does not exist")
        }
        if !isFolder, FileManager.default.fileExists(atPath: target.path, isDirectory: &isDir) {
            if isDir.boolValue { throw ClipFlowError.output("\(label) '\(target.path)' is a directory; give a file name") }
            if !replacing { throw ClipFlowError.output("\(label) '\(target.path)' exists; it is not replaced unless asked (\(Self.replaceHint))") }
        }
        guard access(dir.path, W_OK) == 0 else {
            throw ClipFlowError.output("\(label) '\(target.path)': folder '\(dir.path)' is not writable")
        }
        LeftoverTemporaries.removeOnce(in: dir.path)
        // A sweeper in another process may take and remove a new file between its creation and
        // our lock (it is not locked yet): then the path no longer names our file, and a new
        // name is tried.
        for _ in 0..<16 {
            let name = ".\(target.lastPathComponent)\(LeftoverTemporaries.marker)\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
            let path = dir.appendingPathComponent(name).path
            let e = make(path)
            if e == EEXIST { continue }
            if e != 0 { throw CannotCreate(label: label, target: target.path, errno: e) }
            let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
            guard fd >= 0 else {
                // ENOENT: a sweeper took it first. Otherwise (a hard link to a symlink: ELOOP)
                // it cannot be locked: undo and say so.
                let e = errno
                Self.remove(path)
                if e == ENOENT { continue }
                throw CannotCreate(label: label, target: target.path, errno: e)
            }
            // Never waits: an exclusive lock here is a sweeper about to remove the file, or
            // (for a hard link) another program holding the source; either way try a new name.
            let locked = flock(fd, LOCK_SH | LOCK_NB) == 0
            if locked && LeftoverTemporaries.sameFile(fd, path) {
                temporary = URL(fileURLWithPath: path)
                lockFD = fd
                TemporaryFiles.shared.register(path)
                return
            }
            close(fd)
            if !locked { Self.remove(path) }
        }
        throw CannotCreate(label: label, target: target.path, errno: EEXIST)
    }

    /// Writes `data` as the whole content of the temporary file (in place, keeping its lock).
    public func write(_ data: Data) throws {
        let fd = open(temporary.path, O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW)
        guard fd >= 0 else { throw ClipFlowError.output("cannot write '\(target.path)'", errno: errno) }
        defer { close(fd) }
        try data.withUnsafeBytes { try DurableFiles.writeAll(fd, $0, naming: target.path) }
    }

    /// How a person asks for an existing output to be replaced, for messages.
    public static let replaceHint = "-y or --overwrite on the command line, \"overwrite\": true on a pipeline stage"

    /// Moves the finished temporary onto the target (atomic on one filesystem): replacing what is
    /// there only when `replacing`; otherwise a target that appeared meanwhile is kept and this
    /// output discarded, with an error.
    public func commit() throws {
        guard !done else { return }
        let failure: String?
        var isDir: ObjCBool = false
        if replacing {
            if FileManager.default.fileExists(atPath: target.path, isDirectory: &isDir), isDir.boolValue,
                FileManager.default.fileExists(atPath: temporary.path, isDirectory: &isDir), isDir.boolValue
            {
                failure = replaceFolder()
            } else {
                failure = rename(temporary.path, target.path) == 0 ? nil : String(cString: strerror(errno))
            }
        } else if FileManager.default.fileExists(atPath: temporary.path, isDirectory: &isDir), isDir.boolValue {
            // rename(2) refuses a folder onto a non-empty folder (an empty one is taken over).
            failure = rename(temporary.path, target.path) == 0 ? nil : String(cString: strerror(errno))
        } else if link(temporary.path, target.path) == 0 {
            // A new name made by link(2) never replaces one; then the temporary name goes.
            unlink(temporary.path)
            failure = nil
        } else if errno == EEXIST || FileManager.default.fileExists(atPath: target.path) {
            failure = "'\(target.path)' appeared while it was being written; it was kept (\(Self.replaceHint) replaces it)"
        } else {
            // No hard links here (FAT, some FUSE filesystems): checked just before, then renamed.
            failure = rename(temporary.path, target.path) == 0 ? nil : String(cString: strerror(errno))
        }
        if let why = failure {
            discard()
            throw ClipFlowError.output("could not move the finished \(target.lastPathComponent) into place: \(why)")
        }
        done = true
        unlock()
        TemporaryFiles.shared.unregister(temporary.path)
    }

    /// Puts the finished folder in place of the existing one, which is moved aside under a
    /// temporary's name (swept if this process dies before removing it) and then removed.
    /// Returns why it failed, or nil.
    private func replaceFolder() -> String? {
        let dir = target.deletingLastPathComponent()
        let aside = dir.appendingPathComponent(
            ".\(target.lastPathComponent)\(LeftoverTemporaries.marker)\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        ).path
        guard rename(target.path, aside) == 0 else { return String(cString: strerror(errno)) }
        guard rename(temporary.path, target.path) == 0 else {
            let why = String(cString: strerror(errno))
            _ = rename(aside, target.path)
            return why
        }
        Self.remove(aside)
        return nil
    }

    /// Removes the temporary. Idempotent, and each call removes what is there again: a folder
    /// that several writers fill may get a file from one still writing while another removes it
    /// (the removal then leaves what it could not empty), so the last writer to stop calls it too.
    /// After `commit` the temporary's name holds nothing.
    public func discard() {
        Self.remove(temporary.path)
        guard !done else { return }
        done = true
        unlock()
        TemporaryFiles.shared.unregister(temporary.path)
    }

    /// Removes a file, or a folder with everything in it (never following symlinks).
    static func remove(_ path: String) {
        var st = stat()
        guard lstat(path, &st) == 0 else { return }
        if st.st_mode & S_IFMT == S_IFDIR {
            try? FileManager.default.removeItem(atPath: path)
        } else {
            unlink(path)
        }
    }

    private func unlock() {
        if lockFD >= 0 { close(lockFD) }
        lockFD = -1
    }

    deinit { discard() }

    /// The temporary file could not be made; `errno` tells why.
    struct CannotCreate: Error, CustomStringConvertible {
        var label: String
        var target: String
        var errno: Int32
        var description: String { "\(label) '\(target)': cannot create a temporary file next to it: \(String(cString: strerror(errno)))" }
    }
}

/// Removal of temporaries left by writers that died (see `AtomicOutput`).
public enum LeftoverTemporaries {
    /// What every temporary's name contains: `.NAME` + marker + `PID-RANDOM`.
    static let marker = ".clipflow-tmp-"
    nonisolated(unsafe) private static var swept = Set<String>()
    private static let lock = NSLock()

    /// Sweeps `folder` the first time this process writes there (later writers into the same
    /// folder from this process are alive by construction, or already swept).
    static func removeOnce(in folder: String) {
        let key = URL(fileURLWithPath: folder).standardizedFileURL.path
        lock.lock()
        let first = swept.insert(key).inserted
        lock.unlock()
        if first { _ = remove(in: folder) }
    }

    /// Removes every temporary in `folder` whose writer is gone (no process holds its lock);
    /// returns the names removed. Never follows symlinks; touches only regular files and folders
    /// named as temporaries are (a folder goes with everything in it).
    @discardableResult
    public static func remove(in folder: String) -> [String] {
        guard let names = try? FileManager.default.contentsOfDirectory(atPath: folder) else { return [] }
        // Network and FUSE filesystems may keep flock locks local to each machine, so a writer
        // on another machine would look dead: there a temporary must also be untouched for an hour.
        let minimumAge: Double = locksAreLocal(folder) ? 0 : 3600
        let now = Date().timeIntervalSince1970
        var removed: [String] = []
        for name in names where isTemporaryName(name) {
            let path = (folder as NSString).appendingPathComponent(name)
            let fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)
            guard fd >= 0 else { continue }
            defer { close(fd) }
            var st = stat()
            guard fstat(fd, &st) == 0, st.st_mode & S_IFMT == S_IFREG || st.st_mode & S_IFMT == S_IFDIR else { continue }
            guard now - Double(st.st_mtim.tv_sec) >= minimumAge else { continue }
            guard flock(fd, LOCK_EX | LOCK_NB) == 0 else { continue }  // a live writer holds it
            // Still the file we locked (not committed or replaced meanwhile): remove it while
            // holding the lock, so no writer can be handed it.
            guard sameFile(fd, path) else { continue }
            AtomicOutput.remove(path)
            if !FileManager.default.fileExists(atPath: path) { removed.append(name) }
        }
        return removed
    }

    /// Whether `flock` on `folder`'s filesystem is seen by every process that can write there
    /// (false for NFS, SMB/CIFS, FUSE, Ceph, 9p, AFS, Lustre, GFS2, OCFS2, which may keep locks
    /// per machine).
    static func locksAreLocal(_ folder: String) -> Bool {
        guard let real = realpath(folder, nil) else { return false }
        let path = String(cString: real)
        free(real)
        guard let mounts = try? String(contentsOfFile: "/proc/self/mounts", encoding: .utf8) else { return false }
        let type = filesystemType(of: path, mounts: mounts)
        let shared = ["nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "9p", "afs", "lustre", "gfs2", "ocfs2", "glusterfs"]
        return !(shared.contains(type) || type.hasPrefix("fuse"))
    }

    /// The type of the mount holding the real path `path`, from a `/proc/self/mounts` table: the
    /// mount whose point is the longest prefix (fields: device point type ...; spaces as \040).
    static func filesystemType(of path: String, mounts: String) -> String {
        var best: (point: String, type: String) = ("", "")
        for line in mounts.split(separator: "\n") {
            let f = line.split(separator: " ")
            guard f.count >= 3 else { continue }
            let point = f[1].replacingOccurrences(of: "\\040", with: " ")
            let inside = point == "/" || path == point || path.hasPrefix(point + "/")
            if inside && point.count >= best.point.count { best = (point, String(f[2])) }
        }
        return best.type
    }

    /// `.NAME.clipflow-tmp-PID-RANDOM`, PID and RANDOM decimal.
    static func isTemporaryName(_ name: String) -> Bool {
        guard name.hasPrefix("."), let r = name.range(of: marker, options: .backwards), r.lowerBound > name.index(after: name.startIndex) else {
            return false
        }
        let tail = name[r.upperBound...].split(separator: "-", omittingEmptySubsequences: false)
        return tail.count == 2 && tail.allSatisfy { !$0.isEmpty && $0.allSatisfy(\.isASCII) && $0.allSatisfy(\.isNumber) }
    }

    /// Whether `path` (not followed) names the file open on `fd`.
    static func sameFile(_ fd: Int32, _ path: String) -> Bool {
        var a = stat(), b = stat()
        return fstat(fd, &a) == 0 && lstat(path, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino
    }
}

/// Process-wide list of temporary outputs (files and folders) still being written, so that a
/// forced exit (second SIGINT) can remove them. Thread-safe.
public final class TemporaryFiles: Sendable {
    public static let shared = TemporaryFiles()
    private let paths = Mutex(Set<String>())

    public func register(_ path: String) { _ = paths.withLock { $0.insert(path) } }
    public func unregister(_ path: String) { _ = paths.withLock { $0.remove(path) } }

    /// Removes every registered file and folder. Called from the forced-exit path only.
    public func removeAll() {
        let all = paths.withLock { p -> Set<String> in
            defer { p.removeAll() }
            return p
        }
        for p in all { AtomicOutput.remove(p) }
    }
}
