import ArgumentParser
import ClipFlowMedia
import ClipFlowServe

/// `clipflow serve`'s limits on processing (`ProcessingLimits`): what one job may decode, the
/// memory of each worker process, how many times a job is tried, and the ladder's codecs.
struct ServeProcessingOptions: ParsableArguments {
    @Option(name: .customLong("max-picture"), help: "Largest picture a video may have, WxH either way round (beyond: the video ends in error).")
    var maxPicture: String = "4096x4096"

    @Option(name: .customLong("max-duration"), help: "Longest video, in seconds (beyond: the video ends in error).")
    var maxDuration: Double = 4 * 3600

    @Option(name: .customLong("max-frame-rate"), help: "Highest frame rate a video may declare (beyond: the video ends in error).")
    var maxFrameRate: Double = 120

    @Option(name: .customLong("worker-memory"), help: "MiB of memory each processing worker process may hold (0: no bound).")
    var workerMemory: Int64 = 3072

    @Option(name: .customLong("worker-stall"), help: "Seconds a processing worker may go without progress before it is killed as hung.")
    var workerStall: Double = 300

    @Option(name: .customLong("job-attempts"), help: "Times a job is started before a worker dying under it ends the video in error.")
    var jobAttempts: Int = 3

    @Option(
        name: .customLong("superseded-grace"),
        help: "Seconds a video's earlier renditions stay after better ones are published (players in the middle of them keep working).")
    var supersededGrace: Double = 600

    @Option(
        name: .customLong("client-jobs"),
        help: """
            Jobs of one client (client_id) processed at once, counted over the servers sharing the database (0: no bound); jobs go round the \
            clients in turn either way.
            """)
    var clientJobs: Int = 0

    @Option(help: "h264, or h264,av1: a video's ladder has its rungs up to 720 lines again in AV1, for players that decode it.")
    var codecs: String = "h264"

    func validate() throws {
        if VideoCodec.parse(codecs) == nil { throw ValidationError("--codecs: expected \(VideoCodec.expected) (got '\(codecs)')") }
        guard let p = PictureSize(parsing: maxPicture), p.width >= 16, p.height >= 16 else {
            throw ValidationError("--max-picture: expected WxH with even sides of at least 16, got '\(maxPicture)'")
        }
        if !(maxDuration > 0) { throw ValidationError("--max-duration must be positive") }
        if !(maxFrameRate > 0) { throw ValidationError("--max-frame-rate must be positive") }
        if !(0...(1 << 20)).contains(workerMemory) || (1..<64).contains(workerMemory) {
            throw ValidationError("--worker-memory: expected 0 (no bound) or 64 to 1048576 MiB")
        }
        if !(workerStall >= 1) { throw ValidationError("--worker-stall must be at least 1 second") }
        if !(supersededGrace >= 0) { throw ValidationError("--superseded-grace must be 0 or more seconds") }
        if !(0...1000).contains(clientJobs) { throw ValidationError("--client-jobs must be 0 to 1000") }
        if !(1...100).contains(jobAttempts) { throw ValidationError("--job-attempts must be 1 to 100") }
    }

    var limits: ProcessingLimits {
        var l = ProcessingLimits()
        if let p = PictureSize(parsing: maxPicture) { l.media.maxPicture = p }
        l.media.maxDuration = maxDuration
        l.media.maxFrameRate = maxFrameRate
        l.workerMemory = workerMemory << 20
        l.workerStall = workerStall
        l.attempts = jobAttempts
        l.supersededGrace = supersededGrace
        l.jobsPerClient = clientJobs
        l.ladderCodecs = VideoCodec.parse(codecs) ?? [.h264]
        return l
    }
}
