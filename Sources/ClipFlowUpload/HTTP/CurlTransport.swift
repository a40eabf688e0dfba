import Foundation
import ClipFlowCore
internal import CClipFlowCurl

/// libcurl's global init, done once per process before the first handle.
private let curlGlobalInit: Void = {
    _ = curl_global_init(Int(CURL_GLOBAL_DEFAULT))
}()

/// The one owner of a `CURL*` easy handle. Reusing the handle keeps the connection (and TLS session)
/// open between requests of one upload. Confined to one thread at a time (the upload's worker);
/// `@unchecked Sendable` only so it can be handed from the thread that made it to that worker.
public final class CurlTransport: HTTPTransport, @unchecked Sendable {
    private let handle: UnsafeMutableRawPointer
    public let settings: TransportSettings
    /// Polled during transfers (about every second, and on every block read); returning true
    /// aborts the request with `TransportError.cancelled`. Used for cancel and pause.
    private let shouldAbort: @Sendable () -> Bool

    public init(settings: TransportSettings = TransportSettings(), shouldAbort: @escaping @Sendable () -> Bool = { false }) throws {
        if let e = cf_curl_load_error() { throw TransportError(.invalid, String(cString: e)) }
        _ = curlGlobalInit
        guard let h = curl_easy_init() else {
            throw TransportError(.invalid, "libcurl could not create a handle (out of memory?)")
        }
        handle = h
        self.settings = settings
        self.shouldAbort = shouldAbort
    }

    deinit { curl_easy_cleanup(handle) }

