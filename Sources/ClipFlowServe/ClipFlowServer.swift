import ClipFlowCore
import ClipFlowUpload
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTPTypes
import ServiceLifecycle

/// How `clipflow serve` runs.
public struct ServeOptions: Sendable {
    /// Where the database, the uploads and the token secret live (made when missing; only this
    /// user may enter it: 0700).
    public var data: URL
    public var host: String = "127.0.0.1"
    /// 0: any free port (the one taken is reported by `listening`).
    public var port: Int = 8080
    /// The management API's bearer key (`CLIPFLOW_API_KEY`); required to listen beyond loopback.
    public var apiKey: String?
    public var tus = TUSLimits()
    /// Seconds between sweeps of expired unfinished uploads.
    public var sweepInterval: Double = 60
    /// Videos processed at once.
    public var workers: Int = 1
    /// `sqlite` (a file in the data folder; one server) or `postgres://USER[:PASSWORD]@HOST[:PORT]/DB`
    /// (several servers sharing the database and the data folder); without a password, it is
    /// found in `environment` as libpq finds it (`PostgresLogin`).
    public var database = "sqlite"
    /// Where `database` came from, as messages name it: `--database` (the command line: a password
    /// there draws a warning) or `CLIPFLOW_DATABASE_URL`.
    public var databaseSource = "--database"
    /// Seconds without a heartbeat after which another server takes over a job (PostgreSQL).
    public var jobLease: Double = 60
    /// Seconds without a new fragment after which a recording its recorder did not end ends
    /// (`LiveRecordings`).
    public var recordingTimeout: Double = 120
    /// Connections served at once (1 to `maxConnectionsBound`); more wait in the listen queue (and
    /// are refused by the system once it is full) until one closes.
    public var maxConnections: Int = 2048
    /// The most connections a server may be told to serve at once.
    public static let maxConnectionsBound = 1 << 20
    /// What a processing job may decode and use.
    public var processing = ProcessingLimits()
    /// How the log lines on stderr are written (the start line, each request, each job change).
    public var logFormat = ServeLogFormat.text
    /// What this server does (`all` unless several servers share a PostgreSQL database).
    public var role = ServeRole.all
    /// Where uploads and media are kept: nil, the data folder; `s3://BUCKET[/PREFIX]`, a bucket
    /// (endpoint and credentials from `environment`, as the AWS tools take them), so that
    /// servers share no disk.
    public var storage: String?
    /// Where `storage`'s endpoint and credentials, and the database's password, are read.
    public var environment: [String: String] = ProcessInfo.processInfo.environment
    /// A shell command printing `storage`'s credentials as JSON, run at start and when the bucket
    /// refuses them as expired (nil: the keys in `environment`).
    public var storageCredentialsCommand: String?
    /// Who is told of each video's events (`WebhookService`).
    public var webhooks = WebhookOptions()

    public init(data: URL) { self.data = data }

    var hasAPIKey: Bool { !(apiKey ?? "").isEmpty }

    /// Why these options cannot run, before any name is resolved (nil: they can).
    public var problem: String? {
        if !(0...65535).contains(port) { return "--listen: port \(port) is out of range" }
        if !(1...Self.maxConnectionsBound).contains(maxConnections) {
            return "--max-connections: expected 1 to \(Self.maxConnectionsBound), got \(maxConnections)"
        }
        if role != .all, database == "sqlite" {
            return "--role \(role.rawValue): needs --database postgres://… (API servers and workers find each other's work there; sqlite is one server's)"
        }
        if let storage, S3Location(url: storage) == nil { return "--storage \(storage): expected s3://BUCKET or s3://BUCKET/PREFIX" }
        return nil
    }

    /// The address to bind: `host` resolved once (the first address, as the server binds it);
    /// without an API key it must be a loopback address (127.0.0.0/8, ::1), whatever the name.
    func listenAddress() throws -> SocketAddress {
        let address: SocketAddress
        do { address = try SocketAddress.makeAddressResolvingHost(host, port: port) } catch {
            throw ClipFlowError.badInput("--listen \(host): cannot resolve it (\(error))")
        }
        guard let ip = address.ipAddress else { throw ClipFlowError.badInput("--listen \(host): not an IP address") }
        if !hasAPIKey, !Self.isLoopbackAddress(ip) {
            throw ClipFlowError.badInput("--listen \(host): it resolves to \(ip); listening beyond loopback needs an API key (set CLIPFLOW_API_KEY)")
        }
        return address
    }

