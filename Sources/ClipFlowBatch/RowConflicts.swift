import ClipFlowCore
import ClipFlowUpload
import Foundation
#if canImport(Glibc)
    import Glibc
#endif

/// Where rows of one batch would step on each other, found from their plans before any row runs:
/// two rows writing one place, a row writing inside a folder another row makes whole, or a row
/// writing what another row reads (a file it names, or a file its pattern would match). Rows run
/// in any order and any number at once, so no row may depend on another's outputs.
///
/// Places are compared as they are on disk: a local path by the real path of its folder
/// (`FileIdentity.entry`: symlinked folders and `..` resolved) and its own name; an `s3://` URL by
/// its bucket and its key as written (keys are literal), a folder's without its trailing "/".
/// Every conflicting row gets one reason, naming the other row and both paths.
enum RowConflicts {
    /// A path of a row as the pipeline writes it, and where the pipeline names it.
    struct Use {
        var row: Int
        var path: String
        var field: String
    }

    /// A path as components (`/` first for a local one, `s3:` and the bucket for an object).
    typealias Place = [String]

    /// The reasons of the rows of `plans` that conflict with another, by row.
    static func find(_ plans: [(row: Int, paths: RowPaths)]) -> [Int: String] {
        var exact: [Place: [Use]] = [:]
        var byFolder: [Place: [(name: String, use: Use)]] = [:]
        var whole: [Place: [Use]] = [:]
        var writes: [(place: Place, use: Use)] = []
        var rowWrites: [Int: [(place: Place, use: Use)]] = [:]
        for (row, paths) in plans {
            for w in paths.writes {
                let folder = place(w.path)
                var mine = [(folder, Use(row: row, path: w.path, field: w.field))]
                if w.folder && w.expectedFiles.isEmpty { whole[folder, default: []].append(Use(row: row, path: w.path, field: w.field)) }
                for name in w.expectedFiles {
                    let path = w.path.hasSuffix("/") ? w.path + name : w.path + "/" + name
                    mine.append((folder + [name], Use(row: row, path: path, field: w.field)))
                }
                for (p, use) in mine {
                    exact[p, default: []].append(use)
                    if let name = p.last { byFolder[Array(p.dropLast()), default: []].append((name, use)) }
                    writes.append((p, use))
                }
                rowWrites[row, default: []] += mine.map { (place: $0.0, use: $0.1) }
            }
        }

        var reasons: [Int: String] = [:]
        func note(_ row: Int, _ reason: @autoclosure () -> String) {
            if reasons[row] == nil { reasons[row] = reason() }
        }
        for (row, paths) in plans {
            for (p, use) in rowWrites[row] ?? [] {
                let others = (exact[p] ?? []).filter { $0.row != row }
                if !others.isEmpty {
                    let rows = Set(others.map(\.row)).sorted().map(String.init).joined(separator: ", ")
                    let spelled = others.filter { $0.path != use.path }.map { "row \($0.row) names it '\($0.path)'" }
                    note(
                        row,
                        "writes '\(use.path)', which row(s) \(rows) write too; give each row its own outputs"
                            + (spelled.isEmpty ? "" : " (\(spelled.joined(separator: "; ")))"))
                }
                for folder in wholeFolders(around: p, in: whole, excluding: row) {
                    note(
                        row,
                        "writes '\(use.path)' inside the folder '\(folder.path)' that row \(folder.row) makes whole (\(folder.field)); give each row its own outputs"
                    )
                    note(
                        folder.row,
                        "makes the folder '\(folder.path)' whole (\(folder.field)), but row \(row) writes '\(use.path)' inside it; give each row its own outputs"
                    )
                }
            }
            for r in paths.reads {
                let written =
                    r.pattern
                    ? matches(pattern: patternPlace(r.path), byFolder: byFolder, writes: writes, whole: whole)
                    : readers(of: place(r.path), exact: exact, whole: whole)
                for w in written where w.row != row {
                    note(row, "\(r.field) '\(r.path)' reads what row \(w.row) writes (\(w.field) '\(w.path)'); a row must not write another row's inputs")
                    note(w.row, "\(w.field) '\(w.path)' is an input of row \(row) (\(r.field) '\(r.path)'); a row must not write another row's inputs")
                }
            }
        }
        return reasons
    }

