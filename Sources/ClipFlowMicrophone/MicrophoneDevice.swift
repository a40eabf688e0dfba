internal import CClipFlowALSA
import ClipFlowCore
import Foundation

/// What a capture PCM agreed to.
public struct MicrophoneFormat: Sendable, Equatable {
    public let sampleRate: Int
    public let channels: Int
    /// The device's sample layout ("s16le", "f32le" or "s32le"); chunks are delivered as Float.
    public let sampleFormat: String
    public let periodFrames: Int
    public let bufferFrames: Int

    public var summary: String {
        let ms = { (frames: Int) in Int((Double(frames) * 1000 / Double(max(sampleRate, 1))).rounded()) }
        return "\(sampleRate) Hz, \(channels) channel\(channels == 1 ? "" : "s"), \(sampleFormat), period \(ms(periodFrames)) ms, buffer \(ms(bufferFrames)) ms"
    }
}

/// The outcome of one `MicrophoneDevice.read`.
public enum MicrophoneRead: Sendable {
    /// Interleaved samples (`frames` x channels), the CLOCK_MONOTONIC time of the first frame,
    /// and the time they were read (their last frame was captured before it).
    case audio(samples: [Float], frames: Int, clockTime: Double, readTime: Double)
    /// Nothing arrived within the timeout.
    case timeout
    /// The device overran (frames were lost); capture was restarted and goes on.
    case overrun
    /// The device went away (unplugged, or its server ended); the message says how.
    case deviceLost(String)
}

/// One ALSA capture PCM (owns the `snd_pcm_t`, closed by `close()` or deinit), opened
/// non-blocking, so a read waits at most its timeout even where a plugin's blocking read would
/// hang. Not thread-safe: one owner (a stage queue) uses it.
///
/// Timestamps: after each read, the status gives `htstamp` (CLOCK_MONOTONIC at the status call)
/// and `delay` (frames captured but not read yet), so the first frame of the `n` just read was
/// captured at `htstamp - (delay + n) / rate`. The measure is late by up to tens of milliseconds
/// at times (scheduling, a sound server's latency estimate), never early by much.
public final class MicrophoneDevice {
    /// The ALSA PCM name (`default`, `hw:1,0`, `plughw:CARD=C920,DEV=0`, `pulse`, ...).
    public let name: String
    public let format: MicrophoneFormat
    private var pcm: OpaquePointer?
    private var raw: [UInt8]
    private var started = false

    /// Period and buffer asked for: reads of about 10 ms, and room for 500 ms of scheduling delay.
    static let periodMicroseconds: UInt32 = 10_000
    static let bufferMicroseconds: UInt32 = 500_000

    /// Opens `name` for capture and negotiates the rate and channel count nearest to the ones asked
    /// for. Throws `ClipFlowError.badInput` naming the device and the reason.
    public init(name: String, sampleRate: Int = 48000, channels: Int = 2) throws {
        self.name = name
        cf_alsa_silence_library_messages()
        var handle: OpaquePointer?
        let e = snd_pcm_open(&handle, name, SND_PCM_STREAM_CAPTURE, SND_PCM_NONBLOCK)
        guard e >= 0, let handle else { throw Self.error(name, "cannot open", e) }
        var config = cf_alsa_config()
        config.rate = UInt32(clamping: sampleRate)
        config.channels = UInt32(clamping: channels)
        config.period_us = Self.periodMicroseconds
        config.buffer_us = Self.bufferMicroseconds
        var step: UnsafePointer<CChar>?
        let c = cf_alsa_configure(handle, &config, &step)
        guard c >= 0 else {
            snd_pcm_close(handle)
            throw Self.error(name, step.map { String(cString: $0) } ?? "negotiating the format", c)
        }
        let layout: (String, Int)
        switch config.format {
        case cf_alsa_float: layout = ("f32le", 4)
        case cf_alsa_s32: layout = ("s32le", 4)
        default: layout = ("s16le", 2)
        }
        pcm = handle
        format = MicrophoneFormat(
            sampleRate: Int(config.rate), channels: Int(config.channels), sampleFormat: layout.0,
            periodFrames: Int(config.period_frames), bufferFrames: Int(config.buffer_frames))
        raw = [UInt8](repeating: 0, count: max(Int(config.period_frames), 1) * Int(config.channels) * layout.1)
    }

