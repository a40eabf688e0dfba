import Foundation
import ClipFlowCore
import Synchronization

// Gcore-style video hosting: the hosting API makes a video and hands out an upload server and a
// one-off token; the bytes then go by TUS with the token in Upload-Metadata. The API's bodies are
// the types of `Gcore` (GcoreAPITypes.swift), which `clipflow serve` answers with too.
//
//   POST {api}/videos {"name","description"?}       -> video {id, hls_url, ...}     (once per file; id kept in the resume record)
//   GET  {api}/videos/{id}/upload                    -> {servers[].hostname, video{client_id}, token}
//   TUS  uploadURLTemplate({hostname})  metadata: filename, client_id, video_id, token (a secret)
//
// API calls carry `Authorization: Bearer <access>`; a 401 refreshes the access token once (by the
// refresh token when there is one, else by asking the credential provider again) and repeats the call.
// A 401/403 from the upload server does the same, then fetches a fresh upload token for the same
// video before a creation is repeated. A cancelled or discarded upload deletes its video
// (DELETE {api}/videos/{id}), as a cancelled TUS upload is deleted on its server; so does a failed
// one that cannot be resumed (`abandon`), so no video is left waiting for an upload that ended.
//
// `clipflow serve` speaks the same API (`HostingServer.clipflow`): there the token is optional (a
// server without an API key needs none, so without credentials no Authorization is sent), and a
// result names the video's watch page ({api}/v/{id}).

/// Which server a `GcoreUploader` talks to: both speak Gcore's hosting API.
public enum HostingServer: String, Codable, Sendable {
    /// Gcore's video hosting.
    case gcore
    /// `clipflow serve`, whose feed plays a video at `{api}/v/{id}`.
    case clipflow

    /// How messages name the API.
    var apiName: String {
        switch self {
        case .gcore: "Gcore API"
        case .clipflow: "clipflow serve"
        }
    }
}

/// Options of a Gcore destination. No secrets (those come from the `CredentialProvider`).
public struct GcoreOptions: Codable, Sendable, Equatable {
    public var apiBase: String
    /// The server behind `apiBase` (results, resume records and messages name it).
    public var server = HostingServer.gcore
    /// The TUS creation URL; `{hostname}` is replaced by the upload server the API names
    /// (default: `defaultUploadURLTemplate(apiBase:)`).
    public var uploadURLTemplate: String
    /// The video's name (default: metadata "title", else the file name).
    public var name: String?
    public var description: String?
    /// TUS settings (chunk size, checksum, retries, transport). Its `endpoint` is not used.
    public var tus: TUSOptions = TUSOptions(endpoint: "")

    public init(
        apiBase: String, uploadURLTemplate: String? = nil, name: String? = nil,
        description: String? = nil, tus: TUSOptions = TUSOptions(endpoint: "")
    ) {
        self.apiBase = apiBase
        self.uploadURLTemplate = uploadURLTemplate ?? Self.defaultUploadURLTemplate(apiBase: apiBase)
        self.name = name
        self.description = description
        self.tus = tus
    }

    /// Where Gcore's clients upload: `https://{hostname}/upload`, over the API's own scheme (so an
    /// API reached over plain `http://`, such as `clipflow serve` without TLS, is uploaded to over
    /// `http://` too; Gcore's API is `https://`).
    public static func defaultUploadURLTemplate(apiBase: String) -> String {
        (apiBase.lowercased().hasPrefix("http://") ? "http" : "https") + "://{hostname}/upload"
    }

    private enum CodingKeys: String, CodingKey { case apiBase, server, uploadURLTemplate, name, description, tus }

    public init(from decoder: Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        self.init(apiBase: try c.decode(String.self, forKey: .apiBase))
        server = try c.decodeIfPresent(HostingServer.self, forKey: .server) ?? server
        uploadURLTemplate = try c.decodeIfPresent(String.self, forKey: .uploadURLTemplate) ?? uploadURLTemplate
        name = try c.decodeIfPresent(String.self, forKey: .name)
        description = try c.decodeIfPresent(String.self, forKey: .description)
        tus = try c.decodeIfPresent(TUSOptions.self, forKey: .tus) ?? tus
    }
}

