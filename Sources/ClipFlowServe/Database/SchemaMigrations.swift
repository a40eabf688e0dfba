import ClipFlowCore

/// The SQL dialects `clipflow serve` keeps its rows in.
enum SQLDialect: String, Sendable, CaseIterable {
    case sqlite, postgres

    /// A table's own key, numbered by the database.
    var serialKey: String {
        switch self {
        case .sqlite: return "INTEGER PRIMARY KEY AUTOINCREMENT"
        case .postgres: return "BIGSERIAL PRIMARY KEY"
        }
    }
}

/// One step of the schema: its name, recorded in `schema_migrations` once applied (so never
/// changed, reused or removed once released), and its statements, the same in both dialects but
/// where they really differ.
struct SchemaMigration: Sendable {
    let name: String
    let statements: @Sendable (SQLDialect) -> [String]

    init(_ name: String, _ statements: @escaping @Sendable (SQLDialect) -> [String]) {
        self.name = name
        self.statements = statements
    }

    init(_ name: String, both statements: [String]) {
        self.init(name) { _ in statements }
    }
}

/// The one schema history of `clipflow serve`'s database, SQLite (`SQLiteStore`) and PostgreSQL
/// (`PostgresStore`) alike: each store, when it opens the database, applies the migrations not yet
/// recorded in its `schema_migrations` table, in this order and in one transaction (PostgreSQL
/// under an advisory lock, so servers starting together apply them once), and refuses a database
/// that records one this list does not have (a newer clipflow upgraded it). Both dialects end with
/// the same tables and columns (`SchemaMigrationsTests` compares them); columns are named as
/// PostgreSQL names them (an upload's offset is `received`, `offset` being a keyword there).
///
/// A change to the schema is a new migration at the end, for both dialects.
enum SchemaMigrations {
    static let all: [SchemaMigration] = [
        tables, jobNotifications, jobProbe, recordingFragments, webhooks, clientTurns, videoAccess, views, traceContext
    ]

    /// The table that records what was applied: the same name and shape in both dialects.
    static let recordTable = "CREATE TABLE IF NOT EXISTS schema_migrations (name TEXT PRIMARY KEY NOT NULL, applied_at DOUBLE PRECISION NOT NULL)"

    /// The schema as it stood when this list began. Idempotent, so it recognises what came before:
    /// a PostgreSQL database made by an older clipflow (which ran these statements at every start,
    /// the columns added later as `ADD COLUMN IF NOT EXISTS`), and a SQLite one once
    /// `LegacySQLiteSchema` has named its columns as here.
    static let tables = SchemaMigration("tables") { dialect in
        var statements = [
            """
            CREATE TABLE IF NOT EXISTS uploads (id TEXT PRIMARY KEY NOT NULL, length BIGINT NOT NULL, received BIGINT NOT NULL,
              metadata TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, expires_at DOUBLE PRECISION NOT NULL,
              completed_at DOUBLE PRECISION, video_id BIGINT, multipart_upload TEXT, partial_part TEXT)
            """,
            """
            CREATE TABLE IF NOT EXISTS videos (id \(dialect.serialKey), name TEXT NOT NULL, description TEXT, client_id BIGINT NOT NULL,
              status TEXT NOT NULL, mode TEXT NOT NULL, error TEXT, duration DOUBLE PRECISION, upload_id TEXT, published TEXT NOT NULL,
              renditions TEXT NOT NULL, created_at DOUBLE PRECISION NOT NULL, progress DOUBLE PRECISION NOT NULL DEFAULT 0)
            """,
            """
            CREATE TABLE IF NOT EXISTS jobs (id \(dialect.serialKey), video_id BIGINT NOT NULL REFERENCES videos(id) ON DELETE CASCADE,
              state TEXT NOT NULL, attempts INT NOT NULL, queued_at DOUBLE PRECISION NOT NULL, owner TEXT, heartbeat DOUBLE PRECISION,
              step TEXT NOT NULL DEFAULT 'playable', plan TEXT)
            """,
            "CREATE TABLE IF NOT EXISTS settings (name TEXT PRIMARY KEY NOT NULL, value TEXT NOT NULL)"
        ]
        if dialect == .postgres {
            // Columns an older clipflow's PostgreSQL tables may lack (SQLite has no `IF NOT EXISTS`
            // here, and needs none: `LegacySQLiteSchema` finishes its older tables).
            statements += [
                "ALTER TABLE uploads ADD COLUMN IF NOT EXISTS video_id BIGINT",
                "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS step TEXT NOT NULL DEFAULT 'playable'",
                "ALTER TABLE jobs ADD COLUMN IF NOT EXISTS plan TEXT",
                "ALTER TABLE videos ADD COLUMN IF NOT EXISTS progress DOUBLE PRECISION NOT NULL DEFAULT 0",
                "ALTER TABLE uploads ADD COLUMN IF NOT EXISTS multipart_upload TEXT",
                "ALTER TABLE uploads ADD COLUMN IF NOT EXISTS partial_part TEXT"
            ]
        }
        return statements + [
            "CREATE INDEX IF NOT EXISTS uploads_video_id ON uploads (video_id)",
            "CREATE INDEX IF NOT EXISTS jobs_video_id ON jobs (video_id)"
        ]
    }

