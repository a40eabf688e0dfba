import ClipFlowCore
import ClipFlowUpload
import Foundation
import HTTPTypes
import Hummingbird
import Synchronization

/// Published ladders as objects `media/ID/FOLDER/…` in a bucket. A worker writes a ladder into
/// a local scratch folder of the step's own (`SCRATCH/ID-STEP`, removed when the step ends: the
/// scratch space a worker needs is bounded by the steps it runs at once), then puts every file
/// of it; a ladder step first downloads the published folder it reuses. A folder's time is its newest object's
/// (`LastModified`); a superseded folder is removed once its grace is over by this server (a
/// restart meanwhile leaves it to the next step of the video, or to the video's removal).
final class BucketMedia: MediaStorage {
    let bucket: ServeBucket
    let scratch: URL
    let mediaOrigin: String?
    /// feed.json by `ID/FOLDER/feed.json`: published folders never change, so a read is kept.
    private let small = Mutex<[String: Data]>([:])
    /// Entries `small` keeps before it starts afresh.
    static let smallLimit = 10_000

    init(bucket: ServeBucket, scratch: URL) throws {
        self.bucket = bucket
        self.scratch = scratch
        mediaOrigin = bucket.store.objectOrigin(bucket: bucket.name)
        do {
            // Nothing in scratch outlives a step; what a crash left there goes now.
            try? FileManager.default.removeItem(at: scratch)
            try FileManager.default.createDirectory(at: scratch, withIntermediateDirectories: true)
        } catch {
            throw ClipFlowError.output("cannot create '\(scratch.path)': \(error.localizedDescription)")
        }
    }

    func folderKey(_ video: Int64, _ name: String = "") -> String { bucket.key("media/\(video)/" + (name.isEmpty ? "" : name + "/")) }

    func workFolder(_ video: Int64, step: String) -> URL { scratch.appendingPathComponent("\(video)-\(step)") }

    func prepare(_ video: Int64, published name: String, in work: URL) async throws {
        let prefix = folderKey(video, name), local = work.appendingPathComponent(name)
        try await bucket.perform { s, b in
            for object in try s.list(bucket: b, prefix: prefix).objects {
                let path = local.appendingPathComponent(String(object.key.dropFirst(prefix.count)))
                try FileManager.default.createDirectory(at: path.deletingLastPathComponent(), withIntermediateDirectories: true)
                try s.download(bucket: b, key: object.key, to: path.path)
            }
        }
    }

