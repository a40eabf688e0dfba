import ClipFlowCore
import ClipFlowMedia
import Foundation

/// What one processing job may decode and use (`clipflow serve --max-picture, --max-duration,
/// --max-frame-rate, --worker-memory, --worker-stall, --job-attempts`). The picture, duration and frame rate are
/// checked from the probe, before anything is decoded; a video beyond them ends in `error` with
/// the reason. The memory bounds each worker process.
public struct ProcessingLimits: Sendable, Equatable {
    /// The picture, duration and frame rate a video may have (`--max-picture`, `--max-duration`,
    /// `--max-frame-rate`), checked by the `playable` step's `inspect` stage.
    public var media = MediaLimits()
    /// Bytes of data (heap and private mappings) a worker process may hold; 0: no bound.
    public var workerMemory: Int64 = 3 << 30
    /// Seconds a worker may go without reporting progress before it is taken to hang and killed
    /// (which costs its job an attempt).
    public var workerStall: Double = 300
    /// Times a job is started before a worker dying (or the server stopping) under it ends it in
    /// `error`.
    public var attempts = 3
    /// Seconds a ladder folder stays after a newer one of its video is published, for players in
    /// the middle of its playlists.
    public var supersededGrace: Double = 600
    /// Jobs of one client (a video's `client_id`) running at once on the servers sharing the
    /// database, checked as a server takes one (servers taking at the same moment may each take
    /// one past it); 0: no bound but the lanes. Whatever the bound, the next job goes to the
    /// client served longest ago (`FairTurns`).
    public var jobsPerClient = 0
    /// The codecs of a video's ladder (`--codecs`): H.264, and with AV1 the rungs up to 720
    /// lines again in AV1 (`HLSLadder.codecs`).
    public var ladderCodecs: Set<VideoCodec> = [.h264]

    public init() {}
}
