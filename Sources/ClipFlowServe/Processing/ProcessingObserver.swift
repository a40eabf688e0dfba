import Foundation

/// One change in a processing job's life, as the processor reports it (to the server's log and
/// metrics).
struct JobEvent: Sendable, Equatable {
    enum Kind: String, Sendable {
        /// A worker took the job (`phase` says which step).
        case started
        /// Renditions were published (`renditions`); the video is `status` now.
        case published
        /// Every step is done.
        case done
        /// The job went back to the queue (`reason`: a worker died, the disk is full, a stop).
        case requeued
        /// The job ended in `error` (`reason`).
        case failed
    }
    var kind: Kind
    var video: Int64
    var job: Int64
    /// "playable" (copy, or the smallest rung) or "ladder".
    var phase: String
    /// For `published`: the renditions now in the master playlist, and the video's status.
    var renditions: [String] = []
    var status: VideoRow.Status? = nil
    /// For `requeued` and `failed`: why (never a secret: the processor's own words or FFmpeg's).
    var reason: String? = nil
    /// For `published`, the first time a video becomes playable: seconds since its upload's
    /// last byte (time to playable). For `done` and `failed`: seconds the job's steps ran.
    var seconds: Double? = nil
    /// For `published`, the first time a video becomes playable: where the time to playable
    /// went (`PublishMark`), in order.
    var timeline: [PublishMark] = []
}

/// A moment on a video's way to playable, seconds after its upload's last byte.
struct PublishMark: Sendable, Equatable {
    enum Name: String, Sendable, CaseIterable {
        /// A lane of the processor took the job.
        case taken
        /// The step's worker process runs.
        case worker
        /// The worker's `inspect` stage reported the upload.
        case probed
        /// The worker ended with its folder complete.
        case written
        /// The folder was put where it is served and the video switched to it.
        case published
    }
    var name: Name
    var seconds: Double
}

/// Receives what processing does, as it happens. Implementations are thread-safe and quick
/// (called on the processor's tasks).
protocol ProcessingObserver: Sendable {
    func job(_ event: JobEvent)
}

/// Observes nothing.
struct NoProcessingObserver: ProcessingObserver {
    func job(_ event: JobEvent) {}
}
