import ClipFlowCore
import Foundation
import GRDB

extension UploadRow: FetchableRecord, PersistableRecord {
    static let databaseTableName = "uploads"
    static let databaseColumnEncodingStrategy: DatabaseColumnEncodingStrategy = ColumnNames.encoding
    static let databaseColumnDecodingStrategy: DatabaseColumnDecodingStrategy = ColumnNames.decoding
}
extension VideoRow: FetchableRecord, MutablePersistableRecord {
    static let databaseTableName = "videos"
    static let databaseColumnEncodingStrategy: DatabaseColumnEncodingStrategy = ColumnNames.encoding
    static let databaseColumnDecodingStrategy: DatabaseColumnDecodingStrategy = ColumnNames.decoding
    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}
extension VideoRow.Status: DatabaseValueConvertible {}
extension VideoRow.Mode: DatabaseValueConvertible {}
extension VideoRow.Access: DatabaseValueConvertible {}
extension JobRow: FetchableRecord, MutablePersistableRecord {
    static let databaseTableName = "jobs"
    static let databaseColumnEncodingStrategy: DatabaseColumnEncodingStrategy = ColumnNames.encoding
    static let databaseColumnDecodingStrategy: DatabaseColumnDecodingStrategy = ColumnNames.decoding
    mutating func didInsert(_ inserted: InsertionSuccess) { id = inserted.rowID }
}
extension JobRow.State: DatabaseValueConvertible {}

/// The column of each record property whose name is not its column's: the columns are named as
/// `SchemaMigrations` names them, for both dialects.
private enum ColumnNames {
    static let byProperty = [
        "offset": "received", "partial": "partial_part", "createdAt": "created_at", "expiresAt": "expires_at", "completedAt": "completed_at",
        "videoID": "video_id", "multipartUpload": "multipart_upload", "clientID": "client_id", "uploadID": "upload_id", "queuedAt": "queued_at"
    ]
    static let byColumn = Dictionary(uniqueKeysWithValues: byProperty.map { ($0.value, $0.key) })
    static let encoding = DatabaseColumnEncodingStrategy.custom { key in byProperty[key.stringValue] ?? key.stringValue }
    static let decoding = DatabaseColumnDecodingStrategy.custom { column in Key(byColumn[column] ?? column) }

    struct Key: CodingKey {
        let stringValue: String
        init(_ name: String) { stringValue = name }
        init?(stringValue: String) { self.init(stringValue) }
        var intValue: Int? { nil }
        init?(intValue: Int) { nil }
    }
}

/// The store of one server: SQLite in the data folder (WAL, synchronous writes), made and migrated
/// when opened. Thread-safe (GRDB's queue serialises access); `Sendable`.
final class SQLiteStore: ServeStore {
    let queue: DatabaseQueue
    /// Times every read and write below (`reading`, `writing`).
    let timer: DatabaseTimer

