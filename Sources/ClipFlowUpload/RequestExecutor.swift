import Foundation

// The request loop shared by TUS, S3 and the Gcore API: every protocol sends a request, looks at
// the answer, and then either hands it on, waits and sends it again, or asks for fresh credentials
// and sends it again. The protocol decides what an answer means (retryable, refused, final);
// these two types decide what follows:
//
//   answer ──accepted──▶ RequestDecisions.accepted()  ─▶ caller (retry-resumed attempt, if any)
//          ──retryable─▶ RequestDecisions.failure()   ─▶ .wait(delay) │ .giveUp
//          ──refused───▶ RequestDecisions.refusal()   ─▶ .refresh     │ .fail(why)
//
// `RequestDecisions` is the pure part (no clock, no I/O; table-tested). `RequestExecutor` carries
// out its decisions: events, the interruptible sleep, the credential refresh.

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

/// Carries out `RequestDecisions` for one upload: emits `retryStarted` and sleeps (waking on
/// pause/cancel), emits `credentialsExpired` and refreshes. Errors are built by the protocol,
/// which knows how to name the file and the request. Confined to the upload's thread.
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

    var retry: RetryState { decisions.retry }
    var refreshedSinceAccepted: Bool { decisions.refreshedSinceAccepted }

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
