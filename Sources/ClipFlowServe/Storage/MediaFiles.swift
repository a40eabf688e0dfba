import ClipFlowCore
import ClipFlowUpload
import Foundation
import HTTPTypes
import Hummingbird

/// `DATA/media` under `/media`, GET and HEAD only: the published ladders' playlists, segments,
/// covers and feed manifests.
///
/// - A path is served only when every component is a plain name (no empty, `.`, `..` or hidden
///   component: unfinished ladders live in hidden temporary folders), the file is a regular file
///   reached without following a symbolic link, and its extension is one of `MediaServing.types`
///   (anything else: 404).
/// - A file that is there but cannot be opened now (no permission, too many open files, an I/O
///   error) is 503 with `Retry-After`, never 404 (a 404 of an immutable URL may be kept by
///   caches); the log names the file (relative to the data folder) and the reason.
/// - Every answer carries the type from that table, `X-Content-Type-Options: nosniff`, an `ETag`
///   and `Last-Modified`, and `Cache-Control: public, max-age=31536000, immutable`: a ladder's
///   folder is written once under a new name and never changed, so its files may be kept for good
///   (but a recording's live playlists, which grow: `cacheControl(for:)`).
/// - `If-None-Match` (or, without it, `If-Modified-Since`) answers 304 when the file is unchanged.
/// - `Range` on GET, as RFC 9110 section 14 says (`ByteRanges`): one satisfiable range, 206 with
///   `Content-Range`; none satisfiable, 416 with `Content-Range: bytes */LENGTH`; a header that is
///   not a valid `bytes` range set, or an `If-Range` that does not match, is ignored (200). Several
///   satisfiable ranges are answered with the whole file (200), never `multipart/byteranges`.
struct MediaFiles<Context: RequestContext>: RouterMiddleware {
    let folder: URL

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let relative: String
        switch MediaRequest(request) {
        case .elsewhere: return try await next(request, context)
        case .refused(let answer): return answer
        case .file(let path): relative = path
        }
        let path = folder.appendingPathComponent(relative).path
        let file: OpenMediaFile
        do { file = try await MediaServing.io.perform { try OpenMediaFile(path) } } catch MediaFileError.absent {
            return MediaServing.refusal(.notFound, "no such media file")
        } catch {
            context.logger.error("cannot serve \(folder.lastPathComponent)/\(relative): \(error)")
            var r = MediaServing.refusal(.serviceUnavailable, "the media file cannot be read now; try again later")
            r.headers[.retryAfter] = String(MediaServing.retryAfter)
            return r
        }
        return MediaServing.answer(request, file, relative: relative)
    }
}

/// What a request asks of `/media`.
enum MediaRequest {
    /// Nothing: it is not under `/media` (the next handler's).
    case elsewhere
    /// An answer at once: a method other than GET and HEAD (405), a path that may not be served
    /// (404).
    case refused(Response)
    /// The file at this path inside the media folder.
    case file(String)

    init(_ request: Request) {
        let raw = request.uri.path
        guard raw.hasPrefix(MediaServing.prefix) else {
            self = .elsewhere
            return
        }
        guard request.method == .get || request.method == .head else {
            var r = MediaServing.refusal(.methodNotAllowed, "\(request.method): /media answers GET and HEAD")
            r.headers[.allow] = "GET, HEAD"
            self = .refused(r)
            return
        }
        guard let relative = MediaServing.relativePath(String(raw.dropFirst(MediaServing.prefix.count))) else {
            self = .refused(MediaServing.refusal(.notFound, "no such media file"))
            return
        }
        self = .file(relative)
    }
}

/// What `MediaFiles` serves and how.
enum MediaServing {
    static let prefix = "/media/"
    /// Bytes read from the file per write to the connection.
    static let chunk = 256 << 10
    /// The extensions served; their types come from the product's table (`mimeType(forExtension:)`).
    static let types: Set<String> = ["m3u8", "m4s", "mp4", "m4a", "ts", "aac", "vtt", "jpg", "jpeg", "png", "json"]
    static let cacheControl = "public, max-age=31536000, immutable"

    /// How long the file at `relative` (`ID/FOLDER/...`) may be kept: for good, but the files at
    /// the top of a recording's live folder (its growing playlists and feed entry), which are
    /// asked again each time (`no-cache`: their `ETag` makes that a 304 while unchanged).
    static func cacheControl(for relative: String) -> String {
        let parts = relative.split(separator: "/")
        return parts.count == 3 && parts[1] == LiveRecordings.liveName ? "no-cache" : cacheControl
    }
    /// Seconds a client is told to wait before it asks again for a file that could not be read.
    static let retryAfter = 5
    /// Where media files are opened and read (blocking calls, never on an event loop or a thread
    /// of Swift's cooperative pool).
    static let io = DispatchQueue(label: "clipflow.serve.media", attributes: .concurrent)