/// Bearer credentials for the hosting API: the current access token, refreshed on demand; with
/// no provider, none (an empty token: requests go without `Authorization`). Thread-safe; one per
/// destination, shared by its uploads.
public final class GcoreAuth: Sendable {
    public let apiBase: String
    private let provider: CredentialProvider?
    private let settings: TransportSettings
    private let current = Mutex<(access: String, refresh: String?)?>(nil)
    private let refreshes = Atomic<Int>(0)

    public init(apiBase: String, provider: CredentialProvider?, settings: TransportSettings = TransportSettings()) {
        self.apiBase = apiBase
        self.provider = provider
        self.settings = settings
    }

    /// Times the access token was renewed after a refusal.
    public var refreshCount: Int { refreshes.load(ordering: .relaxed) }

    /// The access token, asking the provider the first time; empty without a provider.
    public func accessToken() throws -> String {
        guard let provider else { return "" }
        if let c = current.withLock({ $0 }) { return c.access }
        return try adopt(provider.refresh(reason: "first use"))
    }

    /// Renews the access token after the API refused `rejected`: POST {api}/auth/refresh with the
    /// refresh token when there is one, else (or when that fails) the provider again. Without a
    /// provider it fails, saying what to set.
    public func refresh(rejected: String, reason: String) throws -> String {
        refreshes.add(1, ordering: .relaxed)
        guard let provider else { throw Self.tokenNeeded(reason) }
        let held = current.withLock { $0 }
        if let held, held.access != rejected { return held.access }  // another upload already renewed it
        if let r = held?.refresh, let access = try? refreshByToken(r) {
            current.withLock { $0 = (access, r) }
            return access
        }
        return try adopt(provider.refresh(reason: reason))
    }

    /// The failure of a request sent without a token that the server refused (`reason`).
    static func tokenNeeded(_ reason: String) -> UploadError {
        UploadError(
            .credentials,
            message:
                "\(reason); the server needs a token: set CLIPFLOW_UPLOAD_TOKEN (for clipflow serve, its CLIPFLOW_API_KEY), or give --credentials-command or --credentials-url"
        )
    }

    /// `Authorization` for `token`: none for the empty token.
    static func headers(_ token: String) -> [(String, String)] {
        token.isEmpty ? [] : [("Authorization", "Bearer \(token)")]
    }

    private func adopt(_ c: Credentials) throws -> String {
        guard case .bearer(let token, let refresh) = c else {
            throw UploadError(.credentials, message: "Gcore API \(displayURL(apiBase)) needs a bearer token; the credential provider returned AWS keys")
        }
        Secrets.shared.register(token)
        Secrets.shared.register(refresh)
        current.withLock { $0 = (token, refresh) }
        return token
    }

    private func refreshByToken(_ refresh: String) throws -> String {
        let t = try CurlTransport(settings: settings)
        let body = try JSONEncoder().encode(Gcore.Refresh(refresh: refresh))
        let r = try t.perform(
            HTTPRequest(
                method: "POST", url: apiBase + "/auth/refresh",
                headers: [("Content-Type", "application/json")], body: .bytes(body)))
        guard r.isSuccess, let access = (try? JSONDecoder().decode(Gcore.Tokens.self, from: r.body))?.access, !access.isEmpty else {
            throw UploadError(.credentials, message: "Gcore API \(displayURL(apiBase)): token refresh answered HTTP \(r.status)")
        }
        Secrets.shared.register(access)
        return access
    }
}

/// Uploads a file as a Gcore video (hosting API + TUS). Resumes through the `ResumeStore`: the
/// record keeps the video id, so a resumed or re-created upload never makes a second video.
public final class GcoreUploader: FileUploader, Sendable {
    public let options: GcoreOptions
    public let auth: GcoreAuth
    public let store: ResumeStore
    public let tus: TUSUploader
    public var destination: String { tus.destination }

    /// `credentials` nil: no token is sent (`clipflow serve` without an API key needs none).
    public init(options: GcoreOptions, store: ResumeStore, credentials: CredentialProvider?) {
        self.options = options
        self.store = store
        auth = GcoreAuth(apiBase: options.apiBase, provider: credentials, settings: options.tus.transport)
        var t = options.tus
        t.endpoint = ""
        let method = options.server.rawValue
        tus = TUSUploader(options: t, store: store, headers: nil, destination: "\(method):" + options.apiBase, method: method)
    }

