import Foundation
import ClipFlowCore
import Synchronization

// MARK: - Results and events

/// What a finished upload produced. Fields a protocol does not have stay nil.
public struct UploadResult: Sendable, Equatable, Codable {
    /// "tus", "gcore", "clipflow" or "s3".
    public var method: String
    public var bytes: Int64
    /// Where the file now lives: the TUS upload URL, or the S3 object URL.
    public var url: String?
    /// Hosting's video id (Gcore and clipflow flows).
    public var videoID: String?
    /// The object's ETag (S3) as the server returned it.
    public var etag: String?
    /// The S3 multipart UploadId (kept for audit).
    public var uploadID: String?
    /// Playback URL reported by hosting (Gcore `hls_url`).
    public var playbackURL: String?
    /// The page where a person watches the video (`clipflow serve`: `{endpoint}/v/{id}`).
    public var watchURL: String?

    public init(
        method: String, bytes: Int64, url: String? = nil, videoID: String? = nil, etag: String? = nil,
        uploadID: String? = nil, playbackURL: String? = nil, watchURL: String? = nil
    ) {
        self.method = method
        self.bytes = bytes
        self.url = url
        self.videoID = videoID
        self.etag = etag
        self.uploadID = uploadID
        self.playbackURL = playbackURL
        self.watchURL = watchURL
    }
}

/// Bytes the server has acknowledged (never goes backwards), with rate and ETA.
public struct UploadProgress: Sendable, Equatable {
    public var acknowledged: Int64
    public var total: Int64
    /// Acknowledged bytes per second over the recent window.
    public var bytesPerSecond: Double
    /// Seconds to completion at the current rate; nil until a rate is known.
    public var eta: Double?

    public init(acknowledged: Int64, total: Int64, bytesPerSecond: Double = 0, eta: Double? = nil) {
        self.acknowledged = acknowledged
        self.total = total
        self.bytesPerSecond = bytesPerSecond
        self.eta = eta
    }

    public var fraction: Double { total > 0 ? min(1, Double(acknowledged) / Double(total)) : 1 }
}

/// Events of one upload, mirroring the reference SDK's listener set. `id` is the upload's (queue)
/// id. Messages are already redacted.
public enum UploadEvent: Sendable, Equatable {
    case started(id: String, file: String, bytes: Int64, resumedAt: Int64)
    case progress(id: String, UploadProgress)
    case finished(id: String, UploadResult)
    case failed(id: String, code: String, message: String)
    /// The server refused the credentials (401/403/ExpiredToken); a refresh is being asked for.
    case credentialsExpired(id: String)
    /// A request failed and will be retried after `delay` seconds.
    case retryStarted(id: String, attempt: Int, delay: Double, reason: String)
    /// After a retry, the upload continues from `offset` (the server's word).
    case retryResumed(id: String, attempt: Int, offset: Int64)
    /// The upload was paused, or cancelled on request.
    case paused(id: String)
    case cancelled(id: String)

    public var name: String {
        switch self {
        case .started: return "started"
        case .progress: return "progress"
        case .finished: return "finished"
        case .failed: return "failed"
        case .credentialsExpired: return "credentials-expired"
        case .retryStarted: return "retry-started"
        case .retryResumed: return "retry-resumed"
        case .paused: return "paused"
        case .cancelled: return "cancelled"
        }
    }

    public var uploadID: String {
        switch self {
        case .started(let id, _, _, _), .progress(let id, _), .finished(let id, _), .failed(let id, _, _),
            .credentialsExpired(let id), .retryStarted(let id, _, _, _), .retryResumed(let id, _, _),
            .paused(let id), .cancelled(let id):
            return id
        }
    }
}

/// Receives upload events. Called on the upload's worker thread; must be cheap and thread-safe.
public protocol UploadObserver: Sendable {
    func upload(_ event: UploadEvent)
}

/// An observer that collects events (tests, and the stage that turns them into pipeline events).
public final class UploadEventLog: UploadObserver, Sendable {
    private let events = Mutex<[UploadEvent]>([])
    public init() {}
    public func upload(_ event: UploadEvent) { events.withLock { $0.append(event) } }
    public var all: [UploadEvent] { events.withLock { $0 } }
    public func named(_ name: String) -> [UploadEvent] { all.filter { $0.name == name } }
}

public struct NoUploadObserver: UploadObserver {
    public init() {}
    public func upload(_ event: UploadEvent) {}
}

// MARK: - Errors

/// Why an upload failed, for people and for the queue's decision to retry later. `kind` says why
/// as a type; `code` is its stable spelling ("http-403", "network", "stalled", "file-changed",
/// ...) for events and the queue file; `message` is already redacted.
public struct UploadError: Error, CustomStringConvertible, Sendable, Equatable {
    public var kind: UploadErrorCode
    public var message: String
    /// True when trying again later (a new process, a later queue pass) can succeed.
    public var retryable: Bool
    /// The file whose upload failed (absolute, standardized), when the error concerns one. When
    /// set, `message` begins with `"<file>: "`: it can be shown as it is.
    public var file: String?