    /// Whether a numeric address (as `SocketAddress.ipAddress` writes it) is in 127.0.0.0/8, is
    /// ::1, or is an IPv4-mapped 127.0.0.0/8.
    static func isLoopbackAddress(_ ip: String) -> Bool {
        ip == "::1" || ip.hasPrefix("127.") || ip.hasPrefix("::ffff:127.")
    }

    /// `host` as a URL writes it (an IPv6 address in brackets).
    var urlHost: String { host.contains(":") ? "[\(host)]" : host }

    /// `--listen` as given: `HOST:PORT`.
    var listenText: String { "\(urlHost):\(port)" }

    /// Whether a host name is loopback without resolving it (`Loopback.isName`).
    static func isLoopback(_ host: String) -> Bool { Loopback.isName(host) }
}

/// What one `clipflow serve` does. Servers of every role share one PostgreSQL database and one
/// data folder; API servers and workers scale apart.
public enum ServeRole: String, Sendable, CaseIterable {
    /// Uploads, the hosting API, media and processing: one server does everything.
    case all
    /// Uploads, the hosting API and media; the jobs it queues are processed by workers.
    case api
    /// Processing only; it answers `/healthz` and `/metrics` and nothing else.
    case worker

    var takesUploads: Bool { self != .worker }
    var processes: Bool { self != .api }
}

/// The clipflow server: TUS uploads under `/files` on Hummingbird, state in SQLite (GRDB) in the
/// data folder. `run` serves until SIGINT/SIGTERM, then stops accepting, lets requests in flight
/// finish (a PATCH records what it received) and returns. What it tells its operator goes to
/// stderr as `ServeLog` lines; `/healthz` and `/metrics` answer monitoring.
public enum ClipFlowServer {
    /// The framework's own log: warnings and errors only (requests are logged by `RequestLog`,
    /// which writes no URL of an upload, no query and no header: they may carry tokens).
    static var logger: Logger {
        var l = Logger(label: "clipflow.serve")
        l.logLevel = .warning
        return l
    }

    /// Serves until a signal; once the server accepts connections it writes its start line and
    /// `listening` gets the port. An address it cannot listen on, or a bucket it cannot use, is an
    /// error before the data folder is made. `alongside`: the program's own services (a tracer's
    /// exporter), started first and shut down last, so they see everything the server does.
    public static func run(
        _ options: ServeOptions, alongside: [any Service] = [], listening: @escaping @Sendable (Int) -> Void = { _ in }
    ) async throws {
        if let p = options.problem { throw ClipFlowError.badInput(p) }
        let address = try options.listenAddress()
        try Self.checkCanListen(on: address, options.listenText)
        let bucket = try options.storage.map {
            try ServeBucket(url: $0, environment: options.environment, credentialsCommand: options.storageCredentialsCommand)
        }
        try await bucket?.check()
        let webhookEndpoints = try options.webhooks.checked()
        if let secret = options.webhooks.secret { Secrets.shared.register(secret) }
        try Self.makePrivateFolder(options.data)
        let log = ServeLog(format: options.logFormat)
        let metrics = ServeMetrics(storage: bucket?.store.traffic)
        let database: any ServeStore
        var lock: DataLock?
        var postgres: PostgresStore?
        defer { lock?.release() }
        if options.database == "sqlite" {
            lock = try DataLock(folder: options.data)
            database = try SQLiteStore(path: options.data.appendingPathComponent("clipflow.sqlite").path, timer: metrics.database)
        } else {
            let store = try PostgresStore(
                login: PostgresLogin(url: options.database, source: options.databaseSource, environment: options.environment), timer: metrics.database)
            for warning in store.login.warnings { log.warning(warning) }
            postgres = store
            database = store
        }
        // Services, shut down in the reverse of this order on SIGINT/SIGTERM: the server (it
        // stops accepting and finishes the requests in flight), the sweeper, the processing (its
        // jobs go back to the queue), then the database's connections.
        var services = alongside
        if let postgres { services.append(postgres.client) }
        services.append(
            ClosureService { [postgres] in
                try await serve(
                    options, address: address, bucket: bucket, database: database, postgres: postgres, webhooks: webhookEndpoints, log: log,
                    metrics: metrics, listening: listening)
            })
        let group = ServiceGroup(configuration: .init(services: services, gracefulShutdownSignals: [.sigterm, .sigint], logger: Self.logger))
        do { try await group.run() } catch let error as IOError where [EADDRINUSE, EACCES, EADDRNOTAVAIL].contains(error.errnoCode) {
            // Taken between the check and the server's own bind.
            throw ClipFlowError.badInput(listenProblem(options.listenText, errno: error.errnoCode))
        }
    }

