import ClipFlowCore
import ClipFlowUpload
import Foundation
import HTTPTypes
import Hummingbird
import Synchronization

/// Published ladders as objects `media/ID/FOLDER/…` in a bucket. A worker writes a ladder into
/// a local scratch folder of the step's own (`SCRATCH/ID-STEP`, removed when the step ends: the
/// scratch space a worker needs is bounded by the steps it runs at once), then each file of it is
/// streamed to its object (`put(file:)`); a file that is a rendition taken over from the folder
/// the ladder builds on (a hard link, `LadderReuse`), or the same bytes as that folder's file of
/// its name, is copied there by the bucket (CopyObject), never sent again. A folder's time is its
/// newest object's (`LastModified`); a superseded folder is removed once its grace is over by
/// this server (a restart meanwhile leaves it to the next step of the video, or to the video's
/// removal).
///
/// A job's `playable` step that queues its `ladder` step leaves its folder (the upload it
/// downloaded, the folder it published) to that step (`keep`: `KEPT/ID-JOB`): when the ladder
/// runs on this server, it takes them (`resume`) and reads nothing from the bucket but a HEAD of
/// the upload (`BucketUploads.localFile` checks the copy is of that upload's object) and writes
/// only what it made. Elsewhere (another server, or after a restart: `KEPT` is emptied at start
/// like the scratch), the ladder step downloads both. A kept folder goes when its step takes it,
/// when its video's published folder is another (the ladder was published elsewhere: checked by
/// `sweepSuperseded`) or the video is removed, after `keptFor` seconds, and, the oldest first,
/// beyond `keptLimit` of them.
final class BucketMedia: MediaStorage {
    let bucket: ServeBucket
    let scratch: URL
    /// Where `keep` keeps step folders for the next step.
    let keptFolder: URL
    let mediaOrigin: String?
    /// feed.json by `ID/FOLDER/feed.json`: published folders never change, so a read is kept.
    private let small = Mutex<[String: Data]>([:])
    /// Entries `small` keeps before it starts afresh.
    static let smallLimit = 10_000
    /// The folders kept (`ID-JOB`): when, and the name of the published folder each holds. Its
    /// lock also orders every rename into and out of `keptFolder`.
    private let kept = Mutex<[String: KeptFolder]>([:])
    /// At most this many folders are kept, each at most `keptFor` seconds.
    static let keptLimit = 8
    static let keptFor: Double = 3600

    private struct KeptFolder {
        var video: Int64
        var since: Date
        var published: String
    }

    /// `kept`: by default `kept` beside `scratch`.
    init(bucket: ServeBucket, scratch: URL, kept: URL? = nil) throws {
        self.bucket = bucket
        self.scratch = scratch
        keptFolder = kept ?? scratch.deletingLastPathComponent().appendingPathComponent("kept")
        mediaOrigin = bucket.store.objectOrigin(bucket: bucket.name)
        for folder in [scratch, keptFolder] {
            do {
                // Nothing in scratch outlives a step, nor a kept folder the server that kept it;
                // what a crash left there goes now.
                try? FileManager.default.removeItem(at: folder)
                try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
            } catch {
                throw ClipFlowError.output("cannot create '\(folder.path)': \(error.localizedDescription)")
            }
        }
    }

    func folderKey(_ video: Int64, _ name: String = "") -> String { bucket.key("media/\(video)/" + (name.isEmpty ? "" : name + "/")) }

    func workFolder(_ video: Int64, step: String) -> URL { scratch.appendingPathComponent("\(video)-\(step)") }

    func prepare(_ video: Int64, published name: String, in work: URL) async throws {
        let prefix = folderKey(video, name), local = work.appendingPathComponent(name)
        // Kept from the step that wrote and put it (`resume`): the folder as published.
        var isFolder: ObjCBool = false
        if FileManager.default.fileExists(atPath: local.path, isDirectory: &isFolder), isFolder.boolValue { return }
        try await bucket.perform { s, b in
            for object in try s.list(bucket: b, prefix: prefix).objects {
                let path = local.appendingPathComponent(String(object.key.dropFirst(prefix.count)))
                try FileManager.default.createDirectory(at: path.deletingLastPathComponent(), withIntermediateDirectories: true)
                try s.download(bucket: b, key: object.key, to: path.path)
            }
        }
    }

