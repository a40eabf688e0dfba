import ClipFlowMedia
import Foundation

/// The recorder's one status line on a terminal:
/// `● REC clip-0003  00:12.4 / total 01:02.7  drops: camera 0, queue 0, audio 0  audio -18 dB ▮▮▮▮▯▯`.
/// Pure: what the line says is decided here from one `RecordStatus` snapshot (so its numbers
/// agree with each other); when it is drawn is the renderer's business.
struct RecordStatusLine: Sendable, Equatable {
    var status: RecordStatus.Snapshot
    /// Fragment file name prefix (`clip` for `clip-0003.mp4`).
    var prefix = "clip"
    /// Items the queue to the encoder dropped (0 with the recorder's blocking queue).
    var queueDrops = 0
    /// Seconds of this recording's fragments deleted while it runs: no longer in the total.
    var deletedSeconds = 0.0

    /// Pictures the camera (or the late test pattern) lost: the gaps the recorder saw in the
    /// source's sequence numbers are every picture lost before it, the queue's drops included.
    var cameraDrops: Int64 { max(0, status.picturesMissing - Int64(queueDrops)) }

    /// Seconds of the recording that exist: the status's total less what was deleted, never less
    /// than the open fragment.
    var totalSeconds: Double { max(status.fragmentSeconds, status.totalSeconds - deletedSeconds) }

    /// Whether there is a microphone (or the test pattern's audio) to report on.
    var hasAudio: Bool { status.audioLevel != nil || status.audioOverruns > 0 }

    var text: String {
        let total = "total " + Self.clock(totalSeconds)
        let head: String
        if status.paused {
            head = "❚❚ paused  " + total
        } else if let n = status.fragment {
            head = "● REC \(String(format: "%@-%04d", prefix, n))  \(Self.clock(status.fragmentSeconds)) / " + total
        } else {
            head = "● REC  " + total
        }
        var drops = "drops: camera \(cameraDrops), queue \(queueDrops)"
        if hasAudio { drops += ", audio \(status.audioOverruns)" }
        return head + "  " + drops + "  " + Self.level(status.audioLevel)
    }

    /// `MM:SS.t`, or `H:MM:SS.t` from an hour on (tenths truncated, so the clock never runs ahead).
    static func clock(_ seconds: Double) -> String {
        let tenths = Int((max(0, seconds) * 10).rounded(.down))
        let (h, m, s, t) = (tenths / 36000, tenths / 600 % 60, tenths / 10 % 60, tenths % 10)
        return h > 0 ? String(format: "%d:%02d:%02d.%d", h, m, s, t) : String(format: "%02d:%02d.%d", m, s, t)
    }

    /// `audio -18 dB ▮▮▮▮▯▯`: the peak level and a six-cell meter over -60 to 0 dBFS; `audio –`
    /// without audio.
    static func level(_ dBFS: Double?) -> String {
        guard let dB = dBFS, !dB.isNaN else { return "audio –" }
        let cells = dB.isFinite ? min(6, max(0, Int(((dB + 60) / 10).rounded(.down)))) : 0
        let value = dB.isFinite ? "\(Int(dB.rounded()))" : "-∞"
        return "audio \(value) dB " + String(repeating: "▮", count: cells) + String(repeating: "▯", count: 6 - cells)
    }
}
