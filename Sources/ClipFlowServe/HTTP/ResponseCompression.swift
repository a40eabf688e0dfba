internal import CClipFlowZlib
import Foundation
import HTTPTypes
import Hummingbird
import NIOCore

/// Gzip of text answers (pages, JSON, HLS playlists, subtitles, scripts and styles) for a client
/// that accepts it (`Accept-Encoding`, RFC 9110 section 12.5.3), around every route:
/// - Only a GET's 200, asked for without `Range`, of a text type (`textTypes`), without a
///   `Content-Encoding` of its own, whose length is known and from `minimumLength` to
///   `maximumLength` bytes, is gzipped; an answer gzip does not make smaller goes as it is. Media
///   (video, audio, pictures) never is, and neither is plain text (refusals, `/healthz`,
///   `/metrics`: short).
/// - A gzipped answer is another representation: its `Content-Length` is the gzip's and a strong
///   `ETag` becomes weak (`W/`, as nginx makes it), so a client revalidates it (`If-None-Match`
///   compares weakly: 304) but never ranges over it (`If-Range` takes strong tags only); a 304
///   for a client that accepts gzip carries the weak tag too.
/// - Every answer of a text type says `Vary: Accept-Encoding`, so caches keep the forms apart.
struct ResponseCompression<Context: RequestContext>: RouterMiddleware {
    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        var response = try await next(request, context)
        guard TextCompression.isText(response.headers[.contentType]) else { return response }
        response.headers[values: .vary].append("Accept-Encoding")
        guard TextCompression.acceptsGzip(request.headers[values: .acceptEncoding]) else { return response }
        if response.status == .notModified {
            TextCompression.weaken(&response.headers)
            return response
        }
        let length = response.body.contentLength ?? response.headers[.contentLength].flatMap { Int($0) }
        guard request.method == .get, response.status == .ok, request.headers[.range] == nil, response.headers[.contentEncoding] == nil,
            response.headers[.contentRange] == nil, let length, (TextCompression.minimumLength...TextCompression.maximumLength).contains(length)
        else { return response }
        let collected = BodyBytes()
        try await response.body.write(CollectingWriter(into: collected))
        let plain = collected.buffer
        guard let packed = try await TextCompression.queue.perform({ TextCompression.gzip(plain) }) else {
            response.body = ResponseBody(byteBuffer: plain)
            return response
        }
        response.headers[.contentEncoding] = "gzip"
        response.headers[.contentLength] = String(packed.readableBytes)
        TextCompression.weaken(&response.headers)
        response.body = ResponseBody(byteBuffer: packed)
        return response
    }
}

/// What `ResponseCompression` gzips, and how.
enum TextCompression {
    /// Media types whose answers are gzipped (compared without parameters, in lower case).
    static let textTypes: Set<String> = [
        "text/html", "text/css", "text/javascript", "application/javascript", "application/json", "application/vnd.apple.mpegurl",
        "application/x-mpegurl", "text/vtt", "image/svg+xml"
    ]
    /// Shorter answers are sent as they are: gzip's header and trailer take 18 bytes.
    static let minimumLength = 256
    /// Longer answers are sent as they are: a gzip is made whole, in memory.
    static let maximumLength = 8 << 20
    /// Where gzips are made (never on an event loop or a thread of Swift's cooperative pool).
    static let queue = DispatchQueue(label: "clipflow.serve.gzip", attributes: .concurrent)

    /// Whether a `Content-Type` names one of `textTypes`.
    static func isText(_ contentType: String?) -> Bool {
        guard let type = contentType?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased() else { return false }
        return textTypes.contains(type)
    }

    /// Whether `Accept-Encoding` (its values, each a list) accepts gzip: `gzip` or `x-gzip`, else
    /// `*`, with a weight above 0 (no weight is 1; a weight that is not a number is 0).
    static func acceptsGzip(_ values: [String]) -> Bool {
        var named: Double?, any: Double?
        for item in values.flatMap({ $0.split(separator: ",") }) {
            let parts = item.split(separator: ";").map { $0.filter { !$0.isWhitespace }.lowercased() }
            guard let coding = parts.first else { continue }
            let weight = parts.dropFirst().first { $0.hasPrefix("q=") }.map { Double($0.dropFirst(2)) ?? 0 } ?? 1
            switch coding {
            case "gzip", "x-gzip": named = max(named ?? 0, weight)
            case "*": any = weight
            default: break
            }
        }
        return (named ?? any ?? 0) > 0
    }

    /// A strong `ETag` made weak: the tag of the gzipped representation.
    static func weaken(_ headers: inout HTTPFields) {
        if let tag = headers[.eTag], !tag.hasPrefix("W/") { headers[.eTag] = "W/" + tag }
    }

    /// `bytes` gzipped, or nil when gzip does not make them smaller (or zlib fails).
    static func gzip(_ bytes: ByteBuffer) -> ByteBuffer? {
        let count = bytes.readableBytes
        guard count > 1 else { return nil }
        var out = [UInt8](repeating: 0, count: count - 1)
        var written = 0
        let status = bytes.withUnsafeReadableBytes { input in
            out.withUnsafeMutableBufferPointer { output in
                cf_gzip(input.baseAddress?.assumingMemoryBound(to: UInt8.self), count, output.baseAddress, output.count, &written)
            }
        }
        guard status == 0 else { return nil }
        return ByteBuffer(bytes: out.prefix(written))
    }
}

/// The bytes a body wrote: filled by one `CollectingWriter` in the task that awaits the body's
/// write, read by that task once the write returned.
private final class BodyBytes {
    var buffer = ByteBuffer()
}

/// A response body writer that keeps what is written instead of sending it.
private struct CollectingWriter: ResponseBodyWriter {
    let into: BodyBytes

    mutating func write(_ buffer: ByteBuffer) async throws {
        var b = buffer
        into.buffer.writeBuffer(&b)
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {}
}
