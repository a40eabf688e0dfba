import ClipFlowBatch
import ClipFlowCore
import Foundation
import Synchronization

/// What a person sees of a batch. JSON: every event (each row's pipeline events and the batch's
/// own, each carrying its row). Text: the batch's status line (rows done, failed, running, rate,
/// time left) and a line per row that failed or was stopped; a row's own stage events stay out
/// of the way (they are in `--events json`).
final class BatchView: EventSink, Sendable {
    let renderer: EventRenderer
    let json: Bool
    private let tally = Mutex<(@Sendable () -> BatchRunner.Tally)?>(nil)

    init(renderer: EventRenderer, json: Bool) {
        self.renderer = renderer
        self.json = json
    }

    /// Where the status line reads the counts from (the runner, once made).
    var tallied: (@Sendable () -> BatchRunner.Tally)? {
        get { tally.withLock { $0 } }
        set { tally.withLock { $0 = newValue } }
    }

    func emit(_ e: PipelineEvent) {
        if json { return renderer.emit(e) }
        guard e.stage == "batch" else { return }
        switch e.kind {
        case .item(_, let name, _, _) where name == "failed" || name == "interrupted": renderer.emit(e)
        case .progress: renderer.emit(e)
        default: break
        }
    }

    func statusLine() -> String {
        guard let t = tallied?() else { return "batch: starting" }
        return Self.statusLine(t, now: SystemClock().now())
    }

    /// "batch: 12/40 rows (10 done, 1 skipped, 1 failed), 2 running, 0.8 rows/s, about 35 s left".
    static func statusLine(_ t: BatchRunner.Tally, now: Double) -> String {
        var s = "batch: \(t.finished)/\(t.total) rows (\(t.ok) done, \(t.skipped) skipped, \(t.failed) failed), \(t.running) running"
        let elapsed = now - t.started
        if t.ran > 0, elapsed > 0 {
            let rate = Double(t.ran) / elapsed
            s += String(format: ", %.1f rows/s", rate)
            let left = Double(t.total - t.finished) / rate
            if left > 0 { s += ", about \(duration(left)) left" }
        }
        return s
    }

    static func duration(_ s: Double) -> String {
        let n = Int(s.rounded())
        if n < 60 { return "\(n) s" }
        if n < 3600 { return String(format: "%d:%02d", n / 60, n % 60) }
        return String(format: "%d:%02d:%02d", n / 3600, n / 60 % 60, n % 60)
    }
}
