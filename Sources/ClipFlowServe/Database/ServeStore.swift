import Foundation

/// One TUS upload as the database keeps it: the offset here is the truth (the file may hold more
/// bytes, written but not yet made durable, which the next PATCH overwrites).
struct UploadRow: Codable, Sendable, Equatable {
    /// The upload's key (`TUSServer.key`: the SHA-256 of the id in its URL), which names its file.
    var id: String
    /// Declared total size in bytes.
    var length: Int64
    /// Bytes received and made durable (fsync'd before this row says so).
    var offset: Int64
    /// The Upload-Metadata header as sent (validated when created).
    var metadata: String
    var createdAt: Double
    /// Seconds since 1970 after which an unfinished upload is removed.
    var expiresAt: Double
    /// When the last byte arrived (nil: in progress).
    var completedAt: Double?
    /// The video its metadata names (`video_id`), if any.
    var videoID: Int64? = nil
    /// The S3 multipart upload its bytes go into, when uploads are kept in a bucket (made by the
    /// first PATCH; `BucketUploads`).
    var multipartUpload: String? = nil
    /// In a bucket, the token of the object that holds the bytes of the part not yet whole, made by
    /// the request that recorded this offset (`BucketUploads.partialKey`); nil: no such object, or
    /// the one without a token.
    var partial: String? = nil
    /// The trace its spans join (`ServeTracing`; nil: tracing was off when it was made).
    var trace: String? = nil

    var isComplete: Bool { offset == length }

    /// What this row records as durable.
    var mark: UploadMark { UploadMark(offset: offset, partial: partial) }
}

/// How far an upload's bytes are durable, as its row records it: the offset and, in a bucket, the
/// token of the object holding the part not yet whole (`UploadRow.partial`).
struct UploadMark: Sendable, Equatable {
    var offset: Int64
    var partial: String? = nil
}

/// A video of the hosting API: made by `POST /videos`, filled by its upload and its processing.
struct VideoRow: Codable, Sendable, Equatable {
    enum Status: String, Codable, Sendable {
        /// Made; waiting for its upload.
        case pending
        /// A recording: its fragments arrive while it is recorded, each appended to its live
        /// playlists (`published` is "live" once the first is), until its end.
        case recording
        /// Uploaded; waiting for or in processing.
        case processing
        /// The smallest rendition is published and plays; the rest is being made.
        case viewable
        /// Every rendition is published.
        case ready
        /// Processing failed (`error` says why).
        case error
    }
    /// Who may play the video: its playlists, segments, covers and MP4.
    enum Access: String, Codable, Sendable, CaseIterable {
        /// Anyone with its URLs; it is in the public feed.
        case `public`
        /// Holders of a playback token (`Tokens.playback`) only; never in the public feed.
        case signed
    }
    enum Mode: String, Codable, Sendable {
        /// Transcoded to the feed ladder.
        case ladder
        /// Remuxed only (an upload that is already H.264/AAC with keyframes on the segments).
        case copy
    }
    var id: Int64?
    var name: String
    var description: String?
    var clientID: Int64
    var status: Status
    var mode: Mode
    var error: String?
    /// Seconds (after probing).
    var duration: Double?
    /// The TUS upload that carried it.
    var uploadID: String?
    /// The folder under DATA/media/ID whose master playlist is published ("" until viewable).
    var published: String
    /// Renditions published, as "720p,360p".
    var renditions: String
    var createdAt: Double
    /// A recording's fragment count, known once it ended (its recorder said so, or it timed
    /// out); nil before, and for a video that is not a recording.
    var fragments: Int64? = nil
    var access: Access = .public
}

/// A processing job: one per uploaded video. One worker holds it at a time (`state` running,
/// `owner` its server, `heartbeat` renewed while it works; `attempts` counted when it starts); a
/// running job whose heartbeat stopped was cut short by a crash and goes back in the queue.
/// A job has two steps: `playable` (probe, then publish something that plays) and `ladder` (the
/// encoded ladder, as `plan` says); a queued `playable` step is always taken before any `ladder`.
struct JobRow: Codable, Sendable, Equatable {
    enum State: String, Codable, Sendable, CaseIterable { case queued, running, done, failed }
    enum Step: String, Codable, Sendable, CaseIterable { case playable, ladder }
    var id: Int64?
    var videoID: Int64
    var state: State
    var attempts: Int
    var queuedAt: Double
    var owner: String?
    var heartbeat: Double?
    var step: Step = .playable
    /// What the `ladder` step makes (`LadderStepPlan`, as JSON); nil for `playable`.
    var plan: String? = nil
    /// The upload's probe (`InspectSummary`, as JSON), once its first step made it; nil before.
    var probe: String? = nil
    /// The trace of the upload it processes (`ServeTracing`), which its steps' spans join.
    var trace: String? = nil
}

