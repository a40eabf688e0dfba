import ClipFlowCore
import Logging
import OTel
import ServiceLifecycle

/// Traces of the commands that make spans (`serve`, `batch`; swift-distributed-tracing), exported
/// by swift-otel over OTLP/HTTP when the standard OpenTelemetry variables ask for it
/// (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; the other `OTEL_*`
/// variables apply as the specification says). Traces only: logs stay the command's, metrics
/// `/metrics`'. Without those variables nothing is bootstrapped, and every span is the no-op
/// tracer's.
enum Telemetry {
    /// Seconds `background`'s stop waits for the exporter to send what it holds.
    static let flushLimit: Double = 30

    /// The exporting service to run beside the command's work, having bootstrapped the tracer;
    /// nil when tracing is not asked for.
    static func tracing(_ environment: [String: String]) throws -> (any Service)? {
        let asked = ["OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"].contains { !(environment[$0] ?? "").isEmpty }
        guard asked else { return nil }
        var config = OTel.Configuration.default
        config.serviceName = "clipflow"
        config.logs.enabled = false
        config.metrics.enabled = false
        config.traces.otlpExporter.protocol = .httpProtobuf
        // The library's own diagnostics: its failures only (unless OTEL_LOG_LEVEL says otherwise),
        // as plain lines on stderr.
        config.diagnosticLogLevel = .error
        return try OTel.bootstrap(configuration: config)
    }

    /// Runs `service` in the background for a command that is not a service itself (`batch`);
    /// the closure returned stops it, sending what it still holds, and waits until it has (at most
    /// `flushLimit` seconds: a collector that does not answer does not hold the command).
    static func background(_ service: any Service) -> @Sendable () -> Void {
        var quiet = Logger(label: "clipflow.otel")
        quiet.logLevel = .error
        let group = ServiceGroup(configuration: .init(services: [service], logger: quiet))
        let done = Doorbell()
        Task {
            try? await group.run()
            done.ring()
        }
        return {
            Task { await group.triggerGracefulShutdown() }
            done.wait(after: 0, atMost: flushLimit)
        }
    }
}
