import ClipFlowCore
import Foundation
import Logging
import PostgresNIO

/// The store of several servers sharing one PostgreSQL database (and one data folder): the same
/// rows as `SQLiteStore`, with what sharing needs: a job is taken with `FOR UPDATE SKIP LOCKED`
/// (never by two servers), kept by heartbeats, and queued again by any server once its heartbeat
/// stops; an upload's offset moves only by compare-and-set. The schema is `SchemaMigrations`
/// (the missing ones applied under an advisory lock, so servers starting together do not race).
/// `run()` must run while the store is used. Thread-safe; `Sendable`.
final class PostgresStore: ServeStore {
    let client: PostgresClient
    /// `postgres://user@host:port/db`: the URL without its password, for messages.
    let display: String
    /// How it logs in (the password is never written anywhere from here).
    let login: PostgresLogin
    let logger: Logger
    /// Times every statement and transaction below (`query`, `transaction`).
    let timer: DatabaseTimer
    private let connection: PostgresConnection.Configuration

    init(login: PostgresLogin, timer: DatabaseTimer = .none) throws {
        self.timer = timer
        self.login = login
        display = login.display
        let plain = login.sslmode == "disable" || (login.sslmode == nil && ServeOptions.isLoopback(login.host))
        let tls: PostgresClient.Configuration.TLS = plain ? .disable : .prefer(.makeClientConfiguration())
        let database = login.database.isEmpty ? nil : login.database
        var config = PostgresClient.Configuration(
            host: login.host, port: login.port, username: login.user, password: login.password, database: database, tls: tls)
        config.options.maximumConnections = 8
        let single: PostgresConnection.Configuration.TLS
        do { single = plain ? .disable : .prefer(try NIOSSLContext(configuration: .makeClientConfiguration())) } catch {
            throw ClipFlowError.failure("\(login.source) \(login.display): cannot set up TLS (\(error))")
        }
        connection = PostgresConnection.Configuration(
            host: login.host, port: login.port, username: login.user, password: login.password, database: database, tls: single)
        var log = Logger(label: "clipflow.serve.postgres")
        log.logLevel = .error
        logger = log
        client = PostgresClient(configuration: config, backgroundLogger: log)
    }

    func run() async { await client.run() }

    /// One statement outside a transaction, timed until the database answers (its first rows;
    /// a read when it is a SELECT).
    @discardableResult
    func query(_ q: PostgresQuery) async throws -> PostgresRowSequence {
        q.sql.hasPrefix("SELECT")
            ? try await timer.read { try await client.query(q, logger: logger) } : try await timer.write { try await client.query(q, logger: logger) }
    }

    /// A transaction, timed as a write.
    func transaction<T: Sendable>(_ body: nonisolated(nonsending) (PostgresConnection) async throws -> sending T) async throws -> T {
        try await timer.write { try await client.withTransaction(logger: logger, body) }
    }

