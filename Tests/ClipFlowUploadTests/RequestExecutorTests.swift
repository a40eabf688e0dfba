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

/// The one perform loop: a scripted protocol answers each attempt, and the events, refreshes and
/// result must follow from the answers alone.
final class RequestExecutorPerformTests: XCTestCase {
    enum Answer {
        case accept(String)
        case retry(String, retryAfter: Double?, immediate: Bool)
        /// A refusal; whether anything can refresh.
        case refuse(canRefresh: Bool)
        case fail(UploadError)
    }

    struct Run {
        var result: Result<String, UploadError>
        var events: [String]
        var attempts: Int
        var refreshes: Int
    }

    func perform(
        _ answers: [Answer], policy: RetryPolicy = RetryPolicy(baseDelay: 0, maxDelay: 0, maxAttemptsWithoutProgress: 3),
        control: UploadControl = UploadControl(), resumedAt: Int64? = 7
    ) -> Run {
        let log = UploadEventLog()
        let x = RequestExecutor(policy: policy, id: "p", control: control, observer: log)
        var attempts = 0
        var refreshes = 0
        let result: Result<String, UploadError>
        do {
            let v: String = try x.perform(progress: { 0 }, resumedAt: { resumedAt }) {
                defer { attempts += 1 }
                guard attempts < answers.count else { return .accepted("ran out") }
                switch answers[attempts] {
                case .accept(let v): return .accepted(v)
                case .retry(let reason, let ra, let immediate):
                    return .retryable(
                        Retryable(reason: reason, retryAfter: ra, immediate: immediate) { r in
                            UploadError(.retry, message: "gave up after \(r.failures): \(reason)")
                        })
                case .refuse(let can):
                    return .refused(
                        Refused(refresh: can ? { refreshes += 1 } : nil) { why in
                            UploadError(.credentials, message: "refused: \(why)")
                        })
                case .fail(let e): throw e
                }
            }
            result = .success(v)
        } catch {
            result = .failure(error as? UploadError ?? UploadError(.internal, message: "\(error)"))
        }
        let events = log.all.map { e -> String in
            switch e {
            case .retryStarted(_, let attempt, let delay, _): return "retry-started \(attempt) \(delay)"
            case .retryResumed(_, let attempt, let offset): return "retry-resumed \(attempt) at \(offset)"
            default: return e.name
            }
        }
        return Run(result: result, events: events, attempts: attempts, refreshes: refreshes)
    }

    func testAnAcceptedFirstAnswerIsReturnedWithoutEvents() {
        let r = perform([.accept("ok")])
        XCTAssertEqual(r.result, .success("ok"))
        XCTAssertEqual(r.events, [])
        XCTAssertEqual(r.attempts, 1)
    }

    func testRetriesAreReportedAndTheAcceptedAnswerReportsTheResumptionOnce() {
        let r = perform([.retry("503", retryAfter: nil, immediate: false), .retry("503", retryAfter: nil, immediate: true), .accept("ok")])
        XCTAssertEqual(r.result, .success("ok"))
        XCTAssertEqual(r.events, ["retry-started 1 0.0", "retry-started 2 0.0", "retry-resumed 2 at 7"])
        XCTAssertEqual(r.attempts, 3)
    }

    func testNoResumptionIsReportedWhenTheProtocolHasNothingToResume() {
        let r = perform([.retry("503", retryAfter: nil, immediate: false), .accept("ok")], resumedAt: nil)
        XCTAssertEqual(r.result, .success("ok"))
        XCTAssertEqual(r.events, ["retry-started 1 0.0"])
    }

    func testThePolicyGivesUpWithTheProtocolsError() {
        let r = perform(Array(repeating: .retry("503", retryAfter: nil, immediate: false), count: 5))
        XCTAssertEqual(r.result, .failure(UploadError(.retry, message: "gave up after 4: 503")))
        XCTAssertEqual(r.events.count, 3)
        XCTAssertEqual(r.attempts, 4)
    }

    func testARefusalRefreshesOnceAndARepeatedRefusalFails() {
        let once = perform([.refuse(canRefresh: true), .accept("ok")])
        XCTAssertEqual(once.result, .success("ok"))
        XCTAssertEqual(once.events, ["credentials-expired"])
        XCTAssertEqual(once.refreshes, 1)

        let twice = perform([.refuse(canRefresh: true), .refuse(canRefresh: true)])
        XCTAssertEqual(twice.result, .failure(UploadError(.credentials, message: "refused: refusedAfterRefresh")))
        XCTAssertEqual(twice.refreshes, 1)

        let none = perform([.refuse(canRefresh: false)])
        XCTAssertEqual(none.result, .failure(UploadError(.credentials, message: "refused: noProvider")))
        XCTAssertEqual(none.events, [])
    }

    func testAFinalFailureEndsAtOnce() {
        let r = perform([.retry("503", retryAfter: nil, immediate: false), .fail(UploadError(.http(404), message: "gone"))])
        XCTAssertEqual(r.result, .failure(UploadError(.http(404), message: "gone")))
        XCTAssertEqual(r.attempts, 2)
    }

    func testAPauseDuringTheWaitStopsPromptly() {
        let control = UploadControl()
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.2) { control.pause() }
        let start = Date()
        let r = perform(
            [.retry("503", retryAfter: nil, immediate: false), .accept("never")],
            policy: RetryPolicy(baseDelay: 30, maxDelay: 30, maxAttemptsWithoutProgress: 3), control: control)
        XCTAssertEqual(r.result.failureCode, "paused")
        XCTAssertEqual(r.attempts, 1)
        XCTAssertLessThan(Date().timeIntervalSince(start), 2)
    }

    func testACancelledUploadSendsNothing() {
        let control = UploadControl()
        control.cancel()
        let r = perform([.accept("never")], control: control)
        XCTAssertEqual(r.result.failureCode, "cancelled")
        XCTAssertEqual(r.attempts, 0)
    }
}

extension Result where Failure == UploadError {
    fileprivate var failureCode: String? {
        if case .failure(let e) = self { return e.code }
        return nil
    }
}
