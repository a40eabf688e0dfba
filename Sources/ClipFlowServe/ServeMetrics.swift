import ClipFlowUpload
import CoreMetrics
import Metrics
import Foundation
import Prometheus
import Synchronization

/// What the server counts, through swift-metrics: into its own Prometheus registry, which
/// `GET /metrics` writes out (swift-prometheus, text format 0.0.4), and into the backend a program
/// embedding the server bootstrapped `MetricsSystem` with (none for the `clipflow` command). The
/// series and their meaning are listed in docs/observability.md. Thread-safe: the handles are the
/// libraries' (atomics), the scrape-time state is behind mutexes.
final class ServeMetrics: Sendable {
    /// Upper bounds (seconds) of the time-to-playable and time-to-mark histograms' buckets.
    static let playableBuckets: [Double] = [0.5, 1, 2, 5, 10, 30, 60, 120, 300]
    /// Upper bounds (seconds) of the processing-time histogram's buckets.
    static let processingBuckets: [Double] = [1, 2, 5, 10, 30, 60, 120, 300, 600, 1800]
    /// Upper bounds of the database-time histogram's buckets.
    static let databaseBuckets: [Duration] = [
        .microseconds(500), .milliseconds(1), .milliseconds(2), .milliseconds(5), .milliseconds(10), .milliseconds(25), .milliseconds(50),
        .milliseconds(100), .milliseconds(250), .milliseconds(500), .seconds(1), .seconds(5)
    ]

    /// Where `/metrics` reads from.
    let registry = PrometheusCollectorRegistry()
    /// The registry's factory, beside the program's own backend.
    let factory: any MetricsFactory
    /// What viewers reported (`POST /beacon`), per video and rendition.
    let viewers: ViewerMetrics
    /// How long the database took to answer, by operation.
    let database: DatabaseTimer

    private let uploadsCreated: CoreMetrics.Counter
    private let uploadsCompleted: CoreMetrics.Counter
    private let uploadBytes: CoreMetrics.Counter
    private let requests: [String: CoreMetrics.Counter]
    private let processing: [String: Recorder]
    private let workerBusy: [String: FloatingPointCounter]
    private let timeToPlayable: Recorder
    private let timeToMark: [PublishMark.Name: Recorder]
    private let webhookAttempts: [WebhookOutcome: CoreMetrics.Counter]
    /// The object storage's own byte counts (nil: no bucket), and how much of them the counters
    /// below took already.
    private let storage: S3Traffic?
    private let bucketRead: CoreMetrics.Counter?
    private let bucketWritten: CoreMetrics.Counter?
    private let bucketTaken = Mutex((read: Int64(0), written: Int64(0)))
    /// The job gauges, set at each scrape from the database; none while it does not answer.
    private let jobGauges = Mutex<[String: CoreMetrics.Gauge]?>(nil)

    /// `storage`: the bucket's byte counts (nil: no bucket). `backend`: where the counts go
    /// besides `/metrics` (the program's `MetricsSystem` unless given).
    init(storage: S3Traffic? = nil, backend: (any MetricsFactory)? = nil) {
        var prometheus = PrometheusMetricsFactory(registry: registry)
        prometheus.valueHistogramBuckets = [
            "clipflow_time_to_playable_seconds": Self.playableBuckets, "clipflow_time_to_mark_seconds": Self.playableBuckets,
            "clipflow_processing_seconds": Self.processingBuckets, ViewerMetrics.startupLabel: ViewerMetrics.startupBuckets
        ]
        prometheus.durationHistogramBuckets = [DatabaseTimer.label: Self.databaseBuckets]
        let f: any MetricsFactory = MultiplexMetricsHandler(factories: [prometheus, backend ?? MetricsSystem.factory])
        factory = f
        viewers = ViewerMetrics(factory: f)
        database = DatabaseTimer(factory: f)
        uploadsCreated = CoreMetrics.Counter(label: "clipflow_uploads_created_total", factory: f)
        uploadsCompleted = CoreMetrics.Counter(label: "clipflow_uploads_completed_total", factory: f)
        uploadBytes = CoreMetrics.Counter(label: "clipflow_upload_bytes_received_total", factory: f)
        requests = Dictionary(
            uniqueKeysWithValues: ["1xx", "2xx", "3xx", "4xx", "5xx"].map {
                ($0, CoreMetrics.Counter(label: "clipflow_http_requests_total", dimensions: [("code", $0)], factory: f))
            })
        processing = Dictionary(
            uniqueKeysWithValues: ["done", "failed"].map {
                ($0, Recorder(label: "clipflow_processing_seconds", dimensions: [("outcome", $0)], aggregate: true, factory: f))
            })
        workerBusy = Dictionary(
            uniqueKeysWithValues: JobRow.Step.allCases.map {
                ($0.rawValue, FloatingPointCounter(label: "clipflow_worker_busy_seconds_total", dimensions: [("step", $0.rawValue)], factory: f))
            })
        timeToPlayable = Recorder(label: "clipflow_time_to_playable_seconds", aggregate: true, factory: f)
        timeToMark = Dictionary(
            uniqueKeysWithValues: PublishMark.Name.allCases.map {
                ($0, Recorder(label: "clipflow_time_to_mark_seconds", dimensions: [("mark", $0.rawValue)], aggregate: true, factory: f))
            })
        webhookAttempts = Dictionary(
            uniqueKeysWithValues: WebhookOutcome.allCases.map {
                ($0, CoreMetrics.Counter(label: "clipflow_webhook_attempts_total", dimensions: [("outcome", $0.rawValue)], factory: f))
            })
        self.storage = storage
        bucketRead = storage.map { _ in CoreMetrics.Counter(label: "clipflow_bucket_bytes_read_total", factory: f) }
        bucketWritten = storage.map { _ in CoreMetrics.Counter(label: "clipflow_bucket_bytes_written_total", factory: f) }
    }

