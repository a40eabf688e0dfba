import ClipFlowMicrophone
import Foundation

/// The microphones part of `clipflow devices`: capture PCMs, then sound cards with their capture
/// devices, each with its rates and channels.
enum MicrophoneListingText {
    static func lines() -> [String] {
        // Some plugins' libraries (JACK's) print to stderr when their server is not running;
        // probing is not an error, so stderr is muted while the PCMs are tried.
        let (pcms, cards) = withStderrMuted { (MicrophoneListing.capturePCMs(), MicrophoneListing.cards()) }
        var out = ["microphones (ALSA capture):"]
        if pcms.isEmpty && cards.isEmpty { return out + ["  no microphones found (no ALSA capture device opened)"] }
        for m in pcms {
            let description = m.description.split(separator: "\n").joined(separator: ", ")
            out.append("  \(m.name)\(description.isEmpty ? "" : ": \(description)")")
            out.append("    rates \(range(m.rates)) Hz, channels \(range(m.channels))")
        }
        for c in cards {
            out.append("  card \(c.index) \(c.id): \(c.name)")
            if c.captureDevices.isEmpty { out.append("    no capture devices") }
            for d in c.captureDevices {
                let offers = d.rates.map { "rates \(range($0)) Hz, channels \(d.channels.map(range) ?? "?")" } ?? "busy (could not open)"
                out.append("    \(d.pcmName): \(d.name), \(offers)")
            }
        }
        return out
    }

    private static func withStderrMuted<T>(_ body: () -> T) -> T {
        fflush(nil)
        let saved = dup(2), null = open("/dev/null", O_WRONLY | O_CLOEXEC)
        guard saved >= 0, null >= 0 else { return body() }
        dup2(null, 2)
        close(null)
        defer {
            dup2(saved, 2)
            close(saved)
        }
        return body()
    }

    private static func range(_ r: ClosedRange<Int>) -> String {
        r.lowerBound == r.upperBound ? "\(r.lowerBound)" : "\(r.lowerBound)-\(r.upperBound)"
    }
}
