internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// What a transcode needs to know of one input, read from its container and stream headers
/// (any format FFmpeg demuxes: MP4/MOV, MKV/WebM, MPEG-TS, AVI, ...).
public struct SourceInfo: Sendable, Equatable {
    public struct Video: Sendable, Equatable {
        public var codec: String
        /// Stored (coded) size.
        public var width: Int
        public var height: Int
        public var pixelFormat: String
        /// Degrees the picture is turned clockwise when displayed (after mirroring, if mirrored).
        public var rotation: Int
        /// The picture is shown mirrored left to right (then turned by `rotation`).
        public var mirrored: Bool
        /// Average frames per second (nil if the container does not say).
        public var frameRate: Double?
        /// Size as displayed (turned by `rotation`).
        public var displaySize: PictureSize {
            rotation % 180 == 0 ? PictureSize(width: width, height: height) : PictureSize(width: height, height: width)
        }
    }
    public struct Audio: Sendable, Equatable {
        public var codec: String
        public var sampleRate: Int
        public var channels: Int
    }
    public var path: String
    /// The demuxer's name for the container ("mov,mp4,m4a,3gp,3g2,mj2", "matroska,webm").
    public var container: String
    /// Seconds, as the container states it (0 if unknown).
    public var duration: Double
    public var video: Video
    public var audio: Audio?
}

/// One input opened for transcoding: its demuxer and chosen streams. Owner: the decoding thread.
final class TranscodeInput {
    let info: SourceInfo
    let demuxer: Demuxer
    let videoIndex: Int
    let audioIndex: Int?

    /// Opens `path` and reads its streams' parameters. Throws a clear error for a missing,
    /// unreadable or unrecognised file, or one without a video stream FFmpeg can decode.
    init(path: String) throws {
        var isDir: ObjCBool = false
        if FileManager.default.fileExists(atPath: path, isDirectory: &isDir), isDir.boolValue {
            throw ClipFlowError.badInput("input '\(path)' is a directory, not a video")
        }
        let dmx = try Demuxer(path: path)
        let rc = avformat_find_stream_info(dmx.ctx, nil)
        if rc < 0 { throw ClipFlowError.badInput("input '\(path)': cannot read its streams: \(FF.describe(rc))") }
        let vi = av_find_best_stream(dmx.ctx, AVMEDIA_TYPE_VIDEO, -1, -1, nil, 0)
        guard vi >= 0 else { throw ClipFlowError.badInput("input '\(path)' has no video stream") }
        let vpar = dmx.codecpar(Int(vi)).pointee
        let vcodec = String(cString: avcodec_get_name(vpar.codec_id))
        guard avcodec_find_decoder(vpar.codec_id) != nil else {
            throw ClipFlowError.badInput("input '\(path)': this FFmpeg has no decoder for its \(vcodec) video")
        }
        guard vpar.width > 0, vpar.height > 0 else {
            throw ClipFlowError.badInput("input '\(path)': its \(vcodec) video has no picture size (damaged or truncated?)")
        }
        let orientation = DisplayOrientation(of: dmx, stream: Int(vi))
        let st = dmx.stream(Int(vi)).pointee
        let avg = st.avg_frame_rate.double > 0 ? st.avg_frame_rate.double : st.r_frame_rate.double
        let pix = av_get_pix_fmt_name(AVPixelFormat(vpar.format)).map { String(cString: $0) } ?? "unknown"
        let video = SourceInfo.Video(
            codec: vcodec, width: Int(vpar.width), height: Int(vpar.height), pixelFormat: pix, rotation: orientation.turn,
            mirrored: orientation.mirrored,
            frameRate: avg > 0 && avg < 1000 ? avg : nil)
        var audio: SourceInfo.Audio? = nil
        let ai = av_find_best_stream(dmx.ctx, AVMEDIA_TYPE_AUDIO, -1, vi, nil, 0)
        if ai >= 0 {
            let apar = dmx.codecpar(Int(ai)).pointee
            if avcodec_find_decoder(apar.codec_id) != nil, apar.sample_rate > 0, apar.ch_layout.nb_channels > 0 {
                audio = SourceInfo.Audio(
                    codec: String(cString: avcodec_get_name(apar.codec_id)), sampleRate: Int(apar.sample_rate), channels: Int(apar.ch_layout.nb_channels))
                audioIndex = Int(ai)
            } else {
                audioIndex = nil
            }
        } else {
            audioIndex = nil
        }
        let d = dmx.ctx.pointee.duration
        info = SourceInfo(path: path, container: dmx.formatName, duration: d > 0 ? Double(d) / Double(AV_TIME_BASE) : 0, video: video, audio: audio)
        demuxer = dmx
        videoIndex = Int(vi)
    }

    var videoTimeBase: AVRational { demuxer.stream(videoIndex).pointee.time_base }

    /// The first video timestamp (stream time base): the clip's time zero, for video and audio.
    var videoStart: Int64 {
        let s = demuxer.stream(videoIndex).pointee.start_time
        return s == FF.noPTS ? 0 : s
    }

    /// One frame thread per core: FFmpeg's own count adds one more, which holds more pictures
    /// and gains nothing while the encoder keeps the cores busy.
    func videoDecoder() throws -> CodecContext {
        try CodecContext.decoder(
            for: demuxer.codecpar(videoIndex), what: "input '\(info.path)': video decoder", threads: ProcessInfo.processInfo.activeProcessorCount,
            timeBase: videoTimeBase)
    }

    func audioDecoder() throws -> CodecContext? {
        guard let ai = audioIndex else { return nil }
        return try CodecContext.decoder(
            for: demuxer.codecpar(ai), what: "input '\(info.path)': audio decoder", threads: 1, timeBase: demuxer.stream(ai).pointee.time_base)
    }
}
