import Foundation
import Synchronization
import MetricsTestKit
import XCTest

@testable import ClipFlowServe

/// The server's log lines and metrics, fed by hand: each job event as one line in either format,
/// the metrics it feeds, and what a request line shows of a path.
final class ServeLogTests: XCTestCase {
    final class Lines: Sendable {
        private let stored = Mutex<[String]>([])
        func add(_ s: String) { stored.withLock { $0.append(s) } }
        var all: [String] { stored.withLock { $0 } }
    }

    func report(_ format: ServeLogFormat) -> (ProcessingReport, Lines, ServeMetrics) {
        let lines = Lines()
        let metrics = ServeMetrics()
        return (ProcessingReport(log: ServeLog(format: format, sink: { lines.add($0) }), metrics: metrics), lines, metrics)
    }

    let events: [JobEvent] = [
        JobEvent(kind: .started, video: 7, job: 3, phase: "playable"),
        JobEvent(
            kind: .published, video: 7, job: 3, phase: "playable", renditions: ["copy"], status: .viewable, seconds: 0.8,
            timeline: [
                PublishMark(name: .taken, seconds: 0.01), PublishMark(name: .worker, seconds: 0.05), PublishMark(name: .probed, seconds: 0.2),
                PublishMark(name: .written, seconds: 0.6), PublishMark(name: .published, seconds: 0.8)
            ]),
        JobEvent(kind: .published, video: 7, job: 3, phase: "ladder", renditions: ["copy", "360p"], status: .viewable),
        JobEvent(kind: .requeued, video: 7, job: 3, phase: "ladder", reason: "the disk is full (\"media\")\nretrying"),
        JobEvent(kind: .done, video: 7, job: 3, phase: "ladder", seconds: 41.25),
        JobEvent(kind: .failed, video: 8, job: 4, phase: "playable", reason: "no video stream", seconds: 0.5)
    ]

    func testJobEventsAreOneTextLineEachWithTheirFields() {
        let (observer, lines, _) = report(.text)
        events.forEach(observer.job)
        let all = lines.all
        XCTAssertEqual(all.count, events.count)
        XCTAssertTrue(all.allSatisfy { $0.hasSuffix("\n") && $0.dropLast().firstIndex(of: "\n") == nil }, "\(all)")
        let bodies = all.map { line in String(line.dropLast().split(separator: " ", maxSplits: 1)[1]) }
        XCTAssertTrue(all.allSatisfy { $0.hasPrefix("time=20") }, "\(all)")
        XCTAssertEqual(
            bodies,
            [
                "event=job kind=started video=7 job=3 phase=playable",
                "event=job kind=published video=7 job=3 phase=playable renditions=copy status=viewable seconds=0.8 "
                    + "timeline=taken:0.01,worker:0.05,probed:0.2,written:0.6,published:0.8",
                "event=job kind=published video=7 job=3 phase=ladder renditions=copy,360p status=viewable",
                "event=job kind=requeued video=7 job=3 phase=ladder reason=\"the disk is full (\\\"media\\\")\\nretrying\"",
                "event=job kind=done video=7 job=3 phase=ladder seconds=41.25",
                "event=job kind=failed video=8 job=4 phase=playable reason=\"no video stream\" seconds=0.5"
            ])
    }