    /// `encoded` (what follows `/media/`, percent-encoded) as a path inside the media folder, or
    /// nil when it may not be served.
    static func relativePath(_ encoded: String) -> String? {
        guard let decoded = encoded.removingPercentEncoding else { return nil }
        let parts = decoded.split(separator: "/", omittingEmptySubsequences: false)
        guard let name = parts.last else { return nil }
        for p in parts where p.isEmpty || p.hasPrefix(".") || p.contains("\0") || p.contains("\\") { return nil }
        guard let dot = name.lastIndex(of: "."), types.contains(name[name.index(after: dot)...].lowercased()) else { return nil }
        return parts.joined(separator: "/")
    }

    /// The media type served for `name`.
    static func contentType(_ name: String) -> String {
        mimeType(forExtension: URL(fileURLWithPath: name).pathExtension)
    }

    static func answer(_ request: Request, _ file: OpenMediaFile, relative: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = contentType(file.path)
        headers[.cacheControl] = cacheControl(for: relative)
        headers[.acceptRanges] = "bytes"
        headers[.eTag] = file.etag
        headers[.lastModified] = TUSServer.httpDate(Double(file.modified))
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        if Conditions.notModified(request.headers, etag: file.etag, modified: file.modified) {
            return Response(status: .notModified, headers: headers)
        }
        var start: Int64 = 0, count = file.length, status = HTTPResponse.Status.ok
        if request.method == .get, let header = request.headers[.range],
            Conditions.ifRangeHolds(request.headers[.ifRange], etag: file.etag, modified: file.modified)
        {
            switch ByteRanges.evaluate(header, length: file.length) {
            case .ignore: break
            case .unsatisfiable:
                var r = refusal(.rangeNotSatisfiable, "Range: no range overlaps the file's \(file.length) bytes")
                r.headers[.contentRange] = "bytes */\(file.length)"
                return r
            case .range(let first, let last):
                (start, count, status) = (first, last - first + 1, .partialContent)
                headers[.contentRange] = "bytes \(first)-\(last)/\(file.length)"
            }
        }
        headers[.contentLength] = String(count)
        guard request.method == .get else { return Response(status: status, headers: headers) }
        return Response(status: status, headers: headers, body: body(file, from: start, count: count))
    }

    /// `count` bytes of `file` from `start`, read off the event loops in chunks as the connection
    /// takes them.
    private static func body(_ file: OpenMediaFile, from start: Int64, count: Int64) -> ResponseBody {
        ResponseBody { writer in
            var at = start, left = count
            while left > 0 {
                let n = Int(min(Int64(chunk), left))
                let offset = at
                let bytes = try await io.perform { try file.read(n, at: offset) }
                try await writer.write(ByteBuffer(bytes: bytes))
                at += Int64(bytes.count)
                left -= Int64(bytes.count)
            }
            try await writer.finish(nil)
        }
    }

    static func refusal(_ status: HTTPResponse.Status, _ reason: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/plain; charset=utf-8"
        return Response(status: status, headers: headers, body: .init(byteBuffer: ByteBuffer(string: reason + "\n")))
    }
}

/// Why a media file cannot be opened.
enum MediaFileError: Error, Equatable, CustomStringConvertible {
    /// Nothing servable is there: no such file, or not a regular file (a folder, a symbolic link,
    /// a FIFO, a socket, a device). Asking again gives the same answer.
    case absent
    /// A file may be there but cannot be opened or examined now (the errno says why).
    case unavailable(Int32)

    /// What an `open` of a media path that failed with `code` means.
    init(opening code: Int32) {
        switch code {
        // ELOOP: a symbolic link (O_NOFOLLOW); ENXIO: a socket or a device without its driver.
        case ENOENT, ENOTDIR, ELOOP, ENAMETOOLONG, ENXIO: self = .absent
        default: self = .unavailable(code)
        }
    }

    var description: String {
        switch self {
        case .absent: "no such regular file"
        case .unavailable(let code): String(cString: strerror(code))
        }
    }
}

/// A media file open for reading: owns its descriptor (closed in deinit). Reads are positioned
/// (`pread`), so one open file may be read from any thread; `Sendable`.
final class OpenMediaFile: Sendable {
    let path: String
    private let fd: Int32
    let length: Int64
    /// Seconds since 1970.
    let modified: Int64
    /// A strong validator: the file's size, modification time (ns) and inode.
    let etag: String

