import PostgresNIO
import ServiceLifecycle

/// Wakes this server's idle workers when any server sharing the PostgreSQL database queues a job:
/// it listens on `channel`, which the jobs table notifies whenever a job becomes queued (a
/// trigger of the schema). A connection lost is listened on again a second later; meanwhile the
/// workers' poll still finds the jobs. Runs as a service of the server's application.
struct JobNotifications: Service {
    /// The channel the schema's trigger notifies.
    static let channel = "clipflow_jobs"
    let client: PostgresClient
    let wake: @Sendable () -> Void

    func run() async {
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            try? await cancelWhenGracefulShutdown {
                try await client.withConnection { connection in
                    try await connection.listen(on: Self.channel) { notifications in
                        // A job queued before the listening began is looked for at once.
                        wake()
                        for try await _ in notifications { wake() }
                    }
                }
            }
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(1)) }
        }
    }
}
