import CoreMetrics
import Foundation
import Synchronization

/// What viewers saw, per video and rendition, since this server started, for `/metrics` (through
/// swift-metrics, `ServeMetrics`): views, a histogram of startup times, rebuffers, stalled and
/// watched seconds, failures. Its memory is bounded: at most `maxSeries` video and rendition pairs
/// (a beacon names a video that exists, and a rendition of it, so the pairs are the server's own);
/// beyond, reports are counted only as dropped.
final class ViewerMetrics: Sendable {
    static let startupLabel = "clipflow_viewer_startup_seconds"
    static let startupBuckets: [Double] = [0.1, 0.25, 0.5, 1, 2, 5, 10]
    static let maxSeries = 10_000

    struct Key: Hashable, Sendable {
        var video: Int64
        var rendition: String
    }

    /// One pair's handles.
    struct Series: Sendable {
        let views: CoreMetrics.Counter
        let startup: Recorder
        let rebuffers: CoreMetrics.Counter
        let rebufferSeconds: FloatingPointCounter
        let watchedSeconds: FloatingPointCounter
        let errors: CoreMetrics.Counter

        init(_ k: Key, factory: any MetricsFactory) {
            let d = [("video", String(k.video)), ("rendition", k.rendition)]
            views = CoreMetrics.Counter(label: "clipflow_viewer_views_total", dimensions: d, factory: factory)
            startup = Recorder(label: ViewerMetrics.startupLabel, dimensions: d, aggregate: true, factory: factory)
            rebuffers = CoreMetrics.Counter(label: "clipflow_viewer_rebuffers_total", dimensions: d, factory: factory)
            rebufferSeconds = FloatingPointCounter(label: "clipflow_viewer_rebuffer_seconds_total", dimensions: d, factory: factory)
            watchedSeconds = FloatingPointCounter(label: "clipflow_viewer_watch_seconds_total", dimensions: d, factory: factory)
            errors = CoreMetrics.Counter(label: "clipflow_viewer_errors_total", dimensions: d, factory: factory)
        }

        func destroy() {
            views.destroy()
            startup.destroy()
            rebuffers.destroy()
            rebufferSeconds.destroy()
            watchedSeconds.destroy()
            errors.destroy()
        }
    }

    private let factory: any MetricsFactory
    private let series = Mutex([Key: Series]())
    private let dropped: CoreMetrics.Counter

    init(factory: any MetricsFactory) {
        self.factory = factory
        dropped = CoreMetrics.Counter(label: "clipflow_viewer_reports_dropped_total", factory: factory)
    }

    func add(_ r: ViewReport) {
        let key = Key(video: r.video, rendition: r.rendition)
        let found = series.withLock { all -> Series? in
            if let s = all[key] { return s }
            guard all.count < Self.maxSeries else { return nil }
            let s = Series(key, factory: factory)
            all[key] = s
            return s
        }
        guard let s = found else { return dropped.increment() }
        s.views.increment()
        if let ms = r.startupMs { s.startup.record(Double(ms) / 1000) }
        if r.rebuffers > 0 { s.rebuffers.increment(by: r.rebuffers) }
        if r.rebufferMs > 0 { s.rebufferSeconds.increment(by: Double(r.rebufferMs) / 1000) }
        if r.watchedMs > 0 { s.watchedSeconds.increment(by: Double(r.watchedMs) / 1000) }
        if r.error != nil { s.errors.increment() }
    }

    /// Forgets a deleted video's series.
    func remove(video: Int64) {
        let gone = series.withLock { all in
            let gone = all.filter { $0.key.video == video }
            for k in gone.keys { all[k] = nil }
            return gone.values
        }
        for s in gone { s.destroy() }
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