    public func perform(_ request: HTTPRequest, onSent: ((Int64) -> Void)?) throws -> HTTPResponse {
        curl_easy_reset(handle)
        let ctx = TransferContext(
            shouldAbort: shouldAbort, onSent: onSent, stallTimeout: Double(settings.stallTimeout),
            responseTimeout: settings.responseTimeout, maxBody: settings.maxResponseBody, bodyFile: request.responseBodyFile)
        defer { ctx.closeFile() }
        var headerList: UnsafeMutablePointer<curl_slist>? = nil
        defer { if let headerList { curl_slist_free_all(headerList) } }

        let method = request.method.uppercased()
        try set(CURLOPT_URL, request.url, what: "URL")
        // The path goes out exactly as given: a signature (SigV4) covers the path as written, and
        // `.`/`..` segments are part of an S3 key, not directions to squash.
        try set(CURLOPT_PATH_AS_IS, 1)
        try set(CURLOPT_NOSIGNAL, 1)
        try set(CURLOPT_FOLLOWLOCATION, 0)
        try set(CURLOPT_PROTOCOLS_STR, "http,https", what: "protocols")
        try set(CURLOPT_CONNECTTIMEOUT_MS, Int(settings.connectTimeout * 1000))
        try set(CURLOPT_LOW_SPEED_LIMIT, 1)
        try set(CURLOPT_LOW_SPEED_TIME, settings.stallTimeout)
        try set(CURLOPT_SSL_VERIFYPEER, settings.verifyTLS ? 1 : 0)
        try set(CURLOPT_SSL_VERIFYHOST, settings.verifyTLS ? 2 : 0)
        if let ca = settings.caBundle { try set(CURLOPT_CAINFO, ca, what: "CA bundle") }
        try set(CURLOPT_UPLOAD_BUFFERSIZE, max(16 << 10, min(2 << 20, settings.uploadBufferSize)))
        try set(CURLOPT_TCP_KEEPALIVE, 1)

        // Body.
        switch method {
        case "HEAD":
            try set(CURLOPT_NOBODY, 1)
        case "GET":
            try set(CURLOPT_HTTPGET, 1)
        default:
            break
        }
        let hasBody: Bool
        switch request.body {
        case .empty: hasBody = ["POST", "PUT", "PATCH"].contains(method)
        default: hasBody = true
        }
        if hasBody {
            try ctx.prepare(request.body)
            try set(CURLOPT_UPLOAD, 1)
            try check(cf_curl_setopt_off(handle, CURLOPT_INFILESIZE_LARGE, Int(request.body.length)), "body size")
            try check(cf_curl_setopt_data_cb(handle, CURLOPT_READFUNCTION, transferRead), "read callback")
            try check(cf_curl_setopt_pointer(handle, CURLOPT_READDATA, ctx.pointer), "read callback")
            try check(cf_curl_setopt_seek_cb(handle, transferSeek), "seek callback")
            try check(cf_curl_setopt_pointer(handle, CURLOPT_SEEKDATA, ctx.pointer), "seek callback")
        }
        if method != "GET" && method != "HEAD" || hasBody {
            try set(CURLOPT_CUSTOMREQUEST, method, what: "method")
        }

        // Headers: ours, plus an empty Expect (curl 7.88 otherwise waits ~1 s for 100-continue).
        // A name or value with a line break or NUL would let a value (a title, a key) write
        // headers of its own: refused, whichever protocol client built it.
        for h in request.headers where (h.name + h.value).unicodeScalars.contains(where: { $0 == "\r" || $0 == "\n" || $0 == "\0" }) {
            throw TransportError(
                .invalid, "\(displayURL(request.url)): header '\(h.name.debugDescription.dropFirst().dropLast())' holds a line break or NUL; refused")
        }
        var lines = request.headers.map { "\($0.name): \($0.value)" }
        lines.append("Expect:")
        for line in lines { headerList = curl_slist_append(headerList, line) }
        try check(cf_curl_setopt_slist(handle, CURLOPT_HTTPHEADER, headerList), "headers")
        var resolveList: UnsafeMutablePointer<curl_slist>? = nil
        defer { if let resolveList { curl_slist_free_all(resolveList) } }
        if !request.connectAddresses.isEmpty, let url = URLComponents(string: request.url), let host = url.host {
            let port = url.port ?? (url.scheme?.lowercased() == "https" ? 443 : 80)
            let addresses = request.connectAddresses.map { $0.contains(":") ? "[\($0)]" : $0 }.joined(separator: ",")
            resolveList = curl_slist_append(nil, "\(host):\(port):\(addresses)")
            try check(cf_curl_setopt_slist(handle, CURLOPT_RESOLVE, resolveList), "connect address")
            // A proxy would resolve the name itself: the addresses checked are reached directly.
            try set(CURLOPT_NOPROXY, "*", what: "no proxy")
        }

        try check(cf_curl_setopt_data_cb(handle, CURLOPT_HEADERFUNCTION, transferHeader), "header callback")
        try check(cf_curl_setopt_pointer(handle, CURLOPT_HEADERDATA, ctx.pointer), "header callback")
        try check(cf_curl_setopt_data_cb(handle, CURLOPT_WRITEFUNCTION, transferWrite), "write callback")
        try check(cf_curl_setopt_pointer(handle, CURLOPT_WRITEDATA, ctx.pointer), "write callback")
        try set(CURLOPT_NOPROGRESS, 0)
        try check(cf_curl_setopt_xferinfo_cb(handle, transferProgress), "progress callback")
        try check(cf_curl_setopt_pointer(handle, CURLOPT_XFERINFODATA, ctx.pointer), "progress callback")

        let code = curl_easy_perform(handle)
        var sent: Int = 0
        _ = cf_curl_getinfo_off(handle, CURLINFO_SIZE_UPLOAD_T, &sent)
        if code != CURLE_OK {
            throw transportError(code, request: request, ctx: ctx, sent: Int64(sent))
        }
        var status: Int = 0
        _ = cf_curl_getinfo_long(handle, CURLINFO_RESPONSE_CODE, &status)
        return HTTPResponse(status: status, headers: ctx.headers, body: ctx.body, bytesSent: Int64(sent), bodyBytesWritten: ctx.bodyBytesWritten)
    }

