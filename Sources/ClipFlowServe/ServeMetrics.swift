import ClipFlowUpload
import Foundation
import Synchronization

/// What the server counts for `GET /metrics`, since it started, and how it is written in the
/// Prometheus text exposition format (version 0.0.4). Thread-safe (a mutex around the counts).
final class ServeMetrics: Sendable {
    /// Upper bounds (seconds) of the time-to-playable histogram's buckets.
    static let playableBuckets: [Double] = [0.5, 1, 2, 5, 10, 30, 60, 120, 300]

    struct Counts: Sendable, Equatable {
        var uploadsCreated = 0
        var uploadsCompleted = 0
        var uploadBytesReceived = 0
        /// Requests answered, by status class ("2xx").
        var requests: [String: Int] = [:]
        /// Seconds processing jobs ran and how many ended, by outcome ("done", "failed").
        var processingSeconds: [String: Double] = [:]
        var processingJobs: [String: Int] = [:]
        /// Videos made playable: how many within each bucket's bound, their sum and count.
        var playableBuckets = [Int](repeating: 0, count: ServeMetrics.playableBuckets.count)
        var playableSum = 0.0
        var playableCount = 0
        /// Seconds after their uploads' last bytes at which videos made playable reached each
        /// mark of their way (`PublishMark`), summed, and how many did.
        var markSeconds: [PublishMark.Name: Double] = [:]
        var markCount: [PublishMark.Name: Int] = [:]
        /// Webhook delivery attempts, by outcome (`WebhookOutcome`).
        var webhookAttempts: [String: Int] = [:]
    }

    private let counts = Mutex(Counts())
    /// What viewers reported (`POST /beacon`), per video and rendition.
    let viewers = ViewerMetrics()
    /// The object storage's own counts of body bytes read and written (nil: no bucket).
    private let storage: S3Traffic?

    /// `storage`: the bucket's byte counts, for the exposition (nil: no bucket).
    init(storage: S3Traffic? = nil) { self.storage = storage }

    var snapshot: Counts { counts.withLock { $0 } }

    func uploadCreated() { counts.withLock { $0.uploadsCreated += 1 } }
    func uploadCompleted() { counts.withLock { $0.uploadsCompleted += 1 } }
    func uploadBytes(_ n: Int) { counts.withLock { $0.uploadBytesReceived += n } }
    func webhookAttempt(_ outcome: WebhookOutcome) { counts.withLock { $0.webhookAttempts[outcome.rawValue, default: 0] += 1 } }
    func answered(status: Int) { counts.withLock { $0.requests["\(status / 100)xx", default: 0] += 1 } }

    /// Processing seconds from `done` and `failed`; time to playable from the `published` event
    /// that carries it (the first one of a video).
    func job(_ e: JobEvent) {
        guard let seconds = e.seconds, seconds.isFinite, seconds >= 0 else { return }
        counts.withLock { c in
            switch e.kind {
            case .done, .failed:
                c.processingSeconds[e.kind.rawValue, default: 0] += seconds
                c.processingJobs[e.kind.rawValue, default: 0] += 1
            case .published:
                for (i, bound) in Self.playableBuckets.enumerated() where seconds <= bound { c.playableBuckets[i] += 1 }
                c.playableSum += seconds
                c.playableCount += 1
                for mark in e.timeline {
                    c.markSeconds[mark.name, default: 0] += mark.seconds
                    c.markCount[mark.name, default: 0] += 1
                }
            case .started, .requeued: break
            }
        }
    }

    /// The exposition: these counts, and `jobs` (jobs in the store by state, every state listed;
    /// nil, when the database did not answer: left out rather than shown as zero).
    func exposition(jobs: [JobRow.State: Int]?) -> String {
        let c = snapshot
        var out = ""
        func family(_ name: String, _ type: String, _ help: String, _ samples: [(String, String, String)]) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
            for (suffix, labels, value) in samples { out += "\(name)\(suffix)\(labels) \(value)\n" }
        }
        family("clipflow_uploads_created_total", "counter", "TUS uploads created.", [("", "", "\(c.uploadsCreated)")])
        family("clipflow_uploads_completed_total", "counter", "TUS uploads whose last byte arrived.", [("", "", "\(c.uploadsCompleted)")])
        family(
            "clipflow_upload_bytes_received_total", "counter", "Bytes read from the bodies of TUS requests.",
            [("", "", "\(c.uploadBytesReceived)")])
        let states: [JobRow.State] = [.queued, .running, .done, .failed]
        if let jobs {
            family(
                "clipflow_jobs", "gauge", "Processing jobs in the database, by state.", states.map { ("", "{state=\"\($0.rawValue)\"}", "\(jobs[$0] ?? 0)") })
        }
        let outcomes = ["done", "failed"]
        family(
            "clipflow_processing_seconds", "summary", "Seconds processing jobs ran, by how they ended.",
            outcomes.flatMap { o in
                [
                    ("_sum", "{outcome=\"\(o)\"}", Self.number(c.processingSeconds[o] ?? 0)),
                    ("_count", "{outcome=\"\(o)\"}", "\(c.processingJobs[o] ?? 0)")
                ]
            })
        var buckets = zip(Self.playableBuckets, c.playableBuckets).map { ("_bucket", "{le=\"\(Self.number($0))\"}", "\($1)") }
        buckets.append(("_bucket", "{le=\"+Inf\"}", "\(c.playableCount)"))
        buckets.append(("_sum", "", Self.number(c.playableSum)))
        buckets.append(("_count", "", "\(c.playableCount)"))
        family("clipflow_time_to_playable_seconds", "histogram", "Seconds from an upload's last byte until its video first played.", buckets)
        family(
            "clipflow_time_to_mark_seconds", "summary",
            "Seconds from an upload's last byte until its video's first publishing reached each mark (taken, worker, probed, written, published).",
            PublishMark.Name.allCases.flatMap { m in
                [
                    ("_sum", "{mark=\"\(m.rawValue)\"}", Self.number(c.markSeconds[m] ?? 0)),
                    ("_count", "{mark=\"\(m.rawValue)\"}", "\(c.markCount[m] ?? 0)")
                ]
            })
        if let traffic = storage {
            family(
                "clipflow_bucket_bytes_read_total", "counter", "Body bytes read from the object storage (objects fetched, listings).",
                [("", "", "\(traffic.read)")])
            family(
                "clipflow_bucket_bytes_written_total", "counter", "Body bytes written to the object storage (objects and parts sent).",
                [("", "", "\(traffic.written)")])
        }
        family(
            "clipflow_webhook_attempts_total", "counter", "Webhook delivery attempts by this server, by outcome (delivered, retry, failed: given up).",
            WebhookOutcome.allCases.map { ("", "{outcome=\"\($0.rawValue)\"}", "\(c.webhookAttempts[$0.rawValue] ?? 0)") })
        let classes = ["1xx", "2xx", "3xx", "4xx", "5xx"]
        family(
            "clipflow_http_requests_total", "counter", "HTTP requests answered, by status class.",
            classes.map { ("", "{code=\"\($0)\"}", "\(c.requests[$0] ?? 0)") })
        return out + viewers.exposition()
    }

    /// A sample value: an integer when whole, else up to six decimals (no exponent, no trailing
    /// zero).
    static func number(_ x: Double) -> String {
        guard x.isFinite else { return x.isNaN ? "NaN" : (x > 0 ? "+Inf" : "-Inf") }
        if x == x.rounded(), abs(x) < 1e15 { return String(Int64(x)) }
        var s = Substring(String(format: "%.6f", x))
        while s.hasSuffix("0") { s = s.dropLast() }
        return String(s)
    }
}
