import Foundation

// The one table of MIME types in the product: TUS `filetype` metadata, the S3 Content-Type and the
// types `clipflow serve` sends with media files.

/// A MIME type for a file extension (video first); `application/octet-stream` when unknown.
public func mimeType(forExtension ext: String) -> String {
    switch ext.lowercased() {
    case "mp4": return "video/mp4"
    // .m4v is MP4; browsers play `video/mp4` (`video/x-m4v` is Apple-only), and S3 serves it.
    case "m4v": return "video/mp4"
    case "mov": return "video/quicktime"
    case "mkv": return "video/x-matroska"
    case "webm": return "video/webm"
    case "avi": return "video/x-msvideo"
    case "ts", "m2ts": return "video/mp2t"
    case "mpg", "mpeg": return "video/mpeg"
    case "3gp": return "video/3gpp"
    case "m3u8": return "application/vnd.apple.mpegurl"
    // An fMP4 segment of HLS or DASH (RFC 8216 and ISO/IEC 23009-1 name this type).
    case "m4s": return "video/iso.segment"
    case "vtt": return "text/vtt"
    case "m4a": return "audio/mp4"
    case "aac": return "audio/aac"
    case "mp3": return "audio/mpeg"
    case "wav": return "audio/wav"
    case "jpg", "jpeg": return "image/jpeg"
    case "png": return "image/png"
    case "json": return "application/json"
    case "txt": return "text/plain"
    default: return "application/octet-stream"
    }
}
