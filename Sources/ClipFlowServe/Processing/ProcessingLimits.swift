import ClipFlowCore
import ClipFlowMedia
import Foundation

/// What one processing job may decode and use (`clipflow serve --max-picture, --max-duration,
/// --max-frame-rate, --worker-memory, --worker-stall, --job-attempts`). The picture, duration and frame rate are
/// checked from the probe, before anything is decoded; a video beyond them ends in `error` with
/// the reason. The memory bounds each worker process.
public struct ProcessingLimits: Sendable, Equatable {
    /// The largest picture, as displayed, either way round (4096x4096: each side at most 4096).
    public var maxPicture = PictureSize(width: 4096, height: 4096)
    /// Seconds.
    public var maxDuration: Double = 4 * 3600
    /// Frames per second, as the container states it.
    public var maxFrameRate: Double = 120
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

    public init() {}

    /// Why a video of this probe is refused (nil: it is within the limits).
    func refusal(_ probe: WorkerProbe) -> String? {
        let (long, short) = (max(probe.width, probe.height), min(probe.width, probe.height))
        let (maxLong, maxShort) = (max(maxPicture.width, maxPicture.height), min(maxPicture.width, maxPicture.height))
        if long > maxLong || short > maxShort {
            return "the picture is \(probe.width)x\(probe.height), above this server's limit of \(maxPicture.width)x\(maxPicture.height)"
        }
        if probe.duration > maxDuration {
            return "the video lasts \(Int(probe.duration)) s, above this server's limit of \(Int(maxDuration)) s"
        }
        if let rate = probe.frameRate, rate > maxFrameRate {
            return "the video has \(String(format: "%.2f", rate)) frames per second, above this server's limit of \(String(format: "%g", maxFrameRate))"
        }
        return nil
    }
}