    /// The spelling of `kind`.
    public var code: String { kind.rawValue }

    public init(_ kind: UploadErrorCode, message: String, retryable: Bool = false) {
        self.kind = kind
        self.message = Secrets.shared.redact(message)
        self.retryable = retryable
    }

    /// This error as the failure to upload `file`: `file` set, and `message` beginning with it
    /// (added unless the message already names it first). Pause and cancel stay as they are:
    /// they are requests, not failures of the file.
    public func concerning(_ file: String) -> UploadError {
        guard kind != .paused, kind != .cancelled else { return self }
        var e = self
        e.file = file
        if !message.hasPrefix(file + ":") { e.message = "\(file): \(message)" }
        return e
    }

    public var description: String { message }

    public static let cancelled = UploadError(.cancelled, message: "upload cancelled")
    public static let paused = UploadError(.paused, message: "upload paused", retryable: true)

    public var asClipFlowError: ClipFlowError {
        switch kind {
        case .cancelled: return .interrupted
        case .badInput, .fileChanged: return .badInput(message)
        default: return .failure(message)
        }
    }
}

// MARK: - Control

/// Pause / cancel requests for one running upload, set from any thread, polled by the worker and
/// by the transport's progress callback. A pause stops the current request and leaves the upload
/// resumable; a cancel also deletes it on the server (TUS termination, S3 abort).
public final class UploadControl: Sendable {
    private enum State: UInt8 { case running = 0, paused = 1, cancelled = 2 }
    private let state = Atomic<UInt8>(0)
    private let external: CancellationFlag?

    /// `external` (e.g. the process's SIGINT flag) acts as a pause: stop now, resume later.
    public init(external: CancellationFlag? = nil) { self.external = external }

    public func pause() { _ = state.compareExchange(expected: State.running.rawValue, desired: State.paused.rawValue, ordering: .acquiringAndReleasing) }
    public func cancel() { state.store(State.cancelled.rawValue, ordering: .releasing) }
    public func resume() { _ = state.compareExchange(expected: State.paused.rawValue, desired: State.running.rawValue, ordering: .acquiringAndReleasing) }

    public var isCancelled: Bool { state.load(ordering: .acquiring) == State.cancelled.rawValue }
    public var isPaused: Bool { state.load(ordering: .acquiring) == State.paused.rawValue || (external?.isCancelled ?? false) }
    /// True when the current request should stop.
    public var shouldStop: Bool { state.load(ordering: .acquiring) != State.running.rawValue || (external?.isCancelled ?? false) }

    /// Throws `.cancelled` or `.paused` when a stop was asked for.
    public func check() throws {
        if isCancelled { throw UploadError.cancelled }
        if isPaused { throw UploadError.paused }
    }

    /// Sleeps up to `seconds`, waking early (and throwing) on pause or cancel.
    public func sleep(_ seconds: Double) throws {
        let end = Date().addingTimeInterval(seconds)
        while Date() < end {
            try check()
            Thread.sleep(forTimeInterval: min(0.05, max(0, end.timeIntervalSinceNow)))
        }
        try check()
    }
}

// MARK: - Retry policy

/// When to try again after a failed request, as a pure value (table-tested). Exponential backoff
/// with full jitter: the n-th consecutive failure waits a random time in [base*2^(n-1)/2,
/// base*2^(n-1)], capped at `maxDelay`. The counter resets whenever the upload made progress since
/// the last failure, so a long upload over a flaky link never runs out of attempts while it moves;
/// `maxAttemptsWithoutProgress` failures in a row with no progress give up.
public struct RetryPolicy: Sendable, Equatable, Codable {
    public var baseDelay: Double = 0.5
    public var maxDelay: Double = 30
    public var maxAttemptsWithoutProgress: Int = 8

    public init(baseDelay: Double = 0.5, maxDelay: Double = 30, maxAttemptsWithoutProgress: Int = 8) {
        self.baseDelay = baseDelay
        self.maxDelay = maxDelay
        self.maxAttemptsWithoutProgress = maxAttemptsWithoutProgress
    }

    /// A policy for tests: tiny delays.
    public static let fast = RetryPolicy(baseDelay: 0.01, maxDelay: 0.05, maxAttemptsWithoutProgress: 8)
}

/// The running state of a `RetryPolicy` for one upload.
public struct RetryState: Sendable, Equatable {
    public let policy: RetryPolicy
    /// Consecutive failures without progress.
    public private(set) var failures = 0
    /// All retries so far (for events).
    public private(set) var attempts = 0
    private var progressMark: Int64 = -1

