import Foundation
import Synchronization

/// What viewers saw, per video and rendition, since this server started, for `/metrics`: views,
/// a histogram of startup times, rebuffers, stalled and watched seconds, failures. Its memory is
/// bounded: at most `maxSeries` video and rendition pairs (a beacon names a video that exists,
/// and a rendition of it, so the pairs are the server's own); beyond, reports are counted only as
/// dropped.
final class ViewerMetrics: Sendable {
    static let startupBuckets: [Double] = [0.1, 0.25, 0.5, 1, 2, 5, 10]
    static let maxSeries = 10_000

    struct Key: Hashable, Sendable, Comparable {
        var video: Int64
        var rendition: String
        static func < (a: Key, b: Key) -> Bool { (a.video, a.rendition) < (b.video, b.rendition) }
    }

    struct Series: Sendable {
        var views = 0
        var startupBuckets = [Int](repeating: 0, count: ViewerMetrics.startupBuckets.count)
        var startupSum = 0.0
        var startupCount = 0
        var rebuffers = 0
        var rebufferSeconds = 0.0
        var watchedSeconds = 0.0
        var errors = 0
    }

    private let series = Mutex([Key: Series]())
    private let dropped = Atomic<Int>(0)

    func add(_ r: ViewReport) {
        let key = Key(video: r.video, rendition: r.rendition)
        let kept = series.withLock { all -> Bool in
            guard all[key] != nil || all.count < Self.maxSeries else { return false }
            var s = all[key, default: Series()]
            s.views += 1
            if let ms = r.startupMs {
                let seconds = Double(ms) / 1000
                for (i, bound) in Self.startupBuckets.enumerated() where seconds <= bound { s.startupBuckets[i] += 1 }
                s.startupSum += seconds
                s.startupCount += 1
            }
            s.rebuffers += r.rebuffers
            s.rebufferSeconds += Double(r.rebufferMs) / 1000
            s.watchedSeconds += Double(r.watchedMs) / 1000
            if r.error != nil { s.errors += 1 }
            all[key] = s
            return true
        }
        if !kept { dropped.add(1, ordering: .relaxed) }
    }

    /// Forgets a deleted video's series.
    func remove(video: Int64) { series.withLock { all in all = all.filter { $0.key.video != video } } }

    /// The families, in the Prometheus text format.
    func exposition() -> String {
        let all = series.withLock { $0 }.sorted { $0.key < $1.key }
        var out = ""
        func family(_ name: String, _ type: String, _ help: String, _ lines: (Key, Series) -> [String]) {
            out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n"
            for (k, s) in all { for l in lines(k, s) { out += l + "\n" } }
        }
        func labels(_ k: Key, _ extra: String = "") -> String { "{video=\"\(k.video)\",rendition=\"\(k.rendition)\"\(extra)}" }
        family("clipflow_viewer_views_total", "counter", "Views players reported, by video and the rendition played last.") { k, s in
            ["clipflow_viewer_views_total\(labels(k)) \(s.views)"]
        }
        family("clipflow_viewer_startup_seconds", "histogram", "Seconds from a video coming on screen to its first picture playing.") { k, s in
            zip(Self.startupBuckets, s.startupBuckets).map { "clipflow_viewer_startup_seconds_bucket\(labels(k, ",le=\"\(ServeMetrics.number($0))\"")) \($1)" }
                + [
                    "clipflow_viewer_startup_seconds_bucket\(labels(k, ",le=\"+Inf\"")) \(s.startupCount)",
                    "clipflow_viewer_startup_seconds_sum\(labels(k)) \(ServeMetrics.number(s.startupSum))",
                    "clipflow_viewer_startup_seconds_count\(labels(k)) \(s.startupCount)"
                ]
        }
        family("clipflow_viewer_rebuffers_total", "counter", "Times playback stalled after its first picture.") { k, s in
            ["clipflow_viewer_rebuffers_total\(labels(k)) \(s.rebuffers)"]
        }
        family("clipflow_viewer_rebuffer_seconds_total", "counter", "Seconds playback stalled after its first picture.") { k, s in
            ["clipflow_viewer_rebuffer_seconds_total\(labels(k)) \(ServeMetrics.number(s.rebufferSeconds))"]
        }
        family("clipflow_viewer_watch_seconds_total", "counter", "Seconds videos were on screen.") { k, s in
            ["clipflow_viewer_watch_seconds_total\(labels(k)) \(ServeMetrics.number(s.watchedSeconds))"]
        }
        family("clipflow_viewer_errors_total", "counter", "Views whose player failed.") { k, s in ["clipflow_viewer_errors_total\(labels(k)) \(s.errors)"] }
        out += "# HELP clipflow_viewer_reports_dropped_total View reports not counted (too many video and rendition pairs).\n"
        out += "# TYPE clipflow_viewer_reports_dropped_total counter\nclipflow_viewer_reports_dropped_total \(dropped.load(ordering: .relaxed))\n"
        return out
    }
}

/// How many beacons are taken: per client address a bucket of `burst` refilled at `perSecond`,
/// and all together at most `totalPerSecond`; what is over is refused (429). Its memory is
/// bounded: at most `maxAddresses` buckets (beyond, the fullest ones are forgotten).
final class BeaconLimiter: Sendable {
    let burst: Double
    let perSecond: Double
    let totalPerSecond: Double
    static let maxAddresses = 10_000

    private struct State {
        var buckets: [String: (tokens: Double, at: Double)] = [:]
        var total: (tokens: Double, at: Double) = (0, 0)
    }
    private let state = Mutex(State())

    init(burst: Double = 20, perSecond: Double = 1, totalPerSecond: Double = 200) {
        self.burst = burst
        self.perSecond = perSecond
        self.totalPerSecond = totalPerSecond
        state.withLock { $0.total = (totalPerSecond, Date().timeIntervalSince1970) }
    }

    /// Whether a beacon from `address` is taken at `now`.
    func take(_ address: String, now: Double = Date().timeIntervalSince1970) -> Bool {
        state.withLock { s in
            s.total.tokens = min(totalPerSecond, s.total.tokens + (now - s.total.at) * totalPerSecond)
            s.total.at = now
            var b = s.buckets[address] ?? (burst, now)
            b.tokens = min(burst, b.tokens + (now - b.at) * perSecond)
            b.at = now
            guard b.tokens >= 1, s.total.tokens >= 1 else {
                if s.buckets[address] != nil { s.buckets[address] = b }
                return false
            }
            b.tokens -= 1
            s.total.tokens -= 1
            if s.buckets[address] == nil, s.buckets.count >= Self.maxAddresses {
                // Buckets refilled to the full are no different from none.
                s.buckets = s.buckets.filter { min(burst, $0.value.tokens + (now - $0.value.at) * perSecond) < burst }
                if s.buckets.count >= Self.maxAddresses { s.buckets.removeAll(keepingCapacity: true) }
            }
            s.buckets[address] = b
            return true
        }
    }
}