    deinit { close() }

    public func close() {
        guard let p = pcm else { return }
        pcm = nil
        snd_pcm_close(p)
    }

    /// Starts capturing (the device's clock runs from here).
    public func start() throws {
        guard let p = pcm else { throw ClipFlowError.failure("microphone '\(name)': used after close") }
        let e = snd_pcm_start(p)
        if e < 0 { throw Self.error(name, "cannot start capturing", e) }
        started = true
    }

    /// Waits at most `timeoutMs` for audio and reads up to one period of it.
    public func read(timeoutMs: Int32) throws -> MicrophoneRead {
        guard let p = pcm else { throw ClipFlowError.failure("microphone '\(name)': used after close") }
        if !started { try start() }
        let w = snd_pcm_wait(p, timeoutMs)
        if w == 0 { return .timeout }
        if w < 0 { return try recover(p, w) }
        let bytesPerFrame = raw.count / max(format.periodFrames, 1)
        let n = raw.withUnsafeMutableBytes { snd_pcm_readi(p, $0.baseAddress, snd_pcm_uframes_t($0.count / bytesPerFrame)) }
        if n == -Int(EAGAIN) || n == 0 { return .timeout }
        if n < 0 { return try recover(p, Int32(n)) }
        var status = cf_alsa_status_reading()
        let s = cf_alsa_status(p, &status)
        if s < 0 { return try recover(p, s) }
        let frames = Int(n)
        let clockTime = status.htstamp - Double(status.delay + frames) / Double(format.sampleRate)
        return .audio(samples: samples(frames: frames), frames: frames, clockTime: clockTime, readTime: status.htstamp)
    }

    /// Interleaved Float samples in -1...1 from the first `frames` frames of `raw`.
    private func samples(frames: Int) -> [Float] {
        let count = frames * format.channels
        return raw.withUnsafeBytes { b -> [Float] in
            switch format.sampleFormat {
            case "f32le": return Array(b.bindMemory(to: Float.self).prefix(count))
            case "s32le": return b.bindMemory(to: Int32.self).prefix(count).map { Float(Int32(littleEndian: $0)) / 2_147_483_648 }
            default: return b.bindMemory(to: Int16.self).prefix(count).map { Float(Int16(littleEndian: $0)) / 32768 }
            }
        }
    }

    /// An overrun restarts capture (`.overrun`); a suspend resumes; a vanished device is
    /// `.deviceLost`, also when it vanishes while capture restarts.
    private func recover(_ p: OpaquePointer, _ e: Int32) throws -> MicrophoneRead {
        switch -e {
        case EPIPE:
            for step in [snd_pcm_prepare, snd_pcm_start] {
                let r = step(p)
                if Self.gone(r) { return .deviceLost("microphone '\(name)' went away: \(Self.text(r))") }
                if r < 0 { throw Self.error(name, "cannot restart after an overrun", r) }
            }
            return .overrun
        case ESTRPIPE:
            var r = snd_pcm_resume(p)
            for _ in 0..<50 {
                if r != -EAGAIN { break }
                usleep(20_000)
                r = snd_pcm_resume(p)
            }
            if r < 0 {
                let q = snd_pcm_prepare(p)
                if Self.gone(q) { return .deviceLost("microphone '\(name)' went away: \(Self.text(q))") }
                if q < 0 { throw Self.error(name, "cannot resume after a suspend", q) }
            }
            if snd_pcm_state(p) != SND_PCM_STATE_RUNNING { _ = snd_pcm_start(p) }
            return .overrun
        case ENODEV, EBADFD, EIO:
            return .deviceLost("microphone '\(name)' went away: \(Self.text(e))")
        default:
            throw Self.error(name, "cannot read", e)
        }
    }

    /// Whether an alsa-lib result says the device is gone (its server died, it was unplugged).
    static func gone(_ r: Int32) -> Bool { r == -ENODEV || r == -EBADFD || r == -EIO }

    static func text(_ e: Int32) -> String { String(cString: snd_strerror(e)) }

    static func error(_ name: String, _ what: String, _ e: Int32) -> ClipFlowError {
        ClipFlowError.badInput("microphone '\(name)': \(what): \(text(e)) (list microphones with 'clipflow devices')")
    }
}
