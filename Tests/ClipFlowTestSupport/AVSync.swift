import Foundation

/// Where sound and picture of the same instants land in a file, judged by ffmpeg: the source
/// flashes (a white picture) and beeps (a loud 1 kHz tone over a quiet one) at the same instants.
public enum AVSync {
    /// Presentation times of the pictures whose mean luma is above `threshold` (flashes).
    public static func flashTimes(_ path: String, threshold: Double = 200) throws -> [Double] {
        let r = try Run.run([
            "ffprobe", "-v", "error", "-f", "lavfi", "-i", "movie=\(path),signalstats", "-show_entries",
            "frame=pts_time:frame_tags=lavfi.signalstats.YAVG", "-of", "csv=p=0"
        ])
        var out: [Double] = []
        for line in r.out.split(separator: "\n") {
            let f = line.split(separator: ",").compactMap { Double($0) }
            if f.count == 2, f[1] > threshold { out.append(f[0]) }
        }
        return out
    }

    /// Seconds from the start of the decoded audio (ffmpeg applies the edit list: priming is not
    /// in it) at which a beep starts: the first sample above `threshold` after at least half a
    /// second without one.
    public static func beepOnsets(_ path: String, threshold: Float = 0.2, rate: Int = 48_000) throws -> [Double] {
        let s = try Probe.audioSamples(path)
        var out: [Double] = []
        var last = -rate
        for (i, v) in s.enumerated() where abs(v) > threshold {
            if i - last > rate / 2 { out.append(Double(i) / Double(rate)) }
            last = i
        }
        return out
    }

    /// For each flash with a beep within half a second, the beep's start minus the flash
    /// (seconds; + : sound late). A flash without one (before the sound started) is left out.
    public static func offsets(_ path: String) throws -> [(flash: Double, offset: Double)] {
        let beeps = try beepOnsets(path)
        return try flashTimes(path).compactMap { f in
            beeps.min { abs($0 - f) < abs($1 - f) }.flatMap { abs($0 - f) < 0.5 ? (f, $0 - f) : nil }
        }
    }

    /// `samples` (mono, 48 kHz) as a stereo float WAV file `heard.wav` in `directory`: what a
    /// microphone was fed, for `scripts/join-metrics` to judge a recording against.
    public static func wav(_ samples: [Float], in directory: URL) throws -> String {
        let raw = directory.appendingPathComponent("heard.f32").path
        try samples.withUnsafeBytes { try Data($0).write(to: URL(fileURLWithPath: raw)) }
        let wav = directory.appendingPathComponent("heard.wav").path
        _ = try Run.run(["ffmpeg", "-v", "error", "-y", "-f", "f32le", "-ar", "48000", "-ac", "1", "-i", raw, "-ac", "2", "-c:a", "pcm_f32le", wav])
        return wav
    }

    /// Duration of a stream (`v:0`, `a:0`) as ffprobe reports it.
    public static func streamDuration(_ path: String, _ selector: String) throws -> Double {
        Double(try Probe.stream(path, selector, "duration")) ?? .nan
    }
}