/// Where `clipflow serve` keeps its truth: uploads and their durable offsets, videos, processing
/// jobs. `SQLiteStore` (one server, a file in the data folder) or `PostgresStore` (several servers
/// sharing one database and one data folder). Implementations are thread-safe.
protocol ServeStore: WebhookStore, ViewStore {
    func upload(_ id: String) async throws -> UploadRow?
    /// Stores a new upload; with `newVideo`, that video too, in one transaction, and the upload
    /// carries it. A failure stores neither, so no video is ever left waiting for an upload that
    /// does not exist. Returns the upload as stored.
    func insert(_ row: UploadRow, carrying newVideo: VideoRow?) async throws -> UploadRow
    /// Moves an upload's durable mark (offset and partial part) from `from` to `to` (`completedAt`
    /// set when it is whole); false when the mark was no longer `from` (another request moved it
    /// first): the row is then as that request left it.
    func setOffset(_ id: String, from: UploadMark, to: UploadMark, completedAt: Double?) async throws -> Bool
    /// Records `uploadID` as the upload's multipart upload unless it has one already; returns the
    /// one it has now (nil: no such upload). Two servers that made one at once agree on the first.
    func setMultipartUpload(_ id: String, to uploadID: String) async throws -> String?
    func delete(_ id: String) async throws
    /// Unfinished uploads whose time ran out before `now`.
    func expired(before now: Double) async throws -> [UploadRow]
    func completedUploads() async throws -> [UploadRow]
    /// Every upload whose metadata names `video`.
    func uploads(ofVideo video: Int64) async throws -> [UploadRow]
    /// Finished uploads naming a video that will never take them: the video is gone, or is bound
    /// to another upload.
    func unclaimedUploads() async throws -> [UploadRow]

    func insert(_ video: VideoRow) async throws -> VideoRow
    func video(_ id: Int64) async throws -> VideoRow?
    /// A page of videos, newest first, and how many there are.
    func videos(page: Int, perPage: Int) async throws -> ([VideoRow], Int)
    /// Viewable and ready videos, and recordings that play already, newest first.
    func playable() async throws -> [VideoRow]
    /// Recordings not yet merged (being recorded, or ended without their merged upload), oldest
    /// first.
    func recordings() async throws -> [VideoRow]
    /// Records that recording `id` has `fragments` fragments (its end), unless an end was
    /// recorded already (`replacing`: whatever was recorded); false when it is not a recording
    /// being recorded, or had its end.
    func endRecording(_ id: Int64, fragments: Int64, replacing: Bool) async throws -> Bool
    /// Recording `id` plays from its live folder (`published` "live") with `status` and lasts
    /// `duration` seconds so far.
    func publishLive(_ id: Int64, status: VideoRow.Status, duration: Double) async throws
    /// Writes what processing changes of the video (status, mode, error, duration, upload,
    /// published folder, renditions, fragments); what its owner edits (`edit`) is left as stored.
    func update(_ video: VideoRow) async throws
    /// Renames the video and sets its access (nil: as it is); the video as it is now, nil when
    /// there is no such video.
    func edit(_ id: Int64, name: String?, access: VideoRow.Access?) async throws -> VideoRow?
    func deleteVideo(_ id: Int64) async throws
    /// Binds a finished upload to its video and queues its processing, in one transaction (a crash
    /// leaves both or neither); a video bound already is left as it is. A recording's merged
    /// fragments are bound so too (it stays `viewable` if it plays already).
    func uploaded(video: Int64, upload: String, trace: String?) async throws

    /// Takes a queued job of one of `steps` for `owner` (never one another server holds), in
    /// fair turns (`FairTurns`): a `playable` one before any `ladder` one, of the client with the
    /// fewest jobs running, then the one served longest ago, its oldest; none of a client with
    /// `perClient` jobs running (0: no such bound). Nil when none.
    func takeJob(owner: String, now: Double, steps: Set<JobRow.Step>, perClient: Int) async throws -> JobRow?
    /// The job's `playable` step is done: it goes back in the queue for its `ladder` step, with
    /// `plan` and its attempts counted afresh.
    func queueLadder(_ id: Int64, plan: String) async throws
    /// Keeps the upload's probe (`JobRow.probe`) in the job's row.
    func recordProbe(_ id: Int64, probe: String) async throws
    /// Records that `job` is alive at `now` and that its video's processing is `progress` done
    /// (0...1; what is stored only grows, so any server answers it moving forward).
    func heartbeat(job: Int64, now: Double, progress: Double) async throws
    /// How far the processing of `video` got, as its worker last recorded it (0 before that).
    func progress(ofVideo video: Int64) async throws -> Double
    func finishJob(_ id: Int64, failed: Bool) async throws
    /// The job goes back in the queue; `counted` false: the attempt it was on does not count (it
    /// failed for a reason of the server's, such as a full disk).
    func retryJob(_ id: Int64, counted: Bool) async throws
    /// Running jobs whose heartbeat is older than `before` go back in the queue; returns how many.
    func requeueStale(before: Double) async throws -> Int
    /// Whether `error` is this store refusing a write for want of space.
    func isFull(_ error: Error) -> Bool

