import ClipFlowCore
import ClipFlowUpload
import Foundation
import Synchronization
#if canImport(Glibc)
    import Glibc
#endif

/// One run's `s3://` paths as local ones, in a scratch folder of its own: inputs are downloaded
/// when the validator asks for them (a pattern: every object it matches), outputs are local
/// places uploaded by `publish` once the run completed, each by multipart upload so an object
/// appears only whole, each marked with the row's key (`BatchOutputs.rowKeyMetadata`). The
/// scratch folder holds one run's files and goes with `discard`.
///
/// Called from one thread at a time (the validator, then the row's worker); the mutex keeps the
/// list of outputs, which `publish` reads after the run.
public final class ObjectStaging: RemotePaths, Sendable {
    public struct Output: Sendable, Equatable {
        public var local: String
        public var location: S3Location
        public var folder: Bool
    }

    let store: S3Client
    let scratch: String
    let shouldAbort: @Sendable () -> Bool
    private let state = Mutex<(outputs: [Output], count: Int, retryable: Bool)>(([], 0, false))
    /// The scratch folder: a temporary folder in `scratchParent`, locked while this run lives (a
    /// later run sweeps it if this one is killed), removed by `discard`.
    private let folder: Mutex<AtomicOutput?>

    /// Makes the run's scratch folder in `scratchParent` (named after `name`).
    public init(store: S3Client, scratchParent: String, name: String, shouldAbort: @escaping @Sendable () -> Bool) throws {
        self.store = store
        self.shouldAbort = shouldAbort
        let f = try AtomicOutput(folder: URL(fileURLWithPath: scratchParent).appendingPathComponent(name), label: "the scratch folder", replacing: false)
        self.scratch = f.temporary.path
        self.folder = Mutex(f)
    }

    public var outputs: [Output] { state.withLock { $0.outputs } }
    /// Whether a fetch failed for a reason a retry may fix (network, storage), not a missing object.
    public var fetchFailedRetryably: Bool { state.withLock { $0.retryable } }

    public func handles(_ path: String) -> Bool { S3Location.isS3URL(path) }

    public func local(for path: String, role: PathRole) throws -> String {
        guard let loc = S3Location(url: path), !loc.bucket.isEmpty else {
            throw ClipFlowError.badInput("'\(path)': expected s3://BUCKET/KEY")
        }
        let n = state.withLock { s -> Int in
            s.count += 1
            return s.count
        }
        let place = "\(scratch)/\(role == .reads || role == .readsPattern ? "in" : "out")-\(n)"
        do {
            switch role {
            case .reads:
                guard !loc.key.isEmpty, !loc.key.hasSuffix("/") else { throw ClipFlowError.badInput("'\(path)' names a folder; expected an object") }
                let local = place + "/" + Self.lastComponent(loc.key)
                try makeFolder(place)
                _ = try store.download(bucket: loc.bucket, key: loc.key, to: local, shouldAbort: shouldAbort)
                return local
            case .readsPattern:
                return try fetchMatches(loc, path, into: place)
            case .writes, .writesFolder:
                if let problem = Self.outputProblem(path, folder: role == .writesFolder) { throw ClipFlowError.badInput(problem) }
                let name = Self.lastComponent(loc.key)
                try makeFolder(place)
                let local = place + "/" + name
                state.withLock { $0.outputs.append(Output(local: local, location: loc, folder: role == .writesFolder)) }
                return local
            case .local:
                throw ClipFlowError.badInput("'\(path)': object storage is taken only for files a stage reads or writes")
            }
        } catch let e as UploadError {
            let c = e.asClipFlowError
            if c.kind != .badInput { state.withLock { $0.retryable = true } }
            throw c
        } catch let e as ClipFlowError {
            if e.kind != .badInput { state.withLock { $0.retryable = true } }
            throw e
        }
    }

    /// Why `path` (an `s3://` URL) cannot be written as an output, or nil: it must name a bucket
    /// and a key; a file's key must not end in "/" (that names a folder, not an object); no part
    /// of the key may be "." or "..", which object stores take as written while HTTP clients,
    /// proxies and tools resolve them, so the object would not land where it is named.
    public static func outputProblem(_ path: String, folder: Bool) -> String? {
        guard let loc = S3Location(url: path), !loc.bucket.isEmpty else { return "'\(path)': expected s3://BUCKET/KEY" }
        guard !lastComponent(loc.key).isEmpty else { return "'\(path)' names no object (the key is empty)" }
        if let dots = loc.key.split(separator: "/", omittingEmptySubsequences: false).first(where: { $0 == "." || $0 == ".." }) {
            return "'\(path)': the key has a '\(dots)' part; object keys are taken as written, so name the object without '.' or '..' parts"
        }
        if !folder && loc.key.hasSuffix("/") {
            return "'\(path)' ends in '/', so it names a folder; this output is one object: give its key without the trailing '/'"
        }
        return nil
    }

