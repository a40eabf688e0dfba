/// The processing observer of a running server: each job event becomes a log line and feeds the
/// metrics (processing seconds, time to playable). Thread-safe (both are).
struct ProcessingReport: ProcessingObserver {
    let log: ServeLog
    let metrics: ServeMetrics

    func job(_ event: JobEvent) {
        log.job(event)
        metrics.job(event)
    }
}