    private func transportError(_ code: CURLcode, request: HTTPRequest, ctx: TransferContext, sent: Int64) -> TransportError {
        let text = String(cString: curl_easy_strerror(code))
        let target = "\(request.method) \(displayURL(request.url))"
        if let fileError = ctx.fileError {
            return TransportError(.fileRead, fileError, bytesSent: sent)
        }
        if let limit = ctx.oversized {
            return TransportError(.oversized, "\(target): \(limit); not a valid answer for this request", bytesSent: sent)
        }
        switch code {
        case CURLE_ABORTED_BY_CALLBACK where ctx.responseTimedOut:
            return TransportError(.stalled, "\(target): the answer did not complete within \(Int(settings.responseTimeout)) s", bytesSent: sent)
        case CURLE_OUT_OF_MEMORY where ctx.connected:
            // curl's only way of saying that one header line exceeded its limit (CURL_MAX_HTTP_HEADER).
            return TransportError(
                .oversized,
                "\(target): the server's response header is larger than curl's limit of 102400 bytes for one header; not a valid answer for this request",
                bytesSent: sent)
        case CURLE_ABORTED_BY_CALLBACK where ctx.stalled:
            return TransportError(.stalled, "\(target): no data moved for \(settings.stallTimeout) s (stalled)", bytesSent: sent)
        case CURLE_ABORTED_BY_CALLBACK:
            return TransportError(.cancelled, "\(target): cancelled", bytesSent: sent)
        case CURLE_OPERATION_TIMEDOUT:
            if ctx.connected {
                return TransportError(.stalled, "\(target): no data moved for \(settings.stallTimeout) s (stalled)", bytesSent: sent)
            }
            return TransportError(.connect, "\(target): connection timed out", bytesSent: sent)
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY, CURLE_COULDNT_CONNECT:
            return TransportError(.connect, "\(target): \(text)", bytesSent: sent)
        case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_CERTPROBLEM:
            return TransportError(
                .tls, "\(target): TLS certificate not trusted (\(text)); the server's certificate must be valid, or pass a CA bundle", bytesSent: sent)
        case CURLE_SSL_CONNECT_ERROR:
            return TransportError(.connect, "\(target): TLS handshake failed (\(text))", bytesSent: sent)
        case CURLE_URL_MALFORMAT, CURLE_UNSUPPORTED_PROTOCOL, CURLE_BAD_FUNCTION_ARGUMENT, CURLE_UNKNOWN_OPTION:
            return TransportError(.invalid, "\(target): \(text)", bytesSent: sent)
        default:
            return TransportError(.network, "\(target): \(text)", bytesSent: sent)
        }
    }

    private func set(_ option: CURLoption, _ value: Int) throws {
        try check(cf_curl_setopt_long(handle, option, value), "option \(option.rawValue)")
    }

    private func set(_ option: CURLoption, _ value: String, what: String) throws {
        try check(cf_curl_setopt_string(handle, option, value), what)
    }

    private func check(_ code: CURLcode, _ what: String) throws {
        guard code == CURLE_OK else {
            throw TransportError(.invalid, "libcurl refused the \(what): \(String(cString: curl_easy_strerror(code)))")
        }
    }
}

/// Per-request state reached from curl's C callbacks through an unmanaged pointer. Lives for
/// exactly one `perform` call, on its thread.
private final class TransferContext {
    let shouldAbort: @Sendable () -> Bool
    let onSent: ((Int64) -> Void)?
    var headers: [String: String] = [:]
    var body = Data()
    var connected = false
    var fileError: String?
    var lastSent: Int64 = -1
    var lastReceived: Int64 = -1
    /// Our own stall clock: curl's LOW_SPEED check averages the speed over a ~5 s window, so with a
    /// 1 byte/s limit a dead connection is noticed only after about 5 s + LOW_SPEED_TIME (measured:
    /// 7.2 s for a 1 s setting). The progress callback (called at least once a second) aborts when
    /// no byte moved either way for `stallTimeout` seconds.
    let stallTimeout: Double
    var lastMove = ProcessInfo.processInfo.systemUptime
    var stalled = false
    /// The answer must be complete `responseTimeout` seconds after the request body was sent
    /// (bytes arriving do not extend it).
    let responseTimeout: Double
    var answerClockStart: Double?
    var responseTimedOut = false
    /// Header bytes received so far (all answers of this request).
    var headerBytes = 0
    /// Why the answer was abandoned for its size, when it was.
    var oversized: String?

    // Body source.
    var fd: Int32 = -1
    var path = ""
    var start: Int64 = 0
    var length: Int64 = 0
    var bytes = Data()
    var position: Int64 = 0

    /// The largest answer body kept (`TransportSettings.maxResponseBody`).
    let maxBody: Int