    /// Logs in, then applies the schema's missing migrations (`applyMigrations`). A login the server
    /// refuses (a wrong password, an unknown user or database) is a bad-input error at once: trying
    /// again cannot fix it. A server that does not answer is tried again until `seconds` have
    /// passed, then is an error (the client would otherwise keep trying to connect).
    func migrate(within seconds: Double = 15) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                try await self.logIn()
                try await self.applyMigrations()
            }
            group.addTask {
                try await Task.sleep(for: .seconds(seconds))
                throw ClipFlowError.output(
                    "\(self.login.source) \(self.display): no answer within \(Int(seconds)) s (is the server running, and the address right?)")
            }
            try await group.next()
            group.cancelAll()
        }
    }

    /// Logs in once on a connection of its own, trying again while the server does not answer;
    /// a refused login throws at once (`refusal`).
    private func logIn() async throws {
        while true {
            do {
                let c = try await PostgresConnection.connect(configuration: connection, id: 0, logger: logger)
                try? await c.close()
                return
            } catch {
                if let why = Self.refusal(error, user: login.user) { throw ClipFlowError.badInput("\(login.source) \(display): \(why)") }
                try await Task.sleep(for: .milliseconds(250))
            }
        }
    }

    /// Why the server refused the login, when it did so for a reason trying again cannot fix
    /// (SQLSTATE 28P01 invalid_password, 28000 invalid_authorization_specification, 3D000 no
    /// such database, or a password asked for and none given); nil for anything else.
    static func refusal(_ error: Error, user: String) -> String? {
        guard let e = error as? PSQLError else { return nil }
        if e.code == .authMechanismRequiresPassword {
            return "authentication failed for user \(user): the server asks for a password and none was given "
                + "(PGPASSWORD, a password file (PGPASSFILE) or \(PostgresLogin.urlVariable))"
        }
        switch e.serverInfo?[.sqlState] {
        case "28P01": return "authentication failed for user \(user)"
        case "28000": return "authentication failed for user \(user) (\(e.serverInfo?[.message] ?? "not allowed"))"
        case "3D000": return e.serverInfo?[.message] ?? "the database does not exist"
        default: return nil
        }
    }

    /// Applies the migrations of `SchemaMigrations` the database lacks, in order, in one
    /// transaction, recording them in `schema_migrations`; a database a newer clipflow upgraded is
    /// refused. The transaction first takes an advisory lock (the one every clipflow since the
    /// first has taken here), so of servers starting together one applies them and the others,
    /// waiting, then find them applied.
    private func applyMigrations() async throws {
        let database = "\(login.source) \(display)"
        do {
            try await transaction { db in
                try await db.query("SELECT pg_advisory_xact_lock(7741)", logger: logger)
                try await db.query(PostgresQuery(unsafeSQL: SchemaMigrations.recordTable), logger: logger)
                var applied: [String] = []
                for try await name in try await db.query("SELECT name FROM schema_migrations", logger: logger).decode(String.self) {
                    applied.append(name)
                }
                let now = Date().timeIntervalSince1970
                for migration in try SchemaMigrations.missing(applied: applied, database: database) {
                    for statement in migration.statements(.postgres) { try await db.query(PostgresQuery(unsafeSQL: statement), logger: logger) }
                    try await db.query("INSERT INTO schema_migrations (name, applied_at) VALUES (\(migration.name), \(now))", logger: logger)
                }
            }
        } catch {
            let failed = (error as? PostgresTransactionError).flatMap { $0.closureError ?? $0.beginError ?? $0.commitError } ?? error
            if let refusal = failed as? ClipFlowError { throw refusal }
            throw ClipFlowError.output("\(database): \(Self.reason(failed))")
        }
    }

    /// What went wrong, without the query (it may hold values) or the password.
    static func reason(_ error: Error) -> String {
        if let e = error as? PSQLError {
            return e.serverInfo?[.message] ?? "\(e.code)"
        }
        return "\(error)"
    }

    /// The token secret every server sharing the database signs with: the first server to ask
    /// stores `seed` (its data folder's secret, so tokens it issued before stay valid); the
    /// others get that one.
    func tokenSecret(seed: [UInt8]) async throws -> [UInt8] {
        let hex = seed.map { String(format: "%02x", $0) }.joined()
        let rows = try await query(
            """
            WITH new AS (INSERT INTO settings (name, value) VALUES ('token-secret', \(hex)) ON CONFLICT (name) DO NOTHING RETURNING value)
            SELECT value FROM new UNION ALL SELECT value FROM settings WHERE name = 'token-secret'
            """)
        for try await stored in rows.decode(String.self) {
            let digits = Array(stored.utf8)
            let bytes = stride(from: 0, to: digits.count - 1, by: 2).compactMap { i in UInt8(String(decoding: digits[i...i + 1], as: UTF8.self), radix: 16) }
            guard bytes.count == 32 else { throw ClipFlowError.output("--database \(display): the stored token secret is damaged (expected 32 bytes)") }
            return bytes
        }
        throw ClipFlowError.output("--database \(display): the token secret was not stored")
    }

    // MARK: uploads

    private static let uploadColumns =
        "id, length, received, metadata, created_at, expires_at, completed_at, video_id, multipart_upload, partial_part, trace"

    private func uploads(_ rows: PostgresRowSequence) async throws -> [UploadRow] {
        var out: [UploadRow] = []
        for try await (id, length, received, metadata, created, expires, completed, video, multipart, partial, trace) in rows.decode(
            (String, Int64, Int64, String, Double, Double, Double?, Int64?, String?, String?, String?).self)
        {
            out.append(
                UploadRow(
                    id: id, length: length, offset: received, metadata: metadata, createdAt: created, expiresAt: expires, completedAt: completed,
                    videoID: video, multipartUpload: multipart, partial: partial, trace: trace))
        }
        return out
    }

    func upload(_ id: String) async throws -> UploadRow? {
        try await uploads(query("SELECT \(unescaped: Self.uploadColumns) FROM uploads WHERE id = \(id)")).first
    }

    func insert(_ r: UploadRow, carrying newVideo: VideoRow?) async throws -> UploadRow {
        guard let v = newVideo else {
            try await query(
                """
                INSERT INTO uploads (\(unescaped: Self.uploadColumns))
                VALUES (\(r.id), \(r.length), \(r.offset), \(r.metadata), \(r.createdAt), \(r.expiresAt), \(r.completedAt), \(r.videoID),
                  \(r.multipartUpload), \(r.partial), \(r.trace))
                """)
            return r
        }
        // One statement, so one transaction: the video exists only if the upload does.
        let rows = try await query(
            """
            WITH v AS (
              INSERT INTO videos (name, description, client_id, status, mode, error, duration, upload_id, published, renditions, created_at)
              VALUES (\(v.name), \(v.description), \(v.clientID), \(v.status.rawValue), \(v.mode.rawValue), \(v.error), \(v.duration),
                \(v.uploadID), \(v.published), \(v.renditions), \(v.createdAt))
              RETURNING id)
            INSERT INTO uploads (\(unescaped: Self.uploadColumns))
            SELECT \(r.id), \(r.length), \(r.offset), \(r.metadata), \(r.createdAt), \(r.expiresAt), \(r.completedAt), v.id, \(r.multipartUpload),
              \(r.partial), \(r.trace) FROM v
            RETURNING \(unescaped: Self.uploadColumns)
            """)
        guard let stored = try await uploads(rows).first else { throw ClipFlowError.output("--database \(display): the upload was not stored") }
        return stored
    }

    func setMultipartUpload(_ id: String, to uploadID: String) async throws -> String? {
        let rows = try await query(
            "UPDATE uploads SET multipart_upload = COALESCE(multipart_upload, \(uploadID)) WHERE id = \(id) RETURNING multipart_upload")
        for try await stored in rows.decode(String.self) { return stored }
        return nil
    }

    func setOffset(_ id: String, from: UploadMark, to: UploadMark, completedAt: Double?) async throws -> Bool {
        let rows = try await query(
            """
            UPDATE uploads SET received = \(to.offset), partial_part = \(to.partial), completed_at = \(completedAt)
            WHERE id = \(id) AND received = \(from.offset) AND partial_part IS NOT DISTINCT FROM \(from.partial) RETURNING id
            """)
        return try await rows.collect().count == 1
    }

    func delete(_ id: String) async throws {
        try await query("DELETE FROM uploads WHERE id = \(id)")
    }

    func expired(before now: Double) async throws -> [UploadRow] {
        try await uploads(
            query(
                "SELECT \(unescaped: Self.uploadColumns) FROM uploads WHERE completed_at IS NULL AND expires_at < \(now)"))
    }

    func completedUploads() async throws -> [UploadRow] {
        try await uploads(query("SELECT \(unescaped: Self.uploadColumns) FROM uploads WHERE completed_at IS NOT NULL"))
    }

    func uploads(ofVideo video: Int64) async throws -> [UploadRow] {
        try await uploads(query("SELECT \(unescaped: Self.uploadColumns) FROM uploads WHERE video_id = \(video)"))
    }

    func unclaimedUploads() async throws -> [UploadRow] {
        try await uploads(
            query(
                """
                SELECT \(unescaped: Self.uploadColumns) FROM uploads u WHERE completed_at IS NOT NULL AND video_id IS NOT NULL
                  AND NOT EXISTS (SELECT 1 FROM videos v WHERE v.id = u.video_id AND \(unescaped: VideoConditions.takes(video: "v", upload: "u")))
                """))
    }

    /// disk_full (53100), or any of class 53 (insufficient resources) but too many connections.
    func isFull(_ error: Error) -> Bool {
        guard let code = (error as? PSQLError)?.serverInfo?[.sqlState] else { return false }
        return code.hasPrefix("53") && code != "53300"
    }

    // MARK: videos

    private static let videoColumns =
        "id, name, description, client_id, status, mode, error, duration, upload_id, published, renditions, created_at, fragments, access"

    private func videos(_ rows: PostgresRowSequence) async throws -> [VideoRow] {
        var out: [VideoRow] = []
        for try await (id, name, description, client, status, mode, error, duration, upload, published, renditions, created, fragments, access)
            in rows
            .decode((Int64, String, String?, Int64, String, String, String?, Double?, String?, String, String, Double, Int64?, String).self)
        {
            out.append(
                VideoRow(
                    id: id, name: name, description: description, clientID: client, status: VideoRow.Status(rawValue: status) ?? .error,
                    mode: VideoRow.Mode(rawValue: mode) ?? .ladder, error: error, duration: duration, uploadID: upload, published: published,
                    renditions: renditions, createdAt: created, fragments: fragments, access: VideoRow.Access(rawValue: access) ?? .signed))
        }
        return out
    }

    func insert(_ v: VideoRow) async throws -> VideoRow {
        try await videos(
            query(
                """
                INSERT INTO videos (name, description, client_id, status, mode, error, duration, upload_id, published, renditions, created_at, fragments,
                  access)
                VALUES (\(v.name), \(v.description), \(v.clientID), \(v.status.rawValue), \(v.mode.rawValue), \(v.error), \(v.duration),
                  \(v.uploadID), \(v.published), \(v.renditions), \(v.createdAt), \(v.fragments), \(v.access.rawValue))
                RETURNING \(unescaped: Self.videoColumns)
                """)
        ).first!
    }

    func video(_ id: Int64) async throws -> VideoRow? {
        try await videos(query("SELECT \(unescaped: Self.videoColumns) FROM videos WHERE id = \(id)")).first
    }

    func videos(page: Int, perPage: Int) async throws -> ([VideoRow], Int) {
        var total = 0
        for try await n in try await query("SELECT count(*) FROM videos").decode(Int64.self) { total = Int(n) }
        let offset = (page - 1) * perPage
        let rows = try await videos(
            query("SELECT \(unescaped: Self.videoColumns) FROM videos ORDER BY id DESC LIMIT \(perPage) OFFSET \(offset)"))
        return (rows, total)
    }

    func playable() async throws -> [VideoRow] {
        try await videos(
            query(
                "SELECT \(unescaped: Self.videoColumns) FROM videos WHERE \(unescaped: VideoConditions.playable) ORDER BY id DESC"))
    }

    func recordings() async throws -> [VideoRow] {
        try await videos(
            query(
                "SELECT \(unescaped: Self.videoColumns) FROM videos WHERE \(unescaped: VideoConditions.unmergedRecording) ORDER BY id"))
    }

    func endRecording(_ id: Int64, fragments: Int64, replacing: Bool) async throws -> Bool {
        let rows = try await query(
            """
            UPDATE videos SET fragments = \(fragments) WHERE id = \(id) AND status = 'recording' \(unescaped: replacing ? "" : "AND fragments IS NULL")
            RETURNING id
            """
        ).collect()
        return rows.count == 1
    }

    func publishLive(_ id: Int64, status: VideoRow.Status, duration: Double) async throws {
        try await query(
            "UPDATE videos SET published = 'live', status = \(status.rawValue), duration = \(duration) WHERE id = \(id)")
    }

    func update(_ v: VideoRow) async throws {
        try await query(
            """
            UPDATE videos SET status = \(v.status.rawValue), mode = \(v.mode.rawValue), error = \(v.error), duration = \(v.duration),
              upload_id = \(v.uploadID), published = \(v.published), renditions = \(v.renditions), fragments = \(v.fragments)
            WHERE id = \(v.id!)
            """)
    }

    func edit(_ id: Int64, name: String?, access: VideoRow.Access?) async throws -> VideoRow? {
        try await videos(
            query(
                """
                UPDATE videos SET name = COALESCE(\(name), name), access = COALESCE(\(access?.rawValue), access) WHERE id = \(id)
                RETURNING \(unescaped: Self.videoColumns)
                """)
        ).first
    }

    func deleteVideo(_ id: Int64) async throws {
        try await query("DELETE FROM videos WHERE id = \(id)")
    }

    func uploaded(video id: Int64, upload: String, trace: String?) async throws {
        let now = Date().timeIntervalSince1970
        try await transaction { db in
            let bound = try await db.query(
                """
                UPDATE videos SET upload_id = \(upload), status = \(unescaped: VideoConditions.boundStatus)
                WHERE id = \(id) AND \(unescaped: VideoConditions.bindable) RETURNING id
                """, logger: logger
            ).collect()
            if bound.count == 1 {
                try await db.query(
                    "INSERT INTO jobs (video_id, state, attempts, queued_at, trace) VALUES (\(id), 'queued', 0, \(now), \(trace))", logger: logger)
            }
        }
    }

    // MARK: jobs

    func takeJob(owner: String, now: Double, steps: Set<JobRow.Step>, perClient: Int) async throws -> JobRow? {
        let names = steps.map(\.rawValue)
        let rows = try await query(
            """
            WITH taken AS (
              UPDATE jobs SET state = 'running', attempts = attempts + 1, owner = \(owner), heartbeat = \(now)
              WHERE id = (SELECT j.id FROM jobs j JOIN videos v ON v.id = j.video_id
                WHERE j.state = 'queued' AND j.step = ANY(\(names)) AND (\(perClient) = 0 OR \(unescaped: FairTurns.running) < \(perClient))
                ORDER BY \(unescaped: FairTurns.order) LIMIT 1 FOR UPDATE OF j SKIP LOCKED)
              RETURNING id, video_id, attempts, queued_at, step, plan, probe, trace),
            turn AS (
              INSERT INTO client_turns (client_id, last_started) SELECT v.client_id, \(now) FROM taken JOIN videos v ON v.id = taken.video_id
              \(unescaped: FairTurns.replacingTurn))
            SELECT id, video_id, attempts, queued_at, step, plan, probe, trace FROM taken
            """)
        for try await (id, video, attempts, queued, step, plan, probe, trace) in rows.decode(
            (Int64, Int64, Int32, Double, String, String?, String?, String?).self)
        {
            return JobRow(
                id: id, videoID: video, state: .running, attempts: Int(attempts), queuedAt: queued, owner: owner, heartbeat: now,
                step: JobRow.Step(rawValue: step) ?? .playable, plan: plan, probe: probe, trace: trace)
        }
        return nil
    }

    func recordProbe(_ id: Int64, probe: String) async throws {
        try await query("UPDATE jobs SET probe = \(probe) WHERE id = \(id)")
    }

    func queueLadder(_ id: Int64, plan: String) async throws {
        try await query(
            "UPDATE jobs SET state = 'queued', step = 'ladder', plan = \(plan), attempts = 0, queued_at = \(Date().timeIntervalSince1970) WHERE id = \(id)")
    }

    func heartbeat(job: Int64, now: Double, progress: Double) async throws {
        try await query(
            """
            WITH j AS (UPDATE jobs SET heartbeat = \(now) WHERE id = \(job) AND state = 'running' RETURNING video_id)
            UPDATE videos SET progress = GREATEST(progress, \(progress)) WHERE id IN (SELECT video_id FROM j)
            """)
    }

    func progress(ofVideo video: Int64) async throws -> Double {
        for try await p in try await query("SELECT progress FROM videos WHERE id = \(video)").decode(Double.self) { return p }
        return 0
    }

    func finishJob(_ id: Int64, failed: Bool) async throws {
        try await query("UPDATE jobs SET state = \(failed ? "failed" : "done") WHERE id = \(id)")
    }

    func retryJob(_ id: Int64, counted: Bool) async throws {
        try await query("UPDATE jobs SET state = 'queued', attempts = attempts - \(counted ? 0 : 1) WHERE id = \(id)")
    }

    func requeueStale(before: Double) async throws -> Int {
        let cutoff = before.isFinite ? before : Double.greatestFiniteMagnitude
        return try await query(
            "UPDATE jobs SET state = 'queued' WHERE state = 'running' AND (heartbeat IS NULL OR heartbeat < \(cutoff)) RETURNING id"
        ).collect().count
    }

    func releaseJobs(owner: String) async throws {
        try await query("UPDATE jobs SET state = 'queued', attempts = attempts - 1 WHERE state = 'running' AND owner = \(owner)")
    }

    func jobStats() async throws -> JobStats {
        var stats = JobStats()
        let rows = try await query("SELECT state, step, COUNT(*), MIN(queued_at) FROM jobs GROUP BY state, step")
        for try await (state, step, n, oldest) in rows.decode((String, String, Int64, Double).self) {
            guard let s = JobRow.State(rawValue: state) else { continue }
            stats.byState[s, default: 0] += Int(n)
            if s == .queued, let step = JobRow.Step(rawValue: step) { stats.queued[step] = .init(count: Int(n), oldest: oldest) }
        }
        return stats
    }
}