    /// Opens a regular file, refusing a symbolic link as the last component; throws
    /// `MediaFileError`. The open does not block (a FIFO without a writer would hold it; reads of
    /// a regular file are not affected).
    init(_ path: String) throws {
        self.path = path
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK)
        guard fd >= 0 else { throw MediaFileError(opening: errno) }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let code = errno
            close(fd)
            throw MediaFileError.unavailable(code)
        }
        guard (st.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            throw MediaFileError.absent
        }
        length = Int64(st.st_size)
        modified = Int64(st.st_mtim.tv_sec)
        let hex = { (n: Int) in String(n, radix: 16) }
        etag = "\"\(hex(st.st_size))-\(hex(st.st_mtim.tv_sec)).\(hex(st.st_mtim.tv_nsec))-\(String(st.st_ino, radix: 16))\""
    }

    deinit { close(fd) }

    /// Up to `count` bytes at `offset`; fewer only at the end of the file (throws when the file
    /// shrank under the reader: the answer's length was promised already).
    func read(_ count: Int, at offset: Int64) throws -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        var done = 0
        try out.withUnsafeMutableBytes { raw in
            while done < count {
                let n = pread(fd, raw.baseAddress! + done, count - done, off_t(offset) + off_t(done))
                if n < 0, errno == EINTR { continue }
                guard n > 0 else { throw ClipFlowError.output("'\(path)' ended early (changed while it was sent)") }
                done += n
            }
        }
        return out
    }
}

/// RFC 9110 section 14: the `Range` header of a GET, against a representation of `length` bytes.
enum ByteRanges: Equatable {
    /// Not a valid `bytes` range set (or nothing to range over): answer the whole file.
    case ignore
    /// Valid, but no range overlaps the file: 416.
    case unsatisfiable
    /// One satisfiable range, inclusive.
    case range(Int64, Int64)

    /// Ranges at most this many: a longer set is ignored (whole file) without being read.
    static let maxRanges = 100

    static func evaluate(_ header: String, length: Int64) -> ByteRanges {
        guard let eq = header.firstIndex(of: "="), header[..<eq].trimmingCharacters(in: .whitespaces).lowercased() == "bytes" else { return .ignore }
        let specs = header[header.index(after: eq)...].split(separator: ",", omittingEmptySubsequences: false)
            .map { $0.trimmingCharacters(in: CharacterSet(charactersIn: " \t")) }
        // An empty element (`bytes=0-1,,2-3`) is allowed by the list syntax; at least one must be there.
        let present = specs.filter { !$0.isEmpty }
        guard !present.isEmpty, present.count <= maxRanges, length > 0 else { return .ignore }
        var satisfiable: [(Int64, Int64)] = []
        for spec in present {
            guard let dash = spec.firstIndex(of: "-") else { return .ignore }
            let a = spec[..<dash], b = spec[spec.index(after: dash)...]
            if a.isEmpty {
                // suffix-range: the last N bytes (all of them when N is larger).
                guard let n = number(b) else { return .ignore }
                if n > 0 { satisfiable.append((max(0, length - n), length - 1)) }
            } else {
                guard let first = number(a) else { return .ignore }
                var last = Int64.max
                if !b.isEmpty {
                    guard let l = number(b) else { return .ignore }
                    last = l
                }
                guard last >= first else { return .ignore }
                if first < length { satisfiable.append((first, min(last, length - 1))) }
            }
        }
        switch satisfiable.count {
        case 0: return .unsatisfiable
        case 1: return .range(satisfiable[0].0, satisfiable[0].1)
        default: return .ignore
        }
    }

    /// 1*DIGIT; a number too large for Int64 is Int64.max (past any file's end); nil otherwise.
    private static func number(_ s: Substring) -> Int64? {
        guard !s.isEmpty, s.utf8.allSatisfy({ $0 >= 48 && $0 <= 57 }) else { return nil }
        return Int64(s) ?? Int64.max
    }
}

/// Conditional requests (RFC 9110 section 13) on a file's `ETag` and modification time.
enum Conditions {
    /// Whether a GET or HEAD is answered 304: `If-None-Match` lists the file's tag (weak
    /// comparison, or `*`); without it, `If-Modified-Since` is no earlier than the file's time.
    static func notModified(_ headers: HTTPFields, etag: String, modified: Int64) -> Bool {
        let tags = headers[values: .ifNoneMatch].flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        if !tags.isEmpty {
            return tags.contains { $0 == "*" || weak($0) == weak(etag) }
        }
        if let since = headers[.ifModifiedSince].flatMap(httpDate) { return modified <= since }
        return false
    }

    /// Whether `If-Range` (absent, or the file's strong tag, or its exact date) lets a range apply.
    static func ifRangeHolds(_ value: String?, etag: String, modified: Int64) -> Bool {
        guard let v = value?.trimmingCharacters(in: .whitespaces) else { return true }
        if v.hasPrefix("\"") { return v == etag }
        return httpDate(v) == modified
    }

    private static func weak(_ tag: String) -> String { tag.hasPrefix("W/") ? String(tag.dropFirst(2)) : tag }

    /// An IMF-fixdate (the form this server sends) as seconds since 1970.
    static func httpDate(_ text: String) -> Int64? {
        let f = DateFormatter()
        f.locale = Locale(identifier: "en_US_POSIX")
        f.timeZone = TimeZone(identifier: "GMT")
        f.dateFormat = "EEE, dd MMM yyyy HH:mm:ss 'GMT'"
        return f.date(from: text).map { Int64($0.timeIntervalSince1970) }
    }
}
