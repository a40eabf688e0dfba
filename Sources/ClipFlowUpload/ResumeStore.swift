import Foundation
import ClipFlowCore

/// Identifies a file's content cheaply and safely: path, size, modification time and a SHA-256 of
/// its first and last 64 KiB. A resume is allowed only when all of it matches, so a changed file
/// starts a new upload instead of mixing old and new data.
public struct FileFingerprint: Sendable, Equatable, Codable, Hashable {
    public var path: String
    public var size: Int64
    public var mtimeNanos: Int64
    public var headTailSHA256: String

    public static func of(_ path: String) throws -> FileFingerprint {
        let absolute = URL(fileURLWithPath: path).standardizedFileURL.path
        let stamp = try FileStamp.of(absolute)
        let span: Int64 = 64 << 10
        let d = Digest(.sha256)
        d.update(Data(try Digest.hash(.sha256, file: absolute, offset: 0, length: min(span, stamp.size))))
        let tail = max(0, stamp.size - span)
        d.update(Data(try Digest.hash(.sha256, file: absolute, offset: tail, length: stamp.size - tail)))
        return FileFingerprint(path: absolute, size: stamp.size, mtimeNanos: stamp.mtimeNanos, headTailSHA256: d.finish().hex)
    }

    /// The key under which resume records are stored: the whole fingerprint plus the destination.
    public func key(destination: String) -> String {
        let d = Digest(.sha256)
        d.update("\(path)\n\(size)\n\(mtimeNanos)\n\(headTailSHA256)\n\(destination)")
        return d.finish().hex
    }
}

/// What a new process needs to continue an upload: the TUS upload URL, or the S3 UploadId + key
/// (with the part size used, so parts line up). No secrets are stored here.
public struct ResumeRecord: Sendable, Equatable, Codable {
    public var method: String
    public var fingerprint: FileFingerprint
    public var destination: String
    public var uploadURL: String?
    public var uploadID: String?
    public var objectKey: String?
    public var partSize: Int64?
    /// Extra values a protocol keeps (e.g. Gcore video id).
    public var extra: [String: String]
    public var created: Date
    /// When the server said the upload expires (TUS `Upload-Expires`), if it did.
    public var expires: Date?

    public init(
        method: String, fingerprint: FileFingerprint, destination: String, uploadURL: String? = nil,
        uploadID: String? = nil, objectKey: String? = nil, partSize: Int64? = nil,
        extra: [String: String] = [:], created: Date = Date(), expires: Date? = nil
    ) {
        self.method = method
        self.fingerprint = fingerprint
        self.destination = destination
        self.uploadURL = uploadURL
        self.uploadID = uploadID
        self.objectKey = objectKey
        self.partSize = partSize
        self.extra = extra
        self.created = created
        self.expires = expires
    }
}

/// A persistent map from (file fingerprint, destination) to `ResumeRecord`: one JSON file shared
/// by every process using the same state directory (a pipeline, `clipflow upload run`, `cancel`).
/// Each lookup reads the file and each change is a locked read-modify-write (`SharedJSONFile`), so
/// processes never overwrite each other's records and a crash never leaves the file half-written.
/// Thread-safe.
public final class ResumeStore: Sendable {
    public let path: String
    private let file: SharedJSONFile<[String: ResumeRecord]>

    /// The default location: `$XDG_STATE_HOME/clipflow/resume.json` (or `~/.local/state/...`).
    public static var defaultPath: String {
        let env = ProcessInfo.processInfo.environment
        let base =
            env["XDG_STATE_HOME"].map { URL(fileURLWithPath: $0) }
            ?? URL(fileURLWithPath: NSHomeDirectory()).appendingPathComponent(".local/state")
        return base.appendingPathComponent("clipflow/resume.json").path
    }

    /// Opens (and checks) the store; a damaged file is refused with its path, never replaced.
    public init(path: String) throws {
        self.path = path
        file = try SharedJSONFile(path: path, what: "the resume store", empty: [:])
        _ = try file.read()
    }

    private var records: [String: ResumeRecord] { (try? file.read()) ?? [:] }

    public func record(for fingerprint: FileFingerprint, destination: String) -> ResumeRecord? {
        records[fingerprint.key(destination: destination)]
    }

    /// Any record for this path and destination whose fingerprint no longer matches the file
    /// (the file changed since): the caller discards the stale server-side upload.
    public func staleRecords(path: String, destination: String, current: FileFingerprint) -> [ResumeRecord] {
        records.values.filter { $0.fingerprint.path == current.path && $0.destination == destination && $0.fingerprint != current }
    }

    public func save(_ record: ResumeRecord) throws {
        try file.modify { $0[record.fingerprint.key(destination: record.destination)] = record }
    }

    public func remove(_ record: ResumeRecord) throws {
        try file.modify { _ = $0.removeValue(forKey: record.fingerprint.key(destination: record.destination)) }
    }

    public var all: [ResumeRecord] { Array(records.values) }
}