    public func upload(
        file: String, id: String, metadata: [String: String], control: UploadControl,
        observer: UploadObserver
    ) throws -> UploadResult {
        let name = options.name ?? metadata["title"] ?? (file as NSString).lastPathComponent
        let description = options.description ?? metadata["description"]
        let api = API(uploader: self, id: id, control: control, observer: observer)
        // The video this upload made or resumes: deleted if the upload is cancelled or abandoned.
        // A recording's fragment made none: its recording is never deleted for it.
        let ownsVideo = metadata[Self.recordingVideo] == nil
        let fingerprint = try? FileFingerprint.of(file)
        var videoID = ownsVideo ? fingerprint.flatMap { store.record(for: $0, destination: destination)?.extra["video_id"] } : nil
        do {
            return try run(
                file: file, id: id, metadata: metadata, control: control, observer: observer, api: api, name: name, description: description,
                made: { if ownsVideo { videoID = $0 } },
                failing: { e in
                    guard let videoID, let fingerprint else { return e }
                    return self.abandon(videoID, of: fingerprint, after: e)
                })
        } catch let e as UploadError where e.kind == .cancelled {
            if options.tus.deleteOnCancel, let videoID { deleteVideos([videoID]) }
            throw e
        }
    }

    /// After the upload of the file `fingerprint` identifies failed with `e`: gives it up, with its
    /// video, when trying again later cannot help or when none of its bytes are on the upload
    /// server (no TUS upload was made: starting anew loses nothing), and returns `e` saying so;
    /// otherwise the video waits for the upload to be resumed and `e` is returned as it is.
    private func abandon(_ videoID: String, of fingerprint: FileFingerprint, after e: UploadError) -> UploadError {
        guard !e.retryable || store.record(for: fingerprint, destination: destination)?.uploadURL == nil else { return e }
        try? tus.discard(fingerprint)
        deleteVideos([videoID])
        var said = e
        said.message += " The video \(videoID) made for it was deleted (DELETE /videos/\(videoID)); uploading the file again makes a new one."
        return said
    }

    /// The TUS upload with a Gcore target; `made` is told the video's id once it is known, and
    /// `failing` gets a failure (not a pause or a cancel) before it is reported.
    private func run(
        file: String, id: String, metadata: [String: String], control: UploadControl, observer: UploadObserver, api: API, name: String,
        description: String?, made: @escaping (String) -> Void, failing: @escaping (UploadError) -> UploadError
    ) throws -> UploadResult {
        let fileName = (file as NSString).lastPathComponent
        let store = self.store
        let destination = self.destination
        return try tus.run(
            file: file, id: id, metadata: [:], control: control, observer: observer,
            target: { previous in
                let video: Gcore.Video
                if let vid = metadata[Self.recordingVideo] ?? previous?["video_id"], !vid.isEmpty {
                    // A recording's fragment names its video; an upload resumed, the one it made.
                    video = Gcore.Video(id: .text(vid), hlsURL: previous?["hls_url"] ?? "")
                } else {
                    video = try api.call(
                        "POST", "/videos", body: try JSONEncoder().encode(Gcore.NewVideo(name: name, description: description)),
                        as: Gcore.Video.self, lacking: "a video id")
                    // Remember the video at once: a crash before the TUS creation must not make a second one.
                    let fp = try FileFingerprint.of(file)
                    try store.save(
                        ResumeRecord(
                            method: self.options.server.rawValue, fingerprint: fp, destination: destination,
                            extra: ["video_id": video.id.description, "hls_url": video.hlsURL]))
                }
                let vid = video.id.description
                made(vid)
                let info = try api.call(
                    "GET", "/videos/\(vid)/upload", as: Gcore.UploadTarget.self, lacking: "servers[].hostname and token")
                guard let host = info.servers.first?.hostname, !host.isEmpty, !info.token.isEmpty else {
                    throw UploadError(
                        .protocol,
                        message:
                            "\(self.options.server.apiName) \(displayURL(self.options.apiBase)): GET /videos/\(vid)/upload answered without servers[].hostname and token"
                    )
                }
                let token = info.token
                Secrets.shared.register(token)
                // The upload server is expected to differ from the API host (the upload token is made for
                // it; the API's bearer token never goes there: the TUS part sends no Authorization). It
                // must be a plain host name or host:port, so it cannot reshape the URL template.
                guard isPlainHost(host) else {
                    throw UploadError(
                        .protocol,
                        message:
                            "\(self.options.server.apiName) \(displayURL(self.options.apiBase)): GET /videos/\(vid)/upload named the upload server '\(String(host.prefix(200)))', which is not a host name (letters, digits, '.', '-', an optional :port)"
                    )
                }
                let clientID = (info.video?.clientID ?? video.clientID)?.description ?? ""
                var meta = ["filename": fileName, "video_id": vid, "token": token]
                if !clientID.isEmpty { meta["client_id"] = clientID }
                if let fragment = metadata[Self.recordingFragment] { meta["fragment"] = fragment }
                let endpoint = self.options.uploadURLTemplate.replacingOccurrences(of: "{hostname}", with: host)
                return TUSTarget(
                    endpoint: endpoint, metadata: meta,
                    extra: ["video_id": vid, "hls_url": video.hlsURL.isEmpty ? previous?["hls_url"] ?? "" : video.hlsURL])
            },
            renew: { [auth] reason in
                // Without a token there is none to renew; a fresh upload token follows all the same.
                let current = try auth.accessToken()
                if !current.isEmpty { _ = try auth.refresh(rejected: current, reason: reason) }
            },
            finish: { result, record in
                result.method = self.options.server.rawValue
                result.videoID = record.extra["video_id"]
                let hls = record.extra["hls_url"] ?? ""
                result.playbackURL = hls.isEmpty ? nil : hls
                if self.options.server == .clipflow, let vid = result.videoID { result.watchURL = self.options.apiBase + "/v/" + vid }
            }, failing: failing)
    }

