import Foundation
import HTTPTypes
import Hummingbird
import NIOCore
import Synchronization

/// The outermost middleware: times each request, counts the body bytes read and written, and once
/// the answer is sent (or sending it failed) writes its line to the log and counts it in the
/// metrics. An error thrown inside becomes its answer here, so the line has the status the client
/// gets.
///
/// The path written is the route (`/files/{id}`), or, when no route matched, the request's path
/// without its query; under an upload prefix (`/files`, `/upload`) anything past the prefix is
/// written as `…`: an upload's URL is the capability to write to it.
struct RequestLog<Context: RequestContext>: RouterMiddleware {
    let log: ServeLog
    let metrics: ServeMetrics
    /// Where TUS uploads are served (`/files`): their requests' bodies count as upload bytes, a
    /// 201 to a POST there as an upload created.
    let uploadPrefixes: [String]

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let started = ContinuousClock.now
        let received = ByteCount()
        var request = request
        request.body = RequestBody(asyncSequence: CountedBody(base: request.body, count: received))
        var response: Response
        do { response = try await next(request, context) } catch let error as any HTTPResponseError {
            response = try error.response(from: request, context: context)
        } catch {
            // The framework answers 500 with no body.
            let path = RequestRecord.loggedPath(route: context.endpointPath, path: request.uri.path, uploadPrefixes: uploadPrefixes)
            finish(request.method, path, status: 500, received: received.value, sent: 0, started: started)
            throw error
        }
        let path = RequestRecord.loggedPath(route: context.endpointPath, path: request.uri.path, uploadPrefixes: uploadPrefixes)
        let method = request.method, status = response.status.code
        let body = response.body
        response.body = ResponseBody(contentLength: body.contentLength) { writer in
            let sent = ByteCount()
            do {
                try await body.write(CountingWriter(parent: writer, count: sent))
            } catch {
                finish(method, path, status: status, received: received.value, sent: sent.value, started: started)
                throw error
            }
            finish(method, path, status: status, received: received.value, sent: sent.value, started: started)
        }
        return response
    }

    private func finish(_ method: HTTPRequest.Method, _ path: String, status: Int, received: Int, sent: Int, started: ContinuousClock.Instant) {
        let elapsed = started.duration(to: .now)
        let seconds = Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18
        let upload = uploadPrefixes.contains { path == $0 || path.hasPrefix($0 + "/") }
        if upload {
            metrics.uploadBytes(received)
            if method == .post, status == 201 { metrics.uploadCreated() }
        }
        metrics.answered(status: status)
        log.request(RequestRecord(method: method.rawValue, path: path, status: status, received: received, sent: sent, seconds: seconds))
    }
}

/// A count of bytes, added to by one task and read by another. Thread-safe.
final class ByteCount: Sendable {
    private let count = Atomic<Int>(0)
    func add(_ n: Int) { count.add(n, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}

/// A request body that counts the bytes read from it.
struct CountedBody: AsyncSequence, Sendable {
    typealias Element = ByteBuffer
    let base: RequestBody
    let count: ByteCount

    struct AsyncIterator: AsyncIteratorProtocol {
        var base: RequestBody.AsyncIterator
        let count: ByteCount
        mutating func next() async throws -> ByteBuffer? {
            let buffer = try await base.next()
            if let buffer { count.add(buffer.readableBytes) }
            return buffer
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(base: base.makeAsyncIterator(), count: count) }
}

/// A response body writer that counts the bytes written through it.
struct CountingWriter: ResponseBodyWriter {
    var parent: any ResponseBodyWriter
    let count: ByteCount

    mutating func write(_ buffer: ByteBuffer) async throws {
        try await parent.write(buffer)
        count.add(buffer.readableBytes)
    }

    mutating func write(contentsOf buffers: some Sequence<ByteBuffer>) async throws {
        for buffer in buffers { try await write(buffer) }
    }

    consuming func finish(_ trailingHeaders: HTTPFields?) async throws {
        try await parent.finish(trailingHeaders)
    }
}
