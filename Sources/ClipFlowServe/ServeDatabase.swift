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
        return m
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
