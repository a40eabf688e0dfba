import Foundation

// The request loop shared by TUS, S3 and the Gcore API: every protocol sends a request, reads
// the answer, and then either hands it on, waits and sends it again, or asks for fresh credentials
// and sends it again. The protocol says what an answer means (a `Verdict`); the executor alone
// decides what follows and reports it:
//
//   attempt ──.accepted(v)──▶ RequestDecisions.accepted() ─▶ retryResumed (after a wait), return v
//           ──.retryable────▶ RequestDecisions.failure()  ─▶ retryStarted, sleep │ give-up error
//           ──.refused──────▶ RequestDecisions.refusal()  ─▶ credentialsExpired, refresh │ error
//           ──throws────────▶ the error, as it is
//
// `RequestDecisions` is the pure part (no clock, no I/O; table-tested). `RequestExecutor.perform`
// carries out its decisions: events, the interruptible sleep, the credential refresh.

/// What comes after one failed or refused request, as a pure value. One per upload (or per API
/// call for Gcore); confined to the thread running it.
public struct RequestDecisions: Sendable, Equatable {
    public enum Retry: Sendable, Equatable {
        /// Wait this many seconds, then send the request again.
        case wait(Double)
        /// `maxAttemptsWithoutProgress` failures in a row without progress: stop.
        case giveUp
    }

    public enum Refusal: Sendable, Equatable {
        /// Ask for fresh credentials, then send the request again.
        case refresh
        /// Fail: nothing can renew the credentials.
        case noProvider
        /// Fail: the credentials were refused again with no accepted answer since the last refresh.
        case refusedAfterRefresh
    }

    /// Backoff with jitter and Retry-After, attempts counted without progress.
    public private(set) var retry: RetryState
    /// A refresh was made and no answer has been accepted since.
    public private(set) var refreshedSinceAccepted = false
    /// The retry attempt to report as resumed once an answer is accepted again.
    public private(set) var pendingResume: Int?

    public init(policy: RetryPolicy) { retry = RetryState(policy: policy) }

    /// A retryable failure with `progress` bytes acknowledged so far (progress since the last
    /// failure resets the count). `retryAfter` is the server's Retry-After in seconds.
    public mutating func failure(
        progress: Int64, retryAfter: Double? = nil,
        random: () -> Double = { Double.random(in: 0..<1) }
    ) -> Retry {
        guard let delay = retry.failure(at: progress, retryAfter: retryAfter, random: random) else { return .giveUp }
        pendingResume = retry.attempts
        return .wait(delay)
    }

    /// The server refused the credentials. A refresh is allowed once between accepted answers.
    public mutating func refusal(canRefresh: Bool) -> Refusal {
        guard canRefresh else { return .noProvider }
        guard !refreshedSinceAccepted else { return .refusedAfterRefresh }
        refreshedSinceAccepted = true
        return .refresh
    }

    /// The server accepted a request. Returns the retry attempt to report as resumed, if the
    /// request followed a wait.
    public mutating func accepted() -> Int? {
        refreshedSinceAccepted = false
        defer { pendingResume = nil }
        return pendingResume
    }
}

/// What one attempt came to, as the protocol reads its answer. A final failure is thrown instead.
enum Verdict<T> {
    /// The protocol has what it asked for.
    case accepted(T)
    /// Worth sending again after the retry policy's wait.
    case retryable(Retryable)
    /// The server refused the credentials.
    case refused(Refused)
}

/// A retryable failure, as the protocol words it.
struct Retryable {
    /// What failed, for the `retryStarted` event and the give-up error (redacted before either).
    var reason: String
    /// The server's Retry-After in seconds.
    var retryAfter: Double? = nil
    /// Send again without waiting (still counted), e.g. a TUS 409 that only needs a HEAD.
    var immediate = false
    /// The error when the policy gives up.
    var giveUp: (RetryState) -> UploadError
}

/// A credential refusal, as the protocol words it.
struct Refused {
    /// Renews the credentials; nil when nothing can.
    var refresh: (() throws -> Void)?
    /// The error when no refresh may be made: none can, or the credentials were refused again with
    /// no accepted answer since the last refresh.
    var failure: (RequestDecisions.Refusal) -> UploadError
}

/// Carries out `RequestDecisions` for one upload (or one Gcore API call): runs an attempt until the
/// protocol accepts its answer, reporting `retryStarted` and sleeping (waking on pause/cancel),
/// reporting `credentialsExpired` and refreshing, and reporting `retryResumed` at the first
/// accepted answer after a wait. Confined to the upload's thread.
final class RequestExecutor {
    private(set) var decisions: RequestDecisions
    let id: String
    let control: UploadControl
    let observer: UploadObserver

    init(policy: RetryPolicy, id: String, control: UploadControl, observer: UploadObserver) {
        decisions = RequestDecisions(policy: policy)
        self.id = id
        self.control = control
        self.observer = observer
    }

    var refreshedSinceAccepted: Bool { decisions.refreshedSinceAccepted }

    /// Runs `attempt` (send one request, or one protocol step, and read the answer) until it
    /// returns `.accepted` or throws. `progress` is the bytes acknowledged so far (progress resets
    /// the count of failures); `resumedAt` is the offset to report in `retryResumed`, or nil when
    /// a resumption is not reported (nothing has started yet).
    func perform<T>(
        progress: () -> Int64, resumedAt: () -> Int64?, _ attempt: () throws -> Verdict<T>
    ) throws -> T {
        while true {
            try control.check()
            switch try attempt() {
            case .accepted(let value):
                if let attempt = accepted(), let offset = resumedAt() {
                    observer.upload(.retryResumed(id: id, attempt: attempt, offset: offset))
                }
                return value
            case .retryable(let r):
                try backoff(reason: r.reason, progress: progress(), retryAfter: r.retryAfter, immediate: r.immediate, giveUp: r.giveUp)
            case .refused(let r):
                try refreshCredentials(canRefresh: r.refresh != nil, fail: r.failure) { try r.refresh?() }
            }
        }
    }

    /// After a retryable failure: reports the retry and waits (no wait when `immediate`, e.g. a
    /// TUS 409 that only needs a HEAD), or throws `giveUp`'s error when the policy stops.
    func backoff(
        reason: String, progress: Int64, retryAfter: Double? = nil, immediate: Bool = false,
        giveUp: (RetryState) -> UploadError
    ) throws {
        let reason = Secrets.shared.redact(reason)
        guard case .wait(let delay) = decisions.failure(progress: progress, retryAfter: retryAfter) else {
            throw giveUp(decisions.retry)
        }
        let wait = immediate ? 0 : delay
        observer.upload(.retryStarted(id: id, attempt: decisions.retry.attempts, delay: wait, reason: reason))
        if wait > 0 { try control.sleep(wait) }
    }

    /// After a credential refusal: reports it and runs `refresh`, or throws `fail`'s error when no
    /// refresh may be made.
    func refreshCredentials(
        canRefresh: Bool, fail: (RequestDecisions.Refusal) -> UploadError,
        refresh: () throws -> Void
    ) throws {
        let d = decisions.refusal(canRefresh: canRefresh)
        guard d == .refresh else { throw fail(d) }
        observer.upload(.credentialsExpired(id: id))
        try refresh()
    }

    /// An accepted answer; returns the attempt to report as resumed, if any.
    @discardableResult
    func accepted() -> Int? { decisions.accepted() }
}
