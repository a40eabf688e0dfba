import ClipFlowCore
import Foundation
import GRDB

/// One TUS upload as the database keeps it: the offset here is the truth (the file may hold more
/// bytes, written but not yet made durable, which the next PATCH overwrites).
struct UploadRow: Codable, Sendable, Equatable, FetchableRecord, PersistableRecord {
    static let databaseTableName = "uploads"
    var id: String
    /// Declared total size in bytes.
    var length: Int64
    /// Bytes received and made durable (fsync'd before this row says so).
    var offset: Int64
    /// The Upload-Metadata header as sent (validated when created).
    var metadata: String
    var createdAt: Double
    /// Seconds since 1970 after which an unfinished upload is removed.
    var expiresAt: Double
    /// When the last byte arrived (nil: in progress).
    var completedAt: Double?

    var isComplete: Bool { offset == length }
}

/// A video of the hosting API: made by `POST /videos`, filled by its upload and its processing.
struct VideoRow: Codable, Sendable, Equatable, FetchableRecord, MutablePersistableRecord {
    static let databaseTableName = "videos"
    enum Status: String, Codable, Sendable, DatabaseValueConvertible {
        /// Made; waiting for its upload.
        case pending
        /// Uploaded; waiting for or in processing.
        case processing
        /// The smallest rendition is published and plays; the rest is being made.
        case viewable
        /// Every rendition is published.
        case ready
        /// Processing failed (`error` says why).
        case error
    }
    enum Mode: String, Codable, Sendable, DatabaseValueConvertible {
        /// Transcoded to the feed ladder.
        case ladder
        /// Remuxed only (an upload that is already H.264/AAC with keyframes on the segments).
        case copy
    }
    var id: Int64?
    var name: String
    var description: String?
    var clientID: Int64
    var status: Status
    var mode: Mode
    var error: String?
    /// Seconds (after probing).
    var duration: Double?
    /// The TUS upload that carried it.
    var uploadID: String?
    /// The folder under DATA/media/ID whose master playlist is published ("" until viewable).
    var published: String
    /// Renditions published, as "720p,360p".
    var renditions: String
    var createdAt: Double

    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

/// A processing job: one per uploaded video. At most one worker holds it (`state` running, its
/// `attempts` counted when it starts); a job found running when the server starts was cut short
/// by a crash and runs again.
struct JobRow: Codable, Sendable, Equatable, FetchableRecord, MutablePersistableRecord {
    static let databaseTableName = "jobs"
    enum State: String, Codable, Sendable, DatabaseValueConvertible { case queued, running, done, failed }
    var id: Int64?
    var videoID: Int64
    var state: State
    var attempts: Int
    var queuedAt: Double

    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}

/// The server's database: SQLite in the data folder (WAL), made and migrated when opened.
/// Thread-safe (GRDB's queue serialises access); `Sendable`.
final class ServeDatabase: Sendable {
    let queue: DatabaseQueue

    init(path: String) throws {
        var config = Configuration()
        config.busyMode = .timeout(5)
        do { queue = try DatabaseQueue(path: path, configuration: config) } catch {
            throw ClipFlowError.output("cannot open the database '\(path)': \(error)")
        }
        try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL") }
        try Self.migrator.migrate(queue)
    }

    static var migrator: DatabaseMigrator {
        var m = DatabaseMigrator()
        m.registerMigration("uploads") { db in
            try db.create(table: "uploads") { t in
                t.primaryKey("id", .text)
                t.column("length", .integer).notNull()
                t.column("offset", .integer).notNull()
                t.column("metadata", .text).notNull()
                t.column("createdAt", .double).notNull()
                t.column("expiresAt", .double).notNull()
                t.column("completedAt", .double)
            }
        }
        m.registerMigration("videos and jobs") { db in
            try db.create(table: "videos") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("name", .text).notNull()
                t.column("description", .text)
                t.column("clientID", .integer).notNull()
                t.column("status", .text).notNull()
                t.column("mode", .text).notNull()
                t.column("error", .text)
                t.column("duration", .double)
                t.column("uploadID", .text)
                t.column("published", .text).notNull()
                t.column("renditions", .text).notNull()
                t.column("createdAt", .double).notNull()
            }
            try db.create(table: "jobs") { t in
                t.autoIncrementedPrimaryKey("id")
                t.column("videoID", .integer).notNull().indexed().references("videos", onDelete: .cascade)
                t.column("state", .text).notNull()
                t.column("attempts", .integer).notNull()
                t.column("queuedAt", .double).notNull()
            }
        }
        return m
    }