    func put(_ video: Int64, _ name: String, from work: URL, reusing earlier: String) async throws {
        let local = work.appendingPathComponent(name), prefix = folderKey(video, name)
        let source = earlier.isEmpty || earlier == name ? nil : work.appendingPathComponent(earlier), sourcePrefix = folderKey(video, earlier)
        try await bucket.perform { s, b in
            guard let walk = FileManager.default.enumerator(at: local, includingPropertiesForKeys: [.isRegularFileKey]) else {
                throw ClipFlowError.output("cannot read the ladder written in '\(local.path)'")
            }
            let base = local.standardizedFileURL.path + "/"
            for case let file as URL in walk where (try? file.resourceValues(forKeys: [.isRegularFileKey]).isRegularFile) == true {
                let relative = String(file.standardizedFileURL.path.dropFirst(base.count))
                if let source, Self.sameBytes(file.path, source.appendingPathComponent(relative).path) {
                    // The earlier folder's own file (or one made again byte for byte, as a
                    // storyboard), so its object is the same bytes: copied in the bucket (sent from
                    // here only when that object is gone).
                    do {
                        try s.copy(bucket: b, from: sourcePrefix + relative, to: prefix + relative)
                        continue
                    } catch let e as UploadError where e.kind == .badInput {}
                }
                try s.put(file: file.path, bucket: b, key: prefix + relative, contentType: MediaServing.contentType(relative))
            }
        }
    }

    /// Whether `a` and `b` hold the same bytes: one file (hard links of one inode), or files of
    /// one size whose bytes compare equal (read 1 MiB at a time).
    static func sameBytes(_ a: String, _ b: String) -> Bool {
        var x = stat(), y = stat()
        guard stat(a, &x) == 0, stat(b, &y) == 0, x.st_size == y.st_size else { return false }
        if x.st_dev == y.st_dev && x.st_ino == y.st_ino { return true }
        guard let f = FileHandle(forReadingAtPath: a), let g = FileHandle(forReadingAtPath: b) else { return false }
        defer {
            try? f.close()
            try? g.close()
        }
        do {
            while true {
                // nil: the end of the file.
                let p = try f.read(upToCount: 1 << 20) ?? Data(), q = try g.read(upToCount: 1 << 20) ?? Data()
                guard p == q else { return false }
                if p.isEmpty { return true }
            }
        } catch { return false }
    }

    func keep(_ video: Int64, job: Int64, from work: URL, published: String) async {
        let name = "\(video)-\(job)", target = keptFolder.appendingPathComponent(name)
        let gone = kept.withLock { k -> [URL] in
            var gone: [URL] = []
            if k.removeValue(forKey: name) != nil, let aside = moveAside(target) { gone.append(aside) }
            guard rename(work.path, target.path) == 0 else { return gone }
            k[name] = KeptFolder(video: video, since: Date(), published: published)
            while k.count > Self.keptLimit, let oldest = k.min(by: { $0.value.since < $1.value.since })?.key {
                k[oldest] = nil
                if let aside = moveAside(keptFolder.appendingPathComponent(oldest)) { gone.append(aside) }
            }
            return gone
        }
        for folder in gone { try? FileManager.default.removeItem(at: folder) }
    }

    func resume(_ video: Int64, job: Int64, into work: URL) async {
        let name = "\(video)-\(job)", source = keptFolder.appendingPathComponent(name)
        let gone = kept.withLock { k -> URL? in
            guard k.removeValue(forKey: name) != nil else { return nil }
            // `work` is new and empty: the kept folder takes its place (rename replaces an empty folder).
            return rename(source.path, work.path) == 0 ? nil : moveAside(source)
        }
        if let gone { try? FileManager.default.removeItem(at: gone) }
    }

    /// Renames kept `folder` to a hidden name, out of every step's way, for its removal outside
    /// the lock; nil when it is not there.
    private func moveAside(_ folder: URL) -> URL? {
        let aside = keptFolder.appendingPathComponent(".gone-\(folder.lastPathComponent)-\(UInt32.random(in: 0...UInt32.max))")
        return rename(folder.path, aside.path) == 0 ? aside : nil
    }

    /// Drops the kept folders that match `drop` (checked under the lock).
    private func dropKept(where drop: (String, KeptFolder) -> Bool) {
        let gone = kept.withLock { k -> [URL] in
            let names = k.filter { drop($0.key, $0.value) }.map(\.key)
            for n in names { k[n] = nil }
            return names.compactMap { moveAside(keptFolder.appendingPathComponent($0)) }
        }
        for folder in gone { try? FileManager.default.removeItem(at: folder) }
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

    /// Superseded folders in the bucket go by `superseded` and `removeLeftovers`; here, the kept
    /// folders no step will take: too old, or of a video whose published folder is another now
    /// (its ladder was published by another server) or that is gone.
    func sweepSuperseded(grace: Double, skip: @Sendable (Int64) -> Bool, published: @Sendable (Int64) async -> String?) async {
        let cutoff = Date().addingTimeInterval(-Self.keptFor)
        dropKept { _, f in f.since < cutoff }
        let held = kept.withLock { k in k.map { ($0.key, $0.value) } }
        var stale: [String: Date] = [:]
        for (name, f) in held where await published(f.video) != f.published { stale[name] = f.since }
        if !stale.isEmpty { dropKept { name, f in stale[name] == f.since } }
    }

    func remove(_ video: Int64) async throws {
        let prefix = folderKey(video)
        small.withLock { $0 = $0.filter { !$0.key.hasPrefix("\(video)/") } }
        dropKept { _, f in f.video == video }
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