    func testJobEventsAreOneJSONObjectEachWithFixedKeys() throws {
        let (observer, lines, _) = report(.json)
        events.forEach(observer.job)
        let objects = try lines.all.map { line in try XCTUnwrap(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]) }
        let keys: Set = ["time", "event", "kind", "video", "job", "phase", "renditions", "status", "reason", "seconds", "timeline"]
        XCTAssertTrue(objects.allSatisfy { Set($0.keys) == keys }, "\(objects)")
        XCTAssertEqual(objects[1]["renditions"] as? [String], ["copy"])
        XCTAssertEqual(objects[1]["seconds"] as? Double, 0.8)
        XCTAssertEqual(objects[1]["timeline"] as? [String], ["taken:0.01", "worker:0.05", "probed:0.2", "written:0.6", "published:0.8"])
        XCTAssertTrue(objects[2]["timeline"] is NSNull, "only the first publishing has one")
        XCTAssertTrue(objects[0]["renditions"] is NSNull)
        XCTAssertEqual(objects[3]["reason"] as? String, "the disk is full (\"media\")\nretrying")
        XCTAssertEqual(objects[5]["kind"] as? String, "failed")
        XCTAssertEqual(objects[5]["video"] as? Int, 8)
    }

    /// The value of the sample `name` whose labels include `labels` (numbers compared as numbers,
    /// so `le="1"` finds `le="1.0"`), read from an exposition's lines.
    func sample(_ text: String, _ name: String, _ labels: [String: String] = [:]) -> Double? {
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let (series, value) = (line.split(separator: " ").dropLast().joined(separator: " "), line.split(separator: " ").last.map(String.init) ?? "")
            let open = series.firstIndex(of: "{")
            guard String(series[..<(open ?? series.endIndex)]) == name else { continue }
            var found: [String: String] = [:]
            if let open {
                for pair in series[series.index(after: open)..<series.index(before: series.endIndex)].split(separator: ",") {
                    let kv = pair.split(separator: "=", maxSplits: 1)
                    found[String(kv[0])] = String(kv[1].dropFirst().dropLast())
                }
            }
            let matches = labels.allSatisfy { k, v in found[k] == v || (Double(v) != nil && Double(found[k] ?? "") == Double(v)) }
            if matches { return Double(value) }
        }
        return nil
    }

    func testJobEventsFeedProcessingSecondsBusyTimeAndTimeToPlayable() {
        let (observer, _, metrics) = report(.text)
        events.forEach(observer.job)
        let text = metrics.exposition(
            jobs: JobStats(byState: [.queued: 2, .done: 1], queued: [.ladder: .init(count: 2, oldest: 100)]), now: 112.5)
        XCTAssertEqual(sample(text, "clipflow_jobs", ["state": "queued"]), 2, text)
        XCTAssertEqual(sample(text, "clipflow_jobs", ["state": "running"]), 0, text)
        XCTAssertEqual(sample(text, "clipflow_job_queue_depth", ["step": "ladder"]), 2, text)
        XCTAssertEqual(sample(text, "clipflow_job_queue_depth", ["step": "playable"]), 0, text)
        XCTAssertEqual(sample(text, "clipflow_job_queue_age_seconds", ["step": "ladder"]), 12.5, text)
        XCTAssertEqual(sample(text, "clipflow_processing_seconds_sum", ["outcome": "done"]), 41.25, text)
        XCTAssertEqual(sample(text, "clipflow_processing_seconds_count", ["outcome": "failed"]), 1, text)
        XCTAssertEqual(sample(text, "clipflow_worker_busy_seconds_total", ["step": "ladder"]), 41.25, text)
        XCTAssertEqual(sample(text, "clipflow_worker_busy_seconds_total", ["step": "playable"]), 0.5, text)
        XCTAssertEqual(sample(text, "clipflow_time_to_playable_seconds_bucket", ["le": "0.5"]), 0, text)
        XCTAssertEqual(sample(text, "clipflow_time_to_playable_seconds_bucket", ["le": "1"]), 1, text)
        XCTAssertEqual(sample(text, "clipflow_time_to_playable_seconds_count"), 1, "only the published event that carries seconds: \(text)")
        XCTAssertEqual(sample(text, "clipflow_time_to_playable_seconds_sum"), 0.8, text)
        XCTAssertEqual(sample(text, "clipflow_time_to_mark_seconds_sum", ["mark": "probed"]), 0.2, text)
        XCTAssertEqual(sample(text, "clipflow_time_to_mark_seconds_count", ["mark": "published"]), 1, text)
        XCTAssertEqual(sample(text, "clipflow_webhook_attempts_total", ["outcome": "retry"]), 0, "every outcome listed: \(text)")
        let down = metrics.exposition(jobs: nil)
        XCTAssertFalse(down.contains("clipflow_jobs") || down.contains("clipflow_job_queue"), "no job series when the database does not answer: \(down)")
        XCTAssertTrue(metrics.exposition(jobs: JobStats()).contains("clipflow_jobs"), "back when it answers")
    }

    /// Whatever backend the program gave swift-metrics gets the same counts as `/metrics`.
    func testTheProgramsOwnMetricsBackendGetsTheCounts() throws {
        let backend = TestMetrics()
        let metrics = ServeMetrics(backend: backend)
        metrics.uploadCreated()
        metrics.answered(status: 204)
        metrics.job(events[4])
        XCTAssertEqual(try backend.expectCounter("clipflow_uploads_created_total").totalValue, 1)
        XCTAssertEqual(try backend.expectCounter("clipflow_http_requests_total", [("code", "2xx")]).totalValue, 1)
        XCTAssertEqual(try backend.expectRecorder("clipflow_processing_seconds", [("outcome", "done")]).lastValue, 41.25)
    }

    func testRequestLinesNameTheRouteAndNeverAnUploadURLOrAQuery() {
        let prefixes = ClipFlowServer.uploadPrefixes
        XCTAssertEqual(RequestRecord.loggedPath(route: "/files/{id}", path: "/files/0123abcd", uploadPrefixes: prefixes), "/files/{id}")
        XCTAssertEqual(RequestRecord.loggedPath(route: "videos/{id}", path: "/videos/3", uploadPrefixes: prefixes), "/videos/{id}")
        XCTAssertEqual(RequestRecord.loggedPath(route: "NotFound", path: "/files/0123abcd/x?token=s3cret", uploadPrefixes: prefixes), "/files/…")
        XCTAssertEqual(RequestRecord.loggedPath(route: nil, path: "/upload/0123abcd", uploadPrefixes: prefixes), "/upload/…")
        XCTAssertEqual(RequestRecord.loggedPath(route: nil, path: "/media/3/a/master.m3u8?token=s3cret", uploadPrefixes: prefixes), "/media/3/a/master.m3u8")
        XCTAssertEqual(RequestRecord.loggedPath(route: nil, path: "/files", uploadPrefixes: prefixes), "/files")

        let lines = Lines()
        let log = ServeLog(format: .text, sink: { lines.add($0) })
        log.request(RequestRecord(method: "PATCH", path: "/files/{id}", status: 204, received: 1_048_576, sent: 0, seconds: 0.0123456))
        log.request(RequestRecord(method: "GET", path: "/a b\n", status: 404, received: 0, sent: 10, seconds: 1))
        XCTAssertEqual(
            lines.all.map { String($0.split(separator: " ", maxSplits: 1)[1]) },
            [
                "event=request method=PATCH path=/files/{id} status=204 received=1048576 sent=0 ms=12.346\n",
                "event=request method=GET path=\"/a b\\n\" status=404 received=0 sent=10 ms=1000\n"
            ])
    }
}