    // MARK: videos

    func insert(_ video: VideoRow) async throws -> VideoRow {
        try await queue.write { db in
            var v = video
            try v.insert(db)
            return v
        }
    }

    func video(_ id: Int64) async throws -> VideoRow? {
        try await queue.read { db in try VideoRow.fetchOne(db, key: id) }
    }

    /// A page of videos, newest first, and how many there are.
    func videos(page: Int, perPage: Int) async throws -> ([VideoRow], Int) {
        try await queue.read { db in
            let total = try VideoRow.fetchCount(db)
            let rows = try VideoRow.order(Column("id").desc).limit(perPage, offset: (page - 1) * perPage).fetchAll(db)
            return (rows, total)
        }
    }

    func playable() async throws -> [VideoRow] {
        try await queue.read { db in
            try VideoRow.filter(sql: "status IN ('viewable', 'ready')").order(Column("id").desc).fetchAll(db)
        }
    }

    func update(_ video: VideoRow) async throws {
        try await queue.write { db in try video.update(db) }
    }

    func deleteVideo(_ id: Int64) async throws {
        _ = try await queue.write { db in try VideoRow.deleteOne(db, key: id) }
    }

    /// Finished uploads.
    func completedUploads() async throws -> [UploadRow] {
        try await queue.read { db in try UploadRow.filter(sql: "completedAt IS NOT NULL").fetchAll(db) }
    }

    /// Binds a finished upload to its video and queues its processing, in one transaction (a
    /// crash leaves both or neither); a video bound already is left as it is.
    func uploaded(video id: Int64, upload: String) async throws {
        try await queue.write { db in
            guard var v = try VideoRow.fetchOne(db, key: id), v.status == .pending, v.uploadID == nil else { return }
            v.uploadID = upload
            v.status = .processing
            try v.update(db)
            var job = JobRow(id: nil, videoID: id, state: .queued, attempts: 0, queuedAt: Date().timeIntervalSince1970)
            try job.insert(db)
        }
    }

    // MARK: jobs

    /// Takes the oldest queued job (marks it running); nil when none.
    func takeJob() async throws -> JobRow? {
        try await queue.write { db in
            guard var job = try JobRow.filter(sql: "state = 'queued'").order(Column("id")).fetchOne(db) else { return nil }
            job.state = .running
            job.attempts += 1
            try job.update(db)
            return job
        }
    }

    func finishJob(_ id: Int64, failed: Bool) async throws {
        try await queue.write { db in
            try db.execute(sql: "UPDATE jobs SET state = ? WHERE id = ?", arguments: [failed ? "failed" : "done", id])
        }
    }

    /// Jobs a crash left running go back in the queue (called when the server starts).
    func requeueInterrupted() async throws -> Int {
        try await queue.write { db in
            try db.execute(sql: "UPDATE jobs SET state = 'queued' WHERE state = 'running'")
            return db.changesCount
        }
    }

    func upload(_ id: String) async throws -> UploadRow? {
        try await queue.read { db in try UploadRow.fetchOne(db, key: id) }
    }

    func insert(_ row: UploadRow) async throws {
        try await queue.write { db in try row.insert(db) }
    }

    /// Records that the upload's bytes up to `offset` are durable.
    func setOffset(_ id: String, _ offset: Int64, completedAt: Double?) async throws {
        try await queue.write { db in
            try db.execute(sql: "UPDATE uploads SET offset = ?, completedAt = ? WHERE id = ?", arguments: [offset, completedAt, id])
        }
    }

    func delete(_ id: String) async throws {
        _ = try await queue.write { db in try UploadRow.deleteOne(db, key: id) }
    }

    /// Unfinished uploads whose time ran out before `now`.
    func expired(before now: Double) async throws -> [UploadRow] {
        try await queue.read { db in
            try UploadRow.filter(sql: "completedAt IS NULL AND expiresAt < ?", arguments: [now]).fetchAll(db)
        }
    }
}
