import ClipFlowCore
import Foundation
import Synchronization

/// The thread that calls into a `MicrophoneDevice` for `MicrophoneSource`: every call after
/// `prepare` (reads, a restart after an overrun, close) is made here, never on the stage's
/// queue, because a device call may never return (alsa-lib's pulse plugin blocks for good inside
/// a wait when its sound server dies). The stage takes what it read from `results` with a
/// bounded wait, sees how long the current call has lasted (`callSeconds`), and ends it with
/// `release`: the thread is told to stop and waited for at most a bound, then abandoned
/// (`HelperThreads.startAbandonable`).
///
/// Ownership: the device belongs to the reading thread from `start` on; it closes it when it
/// ends. An abandoned thread keeps the device, open, for as long as its call lasts (for ever if
/// it never returns): closing it from anywhere else could block as its call does.
/// `@unchecked Sendable`: `device` is touched by the reading thread only; the stage shares
/// `results` (a `BoundedQueue`), `stopping` and `callStart` (atomics) and `helper` (set once,
/// under its mutex).
final class MicrophoneReader: @unchecked Sendable {
    /// What one read gave: audio, a timeout, an overrun, a lost device, or the error it threw.
    typealias Reading = Result<MicrophoneRead, any Error>

    private let device: MicrophoneDevice
    private let pollMs: Int32
    /// Readings, in order; the thread's end closes it (end of stream).
    let results: BoundedQueue<Reading>
    private let stopping = Atomic<Bool>(false)
    /// CLOCK_MONOTONIC time (as its bit pattern) the call in progress began; 0 between calls.
    private let callStart = Atomic<UInt64>(0)
    private let helper = Mutex<AbandonableHelper?>(nil)

    /// Readings held for the stage at most: one. The thread reads the next while the stage hands
    /// on the last, and waits while the stage is held up downstream, so audio waits in the
    /// device's buffer, as it does when the stage reads itself: reads paced by the consumer give
    /// the recorder's clock model (`LiveAudioAligner`) the read times it is tuned for (reads that
    /// run ahead of the recorder put fragments' joins up to 16 ms off, with clicks).
    static let capacity = 1

    init(device: MicrophoneDevice, pollMs: Int32) {
        self.device = device
        self.pollMs = pollMs
        results = BoundedQueue(capacity: Self.capacity)
    }

    /// Starts the reading thread among `helpers`; from here the device is the thread's.
    func start(_ helpers: HelperThreads, name: String) {
        let h = helpers.startAbandonable(name) { [self] in run() }
        helper.withLock { $0 = h }
    }

    /// Seconds the call in progress has lasted (nil between calls).
    func callSeconds(now: Double) -> Double? {
        let bits = callStart.load(ordering: .acquiring)
        return bits == 0 ? nil : now - Double(bitPattern: bits)
    }

    /// Tells the thread to stop and waits at most `seconds` for it to end. Returns false if it
    /// did not (it is then abandoned, with the device open).
    func release(waitingAtMost seconds: Double) -> Bool {
        stopping.store(true, ordering: .releasing)
        results.consumerDone()
        guard let h = helper.withLock({ $0 }) else { return true }
        if h.wait(seconds: seconds) { return true }
        return !h.abandon()
    }

    private func run() {
        let clock = SystemClock()
        while !stopping.load(ordering: .acquiring) {
            callStart.store(max(clock.now(), .leastNormalMagnitude).bitPattern, ordering: .releasing)
            let r = Reading { try device.read(timeoutMs: pollMs) }
            callStart.store(0, ordering: .releasing)
            if results.push(r) != .ok { break }
            switch r {
            case .success(.deviceLost), .failure: stopping.store(true, ordering: .releasing)
            case .success: break
            }
        }
        results.endOfStream()
        device.close()
    }
}