    /// `owner`'s running jobs go back in the queue (it is shutting down); the attempts they were
    /// on do not count.
    func releaseJobs(owner: String) async throws

    /// How many jobs are in each state (states without a job are absent), and the queued ones by
    /// step (steps without one are absent).
    func jobStats() async throws -> JobStats
}

/// How both stores take jobs in fair turns among clients (a video's `client_id`), so one client's
/// fifty uploads do not hold back another's one: SQL over `jobs j` and their videos `v`.
enum FairTurns {
    /// How many of the client's jobs run now (any server's).
    static let running =
        "(SELECT COUNT(*) FROM jobs r JOIN videos rv ON rv.id = r.video_id WHERE r.state = 'running' AND rv.client_id = v.client_id)"
    /// The order jobs are taken in: playable steps first, then the client with the fewest
    /// running, then the client whose last job started longest ago, then the oldest job.
    static let order =
        "j.step = 'ladder', \(running), COALESCE((SELECT t.last_started FROM client_turns t WHERE t.client_id = v.client_id), 0), j.id"
    /// The end of the insert into `client_turns` that records a client's job started: the
    /// client's row is kept, its time replaced.
    static let replacingTurn = "ON CONFLICT (client_id) DO UPDATE SET last_started = excluded.last_started"
}

/// Conditions both stores' SQL shares (one definition, so the dialects cannot drift apart).
enum VideoConditions {
    /// A video the feed shows: viewable, ready, or a recording that plays already.
    static let playable = "(status IN ('viewable', 'ready') OR (status = 'recording' AND published <> ''))"
    /// Video `v` still takes upload `u` (SQL names of the two rows): bound to it, waiting for
    /// its upload, or a recording not yet merged (its fragments are uploads it keeps).
    static func takes(video v: String, upload u: String) -> String {
        "(\(v).upload_id = \(u).id OR (\(v).upload_id IS NULL AND \(v).status IN ('pending', 'recording', 'viewable')))"
    }
    /// A recording not yet merged: being recorded, or ended and playing from its live folder
    /// without an upload.
    static let unmergedRecording = "(status = 'recording' OR (status = 'viewable' AND upload_id IS NULL))"
    /// A video waiting to be bound to an upload: made for one, or a recording (ended or not).
    static let bindable = "upload_id IS NULL AND status IN ('pending', 'recording', 'viewable')"
    /// The status a video bound to its upload takes: a video that plays already stays viewable.
    static let boundStatus = "CASE WHEN published <> '' THEN 'viewable' ELSE 'processing' END"
}

/// Where viewers' reports are kept (`ViewerBeacons`); both stores implement it.
protocol ViewStore: Sendable {
    func recordView(_ view: ViewReport, at: Double) async throws
    /// Video `video`'s last `ViewSummary.window` views, newest first.
    func views(of video: Int64) async throws -> [(startup: Int?, rebufferMs: Int, watchedMs: Int, failed: Bool)]
    /// Removes views reported before `before`, and those of videos that are gone.
    func pruneViews(before: Double) async throws
}

/// Where webhook deliveries are kept (`WebhookService`); both stores implement it.
protocol WebhookStore: Sendable {
    /// Gives each of `endpoints` a delivery row for every event recorded since it was first
    /// fanned out (an endpoint seen for the first time starts from the events to come).
    func fanOutWebhooks(to endpoints: [String], now: Double) async throws
    /// Up to `limit` deliveries to `endpoints` due at `now`, each the oldest pending event of its
    /// video for its endpoint, no other server's lease on it, leased for `lease` seconds.
    func takeWebhookDeliveries(endpoints: [String], now: Double, lease: Double, limit: Int) async throws -> [WebhookDelivery]
    /// Records an attempt at `delivery`: delivered; else tried again at `retryAt`, or given up
    /// (nil), with `error` saying why; nothing when its lease (`WebhookDelivery.lease`) is no
    /// longer the row's (another server took the delivery over).
    func finishWebhookDelivery(_ delivery: WebhookDelivery, delivered: Bool, retryAt: Double?, error: String?) async throws
    /// Removes events and deliveries from before `before` (past their time to be tried, or of a
    /// receiver no server has any more).
    func pruneWebhooks(before: Double) async throws
}
