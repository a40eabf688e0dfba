import ServiceLifecycle

/// Removes expired unfinished uploads every `interval` seconds, as a service of the server's
/// application, until a graceful shutdown.
struct UploadSweeper: Service {
    let tus: TUSServer
    let interval: Double

    func run() async {
        while !Task.isCancelled, !Task.isShuttingDownGracefully {
            _ = try? await tus.sweep()
            try? await cancelWhenGracefulShutdown { try await Task.sleep(for: .seconds(interval)) }
        }
    }
}