    /// PostgreSQL tells the servers sharing it when a job becomes queued (inserted, requeued, its
    /// ladder step queued), on the channel `JobNotifications` listens on, so an idle worker takes
    /// it at once instead of at its next poll. SQLite has one server, which wakes its own workers.
    static let jobNotifications = SchemaMigration("job notifications") { dialect in
        guard dialect == .postgres else { return [] }
        return [
            """
            CREATE OR REPLACE FUNCTION clipflow_job_queued() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN PERFORM pg_notify('\(JobNotifications.channel)', ''); RETURN NULL; END $$
            """,
            """
            CREATE TRIGGER jobs_queued AFTER INSERT OR UPDATE OF state, step ON jobs
              FOR EACH ROW WHEN (NEW.state = 'queued') EXECUTE FUNCTION clipflow_job_queued()
            """
        ]
    }

    /// A job keeps its upload's probe (`JobRow.probe`: `InspectSummary` as JSON), made once by its
    /// first step, so no later step (its ladder, a step tried again) probes again.
    static let jobProbe = SchemaMigration("job probe", both: ["ALTER TABLE jobs ADD COLUMN probe TEXT"])

    /// A recording's fragment count, once it ended (`VideoRow.fragments`).
    static let recordingFragments = SchemaMigration("recording fragments", both: ["ALTER TABLE videos ADD COLUMN fragments BIGINT"])

    /// Webhooks (`WebhookService`): a trigger on `videos` records each event a receiver is told
    /// of (`video.created`, `video.viewable`, `video.ready`, `video.error`, `video.deleted`) in
    /// `webhook_events`, in the transaction that made the change, whichever server or code path
    /// made it; `webhook_deliveries` holds one row per event and endpoint, copied from the event
    /// when a server fans it out, until it is delivered or given up.
    static let webhooks = SchemaMigration("webhooks") { dialect in
        let tables = [
            """
            CREATE TABLE webhook_events (id \(dialect.serialKey), type TEXT NOT NULL, video_id BIGINT NOT NULL, name TEXT NOT NULL,
              client_id BIGINT NOT NULL, status TEXT NOT NULL, error TEXT, created_at DOUBLE PRECISION NOT NULL)
            """,
            """
            CREATE TABLE webhook_deliveries (event_id BIGINT NOT NULL, endpoint TEXT NOT NULL, type TEXT NOT NULL, video_id BIGINT NOT NULL,
              name TEXT NOT NULL, client_id BIGINT NOT NULL, status TEXT NOT NULL, error TEXT, created_at DOUBLE PRECISION NOT NULL,
              state TEXT NOT NULL, attempts INT NOT NULL, next_at DOUBLE PRECISION NOT NULL, lease_until DOUBLE PRECISION, last_error TEXT,
              PRIMARY KEY (event_id, endpoint))
            """,
            "CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_at)",
            "CREATE INDEX webhook_deliveries_video ON webhook_deliveries (endpoint, video_id, state)",
            "CREATE INDEX webhook_events_created ON webhook_events (created_at)"
        ]
        let columns = "(type, video_id, name, client_id, status, error, created_at)"
        switch dialect {
        case .sqlite:
            let now = "(julianday('now') - 2440587.5) * 86400.0"
            func values(_ type: String, _ row: String) -> String {
                "VALUES (\(type), \(row).id, \(row).name, \(row).client_id, \(row).status, \(row).error, \(now))"
            }
            return tables + [
                "CREATE TRIGGER videos_webhook_created AFTER INSERT ON videos BEGIN INSERT INTO webhook_events \(columns) \(values("'video.created'", "NEW")); END",
                """
                CREATE TRIGGER videos_webhook_status AFTER UPDATE OF status ON videos
                  WHEN NEW.status <> OLD.status AND NEW.status IN \(WebhookEvent.statuses)
                  BEGIN INSERT INTO webhook_events \(columns) \(values("'video.' || NEW.status", "NEW")); END
                """,
                "CREATE TRIGGER videos_webhook_deleted AFTER DELETE ON videos BEGIN INSERT INTO webhook_events \(columns) \(values("'video.deleted'", "OLD")); END"
            ]
        case .postgres:
            let now = "extract(epoch from clock_timestamp())"
            func values(_ type: String, _ row: String) -> String {
                "VALUES (\(type), \(row).id, \(row).name, \(row).client_id, \(row).status, \(row).error, \(now))"
            }
            return tables + [
                """
                CREATE OR REPLACE FUNCTION clipflow_webhook_event() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                  IF TG_OP = 'INSERT' THEN INSERT INTO webhook_events \(columns) \(values("'video.created'", "NEW"));
                  ELSIF TG_OP = 'DELETE' THEN INSERT INTO webhook_events \(columns) \(values("'video.deleted'", "OLD"));
                  ELSIF NEW.status IS DISTINCT FROM OLD.status AND NEW.status IN \(WebhookEvent.statuses) THEN
                    INSERT INTO webhook_events \(columns) \(values("'video.' || NEW.status", "NEW"));
                  END IF;
                  RETURN NULL;
                END $$
                """,
                "CREATE TRIGGER videos_webhook AFTER INSERT OR DELETE OR UPDATE OF status ON videos FOR EACH ROW EXECUTE FUNCTION clipflow_webhook_event()"
            ]
        }
    }