    func uploadCreated() { uploadsCreated.increment() }
    func uploadCompleted() { uploadsCompleted.increment() }
    func uploadBytes(_ n: Int) { if n > 0 { uploadBytes.increment(by: n) } }
    func webhookAttempt(_ outcome: WebhookOutcome) { webhookAttempts[outcome]?.increment() }
    func answered(status: Int) { requests["\(status / 100)xx"]?.increment() }

    /// Processing seconds and worker busy time from `done` and `failed`; time to playable from the
    /// `published` event that carries it (the first one of a video).
    func job(_ e: JobEvent) {
        guard let seconds = e.seconds, seconds.isFinite, seconds >= 0 else { return }
        switch e.kind {
        case .done, .failed:
            processing[e.kind.rawValue]?.record(seconds)
            workerBusy[e.phase]?.increment(by: seconds)
        case .published:
            timeToPlayable.record(seconds)
            for mark in e.timeline { timeToMark[mark.name]?.record(mark.seconds) }
        case .started, .requeued: break
        }
    }

    /// The exposition, with the database's view set first: `jobs`, the jobs by state and the
    /// queued ones by step (nil when the database did not answer: the job series are then left
    /// out rather than shown as stale or zero). `now`: seconds since 1970, for the queue's age.
    func exposition(jobs: JobStats?, now: Double = Date().timeIntervalSince1970) -> String {
        show(jobs, now: now)
        if let storage, let bucketRead, let bucketWritten {
            // Read and taken under one lock, so scrapes at once never count the same bytes twice.
            bucketTaken.withLock { t in
                let (read, written) = (storage.read, storage.written)
                if read > t.read { bucketRead.increment(by: read - t.read) }
                if written > t.written { bucketWritten.increment(by: written - t.written) }
                t = (max(t.read, read), max(t.written, written))
            }
        }
        return registry.emitToString()
    }

    private func show(_ jobs: JobStats?, now: Double) {
        jobGauges.withLock { gauges in
            guard let jobs else {
                for g in (gauges ?? [:]).values { g.destroy() }
                gauges = nil
                return
            }
            var values: [String: (label: String, dimension: (String, String), value: Double)] = [:]
            for state in JobRow.State.allCases {
                values["state=\(state)"] = ("clipflow_jobs", ("state", state.rawValue), Double(jobs.byState[state] ?? 0))
            }
            for step in JobRow.Step.allCases {
                let queued = jobs.queued[step]
                values["depth=\(step)"] = ("clipflow_job_queue_depth", ("step", step.rawValue), Double(queued?.count ?? 0))
                values["age=\(step)"] = ("clipflow_job_queue_age_seconds", ("step", step.rawValue), queued.map { max(0, now - $0.oldest) } ?? 0)
            }
            var made = gauges ?? [:]
            for (key, v) in values {
                let g = made[key] ?? CoreMetrics.Gauge(label: v.label, dimensions: [v.dimension], factory: factory)
                made[key] = g
                g.record(v.value)
            }
            gauges = made
        }
    }
}

/// What the database holds of the processing at one moment (`ServeStore.jobStats`).
struct JobStats: Sendable, Equatable {
    /// Jobs by state (every job the database keeps).
    var byState: [JobRow.State: Int] = [:]
    /// The queued jobs by step: how many, and when the one waiting longest was queued.
    var queued: [JobRow.Step: Queued] = [:]

    struct Queued: Sendable, Equatable {
        var count: Int
        /// Seconds since 1970.
        var oldest: Double
    }
}

/// Times the database's answers (`clipflow_database_seconds{operation}`): a store wraps each of
/// its reads and writes (a transaction, or one statement) in `read` or `write`. `none` times
/// nothing.
struct DatabaseTimer: Sendable {
    static let label = "clipflow_database_seconds"
    private let reads: CoreMetrics.Timer?
    private let writes: CoreMetrics.Timer?

    init(factory: any MetricsFactory) {
        reads = CoreMetrics.Timer(label: Self.label, dimensions: [("operation", "read")], factory: factory)
        writes = CoreMetrics.Timer(label: Self.label, dimensions: [("operation", "write")], factory: factory)
    }

    private init() {
        reads = nil
        writes = nil
    }

    static let none = DatabaseTimer()

    func read<T>(_ body: () async throws -> T) async rethrows -> T { try await timed(reads, body) }
    func write<T>(_ body: () async throws -> T) async rethrows -> T { try await timed(writes, body) }

    private func timed<T>(_ timer: CoreMetrics.Timer?, _ body: () async throws -> T) async rethrows -> T {
        guard let timer else { return try await body() }
        let start = ContinuousClock.now
        defer { timer.record(duration: ContinuousClock.now - start) }
        return try await body()
    }
}
