import ClipFlowCore
import ClipFlowMedia
import ClipFlowUpload
import Foundation

/// What one row's run reads and writes, known from its pipeline before anything runs, and
/// whether its outputs are complete: the test a re-run uses to skip a row.
public struct RowPaths: Sendable, Equatable {
    public struct Written: Sendable, Equatable, Hashable {
        /// A local path or an `s3://` URL.
        public var path: String
        public var folder: Bool
        /// Where the pipeline names it ("stages[1].output").
        public var field: String
        /// For a folder filled a file at a time (a `directory` sink): the names of the files it
        /// receives, each of which must be there. Empty for a folder made whole at once (an HLS
        /// ladder's, renamed into place when complete).
        public var expectedFiles: [String] = []
        /// For a folder made whole at once: the file in it whose presence means it is complete
        /// (`FileField.commitMarker`; an HLS ladder's master playlist), published last.
        public var commitMarker: String?
    }
    /// A path the row reads: a file, or a pattern whose matches it reads.
    public struct Read: Sendable, Equatable, Hashable {
        /// A local path or an `s3://` URL.
        public var path: String
        public var pattern: Bool
        /// Where the pipeline names it ("stages[0].glob").
        public var field: String
    }
    public var writes: [Written]
    public var reads: [Read]
    /// Whether any path the row reads or writes is in object storage.
    public var usesObjectStorage: Bool

    /// The paths of `pipeline`'s stages, by their parameters' roles.
    public init(_ pipeline: Pipeline, registry: StageRegistry) {
        var writes: [Written] = [], reads: [Read] = [], remote = false
        let byID = Dictionary(pipeline.stages.map { ($0.id, $0) }, uniquingKeysWith: { a, _ in a })
        for (i, s) in pipeline.stages.enumerated() {
            guard let kind = registry.kind(s.kind) else { continue }
            for spec in kind.params where spec.role != .local {
                let values = s.params.string(spec.name).map { [$0] } ?? s.params.strings(spec.name) ?? []
                for (n, v) in values.enumerated() {
                    if S3Location.isS3URL(v) { remote = true }
                    let field = "stages[\(i)].\(spec.name)" + (spec.type == .pathList ? "[\(n)]" : "")
                    guard spec.role == .writes || spec.role == .writesFolder else {
                        reads.append(Read(path: v, pattern: spec.role == .readsPattern, field: field))
                        continue
                    }
                    var w = Written(path: v, folder: spec.role == .writesFolder, field: field)
                    let files = kind.files?(s.params)
                    if w.folder, files?.copiesInto != nil {
                        w.expectedFiles = s.inputs.flatMap { id -> [String] in
                            guard let up = byID[id], let upKind = registry.kind(up.kind) else { return [] }
                            return (upKind.files?(up.params).passesOn ?? []).map { Self.lastComponent($0.path) }
                        }
                    } else if w.folder {
                        w.commitMarker = files?.writes.first { $0.field == spec.name }?.commitMarker
                    }
                    writes.append(w)
                }
            }
        }
        self.writes = writes
        self.reads = reads
        self.usesObjectStorage = remote
    }

    /// Paths given as they are (tests).
    init(writes: [Written], reads: [Read]) {
        self.writes = writes
        self.reads = reads
        self.usesObjectStorage = (writes.map(\.path) + reads.map(\.path)).contains(where: S3Location.isS3URL)
    }

    /// The commit markers of the row's folders made whole at once, by their paths.
    public var commitMarkers: [String: String] {
        var markers: [String: String] = [:]
        for w in writes { if let m = w.commitMarker { markers[w.path] = m } }
        return markers
    }

    static func lastComponent(_ path: String) -> String {
        var p = path
        while p.hasSuffix("/") { p.removeLast() }
        return p.split(separator: "/").last.map(String.init) ?? p
    }
}

public enum BatchOutputs {
    /// The user-metadata name whose value is the key of the row that wrote an object.
    public static let rowKeyMetadata = "clipflow-row"

    /// A row's identity: the pipeline text and every variable it sets (row values over `--set`
    /// values), so an object written for other values is not taken as this row's.
    public static func rowKey(pipelineText: String, variables: [String: String]) -> String {
        var text = pipelineText + "\u{0}"
        for (k, v) in variables.sorted(by: { $0.key < $1.key }) { text += k + "=" + v + "\u{0}" }
        return Digest.hash(.sha256, Data(text.utf8)).hex
    }

    /// Files of a folder in the order they are published: name order, playlists (`.m3u8`)
    /// after everything else, a master playlist last.
    public static func publishOrder(_ files: [String]) -> [String] {
        func rank(_ f: String) -> Int {
            let name = (f as NSString).lastPathComponent
            if name == "master.m3u8" { return 2 }
            return name.hasSuffix(".m3u8") ? 1 : 0
        }
        return files.sorted { (rank($0), $0) < (rank($1), $1) }
    }

    /// nil when every output of the row is complete; else the first that is not, and why.
    /// Local files are read (`OutputCheck`); a folder filled a file at a time must hold each file
    /// it receives, read the same way; a folder made whole at once must hold files, its commit
    /// marker among them when its stage declares one. An object must carry this row's key (it is
    /// put only whole, by multipart upload, after its run completed); an object folder is judged
    /// by each file it receives, else by its commit marker, which is published last: a folder
    /// whose stage declares none is never taken as complete.
    public static func incomplete(_ writes: [RowPaths.Written], rowKey: String, store: () throws -> S3Client) -> String? {
        for w in writes {
            if let loc = S3Location(url: w.path) {
                do {
                    let s = try store()
                    var keys = [loc.key]
                    if w.folder {
                        let prefix = loc.key.hasSuffix("/") ? loc.key : loc.key + "/"
                        if w.expectedFiles.isEmpty {
                            guard let marker = w.commitMarker else {
                                return "'\(w.path)': its stage (\(w.field)) names no file that marks the folder complete, so it is made again"
                            }
                            keys = [prefix + marker]
                        } else {
                            keys = w.expectedFiles.map { prefix + $0 }
                        }
                    }
                    for key in keys {
                        guard let head = try s.head(bucket: loc.bucket, key: key) else { return "'s3://\(loc.bucket)/\(key)': not there" }
                        if head.metadata[rowKeyMetadata] != rowKey { return "'s3://\(loc.bucket)/\(key)': not written by this row's run" }
                    }
                } catch let e as UploadError {
                    return "'\(w.path)': \(e.asClipFlowError.message)"
                } catch {
                    return "'\(w.path)': \(error)"
                }
                continue
            }
            var isDir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: w.path, isDirectory: &isDir) else { return "'\(w.path)': not there" }
            guard w.folder else {
                if let p = OutputCheck.problem(w.path) { return p }
                continue
            }
            guard isDir.boolValue else { return "'\(w.path)' is a file, expected a folder" }
            if w.expectedFiles.isEmpty {
                let names = (try? FileManager.default.contentsOfDirectory(atPath: w.path)) ?? []
                if !names.contains(where: { !$0.hasPrefix(".") }) { return "'\(w.path)': empty" }
                if let marker = w.commitMarker, !FileManager.default.fileExists(atPath: w.path + "/" + marker) {
                    return "'\(w.path)/\(marker)': not there (written last, it marks the folder complete)"
                }
            }
            for name in w.expectedFiles {
                if let p = OutputCheck.problem(w.path + "/" + name) { return p }
            }
        }
        return nil
    }
}