    // Body sink for a successful answer (`HTTPRequest.responseBodyFile`): open from the status
    // line of a 2xx answer on.
    let bodyFile: ResponseBodyFile?
    var bodyFD: Int32 = -1
    var bodyFilePosition: Int64 = 0
    var bodyBytesWritten: Int64 = 0

    init(
        shouldAbort: @escaping @Sendable () -> Bool, onSent: ((Int64) -> Void)?, stallTimeout: Double, responseTimeout: Double, maxBody: Int,
        bodyFile: ResponseBodyFile?
    ) {
        self.shouldAbort = shouldAbort
        self.onSent = onSent
        self.stallTimeout = stallTimeout
        self.responseTimeout = responseTimeout
        self.maxBody = maxBody
        self.bodyFile = bodyFile
    }

    var pointer: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    func prepare(_ source: HTTPBody) throws {
        switch source {
        case .empty:
            length = 0
        case .bytes(let data):
            bytes = data
            length = Int64(data.count)
        case .file(let path, let offset, let length):
            self.path = path
            self.start = offset
            self.length = length
            fd = open(path, O_RDONLY | O_CLOEXEC)
            if fd < 0 {
                throw TransportError(.fileRead, "\(path): cannot open for reading: \(String(cString: strerror(errno)))")
            }
        }
        position = 0
    }

    func closeFile() {
        if fd >= 0 { close(fd); fd = -1 }
        if bodyFD >= 0 { close(bodyFD); bodyFD = -1 }
    }

    /// Opens the body file for a 2xx answer of `status` and cuts it where this answer's body
    /// starts (`offset` for 206, else 0). False (with `fileError`) when it cannot.
    func openBodyFile(status: Int) -> Bool {
        if bodyFD >= 0 { close(bodyFD); bodyFD = -1 }
        guard let bodyFile, (200..<300).contains(status) else { return true }
        bodyFilePosition = status == 206 ? bodyFile.offset : 0
        bodyBytesWritten = 0
        bodyFD = open(bodyFile.path, O_WRONLY | O_CREAT | O_CLOEXEC, 0o644)
        guard bodyFD >= 0, ftruncate(bodyFD, off_t(bodyFilePosition)) == 0 else {
            fileError = "\(bodyFile.path): cannot write the download: \(String(cString: strerror(errno)))"
            return false
        }
        return true
    }

    /// Writes a piece of a 2xx answer's body to the body file. False (with `fileError`) on failure.
    func writeBodyFile(_ data: UnsafeRawBufferPointer) -> Bool {
        var done = 0
        while done < data.count {
            let n = pwrite(bodyFD, data.baseAddress! + done, data.count - done, off_t(bodyFilePosition))
            if n < 0 {
                if errno == EINTR { continue }
                fileError = "\(bodyFile?.path ?? ""): write failed at byte \(bodyFilePosition): \(String(cString: strerror(errno)))"
                return false
            }
            done += n
            bodyFilePosition += Int64(n)
            bodyBytesWritten += Int64(n)
        }
        return true
    }

    func read(into buffer: UnsafeMutablePointer<CChar>, capacity: Int) -> Int {
        if shouldAbort() { return cf_CURL_READFUNC_ABORT }
        let want = Int(min(Int64(capacity), length - position))
        if want <= 0 { return 0 }
        if fd >= 0 {
            var done = 0
            while done < want {
                let n = pread(fd, buffer + done, want - done, off_t(start + position + Int64(done)))
                if n < 0 {
                    if errno == EINTR { continue }
                    fileError = "\(path): read failed at byte \(start + position + Int64(done)): \(String(cString: strerror(errno)))"
                    return cf_CURL_READFUNC_ABORT
                }
                if n == 0 {
                    fileError =
                        "\(path): the file shrank while being uploaded (ended at byte \(start + position + Int64(done)), expected \(start + length)); it must not change during an upload"
                    return cf_CURL_READFUNC_ABORT
                }
                done += n
            }
            position += Int64(done)
            return done
        }
        bytes.withUnsafeBytes { raw in
            let src = raw.baseAddress!.assumingMemoryBound(to: CChar.self) + Int(position)
            buffer.update(from: src, count: want)
        }
        position += Int64(want)
        return want
    }

