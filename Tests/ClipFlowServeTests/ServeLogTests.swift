import Foundation
import Synchronization
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

    func testJobEventsFeedProcessingSecondsAndTimeToPlayable() {
        let (observer, _, metrics) = report(.text)
        events.forEach(observer.job)
        let c = metrics.snapshot
        XCTAssertEqual(c.processingSeconds, ["done": 41.25, "failed": 0.5])
        XCTAssertEqual(c.processingJobs, ["done": 1, "failed": 1])
        XCTAssertEqual(c.playableCount, 1, "only the published event that carries seconds is time to playable")
        XCTAssertEqual(c.playableSum, 0.8)
        XCTAssertEqual(c.playableBuckets, [0, 1, 1, 1, 1, 1, 1, 1, 1])
        let text = metrics.exposition(jobs: [.queued: 2, .done: 1])
        XCTAssertTrue(text.contains("clipflow_jobs{state=\"queued\"} 2\n"), text)
        XCTAssertTrue(text.contains("clipflow_jobs{state=\"running\"} 0\n"), text)
        XCTAssertTrue(text.contains("clipflow_processing_seconds_sum{outcome=\"done\"} 41.25\n"), text)
        XCTAssertTrue(text.contains("clipflow_time_to_playable_seconds_bucket{le=\"0.5\"} 0\n"), text)
        XCTAssertTrue(text.contains("clipflow_time_to_playable_seconds_bucket{le=\"1\"} 1\n"), text)
        XCTAssertTrue(text.contains("clipflow_time_to_mark_seconds_sum{mark=\"probed\"} 0.2\n"), text)
        XCTAssertTrue(text.contains("clipflow_time_to_mark_seconds_count{mark=\"published\"} 1\n"), text)
        XCTAssertFalse(metrics.exposition(jobs: nil).contains("clipflow_jobs"), "no job counts when the database does not answer")
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