    /// Brings the schema up to date, then runs the HTTP server with the sweeper of expired uploads
    /// and the processing (each by role) as services of the application, until a graceful
    /// shutdown; the database's connections run already (a service before this one).
    private static func serve(
        _ options: ServeOptions, address: SocketAddress, bucket: ServeBucket?, database: any ServeStore, postgres: PostgresStore?,
        webhooks: [WebhookEndpoint], log: ServeLog, metrics: ServeMetrics, listening: @escaping @Sendable (Int) -> Void
    ) async throws {
        try await postgres?.migrate()
        Self.raiseOpenFileLimit(toServe: options.maxConnections)
        let files: any UploadStorage, media: any MediaStorage
        if let bucket {
            files = BucketUploads(bucket: bucket, database: database)
            media = try BucketMedia(bucket: bucket, scratch: options.data.appendingPathComponent("scratch"))
        } else {
            files = try UploadFiles(folder: options.data.appendingPathComponent("uploads"))
            media = try LocalMedia(folder: options.data.appendingPathComponent("media"))
        }
        let secret = try Tokens.secret(in: options.data)
        let tokens = Tokens(secret: try await postgres?.tokenSecret(seed: secret) ?? secret, apiKey: options.apiKey)
        let processor = Processor(
            database: database, uploads: files, media: media, data: options.data, workers: options.workers, limits: options.processing,
            lease: options.jobLease, alone: postgres == nil, observer: ProcessingReport(log: log, metrics: metrics))
        let recordings = LiveRecordings(database: database, processor: processor, uploads: files, timeout: options.recordingTimeout)
        let api = HostingAPI(
            database: database, tokens: tokens, processor: processor, uploads: files, recordings: recordings, viewers: metrics.viewers)
        let tus = TUSServer(
            database: database, files: files, limits: options.tus, admit: api.admit,
            completed: { upload in
                metrics.uploadCompleted()
                await api.completed(upload)
            }, abandoned: api.abandoned)
        let router = Router(context: ServeRequestContext.self)
        router.middlewares.add(RequestLog(log: log, metrics: metrics, uploadPrefixes: Self.uploadPrefixes))
        router.middlewares.add(RequestGuard(checksHost: !options.hasAPIKey, listenName: options.host))
        router.middlewares.add(ResponseCompression())
        if options.role.takesUploads {
            try await api.reconcile()
            router.middlewares.add(MediaAccess(tokens: tokens, access: api.access, media: media))
            if let bucket {
                router.middlewares.add(BucketMediaFiles(bucket: bucket))
            } else {
                router.middlewares.add(MediaFiles(folder: options.data.appendingPathComponent("media")))
            }
            tus.addRoutes(to: router)
            api.addRoutes(to: router)
            ViewerBeacons(database: database, tokens: tokens, metrics: metrics.viewers).addRoutes(to: router)
        }
        OperatorEndpoints(database: database, metrics: metrics).addRoutes(to: router)
        let webhookService =
            webhooks.isEmpty
            ? nil
            : WebhookService(
                store: database, endpoints: webhooks, secret: Array((options.webhooks.secret ?? "").utf8), allowPrivate: options.webhooks.allowPrivate,
                log: log, metrics: metrics, scrub: processor.dataPaths.scrub)
        try await webhookService?.start()
        let databaseName = postgres?.display ?? "sqlite"
        let (serverStarted, started) = AsyncStream<Void>.makeStream()
        var app = Application(
            router: router, server: .http1(configuration: Self.http1),
            configuration: .init(
                address: .hostname(address.ipAddress ?? options.host, port: options.port), serverName: "clipflow",
                availableConnectionsDelegate: .maximum(options.maxConnections, logger: Self.logger)),
            onServerRunning: { channel in
                let port = channel.localAddress?.port ?? options.port
                log.listening(
                    url: "http://\(options.urlHost):\(port)", data: options.data.path, storage: bucket?.display, database: databaseName, role: options.role,
                    workers: options.role.processes ? options.workers : 0)
                listening(port)
                started.finish()
            }, logger: Self.logger)
        // The application shuts its services down after the server, in the reverse of this order.
        if options.role.processes {
            app.addServices(ProcessingService(processor: processor, database: database, serverStarted: serverStarted))
            if let postgres { app.addServices(JobNotifications(client: postgres.client, wake: processor.wake)) }
        }
        if let webhookService { app.addServices(webhookService) }
        if options.role.takesUploads {
            app.addServices(UploadSweeper(tus: tus, interval: options.sweepInterval))
            if recordings.unsupported == nil { app.addServices(LiveRecordingService(recordings: recordings)) }
        }
        try await app.run()
    }
}

