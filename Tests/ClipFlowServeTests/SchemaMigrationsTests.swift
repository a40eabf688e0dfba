import ClipFlowCore
import ClipFlowTestSupport
import Foundation
import XCTest

@testable import ClipFlowServe

/// The one schema history of both stores (`SchemaMigrations`): databases made by the clipflow
/// before it (SQLite by GRDB's migrator, PostgreSQL by idempotent statements) are upgraded in place
/// with their rows, a database a newer clipflow upgraded is refused, and both dialects end with the
/// same tables, columns and indexes. The databases are built and read with tools that are not the
/// stores' code: Python's sqlite3 and psql.
final class SchemaMigrationsTests: XCTestCase {
    // MARK: fixtures: the schema as the clipflow before `SchemaMigrations` made it

    /// GRDB's migrations as the SQLite store of before ran them, in order (the SQL GRDB made for
    /// them, as its `sqlite_master` holds it).
    static let grdbMigrations: [(name: String, sql: String)] = [
        (
            "uploads",
            #"CREATE TABLE "uploads" ("id" TEXT PRIMARY KEY NOT NULL, "length" INTEGER NOT NULL, "offset" INTEGER NOT NULL, "#
                + #""metadata" TEXT NOT NULL, "createdAt" DOUBLE NOT NULL, "expiresAt" DOUBLE NOT NULL, "completedAt" DOUBLE)"#
        ),
        (
            "videos and jobs",
            #"CREATE TABLE "videos" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "name" TEXT NOT NULL, "description" TEXT, "#
                + #""clientID" INTEGER NOT NULL, "status" TEXT NOT NULL, "mode" TEXT NOT NULL, "error" TEXT, "duration" DOUBLE, "#
                + #""uploadID" TEXT, "published" TEXT NOT NULL, "renditions" TEXT NOT NULL, "createdAt" DOUBLE NOT NULL);"#
                + #"CREATE TABLE "jobs" ("id" INTEGER PRIMARY KEY AUTOINCREMENT, "videoID" INTEGER NOT NULL REFERENCES "videos"("id") "#
                + #"ON DELETE CASCADE, "state" TEXT NOT NULL, "attempts" INTEGER NOT NULL, "queuedAt" DOUBLE NOT NULL);"#
                + #"CREATE INDEX "jobs_on_videoID" ON "jobs"("videoID")"#
        ),
        ("job leases", #"ALTER TABLE "jobs" ADD COLUMN "owner" TEXT; ALTER TABLE "jobs" ADD COLUMN "heartbeat" DOUBLE"#),
        ("job steps", #"ALTER TABLE "jobs" ADD COLUMN "step" TEXT NOT NULL DEFAULT 'playable'; ALTER TABLE "jobs" ADD COLUMN "plan" TEXT"#),
        ("uploads name their video", #"ALTER TABLE "uploads" ADD COLUMN "videoID" INTEGER; CREATE INDEX "uploads_videoID" ON "uploads"("videoID")"#),
        ("videos record their progress", #"ALTER TABLE "videos" ADD COLUMN "progress" DOUBLE NOT NULL DEFAULT 0"#),
        ("uploads name their multipart upload", #"ALTER TABLE "uploads" ADD COLUMN "multipartUpload" TEXT"#),
        ("uploads name their partial part", #"ALTER TABLE "uploads" ADD COLUMN "partial" TEXT"#)
    ]

    /// The statements the PostgreSQL store of before ran at every start, in order.
    static let postgresStatements = [
        """
        CREATE TABLE IF NOT EXISTS uploads (id TEXT PRIMARY KEY, length BIGINT NOT NULL, received BIGINT NOT NULL,
          metadata TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL,
          completed_at DOUBLE PRECISION)
        """,
        """
        CREATE TABLE IF NOT EXISTS videos (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, description TEXT,
          client_id BIGINT NOT NULL, status TEXT NOT NULL, mode TEXT NOT NULL, error TEXT, duration DOUBLE PRECISION,
          upload_id TEXT, published TEXT NOT NULL, renditions TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL)
        """,
        """
        CREATE TABLE IF NOT EXISTS jobs (id BIGSERIAL PRIMARY KEY, video_id BIGINT NOT NULL REFERENCES videos(id) ON DELETE CASCADE,
          state TEXT NOT NULL, attempts INT NOT NULL, queued_at DOUBLE PRECISION NOT NULL, owner TEXT, heartbeat DOUBLE PRECISION)
        """,
        "ALTER TABLE uploads ADD COLUMN IF NOT EXISTS video_id BIGINT",
        "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS step TEXT NOT NULL DEFAULT 'playable'",
        "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS plan TEXT",
        "ALTER TABLE videos ADD COLUMN IF NOT EXISTS progress DOUBLE PRECISION NOT NULL DEFAULT 0",
        "ALTER TABLE uploads ADD COLUMN IF NOT EXISTS multipart_upload TEXT",
        "ALTER TABLE uploads ADD COLUMN IF NOT EXISTS partial_part TEXT",
        "CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS uploads_video_id ON uploads (video_id)"
    ]

    /// The same rows in either database of before: four videos (the fourth deleted, so its id is
    /// used up), two uploads, two jobs.
    static func oldRows(_ dialect: SQLDialect) -> String {
        let c: (String, String) -> String = { sqlite, postgres in dialect == .sqlite ? sqlite : postgres }
        return """
            INSERT INTO videos (name, description, \(c("clientID", "client_id")), status, mode, error, duration, \(c("uploadID", "upload_id")),
              published, renditions, \(c("createdAt", "created_at")), progress) VALUES
              ('ready one', 'the first', 7, 'ready', 'ladder', NULL, 12.5, 'up-done', 'a1-full', '720p,360p', 100, 1),
              ('in processing', NULL, 7, 'processing', 'copy', NULL, NULL, 'up-other', '', '', 200, 0.25),
              ('pending', NULL, 8, 'pending', 'ladder', NULL, NULL, NULL, '', '', 300, 0),
              ('deleted', NULL, 8, 'pending', 'ladder', NULL, NULL, NULL, '', '', 400, 0);
            DELETE FROM videos WHERE name = 'deleted';
            INSERT INTO uploads (id, length, \(c("\"offset\"", "received")), metadata, \(c("createdAt", "created_at")), \(c("expiresAt", "expires_at")),
              \(c("completedAt", "completed_at")), \(c("videoID", "video_id")), \(c("multipartUpload", "multipart_upload")), \(c("partial", "partial_part")))
              VALUES ('up-done', 10, 10, 'filename eC5tcDQ=', 100, 200, 150, 1, NULL, NULL), ('up-mid', 100, 40, '', 200, 300, NULL, 3, 'mp-1', 'tok');
            INSERT INTO jobs (\(c("videoID", "video_id")), state, attempts, \(c("queuedAt", "queued_at")), owner, heartbeat, step, plan) VALUES
              (1, 'done', 1, 100, 'old-server', 140, 'ladder', '{"renditions":2}'), (2, 'queued', 0, 200, NULL, NULL, 'playable', NULL);
            """
    }

    // MARK: tests

    func testTheListIsNamedOnceEach() throws {
        let names = SchemaMigrations.all.map(\.name)
        XCTAssertEqual(Set(names).count, names.count, "a name is recorded, so it names one migration")
        XCTAssertEqual(try SchemaMigrations.missing(applied: [], database: "d").map(\.name), names)
        XCTAssertEqual(try SchemaMigrations.missing(applied: names, database: "d").map(\.name), [])
        XCTAssertThrowsError(try SchemaMigrations.missing(applied: names + ["z later", "a later"], database: "the database 'x'")) { error in
            let e = error as? ClipFlowError
            XCTAssertEqual(e?.kind, .incompatible)
            XCTAssertTrue(e?.message.hasPrefix("the database 'x': upgraded by a newer clipflow") == true, "\(error)")
            XCTAssertTrue(e?.message.contains("'a later', 'z later'") == true, "\(error)")
        }
    }

    func testASQLiteDatabaseOfGRDBsMigratorIsUpgradedInPlace() async throws {
        let fresh = try freshSQLiteSchema()
        let path = temporaryFile("old")
        defer { removeSQLite(path) }
        try sqlite(path, script: oldSQLite(upTo: Self.grdbMigrations.count) + Self.oldRows(.sqlite))

        try await checkUpgraded(try SQLiteStore(path: path))
        XCTAssertEqual(try sqliteSchema(path), fresh)
        XCTAssertEqual(try sqlite(path, "SELECT name FROM schema_migrations").sorted(), SchemaMigrations.all.map(\.name).sorted())
        _ = try SQLiteStore(path: path)
        XCTAssertEqual(try sqlite(path, "SELECT count(*) FROM schema_migrations"), ["\(SchemaMigrations.all.count)"], "opened again: nothing applied twice")
    }

    /// A database an even older clipflow left, before GRDB's later migrations: those are applied
    /// first, then it is upgraded as any.
    func testASQLiteDatabaseOfAnOlderGRDBMigrationIsFinishedAndUpgraded() async throws {
        let fresh = try freshSQLiteSchema()
        let path = temporaryFile("older")
        defer { removeSQLite(path) }
        try sqlite(
            path,
            script: oldSQLite(upTo: 4)
                + #"INSERT INTO videos (name, clientID, status, mode, published, renditions, createdAt) VALUES ('old', 1, 'pending', 'ladder', '', '', 5);"#
                + #"INSERT INTO uploads VALUES ('u', 10, 3, '', 1, 2, NULL)"#)
        let store = try SQLiteStore(path: path)
        XCTAssertEqual(try sqliteSchema(path), fresh)
        let upload = try await store.upload("u")
        XCTAssertEqual(upload, UploadRow(id: "u", length: 10, offset: 3, metadata: "", createdAt: 1, expiresAt: 2))
        let video = try await store.video(1)
        XCTAssertEqual(video?.name, "old")
        try await store.uploaded(video: 1, upload: "u", trace: nil)
        let job = try await store.takeJob(owner: "me", now: 10, steps: [.playable], perClient: 0)
        XCTAssertEqual(job?.videoID, 1)
    }

    func testAPostgresDatabaseOfTheIdempotentStatementsIsUpgradedInPlace() async throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let fresh = try await freshPostgresSchema(pg)
        try pg.psql("CREATE DATABASE old", database: "postgres")
        try pg.psql(Self.postgresStatements.joined(separator: ";\n") + ";\n" + Self.oldRows(.postgres), database: "old")

        try await Self.withPostgresStore(pg, database: "old") { store in
            try await store.migrate()
            try await self.checkUpgraded(store)
        }
        XCTAssertEqual(try postgresSchema(pg, database: "old"), fresh)
        XCTAssertEqual(try pg.psql("SELECT name FROM schema_migrations", database: "old").lines.sorted(), SchemaMigrations.all.map(\.name).sorted())

        // One an even older clipflow made, before the columns added later.
        try pg.psql("CREATE DATABASE older", database: "postgres")
        try pg.psql(Self.postgresStatements.prefix(4).joined(separator: ";\n"), database: "older")
        try await Self.withPostgresStore(pg, database: "older") { store in try await store.migrate() }
        XCTAssertEqual(try postgresSchema(pg, database: "older"), fresh)
    }

    /// The tables, columns and indexes both dialects end with are the same by name.
    func testBothDialectsEndWithTheSameTablesAndColumns() async throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        let sqlite = try freshSQLiteSchema(), postgres = try await freshPostgresSchema(pg)
        XCTAssertEqual(sqlite, postgres)
        XCTAssertEqual(
            Set(sqlite.columns.keys),
            ["uploads", "videos", "jobs", "settings", "schema_migrations", "webhook_events", "webhook_deliveries", "client_turns", "views"])
        XCTAssertEqual(sqlite.columns["uploads"]?.contains("received"), true)
    }

    /// Servers starting together on an empty database apply each migration once (the advisory
    /// lock): none fails, and each is recorded once.
    func testPostgresServersStartingTogetherApplyTheMigrationsOnce() async throws {
        let pg = try PostgresServer.start()
        defer { pg.stop() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            for _ in 0..<4 {
                group.addTask { try await Self.withPostgresStore(pg, database: "clipflow") { store in try await store.migrate() } }
            }
            try await group.waitForAll()
        }
        XCTAssertEqual(try pg.psql("SELECT name FROM schema_migrations").lines.sorted(), SchemaMigrations.all.map(\.name).sorted())
    }

    func testADatabaseOfANewerClipflowIsRefused() async throws {
        let path = temporaryFile("newer")
        defer { removeSQLite(path) }
        _ = try SQLiteStore(path: path)
        try sqlite(path, script: "INSERT INTO schema_migrations VALUES ('videos have posters', 1)")
        XCTAssertThrowsError(try SQLiteStore(path: path)) { error in
            XCTAssertEqual((error as? ClipFlowError)?.kind, .incompatible, "\(error)")
            XCTAssertEqual(
                "\(error)",
                "the database '\(path)': upgraded by a newer clipflow: its schema has the migration 'videos have posters', which this "
                    + "clipflow does not know (its last is '\(SchemaMigrations.all.last!.name)'); run that clipflow or a newer one")
        }

        let pg = try PostgresServer.start()
        defer { pg.stop() }
        try await Self.withPostgresStore(pg, database: "clipflow") { store in try await store.migrate() }
        try pg.psql("INSERT INTO schema_migrations VALUES ('videos have posters', 1)")
        try await Self.withPostgresStore(pg, database: "clipflow") { store in
            do {
                try await store.migrate()
                XCTFail("a database of a newer clipflow was used")
            } catch {
                XCTAssertEqual((error as? ClipFlowError)?.kind, .incompatible, "\(error)")
                let message = "\(error)"
                XCTAssertTrue(message.hasPrefix("--database postgres://clipflow@127.0.0.1:\(pg.port)/clipflow: upgraded by a newer clipflow"), message)
                XCTAssertTrue(message.contains("the migration 'videos have posters'"), message)
            }
        }
    }

    // MARK: checks

    /// The rows of `oldRows` read back through the store, and the store at work on them.
    private func checkUpgraded(_ store: any ServeStore) async throws {
        let done = try await store.upload("up-done"), mid = try await store.upload("up-mid")
        XCTAssertEqual(
            done, UploadRow(id: "up-done", length: 10, offset: 10, metadata: "filename eC5tcDQ=", createdAt: 100, expiresAt: 200, completedAt: 150, videoID: 1))
        XCTAssertEqual(
            mid,
            UploadRow(id: "up-mid", length: 100, offset: 40, metadata: "", createdAt: 200, expiresAt: 300, videoID: 3, multipartUpload: "mp-1", partial: "tok"))
        let first = try await store.video(1)
        XCTAssertEqual(
            first,
            VideoRow(
                id: 1, name: "ready one", description: "the first", clientID: 7, status: .ready, mode: .ladder, error: nil, duration: 12.5, uploadID: "up-done",
                published: "a1-full", renditions: "720p,360p", createdAt: 100))
        let (videos, total) = try await store.videos(page: 1, perPage: 10)
        XCTAssertEqual(total, 3)
        XCTAssertEqual(videos.map(\.id), [3, 2, 1])
        XCTAssertEqual(videos.first?.clientID, 8)
        let progress = try await store.progress(ofVideo: 2)
        XCTAssertEqual(progress, 0.25)
        let counts = try await store.jobStats().byState
        XCTAssertEqual(counts, [.done: 1, .queued: 1])
        let ofVideo = try await store.uploads(ofVideo: 3)
        XCTAssertEqual(ofVideo.map(\.id), ["up-mid"])

        // At work: the queued job is taken, the upload's mark moves, a new video takes a new id.
        let job = try await store.takeJob(owner: "new", now: 500, steps: Set(JobRow.Step.allCases), perClient: 0)
        XCTAssertEqual(job?.id, 2)
        XCTAssertEqual(job?.videoID, 2)
        XCTAssertEqual(job?.attempts, 1)
        XCTAssertEqual(job?.step, .playable)
        try await store.heartbeat(job: 2, now: 510, progress: 0.5)
        let moved = try await store.progress(ofVideo: 2)
        XCTAssertEqual(moved, 0.5)
        let whole = try await store.setOffset("up-mid", from: UploadMark(offset: 40, partial: "tok"), to: UploadMark(offset: 100), completedAt: 600)
        XCTAssertTrue(whole)
        let completed = try await store.completedUploads()
        XCTAssertEqual(Set(completed.map(\.id)), ["up-done", "up-mid"])
        let made = try await store.insert(
            VideoRow(
                id: nil, name: "new", description: nil, clientID: 1, status: .pending, mode: .ladder, error: nil, duration: nil, uploadID: nil, published: "",
                renditions: "", createdAt: 700))
        XCTAssertEqual(made.id, 5, "ids are not used again")
        try await store.deleteVideo(1)
        let left = try await store.jobStats().byState
        XCTAssertEqual(left, [.running: 1], "a video's jobs go with it")
    }

    // MARK: SQLite, through Python's sqlite3

    private func temporaryFile(_ name: String) -> String {
        FileManager.default.temporaryDirectory.appendingPathComponent("schema-\(name)-\(UUID().uuidString).sqlite").path
    }

    private func removeSQLite(_ path: String) {
        for file in [path, path + "-wal", path + "-shm"] { try? FileManager.default.removeItem(atPath: file) }
    }

    /// The first `count` of GRDB's migrations, recorded as GRDB records them.
    private func oldSQLite(upTo count: Int) -> String {
        let applied = Self.grdbMigrations.prefix(count)
        return "CREATE TABLE grdb_migrations (identifier TEXT NOT NULL PRIMARY KEY);\n"
            + applied.map { "\($0.sql);\nINSERT INTO grdb_migrations VALUES ('\($0.name)');\n" }.joined()
    }

    private static let python = """
        import sqlite3, sys
        c = sqlite3.connect(sys.argv[1], isolation_level=None)
        if sys.argv[2] == "script":
            c.executescript(sys.argv[3])
        else:
            for row in c.execute(sys.argv[3]):
                print("|".join("" if v is None else str(v) for v in row))
        """

    private func sqlite(_ path: String, script: String) throws {
        try Run.run(["python3", "-c", Self.python, path, "script", script])
    }

    private func sqlite(_ path: String, _ query: String) throws -> [String] {
        try Run.run(["python3", "-c", Self.python, path, "query", query]).out.lines
    }

    private func sqliteSchema(_ path: String) throws -> Schema {
        try Schema(
            columns: sqlite(
                path, "SELECT m.name, p.name FROM sqlite_master m JOIN pragma_table_info(m.name) p WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%'"),
            indexes: sqlite(path, "SELECT name FROM sqlite_master WHERE type = 'index' AND name NOT LIKE 'sqlite_autoindex_%'"))
    }

    private func freshSQLiteSchema() throws -> Schema {
        let path = temporaryFile("fresh")
        defer { removeSQLite(path) }
        _ = try SQLiteStore(path: path)
        return try sqliteSchema(path)
    }

    // MARK: PostgreSQL, through psql

    private static func withPostgresStore(_ pg: PostgresServer, database: String, _ body: (PostgresStore) async throws -> Void) async throws {
        let store = try PostgresStore(login: PostgresLogin(url: "postgres://clipflow@127.0.0.1:\(pg.port)/\(database)", source: "--database", environment: [:]))
        let connection = Task { await store.run() }
        defer { connection.cancel() }
        try await body(store)
    }

    private func postgresSchema(_ pg: PostgresServer, database: String) throws -> Schema {
        try Schema(
            columns: pg.psql("SELECT table_name, column_name FROM information_schema.columns WHERE table_schema = 'public'", database: database).lines,
            indexes: pg.psql("SELECT indexname FROM pg_indexes WHERE schemaname = 'public' AND indexname NOT LIKE '%_pkey'", database: database).lines)
    }

    private func freshPostgresSchema(_ pg: PostgresServer) async throws -> Schema {
        try pg.psql("CREATE DATABASE fresh", database: "postgres")
        try await Self.withPostgresStore(pg, database: "fresh") { store in try await store.migrate() }
        return try postgresSchema(pg, database: "fresh")
    }
}

/// A database's tables with their columns' names, and its indexes' names (not those of primary
/// keys), as sets: the order they were made in may differ.
private struct Schema: Equatable, CustomStringConvertible {
    var columns: [String: Set<String>] = [:]
    var indexes: Set<String>

    /// From `table|column` lines.
    init(columns lines: [String], indexes: [String]) {
        for line in lines {
            let parts = line.split(separator: "|", maxSplits: 1).map(String.init)
            columns[parts[0], default: []].insert(parts.count > 1 ? parts[1] : "")
        }
        self.indexes = Set(indexes)
    }

    var description: String {
        columns.keys.sorted().map { "\($0)(\(columns[$0]!.sorted().joined(separator: ", ")))" }.joined(separator: " ") + " indexes: \(indexes.sorted())"
    }
}

extension String {
    fileprivate var lines: [String] { split(separator: "\n").map(String.init) }
}
