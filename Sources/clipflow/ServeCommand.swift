import ArgumentParser
import ClipFlowCore
import ClipFlowServe
import Foundation

struct Serve: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve uploads (TUS 1.0), the hosting API, processing into HLS, and the feed.",
        discussion: """
            TUS 1.0.0 under /files and /upload (as Gcore's clients use): creation, creation-with-upload, termination, checksum (sha1, \
            sha256), expiration. Offsets are durable: an upload resumes after a crash with nothing \
            lost or duplicated. State is kept in DATA/clipflow.sqlite (or PostgreSQL), bytes in \
            DATA/uploads and DATA/media (or a bucket: --storage s3://BUCKET/PREFIX). Listens \
            on loopback unless told otherwise; beyond loopback it needs CLIPFLOW_API_KEY. SIGINT or \
            SIGTERM: stop accepting, finish the requests in flight, exit. On stderr: a start line, then \
            one line per request (method, route, status, bytes, time; never a token) and per \
            processing job change. GET /healthz and GET /metrics (Prometheus) need no key.
            """
    )

    @Option(help: "The data folder (made when missing).")
    var data: String = "clipflow-data"

    @Option(help: "HOST:PORT to listen on (port 0: any free port).")
    var listen: String = "127.0.0.1:8080"

    @Option(name: .customLong("max-size"), help: "Largest upload in bytes (Tus-Max-Size).")
    var maxSize: Int64 = 16 << 30

    @Option(help: "Hours an unfinished upload is kept (Upload-Expires).")
    var expiration: Double = 24

    @Option(name: .customLong("sweep-every"), help: "Seconds between removals of expired unfinished uploads.")
    var sweepEvery: Double = 60

    @Option(help: "Videos processed into HLS ladders at once.")
    var workers: Int = 1

    @Option(
        help: """
            sqlite (a file in --data; one server) or postgres://USER@HOST[:PORT]/DB (several servers sharing it and --data); default: \
            CLIPFLOW_DATABASE_URL, else sqlite. The password from PGPASSWORD or a password file (PGPASSFILE, else ~/.pgpass, 0600), \
            never the command line, which every local user sees.
            """)
    var database: String?

    @Option(name: .customLong("job-lease"), help: "Seconds without a heartbeat before another server takes over a job (PostgreSQL).")
    var jobLease: Double = 60

    @Option(
        name: .customLong("recording-timeout"),
        help: "Seconds without a new fragment after which a recording that was not ended ends with the fragments it has (clipflow record --publish).")
    var recordingTimeout: Double = 120

    @Option(
        help: """
            all (uploads, the API, media and processing), api (uploads, the API and media; workers process) or worker (processing \
            only; /healthz and /metrics). api and worker need --database postgres://… shared with the others.
            """)
    var role: ServeRole = .all

    @Option(
        help: """
            Where uploads and ladders are kept: the data folder (default) or s3://BUCKET[/PREFIX], with the endpoint and keys \
            from AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and AWS_REGION (servers then \
            share no disk; workers use DATA/scratch).
            """)
    var storage: String?

    @Option(
        name: .customLong("credentials-command"),
        help: "For --storage: a shell command printing S3 credentials JSON, run at start and whenever the bucket refuses them as expired.")
    var credentialsCommand: String?

    @Option(
        name: .customLong("max-connections"),
        help: "Connections served at once; more wait until one closes (the system refuses them once its listen queue of 256 is full).")
    var maxConnections: Int = 2048

    @Option(name: .customLong("log-format"), help: "How lines on stderr are written: text (KEY=VALUE) or json (one object per line).")
    var logFormat: ServeLogFormat = .text

    @Option(
        name: .customLong("webhook"),
        help: """
            A URL told of each video's events (video.created, .viewable, .ready, .error, .deleted) by a signed POST, retried for three \
            days; repeat for more. Needs CLIPFLOW_WEBHOOK_SECRET (the signing key).
            """)
    var webhooks: [String] = []

    @Flag(
        name: .customLong("webhook-allow-private"),
        help: "Deliver webhooks to host names that resolve to loopback, private or link-local addresses (refused otherwise).")
    var webhookAllowPrivate = false

    @OptionGroup var processing: ServeProcessingOptions

    func validate() throws {
        guard Self.split(listen) != nil else { throw ValidationError("--listen: expected HOST:PORT, got '\(listen)'") }
        if maxSize <= 0 { throw ValidationError("--max-size must be positive") }
        if expiration <= 0 { throw ValidationError("--expiration must be positive") }
        if sweepEvery <= 0 { throw ValidationError("--sweep-every must be positive") }
        if !(1...16).contains(workers) { throw ValidationError("--workers must be 1 to 16") }
        if let database, database != "sqlite", !(database.hasPrefix("postgres://") || database.hasPrefix("postgresql://")) {
            throw ValidationError("--database: expected sqlite or postgres://USER@HOST[:PORT]/DB")
        }
        if jobLease < 1 { throw ValidationError("--job-lease must be at least 1 second") }
        if !(recordingTimeout >= 1 && recordingTimeout <= 86400) { throw ValidationError("--recording-timeout expects 1 to 86400 seconds") }
    }

    static func split(_ s: String) -> (String, Int)? {
        guard let colon = s.lastIndex(of: ":"), let port = Int(s[s.index(after: colon)...]) else { return nil }
        var host = String(s[..<colon])
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host.isEmpty ? nil : (host, port)
    }

    func run() async throws {
        var options = ServeOptions(data: URL(fileURLWithPath: data))
        (options.host, options.port) = Self.split(listen)!
        options.apiKey = ProcessInfo.processInfo.environment["CLIPFLOW_API_KEY"]
        options.tus.maxSize = maxSize
        options.tus.expiration = expiration * 3600
        options.sweepInterval = sweepEvery
        options.workers = workers
        // The whole URL, password and all, may come from the environment, which others cannot read.
        let fromEnvironment = database == nil ? ProcessInfo.processInfo.environment["CLIPFLOW_DATABASE_URL"].flatMap { $0.isEmpty ? nil : $0 } : nil
        options.database = database ?? fromEnvironment ?? "sqlite"
        options.databaseSource = fromEnvironment == nil ? "--database" : "CLIPFLOW_DATABASE_URL"
        options.jobLease = jobLease
        options.recordingTimeout = recordingTimeout
        options.maxConnections = maxConnections
        options.processing = processing.limits
        options.logFormat = logFormat
        options.role = role
        options.storage = storage
        options.storageCredentialsCommand = credentialsCommand
        options.webhooks.endpoints = webhooks
        options.webhooks.secret = ProcessInfo.processInfo.environment["CLIPFLOW_WEBHOOK_SECRET"]
        options.webhooks.allowPrivate = webhookAllowPrivate
        do { try await ClipFlowServer.run(options, alongside: try Telemetry.tracing(ProcessInfo.processInfo.environment).map { [$0] } ?? []) } catch {
            try ErrorReport.run { throw error }
        }
    }
}

extension ServeLogFormat: ExpressibleByArgument {}
extension ServeRole: ExpressibleByArgument {}
