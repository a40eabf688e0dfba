internal import CClipFlowALSA
import Foundation

/// A capture PCM that opened for capture, with what it offers.
public struct MicrophoneInfo: Sendable, Equatable {
    /// The ALSA PCM name to record from (`MicrophoneSource` device, `record --audio`).
    public let name: String
    /// alsa-lib's description of it (may span lines; empty when it has none).
    public let description: String
    public let rates: ClosedRange<Int>
    public let channels: ClosedRange<Int>
}

/// A sound card and its capture devices (`hw:CARD=id,DEV=n`).
public struct SoundCardInfo: Sendable, Equatable {
    public let index: Int
    public let id: String
    public let name: String
    public let captureDevices: [CaptureDeviceInfo]
}

/// One capture device of a card; `rates`/`channels` nil when it could not be opened (busy).
public struct CaptureDeviceInfo: Sendable, Equatable {
    public let pcmName: String
    public let name: String
    public let rates: ClosedRange<Int>?
    public let channels: ClosedRange<Int>?
}

/// The microphones alsa-lib knows: capture PCMs from its name hints and the sound cards.
public enum MicrophoneListing {
    /// Capture PCMs from the name hints (I/O direction unset or "Input") that open for capture
    /// (non-blocking; one that fails to open, such as a sound server's plugin without a
    /// reachable server, is left out), in alsa-lib's order. The `null` PCM (endless zeros, no
    /// device behind it) is not a microphone and is left out too.
    public static func capturePCMs() -> [MicrophoneInfo] {
        cf_alsa_silence_library_messages()
        var hints: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
        guard snd_device_name_hint(-1, "pcm", &hints) >= 0, let hints else { return [] }
        defer { snd_device_name_free_hint(hints) }
        var found: [MicrophoneInfo] = []
        var i = 0
        while let hint = hints[i] {
            i += 1
            guard let name = string(hint, "NAME"), name != "null" else { continue }
            let direction = string(hint, "IOID")
            guard direction == nil || direction == "Input" else { continue }
            guard let r = ranges(of: name) else { continue }
            found.append(MicrophoneInfo(name: name, description: string(hint, "DESC") ?? "", rates: r.rates, channels: r.channels))
        }
        return found
    }

    /// The sound cards and their capture devices.
    public static func cards() -> [SoundCardInfo] {
        cf_alsa_silence_library_messages()
        var cards: [SoundCardInfo] = []
        var card: Int32 = -1
        while snd_card_next(&card) >= 0, card >= 0 {
            var ctl: OpaquePointer?
            guard snd_ctl_open(&ctl, "hw:\(card)", 0) >= 0, let ctl else { continue }
            defer { snd_ctl_close(ctl) }
            var info: OpaquePointer?
            guard snd_ctl_card_info_malloc(&info) >= 0, let info else { continue }
            defer { snd_ctl_card_info_free(info) }
            guard snd_ctl_card_info(ctl, info) >= 0 else { continue }
            let id = String(cString: snd_ctl_card_info_get_id(info))
            let name = String(cString: snd_ctl_card_info_get_name(info))
            var devices: [CaptureDeviceInfo] = []
            var pcmInfo: OpaquePointer?
            guard snd_pcm_info_malloc(&pcmInfo) >= 0, let pcmInfo else { continue }
            defer { snd_pcm_info_free(pcmInfo) }
            var device: Int32 = -1
            while snd_ctl_pcm_next_device(ctl, &device) >= 0, device >= 0 {
                snd_pcm_info_set_device(pcmInfo, UInt32(device))
                snd_pcm_info_set_subdevice(pcmInfo, 0)
                snd_pcm_info_set_stream(pcmInfo, SND_PCM_STREAM_CAPTURE)
                guard snd_ctl_pcm_info(ctl, pcmInfo) >= 0 else { continue }
                let pcmName = "hw:CARD=\(id),DEV=\(device)"
                let r = ranges(of: pcmName)
                devices.append(
                    CaptureDeviceInfo(
                        pcmName: pcmName, name: String(cString: snd_pcm_info_get_name(pcmInfo)), rates: r?.rates, channels: r?.channels))
            }
            cards.append(SoundCardInfo(index: Int(card), id: id, name: name, captureDevices: devices))
        }
        return cards
    }

    /// The rate and channel ranges `name` offers for capture; nil when it does not open.
    static func ranges(of name: String) -> (rates: ClosedRange<Int>, channels: ClosedRange<Int>)? {
        var pcm: OpaquePointer?
        guard snd_pcm_open(&pcm, name, SND_PCM_STREAM_CAPTURE, SND_PCM_NONBLOCK) >= 0, let pcm else { return nil }
        defer { snd_pcm_close(pcm) }
        var r = cf_alsa_ranges()
        guard cf_alsa_ranges_of(pcm, &r) >= 0, r.rate_min <= r.rate_max, r.channels_min <= r.channels_max else { return nil }
        return (Int(r.rate_min)...Int(r.rate_max), Int(r.channels_min)...Int(r.channels_max))
    }

    private static func string(_ hint: UnsafeMutableRawPointer, _ id: String) -> String? {
        guard let p = snd_device_name_get_hint(hint, id) else { return nil }
        defer { free(p) }
        return String(cString: p)
    }
}
