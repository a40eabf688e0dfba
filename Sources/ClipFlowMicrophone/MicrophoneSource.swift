import ClipFlowCore
import Foundation
import Synchronization

/// Source: audio from an ALSA capture PCM (port type `frames`), as `Item.frame(.audio(...))`
/// chunks of about 10 ms of interleaved Float samples.
///
/// `prepare` opens the PCM, negotiates the rate and channels (so a missing or busy device fails
/// before anything runs), emits a notice with what was agreed and starts capturing, so the
/// microphone runs before the sources prepared after it start (a camera starts in `produce`):
/// what it captures meanwhile waits in the device's buffer for `produce`, and an overrun before
/// the first chunk only restarts capture (no audio was delivered yet). Each chunk's `firstSample`
/// counts the frames the device delivered before it (continuous: frames the device lost are not
/// counted) and its `clockTime` is the measured CLOCK_MONOTONIC time of its first frame; placing
/// the chunks against the pictures is the recorder's work.
///
/// Ends after `duration` seconds of audio, when the consumer ends, when the device goes away (a
/// notice, then a normal end of stream; `deviceLost` and `lossReason` say so), or on a graceful
/// stop: it then keeps reading until the audio reaches the stop time plus `stopTail`, so a
/// recorder can cover the last picture, and ends at most a second after that whatever the device
/// does. A cancel ends it within one wait (`pollMs`). No audio for `stallSeconds` while the
/// device answers is an error. Overruns are counted in `overruns` and each emits a notice.
///
/// The device is never called on the stage's queue after `prepare`: a `MicrophoneReader` thread
/// makes every call, since one may never return (a sound server killed while its plugin waits).
/// A call that lasts `hungSeconds` counts as the device going away; when the stage ends, the
/// reading thread is waited for at most `releaseSeconds`, then abandoned with the device open
/// (a notice says so). So the source always ends within those bounds.
///
/// The stop time, the stall timeout and the tail are on CLOCK_MONOTONIC (`SystemClock`) whatever
/// the context's clock, since they are compared with the device's timestamps.
///
/// Belongs to its stage queue (others read its counters after the run); owns the
/// `MicrophoneDevice` from `prepare` until `produce` hands it to its reading thread (or, if
/// nothing was produced, until `finish` closes it).
public final class MicrophoneSource: Stage {
    public let id: String
    public let device: String
    public let sampleRate: Int
    public let channels: Int
    /// Seconds of audio to capture (0: until stopped).
    public let duration: Double
    /// Seconds without audio before `produce` fails.
    public let stallSeconds: Double
    /// Seconds of audio captured past the stop time on a graceful stop.
    public let stopTail: Double
    private var microphone: MicrophoneDevice?

    public private(set) var negotiated: MicrophoneFormat?
    /// Frames delivered (per channel).
    public private(set) var framesCaptured: Int64 = 0
    public private(set) var overruns = 0
    /// The device went away mid-stream (an error saying so, or a call that did not return
    /// within `hungSeconds`).
    public private(set) var deviceLost = false
    /// How the device went away ("microphone 'pulse' went away: ..."), when it did.
    public private(set) var lossReason: String?

    public var inputTypes: Set<PortType> { [] }
    public var outputType: PortType? { .frames }

    static let pollMs: Int32 = 50
    /// A device call lasting this long is taken for a device that went away.
    public static let hungSeconds = 3.0
    /// How long the end of the stage waits for its reading thread before abandoning it.
    public static let releaseSeconds = 1.0

    public static let kind = StageKind(
        name: "microphone", summary: "source: audio from an ALSA capture device (microphone)",
        output: .frames,
        params: [
            ParamSpec(
                "device", .string, default: .string("default"),
                help: "ALSA PCM name: default, hw:1,0, plughw:CARD=C920,DEV=0, pulse ('clipflow devices' lists them)"),
            ParamSpec("sample-rate", .integer(min: 8000, max: 192_000), default: .number(48000), help: "sample rate to ask for (the device may offer another)"),
            ParamSpec("channels", .integer(min: 1, max: 32), default: .number(2), help: "channels to ask for (the device may offer another count)"),
            ParamSpec("duration", .number(min: 0, max: nil), default: .number(0), help: "seconds to capture (0: until stopped)")
        ],
        make: { id, p in
            MicrophoneSource(
                id: id, device: p.string("device") ?? "default", sampleRate: p.int("sample-rate") ?? 48000,
                channels: p.int("channels") ?? 2, duration: p.double("duration") ?? 0)
        })

    public init(
        id: String, device: String = "default", sampleRate: Int = 48000, channels: Int = 2, duration: Double = 0,
        stallSeconds: Double = 5, stopTail: Double = 0.3
    ) {
        self.id = id
        self.device = device
        self.sampleRate = sampleRate
        self.channels = channels
        self.duration = duration
        self.stallSeconds = stallSeconds
        self.stopTail = stopTail
    }