    public init(policy: RetryPolicy) { self.policy = policy }

    /// Records a failure at acknowledged offset `offset`. Returns the delay before the next try, or
    /// nil to give up. `random` yields values in [0, 1) (injected for tests). `retryAfter` is a
    /// server's Retry-After in seconds (honoured, capped at 10 x maxDelay).
    public mutating func failure(at offset: Int64, retryAfter: Double? = nil, random: () -> Double = { Double.random(in: 0..<1) }) -> Double? {
        if offset > progressMark {
            failures = 0
            progressMark = offset
        }
        failures += 1
        attempts += 1
        if failures > policy.maxAttemptsWithoutProgress { return nil }
        let ceiling = min(policy.maxDelay, policy.baseDelay * pow(2, Double(failures - 1)))
        var delay = ceiling / 2 + random() * ceiling / 2
        if let retryAfter { delay = max(delay, min(retryAfter, policy.maxDelay * 10)) }
        return delay
    }
}

/// Whether an HTTP status means "try the same request again later".
public func isRetryableStatus(_ status: Int) -> Bool {
    status >= 500 || status == 423 || status == 429 || status == 408
}

/// Parses Retry-After (seconds form only).
func retryAfterSeconds(_ response: HTTPResponse) -> Double? {
    guard let value = response.header("retry-after"), let s = Double(value.trimmingCharacters(in: .whitespaces)) else { return nil }
    return max(0, s)
}

// MARK: - Progress meter

/// Turns acknowledged-byte reports into `UploadProgress` values: never backwards, rate over a
/// sliding window of about 5 s, ETA from that rate. Emits at most every `interval` seconds (and
/// always the final one). Confined to the upload's worker thread.
public final class ProgressMeter {
    public let total: Int64
    private let interval: Double
    private let now: () -> Double
    private var samples: [(t: Double, bytes: Int64)] = []
    private var lastEmit: Double = -.infinity
    public private(set) var acknowledged: Int64 = 0

    public init(total: Int64, interval: Double = 0.25, now: @escaping () -> Double = { ProcessInfo.processInfo.systemUptime }) {
        self.total = total
        self.interval = interval
        self.now = now
    }

    /// Records that the server holds `offset` bytes. Returns a progress value to publish, or nil
    /// when nothing is due (rate-limited, or no forward movement).
    public func acknowledge(_ offset: Int64, force: Bool = false) -> UploadProgress? {
        let t = now()
        let advanced = offset > acknowledged
        if advanced { acknowledged = offset }
        samples.append((t, acknowledged))
        while samples.count > 2, t - samples[0].t > 5 { samples.removeFirst() }
        guard force || (advanced && t - lastEmit >= interval) || (advanced && acknowledged == total) else { return nil }
        lastEmit = t
        return current(at: t)
    }

    public func current(at t: Double? = nil) -> UploadProgress {
        let t = t ?? now()
        var rate = 0.0
        if let first = samples.first, t - first.t > 0.05 {
            rate = Double(acknowledged - first.bytes) / (t - first.t)
        }
        let eta: Double? = rate > 0 ? Double(total - acknowledged) / rate : (acknowledged >= total ? 0 : nil)
        return UploadProgress(acknowledged: acknowledged, total: total, bytesPerSecond: rate, eta: eta)
    }
}

// MARK: - Files

/// Size and modification time of a file, with a clear error naming it.
public struct FileStamp: Sendable, Equatable, Codable {
    public var size: Int64
    /// Modification time in nanoseconds since the epoch.
    public var mtimeNanos: Int64

    public static func of(_ path: String) throws -> FileStamp {
        var st = stat()
        guard stat(path, &st) == 0 else {
            let reason = String(cString: strerror(errno))
            throw UploadError(.badInput, message: "\(path): cannot upload: \(reason)")
        }
        guard (st.st_mode & S_IFMT) == S_IFREG else {
            throw UploadError(.badInput, message: "\(path): cannot upload: not a regular file")
        }
        guard access(path, R_OK) == 0 else {
            throw UploadError(.badInput, message: "\(path): cannot upload: permission denied")
        }
        return FileStamp(size: Int64(st.st_size), mtimeNanos: Int64(st.st_mtim.tv_sec) * 1_000_000_000 + Int64(st.st_mtim.tv_nsec))
    }

    /// Throws `file-changed` if the file at `path` no longer has this stamp.
    public func verifyUnchanged(_ path: String) throws {
        let now = try FileStamp.of(path)
        if now != self {
            throw UploadError(
                .fileChanged,
                message:
                    "\(path): the file changed while it was being uploaded (size \(size) -> \(now.size)); the partial upload was discarded, upload it again once it is complete"
            )
        }
    }
}