    /// Fair processing (`ServeStore.takeJob`): when each client last had a job started, so the
    /// next job goes to the client served longest ago; running jobs are found by their state.
    static let clientTurns = SchemaMigration(
        "client turns",
        both: [
            "CREATE TABLE client_turns (client_id BIGINT PRIMARY KEY NOT NULL, last_started DOUBLE PRECISION NOT NULL)",
            "CREATE INDEX jobs_state ON jobs (state)",
            "CREATE INDEX videos_client_id ON videos (client_id)"
        ])

    /// Who may play a video (`VideoRow.access`): anyone, or holders of a signed token.
    static let videoAccess = SchemaMigration("video access", both: ["ALTER TABLE videos ADD COLUMN access TEXT NOT NULL DEFAULT 'public'"])

    /// What players reported of each view (`ViewReport`), for the studio's figures; kept
    /// `ViewerBeacons.keepFor`.
    static let views = SchemaMigration("views") { dialect in
        [
            """
            CREATE TABLE views (id \(dialect.serialKey), video_id BIGINT NOT NULL, rendition TEXT NOT NULL, startup_ms BIGINT, rebuffers BIGINT NOT NULL,
              rebuffer_ms BIGINT NOT NULL, watched_ms BIGINT NOT NULL, error TEXT, at DOUBLE PRECISION NOT NULL)
            """,
            "CREATE INDEX views_video ON views (video_id, id)",
            "CREATE INDEX views_at ON views (at)"
        ]
    }

    /// The trace an upload's spans join (`ServeTracing`: a W3C `traceparent`, NULL when tracing is
    /// off), carried on to its job, so the worker that takes the job continues it.
    static let traceContext = SchemaMigration(
        "trace context", both: ["ALTER TABLE uploads ADD COLUMN trace TEXT", "ALTER TABLE jobs ADD COLUMN trace TEXT"])

    /// The migrations a database that recorded `applied` lacks, in order. Throws, naming
    /// `database` and the migrations, when `applied` has one this list does not: a newer clipflow
    /// upgraded the database, and this one would misread it.
    static func missing(applied: some Sequence<String>, database: String) throws -> [SchemaMigration] {
        let applied = Set(applied)
        let known = Set(all.map(\.name))
        let unknown = applied.subtracting(known).sorted()
        if !unknown.isEmpty { throw newer(database: database, unknown: unknown) }
        return all.filter { !applied.contains($0.name) }
    }

    /// The refusal of a database a newer clipflow upgraded.
    static func newer(database: String, unknown: [String]) -> ClipFlowError {
        let names = unknown.map { "'\($0)'" }.joined(separator: ", ")
        return .incompatible(
            "\(database): upgraded by a newer clipflow: its schema has the \(unknown.count == 1 ? "migration" : "migrations") \(names), "
                + "which this clipflow does not know (its last is '\(all.last!.name)'); run that clipflow or a newer one")
    }
}
