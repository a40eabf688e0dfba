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
    }
    public var writes: [Written]
    /// Whether any path the row reads or writes is in object storage.
    public var usesObjectStorage: Bool

    /// The paths of `pipeline`'s stages, by their parameters' roles.
    public init(_ pipeline: Pipeline, registry: StageRegistry) {
        var writes: [Written] = [], remote = false
        for (i, s) in pipeline.stages.enumerated() {
            guard let kind = registry.kind(s.kind) else { continue }
            for spec in kind.params where spec.role != .local {
                let values = s.params.string(spec.name).map { [$0] } ?? s.params.strings(spec.name) ?? []
                for v in values {
                    if S3Location.isS3URL(v) { remote = true }
                    if spec.role == .writes || spec.role == .writesFolder {
                        writes.append(Written(path: v, folder: spec.role == .writesFolder, field: "stages[\(i)].\(spec.name)"))
                    }
                }
            }
        }
        self.writes = writes
        self.usesObjectStorage = remote
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
    /// Local files are read (`OutputCheck`); a local folder must hold files; an object must carry
    /// this row's key (it is put only whole, by multipart upload, after its run completed); an
    /// object folder is judged by the object published last into it.
    public static func incomplete(_ writes: [RowPaths.Written], rowKey: String, store: () throws -> S3ObjectStore) -> String? {
        for w in writes {
            if let loc = S3Location(url: w.path) {
                do {
                    let s = try store()
                    var key = loc.key
                    if w.folder {
                        let prefix = key.hasSuffix("/") ? key : key + "/"
                        let keys = try s.list(bucket: loc.bucket, prefix: prefix).objects.map { String($0.key.dropFirst(prefix.count)) }
                        guard let last = publishOrder(keys).last else { return "'\(w.path)': no objects under it" }
                        key = prefix + last
                    }
                    guard let head = try s.head(bucket: loc.bucket, key: key) else { return "'\(w.path)': not there" }
                    if head.metadata[rowKeyMetadata] != rowKey { return "'\(w.path)': not written by this row's run" }
                } catch let e as UploadError {
                    return "'\(w.path)': \(e.asClipFlowError.message)"
                } catch {
                    return "'\(w.path)': \(error)"
                }
                continue
            }
            var isDir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: w.path, isDirectory: &isDir) else { return "'\(w.path)': not there" }
            if w.folder {
                guard isDir.boolValue else { return "'\(w.path)' is a file, expected a folder" }
                let names = (try? FileManager.default.contentsOfDirectory(atPath: w.path)) ?? []
                if !names.contains(where: { !$0.hasPrefix(".") }) { return "'\(w.path)': empty" }
            } else if let p = OutputCheck.problem(w.path) {
                return p
            }
        }
        return nil
    }
}
