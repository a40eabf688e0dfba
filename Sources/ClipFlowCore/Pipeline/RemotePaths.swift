import Foundation

/// What a path parameter names, for a path that is not a local file (an `s3://` URL): a stage
/// reads it, reads what a pattern matches, writes it, or writes a folder of files under it.
/// Parameters that name neither (a queue folder, a state file) are `.local`: they take local
/// paths only.
public enum PathRole: Sendable, Equatable {
    case local
    /// A file the stage reads.
    case reads
    /// A pattern (`*`, `?`, `[...]`) whose matches the stage reads.
    case readsPattern
    /// A file the stage writes.
    case writes
    /// A folder the stage writes files into.
    case writesFolder
}

/// Maps paths that live elsewhere (object storage) to local ones for the length of one run: the
/// validator asks for each path parameter whose value `handles` accepts, after variables are
/// expanded and before the kind's checks, so the checks and the stages see local files only.
/// Inputs are fetched when asked for; outputs are local places published after the run
/// completes (by the caller, which owns the implementation).
public protocol RemotePaths: Sendable {
    /// Whether `path` is one this mapping serves (e.g. starts with `s3://`).
    func handles(_ path: String) -> Bool
    /// The local path (or, for `.readsPattern`, the local pattern) standing for `path`. Throws a
    /// `ClipFlowError` naming `path` and the reason (a missing object is `.badInput`; a network
    /// or storage failure is `.failure`).
    func local(for path: String, role: PathRole) throws -> String
}
