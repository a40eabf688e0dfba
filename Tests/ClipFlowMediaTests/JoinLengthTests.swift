import ClipFlowMedia
import ClipFlowTestSupport
import Foundation
import XCTest

/// No sound is dropped at a join: a clip whose sound outlasts its pictures has its last picture
/// held, so the sound plays out and the next clip still starts in sync. Judged by ffmpeg (the
/// decoded sound) and ffprobe (the pictures' times), never by our own code.
final class JoinLengthTests: XCTestCase {
    let fx = Fixtures.shared

    /// A clip of 2 s of pictures (30 fps) whose sound is `audioSeconds` long: a quiet tone with a
    /// 50 ms beep at 1 kHz 0.5 s after the clip's first picture, so each clip's sound can be found
    /// in the output (away from the joins, whose edges merge may repair).
    func beepClip(_ i: Int, audioSeconds: Double) throws -> String {
        try fx.clip(
            "join-length-\(i)-\(audioSeconds).mp4",
            [
                "-f", "lavfi", "-i", "testsrc2=size=320x240:rate=30,trim=start_frame=\(i * 60):end_frame=\(i * 60 + 60),setpts=PTS-STARTPTS",
                "-f", "lavfi", "-i", "aevalsrc='if(between(t,0.5,0.55),0.6*sin(2*PI*1000*t),0.05*sin(2*PI*440*t))':s=48000:d=\(audioSeconds)"
            ] + Fixtures.x264 + ["-c:a", "aac", "-b:a", "192k"])
    }

    /// Onset (seconds) of the first sample louder than `level` at or after `from` seconds.
    func onset(_ x: [Float], from: Double, level: Float = 0.3) -> Double? {
        let start = Int(from * 48000)
        guard start < x.count else { return nil }
        return x[start...].firstIndex { abs($0) > level }.map { Double($0) / 48000 }
    }

    func testSoundThatOutlastsThePicturesIsKeptAndTheNextClipStartsInSync() throws {
        // Two clips whose sound runs 100 ms past their last picture (a variable-rate phone
        // fragment), then one whose sound and pictures end together.
        try checkHeld([2.1, 2.1, 2], name: "join-length")
    }

    /// Sound that outlasts the pictures by more than one AAC frame and less than two (32 ms) is
    /// kept too: at most one frame of sound is cut at a join.
    func testSoundOneAndAHalfAACFramesPastThePicturesIsKept() throws {
        try checkHeld([2.032, 2.032, 2], name: "join-length-short")
    }

    /// Merges clips of 2 s of pictures and `sounds` seconds of sound, and checks the decoded sound
    /// is their sum within one AAC frame per join, and every clip starts after all the sound of
    /// the one before it, in sync.
    func checkHeld(_ sounds: [Double], name: String) throws {
        let clips = try sounds.enumerated().map { try beepClip($0.offset, audioSeconds: $0.element) }
        let out = fx.scratch(name).appendingPathComponent("merged.mp4")
        _ = try Merger(inputs: clips, options: MergeOptions(output: out)).run()
        XCTAssertEqual(try Probe.decodeErrors(out.path), "")

        // The decoded sound is the clips' sound: their sum within one AAC frame per join.
        XCTAssertEqual(Double(try Probe.stream(clips[0], "a:0", "duration")) ?? 0, sounds[0], accuracy: 0.001, "fixture: its sound")
        XCTAssertEqual(try Probe.stream(clips[0], "v:0", "duration"), "2.000000", "fixture: 2 s of pictures")
        let inputs = try clips.map { try Probe.audioSamples($0).count }
        let sound = try Probe.audioSamples(out.path)
        XCTAssertEqual(
            Double(sound.count), Double(inputs.reduce(0, +)), accuracy: Double(clips.count - 1) * 1024, "decoded \(sound.count), clips \(inputs)")

        // Each clip starts in sync (its beep 0.5 s after its first picture, as in the clip), after
        // all the sound of the clip before it: that clip's last picture was held.
        let pts = try Probe.videoPTS(out.path)
        XCTAssertEqual(pts.count, 180)
        let frame = 1.0 / 30
        let starts = [0.0, sounds[0], sounds[0] + sounds[1]]
        for (i, picture) in [0, 60, 120].enumerated() {
            XCTAssertEqual(pts[picture] - pts[0], starts[i], accuracy: frame, "clip \(i + 1) starts after the sound before it")
            let beep = try XCTUnwrap(onset(sound, from: pts[picture] - pts[0]), "clip \(i + 1)'s beep")
            XCTAssertEqual(beep - (pts[picture] - pts[0]), 0.5, accuracy: frame, "clip \(i + 1): its sound and its first picture")
        }
    }
}