    /// Opens (or makes) the database at `path`, readable and writable by this user only: the file
    /// is made 0600 before SQLite opens it, and SQLite gives its `-wal` and `-shm` the database's
    /// mode (ones left by an older server are made 0600 too).
    init(path: String, timer: DatabaseTimer = .none) throws {
        self.timer = timer
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ClipFlowError.output("cannot open the database '\(path)': \(String(cString: strerror(errno)))") }
        close(fd)
        for file in [path, path + "-wal", path + "-shm"] where chmod(file, 0o600) != 0 && errno != ENOENT {
            throw ClipFlowError.output("cannot make '\(file)' private (0600): \(String(cString: strerror(errno)))")
        }
        var config = Configuration()
        config.busyMode = .timeout(5)
        do { queue = try DatabaseQueue(path: path, configuration: config) } catch {
            throw ClipFlowError.output("cannot open the database '\(path)': \(error)")
        }
        try queue.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL") }
        try Self.migrate(queue, path: path)
    }

    /// Applies the migrations of `SchemaMigrations` the database lacks, in order, in one
    /// transaction, recording them in `schema_migrations`; a database made before that list
    /// (`LegacySQLiteSchema`) is brought to it first, in the same transaction. A database a newer
    /// clipflow upgraded is refused. One server opens a data folder's database at a time
    /// (`DataLock`); the transaction is taken at once (`BEGIN IMMEDIATE`) all the same.
    static func migrate(_ queue: DatabaseQueue, path: String) throws {
        let database = "the database '\(path)'"
        do {
            try queue.writeWithoutTransaction { db in
                try db.inTransaction(.immediate) {
                    try db.execute(sql: SchemaMigrations.recordTable)
                    let applied = try String.fetchAll(db, sql: "SELECT name FROM schema_migrations")
                    let missing = try SchemaMigrations.missing(applied: applied, database: database)
                    if try LegacySQLiteSchema.isLegacy(db) { try LegacySQLiteSchema.adopt(db, database: database) }
                    let now = Date().timeIntervalSince1970
                    for migration in missing {
                        for statement in migration.statements(.sqlite) { try db.execute(sql: statement) }
                        try db.execute(sql: "INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)", arguments: [migration.name, now])
                    }
                    return .commit
                }
            }
        } catch let error as ClipFlowError {
            throw error
        } catch {
            throw ClipFlowError.output("cannot upgrade \(database): \(error)")
        }
    }

    // MARK: videos

    func insert(_ video: VideoRow) async throws -> VideoRow {
        try await writing { db in
            var v = video
            try v.insert(db)
            return v
        }
    }

    func video(_ id: Int64) async throws -> VideoRow? {
        try await reading { db in try VideoRow.fetchOne(db, key: id) }
    }

    func videos(page: Int, perPage: Int) async throws -> ([VideoRow], Int) {
        try await reading { db in
            let total = try VideoRow.fetchCount(db)
            let rows = try VideoRow.order(Column("id").desc).limit(perPage, offset: (page - 1) * perPage).fetchAll(db)
            return (rows, total)
        }
    }

    func playable() async throws -> [VideoRow] {
        try await reading { db in
            try VideoRow.filter(sql: VideoConditions.playable).order(Column("id").desc).fetchAll(db)
        }
    }

    func recordings() async throws -> [VideoRow] {
        try await reading { db in try VideoRow.filter(sql: VideoConditions.unmergedRecording).order(Column("id")).fetchAll(db) }
    }

    func endRecording(_ id: Int64, fragments: Int64, replacing: Bool) async throws -> Bool {
        try await writing { db in
            try db.execute(
                sql: "UPDATE videos SET fragments = ? WHERE id = ? AND status = 'recording'" + (replacing ? "" : " AND fragments IS NULL"),
                arguments: [fragments, id])
            return db.changesCount == 1
        }
    }

    func publishLive(_ id: Int64, status: VideoRow.Status, duration: Double) async throws {
        try await writing { db in
            try db.execute(sql: "UPDATE videos SET published = 'live', status = ?, duration = ? WHERE id = ?", arguments: [status, duration, id])
        }
    }

    func update(_ video: VideoRow) async throws {
        try await writing { db in
            try video.update(
                db, columns: ["status", "mode", "error", "duration", "upload_id", "published", "renditions", "fragments"])
        }
    }

    func edit(_ id: Int64, name: String?, access: VideoRow.Access?) async throws -> VideoRow? {
        try await writing { db in
            try db.execute(
                sql: "UPDATE videos SET name = COALESCE(?, name), access = COALESCE(?, access) WHERE id = ?", arguments: [name, access, id])
            return try VideoRow.fetchOne(db, key: id)
        }
    }

    func deleteVideo(_ id: Int64) async throws {
        _ = try await writing { db in try VideoRow.deleteOne(db, key: id) }
    }

    func completedUploads() async throws -> [UploadRow] {
        try await reading { db in try UploadRow.filter(sql: "completed_at IS NOT NULL").fetchAll(db) }
    }

    func uploads(ofVideo video: Int64) async throws -> [UploadRow] {
        try await reading { db in try UploadRow.filter(sql: "video_id = ?", arguments: [video]).fetchAll(db) }
    }

    func unclaimedUploads() async throws -> [UploadRow] {
        try await reading { db in
            try UploadRow.filter(
                sql: """
                    completed_at IS NOT NULL AND video_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM videos v WHERE v.id = uploads.video_id
                      AND \(VideoConditions.takes(video: "v", upload: "uploads")))
                    """
            ).fetchAll(db)
        }
    }

    func isFull(_ error: Error) -> Bool {
        (error as? DatabaseError)?.resultCode == .SQLITE_FULL
    }

    func uploaded(video id: Int64, upload: String, trace: String?) async throws {
        try await writing { db in
            try db.execute(
                sql: "UPDATE videos SET upload_id = ?, status = \(VideoConditions.boundStatus) WHERE id = ? AND \(VideoConditions.bindable)",
                arguments: [upload, id])
            guard db.changesCount == 1 else { return }
            var job = JobRow(
                id: nil, videoID: id, state: .queued, attempts: 0, queuedAt: Date().timeIntervalSince1970, owner: nil, heartbeat: nil, trace: trace)
            try job.insert(db)
        }
    }

    // MARK: jobs

    func takeJob(owner: String, now: Double, steps: Set<JobRow.Step>, perClient: Int) async throws -> JobRow? {
        try await writing { db in
            let names = steps.map(\.rawValue)
            guard
                var job = try JobRow.fetchOne(
                    db,
                    sql: """
                        SELECT j.* FROM jobs j JOIN videos v ON v.id = j.video_id
                        WHERE j.state = 'queued' AND j.step IN (\(names.map { _ in "?" }.joined(separator: ", "))) AND (? = 0 OR \(FairTurns.running) < ?)
                        ORDER BY \(FairTurns.order) LIMIT 1
                        """, arguments: StatementArguments(names) + [perClient, perClient])
            else { return nil }
            try db.execute(
                sql: "INSERT INTO client_turns (client_id, last_started) SELECT client_id, ? FROM videos WHERE id = ? \(FairTurns.replacingTurn)",
                arguments: [now, job.videoID])
            job.state = .running
            job.attempts += 1
            job.owner = owner
            job.heartbeat = now
            try job.update(db)
            return job
        }
    }

    func queueLadder(_ id: Int64, plan: String) async throws {
        try await writing { db in
            try db.execute(
                sql: "UPDATE jobs SET state = 'queued', step = 'ladder', plan = ?, attempts = 0, queued_at = ? WHERE id = ?",
                arguments: [plan, Date().timeIntervalSince1970, id])
        }
    }

    func recordProbe(_ id: Int64, probe: String) async throws {
        try await writing { db in try db.execute(sql: "UPDATE jobs SET probe = ? WHERE id = ?", arguments: [probe, id]) }
    }

    func heartbeat(job: Int64, now: Double, progress: Double) async throws {
        try await writing { db in
            try db.execute(sql: "UPDATE jobs SET heartbeat = ? WHERE id = ?", arguments: [now, job])
            try db.execute(
                sql: "UPDATE videos SET progress = MAX(progress, ?) WHERE id = (SELECT video_id FROM jobs WHERE id = ?)", arguments: [progress, job])
        }
    }

    func progress(ofVideo video: Int64) async throws -> Double {
        try await reading { db in try Double.fetchOne(db, sql: "SELECT progress FROM videos WHERE id = ?", arguments: [video]) } ?? 0
    }

    func finishJob(_ id: Int64, failed: Bool) async throws {
        try await writing { db in
            try db.execute(sql: "UPDATE jobs SET state = ? WHERE id = ?", arguments: [failed ? "failed" : "done", id])
        }
    }

    func retryJob(_ id: Int64, counted: Bool) async throws {
        try await writing { db in
            try db.execute(sql: "UPDATE jobs SET state = 'queued', attempts = attempts - ? WHERE id = ?", arguments: [counted ? 0 : 1, id])
        }
    }

    func requeueStale(before: Double) async throws -> Int {
        try await writing { db in
            try db.execute(sql: "UPDATE jobs SET state = 'queued' WHERE state = 'running' AND (heartbeat IS NULL OR heartbeat < ?)", arguments: [before])
            return db.changesCount
        }
    }

    func releaseJobs(owner: String) async throws {
        try await writing { db in
            try db.execute(sql: "UPDATE jobs SET state = 'queued', attempts = attempts - 1 WHERE state = 'running' AND owner = ?", arguments: [owner])
        }
    }

    // MARK: uploads

    func upload(_ id: String) async throws -> UploadRow? {
        try await reading { db in try UploadRow.fetchOne(db, key: id) }
    }

    func insert(_ row: UploadRow, carrying newVideo: VideoRow?) async throws -> UploadRow {
        try await writing { db in
            var stored = row
            if var video = newVideo {
                try video.insert(db)
                stored.videoID = video.id
            }
            try stored.insert(db)
            return stored
        }
    }

    func setOffset(_ id: String, from: UploadMark, to: UploadMark, completedAt: Double?) async throws -> Bool {
        try await writing { db in
            try db.execute(
                sql: "UPDATE uploads SET received = ?, partial_part = ?, completed_at = ? WHERE id = ? AND received = ? AND partial_part IS ?",
                arguments: [to.offset, to.partial, completedAt, id, from.offset, from.partial])
            return db.changesCount == 1
        }
    }

    func setMultipartUpload(_ id: String, to uploadID: String) async throws -> String? {
        try await writing { db in
            try db.execute(sql: "UPDATE uploads SET multipart_upload = COALESCE(multipart_upload, ?) WHERE id = ?", arguments: [uploadID, id])
            return try String.fetchOne(db, sql: "SELECT multipart_upload FROM uploads WHERE id = ?", arguments: [id])
        }
    }

    func delete(_ id: String) async throws {
        _ = try await writing { db in try UploadRow.deleteOne(db, key: id) }
    }

    func expired(before now: Double) async throws -> [UploadRow] {
        try await reading { db in
            try UploadRow.filter(sql: "completed_at IS NULL AND expires_at < ?", arguments: [now]).fetchAll(db)
        }
    }

    /// A read of the database, timed.
    func reading<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await timer.read { try await queue.read(body) }
    }

    /// A write of the database (one transaction), timed.
    func writing<T: Sendable>(_ body: @escaping @Sendable (Database) throws -> T) async throws -> T {
        try await timer.write { try await queue.write(body) }
    }

    func jobStats() async throws -> JobStats {
        try await reading { db in
            var stats = JobStats()
            for row in try Row.fetchAll(db, sql: "SELECT state, step, COUNT(*) AS n, MIN(queued_at) AS oldest FROM jobs GROUP BY state, step") {
                guard let state = JobRow.State(rawValue: row["state"]) else { continue }
                let n: Int = row["n"]
                stats.byState[state, default: 0] += n
                if state == .queued, let step = JobRow.Step(rawValue: row["step"]) { stats.queued[step] = .init(count: n, oldest: row["oldest"]) }
            }
            return stats
        }
    }
}
