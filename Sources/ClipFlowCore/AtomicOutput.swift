import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// An output file written under a temporary name next to its target and renamed into place only
/// when complete (habit 8). If the work fails or is interrupted, `discard()` (or deinit) removes
/// the temporary file, so a failed run leaves nothing behind. Not thread-safe: one owner.
public final class AtomicOutput {
    public let target: URL
    public let temporary: URL
    private var done = false

    /// Creates the temporary name; fails early with a clear error if the target's folder is missing
    /// or not writable, or if the target is an existing directory.
    public init(target: URL, label: String = "output") throws {
        self.target = target
        let dir = target.deletingLastPathComponent()
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: dir.path, isDirectory: &isDir), isDir.boolValue else {
            throw ClipFlowError.output("\(label) '\(target.path)': folder '\(dir.path)' does not exist")
        }
        if FileManager.default.fileExists(atPath: target.path, isDirectory: &isDir), isDir.boolValue {
            throw ClipFlowError.output("\(label) '\(target.path)' is a directory; give a file name")
        }
        guard access(dir.path, W_OK) == 0 else {
            throw ClipFlowError.output("\(label) '\(target.path)': folder '\(dir.path)' is not writable")
        }
        let name = ".\(target.lastPathComponent).clipflow-tmp-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        temporary = dir.appendingPathComponent(name)
        TemporaryFiles.shared.register(temporary.path)
    }

    /// Renames the temporary file onto the target (atomic on one filesystem).
    public func commit() throws {
        guard !done else { return }
        if rename(temporary.path, target.path) != 0 {
            let why = String(cString: strerror(errno))
            discard()
            throw ClipFlowError.output("could not move the finished \(target.lastPathComponent) into place: \(why)")
        }
        done = true
        TemporaryFiles.shared.unregister(temporary.path)
    }

    /// Removes the temporary file (idempotent).
    public func discard() {
        guard !done else { return }
        done = true
        unlink(temporary.path)
        TemporaryFiles.shared.unregister(temporary.path)
    }

    deinit { discard() }
}

/// Process-wide list of temporary outputs still being written, so that a forced exit (second
/// SIGINT) can remove them. Thread-safe.
public final class TemporaryFiles: @unchecked Sendable {
    public static let shared = TemporaryFiles()
    private let lock = NSLock()
    private var paths = Set<String>()

    public func register(_ path: String) { lock.lock(); paths.insert(path); lock.unlock() }
    public func unregister(_ path: String) { lock.lock(); paths.remove(path); lock.unlock() }

    /// Unlinks every registered file. Called from the forced-exit path only.
    public func removeAll() {
        lock.lock()
        let all = paths
        paths.removeAll()
        lock.unlock()
        for p in all { unlink(p) }
    }
}
