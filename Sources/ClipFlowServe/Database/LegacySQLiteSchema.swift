import GRDB

/// SQLite databases made before `SchemaMigrations`: GRDB's `DatabaseMigrator` made them, recording
/// its migrations in `grdb_migrations`, with the columns named as the records' Swift properties.
/// `SQLiteStore` recognises one by that table and, in the transaction that then applies
/// `SchemaMigrations`, applies the migrations the older clipflow had not applied yet (the SQL GRDB
/// ran for them, below), names the columns as `SchemaMigrations` does, and drops `grdb_migrations`
/// (so an older clipflow stops at its first migration, the tables being there, instead of
/// misreading the columns). Rows, and the numbering of their ids, are kept. Frozen: never changed.
enum LegacySQLiteSchema {
    /// GRDB's migrations in the order it applied them, each with the SQL it ran.
    static let migrations: [(name: String, sql: String)] = [
        (
            "uploads",
            """
            CREATE TABLE "uploads" ("id" TEXT PRIMARY KEY NOT NULL, "length" INTEGER NOT NULL, "offset" INTEGER NOT NULL, "metadata" TEXT NOT NULL, \
            "createdAt" DOUBLE NOT NULL, "expiresAt" DOUBLE NOT NULL, "completedAt" DOUBLE)
            """
        ),
        (
            "videos and jobs",
            """
            CREATE TABLE "videos" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "name" TEXT NOT NULL, "description" TEXT, "clientID" INTEGER NOT NULL, \
            "status" TEXT NOT NULL, "mode" TEXT NOT NULL, "error" TEXT, "duration" DOUBLE, "uploadID" TEXT, "published" TEXT NOT NULL, \
            "renditions" TEXT NOT NULL, "createdAt" DOUBLE NOT NULL);
            CREATE TABLE "jobs" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "videoID" INTEGER NOT NULL REFERENCES "videos"("id") ON DELETE CASCADE, \
            "state" TEXT NOT NULL, "attempts" INTEGER NOT NULL, "queuedAt" DOUBLE NOT NULL);
            CREATE INDEX "jobs_on_videoID" ON "jobs"("videoID")
            """
        ),
        ("job leases", #"ALTER TABLE "jobs" ADD COLUMN "owner" TEXT; ALTER TABLE "jobs" ADD COLUMN "heartbeat" DOUBLE"#),
        ("job steps", #"ALTER TABLE "jobs" ADD COLUMN "step" TEXT NOT NULL DEFAULT 'playable'; ALTER TABLE "jobs" ADD COLUMN "plan" TEXT"#),
        ("uploads name their video", #"ALTER TABLE "uploads" ADD COLUMN "videoID" INTEGER; CREATE INDEX "uploads_videoID" ON "uploads"("videoID")"#),
        ("videos record their progress", #"ALTER TABLE "videos" ADD COLUMN "progress" DOUBLE NOT NULL DEFAULT 0"#),
        ("uploads name their multipart upload", #"ALTER TABLE "uploads" ADD COLUMN "multipartUpload" TEXT"#),
        ("uploads name their partial part", #"ALTER TABLE "uploads" ADD COLUMN "partial" TEXT"#)
    ]

    /// The last of GRDB's tables made as `SchemaMigrations.tables` names them (its indexes are made
    /// again under their new names by that migration).
    static let renames = """
        ALTER TABLE uploads RENAME COLUMN "offset" TO received;
        ALTER TABLE uploads RENAME COLUMN createdAt TO created_at;
        ALTER TABLE uploads RENAME COLUMN expiresAt TO expires_at;
        ALTER TABLE uploads RENAME COLUMN completedAt TO completed_at;
        ALTER TABLE uploads RENAME COLUMN videoID TO video_id;
        ALTER TABLE uploads RENAME COLUMN multipartUpload TO multipart_upload;
        ALTER TABLE uploads RENAME COLUMN partial TO partial_part;
        ALTER TABLE videos RENAME COLUMN clientID TO client_id;
        ALTER TABLE videos RENAME COLUMN uploadID TO upload_id;
        ALTER TABLE videos RENAME COLUMN createdAt TO created_at;
        ALTER TABLE jobs RENAME COLUMN videoID TO video_id;
        ALTER TABLE jobs RENAME COLUMN queuedAt TO queued_at;
        DROP INDEX uploads_videoID;
        DROP INDEX jobs_on_videoID;
        DROP TABLE grdb_migrations
        """

    /// Whether `db` was made before `SchemaMigrations`.
    static func isLegacy(_ db: Database) throws -> Bool { try db.tableExists("grdb_migrations") }

    /// Brings a database GRDB's migrator made (any of its versions) to the tables
    /// `SchemaMigrations.tables` makes, within the caller's transaction.
    static func adopt(_ db: Database, database: String) throws {
        let applied = Set(try String.fetchAll(db, sql: "SELECT identifier FROM grdb_migrations"))
        let unknown = applied.subtracting(migrations.map(\.name)).sorted()
        if !unknown.isEmpty { throw SchemaMigrations.newer(database: database, unknown: unknown) }
        for migration in migrations where !applied.contains(migration.name) { try db.execute(sql: migration.sql) }
        try db.execute(sql: renames)
    }
}
