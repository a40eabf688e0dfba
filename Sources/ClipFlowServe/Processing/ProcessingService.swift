import ServiceLifecycle

/// The processor as a service of the server's application: it starts taking jobs once the server
/// listens (its start line is out first), and at a graceful shutdown stops its workers at once
/// (their worker processes get SIGTERM) and hands the jobs they had back to the queue, where
/// another server, or this one when it starts again, takes them.
struct ProcessingService: Service {
    let processor: Processor
    let database: any ServeStore
    /// Ends when the server listens.
    let serverStarted: AsyncStream<Void>

    func run() async {
        for await _ in serverStarted {}
        guard !Task.isCancelled, !Task.isShuttingDownGracefully else { return }
        await cancelWhenGracefulShutdown { await processor.run() }
        try? await database.releaseJobs(owner: processor.owner)
    }
}