    /// Downloads every object the pattern's last part (`*`, `?`, `[...]`, not crossing `/`)
    /// matches; returns the same pattern over the local copies.
    func fetchMatches(_ loc: S3Location, _ path: String, into place: String) throws -> String {
        let key = loc.key
        guard let wild = key.firstIndex(where: { "*?[".contains($0) }) else {
            // No wildcard: one object, as a pattern that matches it.
            let local = place + "/" + Self.lastComponent(key)
            try makeFolder(place)
            _ = try store.download(bucket: loc.bucket, key: key, to: local, shouldAbort: shouldAbort)
            return local
        }
        let folderEnd = key[..<wild].lastIndex(of: "/").map { key.index(after: $0) } ?? key.startIndex
        let prefix = String(key[..<folderEnd]), pattern = String(key[folderEnd...])
        guard !pattern.contains("/") else {
            throw ClipFlowError.badInput("'\(path)': a pattern may use wildcards in its last part only (e.g. s3://bucket/set-1/fragment*.mp4)")
        }
        let listed = try store.list(bucket: loc.bucket, prefix: prefix, delimiter: "/").objects
        let matches = listed.filter { fnmatch(pattern, String($0.key.dropFirst(prefix.count)), 0) == 0 }
        guard !matches.isEmpty else { throw ClipFlowError.badInput("'\(path)' matches no objects") }
        try makeFolder(place)
        for m in matches {
            if shouldAbort() { throw ClipFlowError.interrupted }
            _ = try store.download(bucket: loc.bucket, key: m.key, to: place + "/" + String(m.key.dropFirst(prefix.count)), shouldAbort: shouldAbort)
        }
        return place + "/" + pattern
    }

    /// Uploads every output the run wrote, each marked with `rowKey`. A folder's files go in
    /// name order with playlists last (a playlist never names a segment not yet there). Uploads to
    /// the same keys that an earlier run of the row began and never finished (it was killed) are
    /// aborted first: the row owns its outputs' keys, and their parts would stay on the server.
    /// `commitMarkers` (by output URL, `RowPaths.commitMarkers`) name the file of a folder whose
    /// object means the folder is complete: the object an earlier run put there is deleted
    /// before any file of the folder is uploaded, and the marker is uploaded after all of them,
    /// so a run killed part-way never leaves a folder that looks complete.
    public func publish(rowKey: String, commitMarkers: [String: String] = [:]) throws {
        do {
            for o in outputs {
                for u in try store.pendingUploads(bucket: o.location.bucket, prefix: o.location.key)
                where u.key == o.location.key || (o.folder && u.key.hasPrefix(o.location.key.hasSuffix("/") ? o.location.key : o.location.key + "/")) {
                    try store.abortUpload(bucket: o.location.bucket, key: u.key, uploadID: u.uploadID)
                }
            }
        } catch let e as UploadError {
            throw e.asClipFlowError
        }
        for o in outputs {
            if shouldAbort() { throw ClipFlowError.interrupted }
            var isDir: ObjCBool = false
            guard FileManager.default.fileExists(atPath: o.local, isDirectory: &isDir) else {
                throw ClipFlowError.failure("the run completed without writing '\(o.location)'")
            }
            let meta = [BatchOutputs.rowKeyMetadata: rowKey]
            do {
                if o.folder {
                    let prefix = o.location.key.hasSuffix("/") ? o.location.key : o.location.key + "/"
                    var order = BatchOutputs.publishOrder(try Self.files(under: o.local))
                    if let marker = commitMarkers[o.location.description] {
                        guard let at = order.firstIndex(of: marker) else {
                            throw ClipFlowError.failure("the run completed without writing '\(marker)' into '\(o.location)', the file that marks it complete")
                        }
                        order.append(order.remove(at: at))
                        try store.delete(bucket: o.location.bucket, key: prefix + marker)
                    }
                    for rel in order {
                        if shouldAbort() { throw ClipFlowError.interrupted }
                        try store.upload(file: o.local + "/" + rel, bucket: o.location.bucket, key: prefix + rel, metadata: meta, shouldAbort: shouldAbort)
                    }
                } else {
                    try store.upload(file: o.local, bucket: o.location.bucket, key: o.location.key, metadata: meta, shouldAbort: shouldAbort)
                }
            } catch let e as UploadError {
                throw e.asClipFlowError
            }
        }
    }

    /// Removes the scratch folder and everything in it.
    public func discard() {
        folder.withLock { f in
            f?.discard()
            f = nil
        }
    }

    func makeFolder(_ path: String) throws {
        do { try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true) } catch {
            throw ClipFlowError.output("scratch folder '\(path)': cannot create it (\(error.localizedDescription))")
        }
    }

    static func lastComponent(_ key: String) -> String {
        var k = key
        while k.hasSuffix("/") { k.removeLast() }
        return k.split(separator: "/").last.map(String.init) ?? ""
    }

    /// Files under `folder`, as paths relative to it.
    static func files(under folder: String) throws -> [String] {
        guard let e = FileManager.default.enumerator(atPath: folder) else { throw ClipFlowError.failure("'\(folder)': cannot list it") }
        var out: [String] = []
        while let rel = e.nextObject() as? String {
            var isDir: ObjCBool = false
            if FileManager.default.fileExists(atPath: folder + "/" + rel, isDirectory: &isDir), !isDir.boolValue { out.append(rel) }
        }
        return out
    }
}