    /// Drops the file's resume records and deletes what they name: the TUS uploads and the videos.
    public func discard(file: String) throws {
        let fp = try FileFingerprint.of(file)
        var records = store.staleRecords(path: fp.path, destination: destination, current: fp)
        if let r = store.record(for: fp, destination: destination) { records.append(r) }
        let videos = records.compactMap { $0.extra["video_id"] }
        try tus.discard(file: file)
        deleteVideos(videos)
    }

    /// The upload metadata naming the recording a fragment belongs to (`clipflow serve`'s video id)
    /// and the fragment's index from 0: the upload adds to that video instead of making one.
    public static let recordingVideo = "recording_video"
    public static let recordingFragment = "fragment"

    /// Makes a recording on `clipflow serve` (`POST /videos` with `recording`); returns its id.
    public func createRecording(name: String, control: UploadControl) throws -> String {
        let api = API(uploader: self, id: "recording", control: control, observer: NoUploadObserver())
        let video = try api.call(
            "POST", "/videos", body: try JSONEncoder().encode(Gcore.NewVideo(name: name, recording: true)), as: Gcore.Video.self, lacking: "a video id")
        return video.id.description
    }

    /// Tells `clipflow serve` that recording `video` ended with `fragments` fragments.
    public func endRecording(_ video: String, fragments: Int, control: UploadControl) throws {
        let api = API(uploader: self, id: "recording", control: control, observer: NoUploadObserver())
        _ = try api.call(
            "POST", "/videos/\(video)/end", body: Data("{\"fragments\": \(fragments)}".utf8), as: Gcore.Video.self, lacking: "the video")
    }

    /// Deletes videos on the hosting API, best effort (a cleanup must not hide why the upload
    /// ended): one request each, repeated once after renewing a refused access token.
    func deleteVideos(_ ids: [String]) {
        guard !ids.isEmpty, let transport = try? CurlTransport(settings: tus.cleanupSettings) else { return }
        for vid in ids {
            guard var token = try? auth.accessToken() else { return }
            for _ in 0..<2 {
                let req = HTTPRequest(
                    method: "DELETE", url: options.apiBase + "/videos/\(vid)", headers: GcoreAuth.headers(token) + [("Accept", "application/json")])
                guard let r = try? transport.perform(req), r.status == 401,
                    let fresh = try? auth.refresh(rejected: token, reason: "\(options.server.apiName) DELETE /videos/\(vid) answered 401")
                else { break }
                token = fresh
            }
        }
    }