    func put(_ video: Int64, _ name: String, from work: URL) async throws {
        let local = work.appendingPathComponent(name), prefix = folderKey(video, name)
        try await bucket.perform { s, b in
            guard let walk = FileManager.default.enumerator(at: local, includingPropertiesForKeys: [.isRegularFileKey]) else {
                throw ClipFlowError.output("cannot read the ladder written in '\(local.path)'")
            }
            let base = local.standardizedFileURL.path + "/"
            for case let file as URL in walk where (try? file.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true {
                let relative = String(file.standardizedFileURL.path.dropFirst(base.count))
                let data = try Data(contentsOf: file)
                try s.put(data, bucket: b, key: prefix + relative, contentType: MediaServing.contentType(relative))
            }
        }
    }

    func superseded(_ video: Int64, _ name: String, grace: Double) async {
        Task {
            try? await Task.sleep(for: .seconds(grace))
            let prefix = self.folderKey(video, name)
            _ = try? await self.bucket.perform { s, b in try s.deleteAll(bucket: b, prefix: prefix) }
        }
    }

    func release(_ work: URL) async {
        try? FileManager.default.removeItem(at: work)
    }

    func removeLeftovers(_ video: Int64, keeping published: String, grace: Double) async {
        let prefix = folderKey(video), cutoff = Date().addingTimeInterval(-grace)
        _ = try? await bucket.perform { s, b in
            var newest: [String: Date] = [:]
            for object in try s.list(bucket: b, prefix: prefix).objects {
                let name = String(object.key.dropFirst(prefix.count).prefix { $0 != "/" })
                newest[name] = max(newest[name] ?? .distantPast, object.modified ?? .distantPast)
            }
            for (name, time) in newest where name != published && time < cutoff {
                try s.deleteAll(bucket: b, prefix: self.folderKey(video, name))
            }
        }
    }

    func sweepSuperseded(grace: Double, skip: @Sendable (Int64) -> Bool, published: @Sendable (Int64) async -> String?) async {}

    func remove(_ video: Int64) async throws {
        let prefix = folderKey(video)
        small.withLock { $0 = $0.filter { !$0.key.hasPrefix("\(video)/") } }
        try await bucket.perform { s, b in try s.deleteAll(bucket: b, prefix: prefix) }
    }

    func read(_ video: Int64, _ path: String) async -> Data? {
        let name = "\(video)/\(path)"
        if let kept = small.withLock({ $0[name] }) { return kept }
        let key = bucket.key("media/" + name)
        guard let data = try? await bucket.perform({ s, b in try s.read(bucket: b, key: key) }) else { return nil }
        small.withLock { kept in
            if kept.count >= Self.smallLimit { kept.removeAll() }
            kept[name] = data
        }
        return data
    }
}

/// `/media` when ladders are in a bucket, GET and HEAD only, with `MediaFiles`'s rules for which
/// paths may be served. Playlists and feed manifests are proxied: their segment and rendition
/// URIs are relative, so a player must read them from this server for those URIs to come back
/// here; they are small, and answered as `MediaFiles` answers (type, `ETag`, immutable caching,
/// 304). Everything else (segments, covers, MP4s: the bytes of playback) is a `302` to a
/// presigned GET of its object: the bucket serves ranges and the bytes never pass through an API
/// server. The redirect is cached privately for less than the URL lives.
struct BucketMediaFiles<Context: RequestContext>: RouterMiddleware {
    let bucket: ServeBucket
    /// Seconds a presigned URL lives, and a redirect may be kept.
    static var urlLifetime: Int { 3600 }
    static var redirectMaxAge: Int { 3000 }
    static var proxied: Set<String> { ["m3u8", "json"] }

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let relative: String
        switch MediaRequest(request) {
        case .elsewhere: return try await next(request, context)
        case .refused(let answer): return answer
        case .file(let path): relative = path
        }
        let key = bucket.key("media/" + relative)
        do {
            guard Self.proxied.contains(URL(fileURLWithPath: relative).pathExtension.lowercased()) else {
                let url = try await bucket.perform { s, b in try s.presignedGET(bucket: b, key: key, expires: Self.urlLifetime) }
                var headers = HTTPFields()
                headers[.location] = url
                headers[.cacheControl] = "private, max-age=\(Self.redirectMaxAge)"
                return Response(status: .found, headers: headers)
            }
            let data = try await bucket.perform { s, b in try s.read(bucket: b, key: key) }
            return Self.answer(request, data, name: relative)
        } catch let e as UploadError where e.kind == .badInput {
            return MediaServing.refusal(.notFound, "no such media file")
        } catch {
            context.logger.error("cannot serve media/\(relative) from the bucket: \(error)")
            var r = MediaServing.refusal(.serviceUnavailable, "the media file cannot be read now; try again later")
            r.headers[.retryAfter] = String(MediaServing.retryAfter)
            return r
        }
    }

    static func answer(_ request: Request, _ data: Data, name: String) -> Response {
        var headers = HTTPFields()
        let etag = "\"" + Digest.hash(.md5, data).hex + "\""
        headers[.contentType] = MediaServing.contentType(name)
        headers[.cacheControl] = MediaServing.cacheControl
        headers[.eTag] = etag
        headers[HTTPField.Name("X-Content-Type-Options")!] = "nosniff"
        // Compared weakly (RFC 9110 section 13.1.2): a gzipped playlist's tag is the weak form.
        let tags = request.headers[.ifNoneMatch]?.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) } ?? []
        if tags.contains(where: { $0 == etag || $0 == "W/" + etag }) {
            return Response(status: .notModified, headers: headers)
        }
        headers[.contentLength] = String(data.count)
        guard request.method == .get else { return Response(status: .ok, headers: headers) }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }
}
