import Foundation
#if canImport(Glibc)
    import Glibc
#endif

/// What a path names on disk, for "is this the same file" checks that spelled paths get wrong
/// (symlinked folders, `..`, `./`, hard links).
///
/// - `entry`: the directory entry that writing to the path replaces (outputs are renamed into
///   place): the real path of its folder (symlinks and `..` resolved; for a folder that does not
///   exist yet, of its nearest existing ancestor) followed by its own name, which is not resolved.
/// - `file`: the file the path reaches now, following symlinks (device and inode), or nil when
///   nothing is there. Two paths with the same `file` are the same data: a symlink and its target,
///   or two hard links.
public struct FileIdentity: Hashable, Sendable {
    public struct Inode: Hashable, Sendable {
        public var device: UInt64
        public var inode: UInt64
    }
    public let entry: String
    public let file: Inode?

    /// Relative paths are taken from the working directory.
    public init(path: String) {
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        entry = Self.resolvedEntry(absolute)
        var st = stat()
        file = stat(absolute, &st) == 0 ? Inode(device: UInt64(st.st_dev), inode: UInt64(st.st_ino)) : nil
    }

    /// The real path of the folder of `absolute`, then its last component as spelled ("." and
    /// ".." name no entry of their own: they resolve as folders).
    private static func resolvedEntry(_ absolute: String) -> String {
        let ns = absolute as NSString
        let name = ns.lastPathComponent
        if name == "." || name == ".." || absolute == "/" { return resolvedFolder(absolute) }
        return join(resolvedFolder(ns.deletingLastPathComponent), name)
    }

    /// The real path of a folder; for one that does not exist (yet), the real path of its nearest
    /// existing ancestor followed by the rest, with "." and ".." applied.
    private static func resolvedFolder(_ p: String) -> String {
        if let r = realPath(p) { return r }
        let ns = p as NSString
        let parent = ns.deletingLastPathComponent
        guard parent != p, !parent.isEmpty else { return p }
        let base = resolvedFolder(parent)
        switch ns.lastPathComponent {
        case ".": return base
        case "..": return (base as NSString).deletingLastPathComponent
        default: return join(base, ns.lastPathComponent)
        }
    }

    private static func join(_ folder: String, _ name: String) -> String { folder == "/" ? "/" + name : folder + "/" + name }

    private static func realPath(_ p: String) -> String? {
        guard let r = realpath(p, nil) else { return nil }
        defer { free(r) }
        return String(cString: r)
    }
}

/// The one check that no output overwrites an input or another output, used by `merge`, the
/// pipeline validator and anything else that writes files.
///
/// An output clashes with an input when writing it would replace the input's directory entry, or
/// when the output path already reaches the input's data (a symlink to it, or a hard link). Two
/// outputs clash when they are the same directory entry (outputs replace entries by rename, so
/// outputs that are hard links of each other from an earlier run do not clash).
public enum OutputSafety {
    /// A path and how the person at the terminal named it (`-o`, `input 2`, `stages[1].output`).
    public struct Use: Sendable {
        public var path: String
        public var label: String
        /// For an output that is a copy of one of the inputs (a `directory` sink): an existing
        /// hard link of that same input at the output path is the earlier copy, not a clash, and
        /// two copies of one file to one place are one output.
        public var copyOf: String?
        public init(path: String, label: String, copyOf: String? = nil) {
            self.path = path
            self.label = label
            self.copyOf = copyOf
        }
    }

    /// A clash, reported at the output. `description` is a sentence for the terminal.
    public struct Clash: Sendable, Equatable, CustomStringConvertible {
        /// Index into the `outputs` given.
        public var outputIndex: Int
        public var output: String
        public var outputLabel: String
        public var other: String
        public var otherLabel: String
        public var otherIsInput: Bool
        /// Why, without naming the output: "is the same file as input 2 'a.mp4'; ...".
        public var reason: String {
            "is the same file as \(otherLabel) '\(other)'; " + (otherIsInput ? "inputs are never overwritten" : "give each output its own file")
        }
        public var description: String { "\(outputLabel) '\(output)' \(reason)" }
    }

    /// The indices of the outputs that exist already (a file, a folder, or a symlink, even one to
    /// nothing): those a writer must not replace unless asked. An output that is a copy of an
    /// input and already the same file as it (an earlier hard-linked copy) is not counted.
    public static func existing(_ outputs: [Use]) -> [Int] {
        outputs.indices.filter { n in
            let o = outputs[n]
            var st = stat()
            guard lstat(o.path, &st) == 0 else { return false }
            if let src = o.copyOf, let f = FileIdentity(path: o.path).file, f == FileIdentity(path: src).file { return false }
            return true
        }
    }

    /// The sentence a command prints for an output that exists and was not to be replaced.
    public static func existsMessage(_ o: Use) -> String {
        "\(o.label) '\(o.path)' exists; give -y (--overwrite) to replace it"
    }

    /// Every clash, outputs in the order given (each reported once, against the first input or
    /// earlier output it clashes with). Linear in the number of paths.
    public static func clashes(inputs: [Use], outputs: [Use]) -> [Clash] {
        var inputByEntry: [String: Use] = [:]
        var inputByFile: [FileIdentity.Inode: Use] = [:]
        for u in inputs {
            let id = FileIdentity(path: u.path)
            if inputByEntry[id.entry] == nil { inputByEntry[id.entry] = u }
            if let f = id.file, inputByFile[f] == nil { inputByFile[f] = u }
        }
        var outputByEntry: [String: Use] = [:]
        var found: [Clash] = []
        for (n, o) in outputs.enumerated() {
            let id = FileIdentity(path: o.path)
            if let i = inputByEntry[id.entry] {
                found.append(Clash(outputIndex: n, output: o.path, outputLabel: o.label, other: i.path, otherLabel: i.label, otherIsInput: true))
            } else if let f = id.file, let i = inputByFile[f],
                !(o.copyOf.map { FileIdentity(path: $0).file == f } ?? false)
            {
                found.append(Clash(outputIndex: n, output: o.path, outputLabel: o.label, other: i.path, otherLabel: i.label, otherIsInput: true))
            } else if let earlier = outputByEntry[id.entry], earlier.copyOf == nil || earlier.copyOf != o.copyOf {
                found.append(Clash(outputIndex: n, output: o.path, outputLabel: o.label, other: earlier.path, otherLabel: earlier.label, otherIsInput: false))
            }
            if outputByEntry[id.entry] == nil { outputByEntry[id.entry] = o }
        }
        return found
    }
}
