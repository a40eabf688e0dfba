import ClipFlowCore
import Foundation

/// Whether a file a run wrote is whole, judged by reading it (not by its presence): what a batch
/// asks before it skips a row whose outputs are there.
public enum OutputCheck {
    /// nil when `path` is a complete media file: an MP4/MOV whose sample tables add up to the
    /// file and whose video has a duration (`ClipProbe`), or any other file FFmpeg opens with at
    /// least one stream (a JPEG cover). Else the reason, naming the file.
    public static func problem(_ path: String) -> String? {
        do {
            try ClipProbe.checkReadableFile(path)
            let dmx = try Demuxer(path: path)
            if dmx.formatName.contains("mov") || dmx.formatName.contains("mp4") {
                let info = try ClipProbe.probe(path)
                return info.video.duration > 0 ? nil : "'\(path)': the video track has no duration"
            }
            return dmx.streamCount > 0 ? nil : "'\(path)': no stream FFmpeg can read"
        } catch let e as ClipFlowError {
            return e.message
        } catch {
            return "'\(path)': \(error)"
        }
    }
}