    /// Hosting API calls of one upload: bearer auth, one refresh on 401, retries on network
    /// errors and retryable statuses per the TUS retry policy; answers read as `Gcore` types.
    fileprivate struct API {
        let uploader: GcoreUploader
        let id: String
        let control: UploadControl
        let observer: UploadObserver

        /// `body`: JSON to send. An accepted answer that is not a JSON object, or one without what
        /// `Answer` must hold (said by `lacking`), fails the call.
        func call<Answer: Decodable>(_ method: String, _ path: String, body: Data? = nil, as: Answer.Type, lacking: String) throws -> Answer {
            let base = uploader.options.apiBase
            let transport = try CurlTransport(settings: uploader.options.tus.transport, shouldAbort: { [control] in control.shouldStop })
            // One refresh per call: the call ends at the first accepted answer.
            let requests = RequestExecutor(policy: uploader.options.tus.retry, id: id, control: control, observer: observer)
            var token = try uploader.auth.accessToken()
            // API calls report no resumption: `retryResumed` is about the upload's bytes.
            return try requests.perform(progress: { 0 }, resumedAt: { nil }) {
                var req = HTTPRequest(method: method, url: base + path, headers: GcoreAuth.headers(token) + [("Accept", "application/json")])
                if let body {
                    req.body = .bytes(body)
                    req.setHeader("Content-Type", "application/json")
                }
                let what = "\(uploader.options.server.apiName) \(method) \(displayURL(base + path))"
                var reason: String
                var retryAfter: Double? = nil
                do {
                    let r = try transport.perform(req)
                    if r.isSuccess {
                        do { return .accepted(try JSONDecoder().decode(Answer.self, from: r.body)) } catch {
                            throw UploadError(
                                .protocol,
                                message: isNotAnObject(error)
                                    ? "\(what): the answer is not a JSON object"
                                    : "\(uploader.options.server.apiName) \(displayURL(base)): \(method) \(path) answered without \(lacking)")
                        }
                    }
                    let text = String(r.text.prefix(300)).trimmingCharacters(in: .whitespacesAndNewlines)
                    reason = "\(what): HTTP \(r.status)\(text.isEmpty ? "" : " (\(text))")"
                    if r.status == 401 {
                        // Sent without a token: there is none to renew.
                        if token.isEmpty { throw GcoreAuth.tokenNeeded(reason) }
                        let rejected = token
                        let refresh = { token = try uploader.auth.refresh(rejected: rejected, reason: "\(what) answered 401") }
                        return .refused(
                            Refused(refresh: refresh) { _ in
                                UploadError(.http(401), message: reason + "; the credentials were refused even after a refresh")
                            })
                    }
                    guard isRetryableStatus(r.status) else { throw UploadError(.http(r.status), message: reason) }
                    retryAfter = retryAfterSeconds(r)
                } catch let e as TransportError {
                    if e.kind == .cancelled { try control.check() }
                    guard e.isRetryable else { throw UploadError(e.kind == .oversized ? .badResponse : .transport, message: e.message) }
                    reason = e.message
                }
                return .retryable(
                    Retryable(reason: reason, retryAfter: retryAfter) { retry in
                        UploadError(.api, message: "\(reason); gave up after \(retry.attempts) tries", retryable: true)
                    })
            }
        }
    }
}

/// A DNS name, IPv4 address or bracketed IPv6 address, with an optional port; nothing else (no
/// user info, path, query or spaces).
func isPlainHost(_ s: String) -> Bool {
    guard !s.isEmpty, s.count <= 260 else { return false }
    var host = Substring(s)
    if s.hasPrefix("[") {
        guard let close = s.firstIndex(of: "]") else { return false }
        let inner = s[s.index(after: s.startIndex)..<close]
        guard !inner.isEmpty, inner.allSatisfy({ $0.isHexDigit || $0 == ":" || $0 == "." }) else { return false }
        host = s[s.index(after: close)...]
        if host.isEmpty { return true }
        guard host.first == ":" else { return false }
        return host.dropFirst().allSatisfy(\.isASCII) && Int(host.dropFirst()).map { (1...65535).contains($0) } == true
    }
    if let colon = s.firstIndex(of: ":") {
        guard let port = Int(s[s.index(after: colon)...]), (1...65535).contains(port) else { return false }
        host = s[..<colon]
    }
    return !host.isEmpty && !host.hasPrefix(".") && !host.hasPrefix("-")
        && host.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "." || $0 == "-") }
}

/// Whether decoding failed on the whole answer (not JSON, or not an object) rather than on a field.
private func isNotAnObject(_ error: any Error) -> Bool {
    switch error as? DecodingError {
    case .typeMismatch(_, let context)?, .valueNotFound(_, let context)?, .dataCorrupted(let context)?: context.codingPath.isEmpty
    case .keyNotFound?: false
    default: true
    }
}
