import XCTest
@testable import ClipFlowUpload

/// The decisions shared by the TUS, S3 and Gcore request loops, as a table: each row is one
/// outcome of a request and what must follow.
final class RequestDecisionsTests: XCTestCase {
    enum Step {
        /// A retryable failure with this much acknowledged, and the server's Retry-After.
        case fail(progress: Int64, retryAfter: Double?)
        /// A credential refusal; whether anything can refresh them.
        case refused(canRefresh: Bool)
        case accepted
    }
    enum Outcome: Equatable {
        case retry(RequestDecisions.Retry)
        case refusal(RequestDecisions.Refusal)
        /// The attempt to report as resumed.
        case resumed(Int?)
    }

    func run(_ policy: RetryPolicy, _ steps: [Step]) -> [Outcome] {
        var d = RequestDecisions(policy: policy)
        return steps.map { step in
            switch step {
            case .fail(let p, let ra): return .retry(d.failure(progress: p, retryAfter: ra, random: { 1 }))
            case .refused(let can): return .refusal(d.refusal(canRefresh: can))
            case .accepted: return .resumed(d.accepted())
            }
        }
    }

    func testRetriesBackOffAndGiveUpAfterTheAttemptsWithoutProgress() {
        let policy = RetryPolicy(baseDelay: 1, maxDelay: 4, maxAttemptsWithoutProgress: 3)
        XCTAssertEqual(
            run(
                policy,
                [
                    .fail(progress: 0, retryAfter: nil), .fail(progress: 0, retryAfter: nil),
                    .fail(progress: 0, retryAfter: nil), .fail(progress: 0, retryAfter: nil)
                ]),
            [.retry(.wait(1)), .retry(.wait(2)), .retry(.wait(4)), .retry(.giveUp)])
    }

    func testProgressSinceTheLastFailureStartsTheCountAgain() {
        let policy = RetryPolicy(baseDelay: 1, maxDelay: 8, maxAttemptsWithoutProgress: 2)
        XCTAssertEqual(
            run(
                policy,
                [
                    .fail(progress: 0, retryAfter: nil), .fail(progress: 0, retryAfter: nil),
                    .fail(progress: 100, retryAfter: nil), .fail(progress: 100, retryAfter: nil),
                    .fail(progress: 100, retryAfter: nil)
                ]),
            [.retry(.wait(1)), .retry(.wait(2)), .retry(.wait(1)), .retry(.wait(2)), .retry(.giveUp)])
    }

    func testRetryAfterIsHonouredAndCappedAtTenTimesTheMaximumDelay() {
        let policy = RetryPolicy(baseDelay: 1, maxDelay: 2, maxAttemptsWithoutProgress: 8)
        XCTAssertEqual(
            run(
                policy,
                [
                    .fail(progress: 0, retryAfter: 7), .fail(progress: 0, retryAfter: 500),
                    .fail(progress: 0, retryAfter: 0)
                ]),
            [.retry(.wait(7)), .retry(.wait(20)), .retry(.wait(2))])
    }

    func testOneRefreshBetweenAcceptedAnswers() {
        XCTAssertEqual(
            run(.fast, [.refused(canRefresh: true), .refused(canRefresh: true)]),
            [.refusal(.refresh), .refusal(.refusedAfterRefresh)])
        XCTAssertEqual(
            run(.fast, [.refused(canRefresh: true), .accepted, .refused(canRefresh: true)]),
            [.refusal(.refresh), .resumed(nil), .refusal(.refresh)])
        XCTAssertEqual(run(.fast, [.refused(canRefresh: false)]), [.refusal(.noProvider)])
        // A retryable failure in between is not an accepted answer.
        XCTAssertEqual(
            run(.fast, [.refused(canRefresh: true), .fail(progress: 0, retryAfter: nil), .refused(canRefresh: true)]),
            [.refusal(.refresh), .retry(.wait(0.01)), .refusal(.refusedAfterRefresh)])
    }

    func testTheAcceptedAnswerAfterAWaitReportsTheAttemptOnce() {
        XCTAssertEqual(
            run(.fast, [.fail(progress: 0, retryAfter: nil), .fail(progress: 0, retryAfter: nil), .accepted, .accepted]),
            [.retry(.wait(0.01)), .retry(.wait(0.02)), .resumed(2), .resumed(nil)])
    }
}

/// The side effects of those decisions: events, and the errors the protocol builds.
final class RequestExecutorTests: XCTestCase {
    func testBackoffReportsTheRetryRedactedAndGivesUpWithTheProtocolsError() throws {
        Secrets.shared.register("s3cr3t-value-for-executor")
        let log = UploadEventLog()
        let x = RequestExecutor(
            policy: RetryPolicy(baseDelay: 0, maxDelay: 0, maxAttemptsWithoutProgress: 1), id: "u1",
            control: UploadControl(), observer: log)
        try x.backoff(reason: "HTTP 503 token=s3cr3t-value-for-executor", progress: 0) { _ in UploadError(.internal, message: "never") }
        XCTAssertThrowsError(
            try x.backoff(reason: "again", progress: 0) { r in
                UploadError(.retry, message: "after \(r.failures)")
            }
        ) { XCTAssertEqual($0 as? UploadError, UploadError(.retry, message: "after 2")) }
        guard case .retryStarted(let id, let attempt, _, let reason)? = log.all.first else { return XCTFail("\(log.all)") }
        XCTAssertEqual(id, "u1")
        XCTAssertEqual(attempt, 1)
        XCTAssertFalse(reason.contains("s3cr3t-value-for-executor"), reason)
        XCTAssertEqual(log.all.count, 1)
        XCTAssertEqual(x.accepted(), 1)
    }

    func testRefreshRunsOnceThenFailsWithTheProtocolsError() throws {
        let log = UploadEventLog()
        let x = RequestExecutor(policy: .fast, id: "u2", control: UploadControl(), observer: log)
        var refreshes = 0
        try x.refreshCredentials(canRefresh: true, fail: { _ in UploadError(.internal, message: "never") }) { refreshes += 1 }
        XCTAssertThrowsError(
            try x.refreshCredentials(canRefresh: true, fail: { UploadError(.credentials, message: "refused: \($0)") }) {
                refreshes += 1
            }
        ) { XCTAssertEqual(($0 as? UploadError)?.message, "refused: refusedAfterRefresh") }
        XCTAssertEqual(refreshes, 1)
        XCTAssertEqual(log.named("credentials-expired").count, 1)
    }

    func testAPausedUploadStopsWaiting() {
        let control = UploadControl()
        control.pause()
        let x = RequestExecutor(
            policy: RetryPolicy(baseDelay: 5, maxDelay: 5, maxAttemptsWithoutProgress: 3), id: "u3",
            control: control, observer: NoUploadObserver())
        let start = Date()
        XCTAssertThrowsError(try x.backoff(reason: "x", progress: 0) { _ in UploadError(.internal, message: "never") }) {
            XCTAssertEqual(($0 as? UploadError)?.code, "paused")
        }
        XCTAssertLessThan(Date().timeIntervalSince(start), 1)
    }
}