    public func prepare(_ context: StageContext) throws {
        let mic = try MicrophoneDevice(name: device, sampleRate: sampleRate, channels: channels)
        microphone = mic
        negotiated = mic.format
        context.emit(.notice("microphone \(device): \(mic.format.summary)"))
        try mic.start()
    }

    /// Announces raw audio at the negotiated rate and channel count.
    public func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        guard let f = negotiated else { return StreamParameters(port: .frames) }
        return StreamParameters(port: .frames, audio: AudioParameters(sampleRate: f.sampleRate, channels: f.channels))
    }

    public func produce(_ context: StageContext) throws {
        guard let mic = microphone else { throw ClipFlowError.failure("microphone source '\(id)': produce before prepare") }
        if context.stopRequested { return }
        // The stop time on the device's clock (CLOCK_MONOTONIC), taken when the stop is asked for.
        let stopAt = Mutex<Double?>(nil)
        context.onStop { stopAt.withLock { $0 = $0 ?? SystemClock().now() } }
        let cancelled = Atomic<Bool>(false)
        context.onCancel { cancelled.store(true, ordering: .releasing) }
        let format = mic.format
        microphone = nil
        let reader = MicrophoneReader(device: mic, pollMs: Self.pollMs)
        reader.start(context.helpers, name: "microphone \(device)")
        defer { release(reader, context) }
        let rate = Double(format.sampleRate)
        let limit: Int64? = duration > 0 ? max(1, Int64((duration * rate).rounded())) : nil
        var lastAudio = SystemClock().now()
        var chunks = 0
        while !cancelled.load(ordering: .acquiring) && !context.cancellation.isCancelled {
            let stop = stopAt.withLock { $0 }
            let now = SystemClock().now()
            if let stop, now > stop + stopTail + 1 { break }
            let reading: MicrophoneRead
            switch reader.results.pull(waitingAtMost: Double(Self.pollMs) / 1000) {
            case .ended:
                // The thread ended without a last reading: it was told to stop.
                return report(context)
            case .empty:
                if let call = reader.callSeconds(now: now), call >= Self.hungSeconds {
                    lose(
                        "microphone '\(device)' stopped answering: a call into it has not returned for \(Self.seconds(Self.hungSeconds)) (its sound server or driver hung)",
                        context)
                    return
                }
                continue
            case .element(let pulled):
                reading = try pulled.element.get()
            }
            switch reading {
            case .timeout:
                if SystemClock().now() - lastAudio >= stallSeconds, stop == nil {
                    throw ClipFlowError.failure(
                        "microphone '\(device)' sent no audio for \(Self.seconds(stallSeconds)); is its sound server or driver stalled, or the device broken?"
                    )
                }
            case .overrun where framesCaptured == 0:
                continue
            case .overrun:
                overruns += 1
                context.emit(.notice("microphone \(device): overrun \(overruns) (audio lost; the recorder fills the gap)"))
            case .deviceLost(let why):
                lose(why, context)
                return
            case .audio(var samples, var frames, let clockTime, let readTime):
                lastAudio = SystemClock().now()
                if let limit, framesCaptured + Int64(frames) > limit {
                    frames = Int(limit - framesCaptured)
                    samples = Array(samples.prefix(frames * format.channels))
                }
                let chunk = AudioChunk(
                    sampleRate: format.sampleRate, channels: format.channels, samples: samples,
                    firstSample: framesCaptured, clockTime: clockTime, readTime: readTime)
                framesCaptured += Int64(frames)
                if context.push(.frame(.audio(chunk))) != .ok { return report(context) }
                chunks += 1
                if chunks % 100 == 0 { report(context) }
                if let limit, framesCaptured >= limit { return report(context) }
                if let stop, clockTime + Double(frames) / rate >= stop + stopTail { return report(context) }
            }
        }
        report(context)
    }

    /// The device went away: a notice, and the audio ends here.
    private func lose(_ why: String, _ context: StageContext) {
        deviceLost = true
        lossReason = why
        context.emit(.notice("\(why) after \(framesCaptured) frames; ending its audio there"))
        report(context)
    }

    /// Ends the reading thread, waiting for it at most `releaseSeconds`.
    private func release(_ reader: MicrophoneReader, _ context: StageContext) {
        if !reader.release(waitingAtMost: Self.releaseSeconds) {
            context.emit(
                .notice(
                    "microphone \(device): its reading thread did not end within \(Self.seconds(Self.releaseSeconds)) (a call into the device has not returned); left behind, with the device open"
                ))
        }
    }

    private func report(_ context: StageContext) {
        context.progress(framesCaptured, of: 0, unit: "audio frames")
    }

    static func seconds(_ s: Double) -> String {
        s == 1 ? "1 second" : s == s.rounded() ? "\(Int(s)) seconds" : String(format: "%.1f seconds", s)
    }

    public func finish(_ context: StageContext, outcome: StageOutcome) {
        microphone?.close()
        microphone = nil
    }
}