    func seek(to offset: Int64) -> Bool {
        guard offset >= 0, offset <= length else { return false }
        position = offset
        return true
    }

    /// Takes one header line; false when the headers exceed `HTTPResponse.maxHeaderBytes` (the
    /// transfer is then abandoned).
    func header(_ line: String) -> Bool {
        lastMove = ProcessInfo.processInfo.systemUptime
        headerBytes += line.utf8.count
        if headerBytes > HTTPResponse.maxHeaderBytes {
            oversized = "the server's response header is larger than \(HTTPResponse.maxHeaderBytes) bytes"
            return false
        }
        let trimmed = line.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed.hasPrefix("HTTP/") {
            // A new response (after 100 Continue or an interim response): start over.
            headers = [:]
            connected = true
            // A final answer starts the answer clock even if the body was not all sent: a
            // server may answer early and never read the rest.
            let status = trimmed.split(separator: " ").dropFirst().first.flatMap { Int($0) } ?? 0
            if status >= 200 && answerClockStart == nil { answerClockStart = lastMove }
            return openBodyFile(status: status)
        }
        guard let colon = trimmed.firstIndex(of: ":") else { return true }
        let name = trimmed[..<colon].lowercased()
        let value = trimmed[trimmed.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        if let existing = headers[name] {
            headers[name] = existing + ", " + value
        } else {
            headers[name] = value
        }
        return true
    }

    /// Takes a piece of the answer's body (into the body file when one is open); false when the
    /// body exceeds `maxBody` or the file cannot be written (the transfer is then abandoned).
    func write(_ data: UnsafeRawBufferPointer) -> Bool {
        connected = true
        lastMove = ProcessInfo.processInfo.systemUptime
        if bodyFD >= 0 { return writeBodyFile(data) }
        guard body.count + data.count <= maxBody else {
            oversized = "the server's answer is larger than \(maxBody) bytes"
            return false
        }
        body.append(contentsOf: data)
        return true
    }

    func progress(sent: Int64, received: Int64) -> Bool {
        if sent > 0 { connected = true }
        let now = ProcessInfo.processInfo.systemUptime
        if sent != lastSent {
            lastSent = sent
            lastMove = now
            onSent?(sent)
        }
        if received != lastReceived {
            lastReceived = received
            lastMove = now
        }
        if stallTimeout > 0 && now - lastMove >= stallTimeout {
            stalled = true
            return true
        }
        if answerClockStart == nil && sent >= length { answerClockStart = now }
        if let t0 = answerClockStart, responseTimeout > 0, now - t0 >= responseTimeout {
            responseTimedOut = true
            return true
        }
        return shouldAbort()
    }
}

private func context(_ p: UnsafeMutableRawPointer?) -> TransferContext {
    Unmanaged<TransferContext>.fromOpaque(p!).takeUnretainedValue()
}

private let transferRead: cf_curl_data_cb = { buffer, size, count, user in
    guard let buffer else { return 0 }
    return context(user).read(into: buffer, capacity: size * count)
}

private let transferSeek: cf_curl_seek_cb = { user, offset, origin in
    guard origin == SEEK_SET else { return cf_CURL_SEEKFUNC_FAIL }
    return context(user).seek(to: Int64(offset)) ? cf_CURL_SEEKFUNC_OK : cf_CURL_SEEKFUNC_FAIL
}

private let transferHeader: cf_curl_data_cb = { buffer, size, count, user in
    let n = size * count
    guard let buffer else { return n }
    let line = String(decoding: UnsafeRawBufferPointer(start: buffer, count: n), as: UTF8.self)
    return context(user).header(line) ? n : 0
}

private let transferWrite: cf_curl_data_cb = { buffer, size, count, user in
    let n = size * count
    guard let buffer else { return n }
    return context(user).write(UnsafeRawBufferPointer(start: buffer, count: n)) ? n : 0
}

private let transferProgress: cf_curl_xferinfo_cb = { user, _, dlnow, _, ulnow in
    context(user).progress(sent: Int64(ulnow), received: Int64(dlnow)) ? 1 : 0
}