    /// The folders made whole (by rows other than `row`) that hold `place`.
    static func wholeFolders(around place: Place, in whole: [Place: [Use]], excluding row: Int) -> [Use] {
        guard place.count > 1 else { return [] }
        var found: [Use] = []
        for k in 1..<place.count {
            found += (whole[Array(place[..<k])] ?? []).filter { $0.row != row }
        }
        return found
    }

    /// What is written at `place` or into a folder made whole that holds it.
    static func readers(of place: Place, exact: [Place: [Use]], whole: [Place: [Use]]) -> [Use] {
        var found = exact[place] ?? []
        for k in 1..<max(1, place.count) { found += whole[Array(place[..<k])] ?? [] }
        return found
    }

    /// What is written where `pattern` (its parts as `fnmatch` patterns) could match: a file it
    /// matches, or a folder made whole that holds a file it could match.
    static func matches(pattern: Place, byFolder: [Place: [(name: String, use: Use)]], writes: [(place: Place, use: Use)], whole: [Place: [Use]]) -> [Use] {
        guard let last = pattern.last else { return [] }
        let folder = Array(pattern.dropLast())
        if !folder.contains(where: isWildcard) {
            // The common case (`clips/fragment*.mp4`): only the files written into that folder.
            var found = (byFolder[folder] ?? []).filter { fnmatch(last, $0.name, 0) == 0 }.map(\.use)
            for k in 1..<(folder.count + 1) { found += whole[Array(folder[..<k])] ?? [] }
            return found
        }
        func partsMatch(_ p: Place) -> Bool { zip(pattern, p).allSatisfy { fnmatch($0, $1, 0) == 0 } }
        var found = writes.filter { $0.place.count == pattern.count && partsMatch($0.place) }.map(\.use)
        for (f, uses) in whole where f.count < pattern.count && partsMatch(f) { found += uses }
        return found
    }

    static func isWildcard(_ part: String) -> Bool { part.contains { "*?[".contains($0) } }

    /// `path` as it is on disk (a local path) or in its bucket (an `s3://` URL).
    static func place(_ path: String) -> Place {
        if let loc = S3Location(url: path) { return objectPlace(loc) }
        return ["/"] + FileIdentity(path: collapsingSlashes(path)).entry.split(separator: "/").map(String.init)
    }

    /// A pattern's parts: for a local one, the folders before its first wildcard as they are on
    /// disk, then the rest as written.
    static func patternPlace(_ path: String) -> Place {
        if let loc = S3Location(url: path) { return objectPlace(loc) }
        let absolute = path.hasPrefix("/") ? path : FileManager.default.currentDirectoryPath + "/" + path
        let parts = absolute.split(separator: "/").map(String.init)
        guard let first = parts.firstIndex(where: isWildcard) else { return place(path) }
        let literal = "/" + parts[..<first].joined(separator: "/")
        return place(literal + "/.") + parts[first...]
    }

    static func objectPlace(_ loc: S3Location) -> Place {
        var key = loc.key
        while key.hasSuffix("/") { key.removeLast() }
        return ["s3:", loc.bucket] + (key.isEmpty ? [] : key.split(separator: "/", omittingEmptySubsequences: false).map(String.init))
    }

    /// `//` is `/` to the file system.
    static func collapsingSlashes(_ path: String) -> String {
        var out = "", previousWasSlash = false
        for c in path {
            if c == "/" && previousWasSlash { continue }
            previousWasSlash = c == "/"
            out.append(c)
        }
        return out
    }
}