extension ClipFlowServer {
    /// Where TUS uploads are served: the URL below each is an upload's capability.
    static let uploadPrefixes = ["/files", "/upload"]

    /// Throws, naming `--listen` and the reason, when `address` cannot be listened on now (taken
    /// by another server, a privileged port, an address of no interface here). Port 0 is always
    /// free. The check binds a socket as the server will (`SO_REUSEADDR`) and closes it.
    static func checkCanListen(on address: SocketAddress, _ listenText: String) throws {
        guard address.port != 0 else { return }
        let fd = socket(Int32(address.protocol.rawValue), Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var on: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size))
        let bound = address.withSockAddr { pointer, size in bind(fd, pointer, socklen_t(size)) }
        if bound != 0 { throw ClipFlowError.badInput(listenProblem(listenText, errno: errno)) }
    }

    /// The message for a `--listen` address the system refused with `errno`.
    static func listenProblem(_ listen: String, errno: Int32) -> String {
        switch errno {
        case EADDRINUSE: return "--listen \(listen): the address is already in use (another server listens there)"
        case EACCES: return "--listen \(listen): permission denied (ports below 1024 need privileges)"
        case EADDRNOTAVAIL: return "--listen \(listen): no network interface of this machine has that address"
        default: return "--listen \(listen): cannot listen there: \(String(cString: strerror(errno)))"
        }
    }

    /// Headers are limited (32 KiB in all, 100 fields; a request beyond gets no answer but a closed
    /// connection), idle connections closed after 2 minutes, and `Expect: 100-continue` answered.
    static var http1: HTTP1Channel.Configuration {
        HTTP1Channel.Configuration(
            additionalChannelHandlers: [ExpectContinue()], idleTimeout: .seconds(120),
            httpDecoderConfiguration: .init(maxHeaderFieldSize: 16 << 10, maxHeaderListSize: 32 << 10, maxHeaderFieldCount: 100))
    }

    /// Makes `folder` (and its parents) if missing, and lets only this user enter it (0700,
    /// tightened when it was looser): it holds the token secret, the database and the uploads.
    static func makePrivateFolder(_ folder: URL) throws {
        do { try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700]) } catch {
            throw ClipFlowError.output("--data '\(folder.path)': cannot create it: \(error.localizedDescription)")
        }
        var st = stat()
        guard stat(folder.path, &st) == 0 else { throw ClipFlowError.output("--data '\(folder.path)': \(String(cString: strerror(errno)))") }
        if st.st_mode & 0o077 != 0, chmod(folder.path, 0o700) != 0 {
            throw ClipFlowError.output("--data '\(folder.path)': cannot make it private (chmod 0700): \(String(cString: strerror(errno)))")
        }
    }

    /// Raises the soft limit of open files (up to the hard limit) to what `connections` may need:
    /// a socket each, and a file each for what they upload or download.
    static func raiseOpenFileLimit(toServe connections: Int) {
        var limit = rlimit()
        guard getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit) == 0 else { return }
        let wanted = rlim_t(2 * connections + 256)
        guard limit.rlim_cur < wanted else { return }
        limit.rlim_cur = min(wanted, limit.rlim_max)
        _ = setrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
    }
}

/// Answers `Expect: 100-continue` with `100 Continue` as soon as the head arrives, so a client
/// that waits for it (curl does, for bodies above 1 MiB, up to a second) sends the body at once.
final class ExpectContinue: ChannelInboundHandler, RemovableChannelHandler, Sendable {
    typealias InboundIn = HTTPRequestPart
    typealias InboundOut = HTTPRequestPart
    typealias OutboundOut = HTTPResponsePart

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = unwrapInboundIn(data), head.headerFields[.expect]?.lowercased() == "100-continue" {
            context.writeAndFlush(wrapOutboundOut(.head(HTTPResponse(status: .continue))), promise: nil)
        }
        context.fireChannelRead(data)
    }
}

/// One server per data folder: an exclusive lock on `DATA/lock`, held while it runs (the kernel
/// drops it if the process dies, so a crash leaves nothing to clean).
final class DataLock: Sendable {
    private let fd: Int32

    init(folder: URL) throws {
        let path = folder.appendingPathComponent("lock").path
        fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw ClipFlowError.output("cannot open '\(path)': \(String(cString: strerror(errno)))") }
        guard flock(fd, LOCK_EX | LOCK_NB) == 0 else {
            close(fd)
            throw ClipFlowError.badInput("--data '\(folder.path)': another clipflow serve is using it")
        }
    }

    func release() { close(fd) }
}
