import ClipFlowCore
import ClipFlowMedia
import ClipFlowUpload
import Foundation
import ServiceLifecycle
import Synchronization

/// Recordings published while they are recorded (`POST /videos` with `"recording": true`).
///
/// Each fragment comes as a TUS upload whose metadata names the video (`video_id`, `token`) and
/// the fragment's index from 0 (`fragment`). Fragments are appended in index order, whatever
/// order they arrive in: each is copied (nothing decoded, in the spare worker) into the video's
/// live folder (`LiveLadder`: `DATA/media/ID/live/f00000`, ...), its timeline starting where the
/// one before it ended, and the live playlists grow by its segments; the video plays (`published`
/// "live", still `recording`) from its first fragment. It ends when its recorder says how many
/// fragments it has (`POST /videos/ID/end`, `end`), or when `timeout` seconds pass without a new
/// fragment (a recorder that died: the fragments in order from the first are the recording).
/// Once every fragment of an ended recording is in, its playlists close and it is `viewable`;
/// then its fragments are merged losslessly (conforming one that differs) into one MP4, bound to
/// the video as its upload, and processed as any upload (its copy published, then its ladder);
/// the fragments' uploads go once it is merged (`unclaimedUploads`).
///
/// What is true lives in the store (fragment uploads, the video's end and status) and the live
/// folder (a fragment folder exists only once complete), so a restart goes on where it was
/// (`resume`). One task at a time works on a video on this server. Recordings need the media and
/// the uploads on this server's disk (`LocalMedia`, `UploadFiles`). Thread-safe; `Sendable`.
final class LiveRecordings: Sendable {
    let database: any ServeStore
    let processor: Processor
    let files: UploadFiles?
    /// Seconds without a new fragment after which a recording not ended by its recorder ends.
    let timeout: Double
    /// Videos being worked on; true: more arrived meanwhile (the task looks again).
    private let busy = Mutex<[Int64: Bool]>([:])
    /// Steps that failed in a row, by video.
    private let failures = Mutex<[Int64: Int]>([:])
    /// Fragment uploads in progress: the offset last seen and when it was first seen there.
    private let growing = Mutex<[String: (offset: Int64, at: Double)]>([:])

    init(database: any ServeStore, processor: Processor, uploads: any UploadStorage, timeout: Double) {
        self.database = database
        self.processor = processor
        files = uploads as? UploadFiles
        self.timeout = timeout
    }

    /// Why this server takes no recordings (nil: it takes them).
    var unsupported: String? {
        guard processor.media is LocalMedia, files != nil else {
            return "recordings need the uploads and the media on the server's disk (this server keeps them in a bucket)"
        }
        return nil
    }

    /// The metadata key of a fragment's index.
    static let fragmentKey = "fragment"
    /// The metadata key of a recording's merged upload (its value: how many fragments it joins).
    static let mergedKey = "merged_fragments"
    /// The largest fragment index taken.
    static let maxFragment = 999_999

    /// A fragment's index, from its upload's metadata (nil: the upload is not a fragment).
    static func fragmentIndex(_ upload: UploadRow) -> Int? {
        (try? TUSMetadata.decode(upload.metadata))?[fragmentKey].flatMap { Int($0) }
    }

    /// The live folder of `video`.
    func liveFolder(_ video: Int64) -> URL { processor.media.workFolder(video, step: "live").appendingPathComponent(Self.liveName) }
    static let liveName = "live"

    /// A fragment of `video` arrived (or its end did): its work starts, or the task at work
    /// looks again when it is done.
    func arrived(_ video: Int64) {
        let start = busy.withLock { b -> Bool in
            if b[video] != nil {
                b[video] = true
                return false
            }
            b[video] = false
            return true
        }
        guard start else { return }
        Task {
            repeat { await self.advance(video) } while self.more(video)
        }
    }

    /// Whether more arrived for `video` while its task worked (then it looks again); otherwise
    /// the task ends.
    private func more(_ video: Int64) -> Bool {
        busy.withLock { b in
            guard b[video] == true else {
                b.removeValue(forKey: video)
                return false
            }
            b[video] = false
            return true
        }
    }

    /// Every recording not yet merged goes on (a restart); one silent for `timeout` (no fragment
    /// created, completed or growing) ends with the fragments it has in order from the first,
    /// whether its recorder said its end or not (a fragment it counted never came). Checked until
    /// cancelled.
    func run() async {
        while !Task.isCancelled {
            let now = Date().timeIntervalSince1970
            for v in (try? await database.recordings()) ?? [] {
                guard let id = v.id else { continue }
                if v.status == .recording, let last = try? await lastActivity(v, now: now), now - last > timeout {
                    let count = completeFragments(id)
                    if v.fragments.map({ count < $0 }) ?? true {
                        await giveUp(id, "nothing came for \(Int(timeout)) s (--recording-timeout)")
                        continue
                    }
                }
                arrived(id)
            }
            try? await Task.sleep(for: .seconds(max(0.5, min(5, timeout / 4))))
        }
    }

    /// The recorder of `video` says it has `fragments` fragments. Returns nil when that is its
    /// end now (or was already), else why not: it is not being recorded, it ended with another
    /// count, or more fragments than that are in its playlists already.
    func end(_ video: Int64, fragments: Int64) async throws -> String? {
        let appended = completeFragments(video)
        guard fragments >= appended else { return "\(appended) fragments of video \(video) play already; its end cannot be \(fragments)" }
        if try await database.endRecording(video, fragments: fragments, replacing: false) {
            arrived(video)
            return nil
        }
        guard let v = try await database.video(video) else { return "no such video" }
        if v.fragments == fragments { return nil }
        return v.status == .recording ? "video \(video) ended already with \(v.fragments ?? 0) fragments" : "video \(video) is not being recorded"
    }

    /// When `v` last saw a fragment: created, completed, or (an upload in progress) grown since
    /// this server last looked (`now` then); its own creation when nothing came.
    private func lastActivity(_ v: VideoRow, now: Double) async throws -> Double {
        var last = v.createdAt
        for u in try await database.uploads(ofVideo: v.id!) {
            last = max(last, u.completedAt ?? u.createdAt)
            guard !u.isComplete else {
                growing.withLock { _ = $0.removeValue(forKey: u.id) }
                continue
            }
            let seen = growing.withLock { g -> Double in
                if let before = g[u.id], before.offset == u.offset { return before.at }
                g[u.id] = (u.offset, now)
                return now
            }
            last = max(last, seen)
        }
        return last
    }

    /// How many fragment folders, in order from the first, the live folder holds complete.
    func completeFragments(_ video: Int64) -> Int {
        let live = liveFolder(video)
        var n = 0
        while Self.isComplete(live.appendingPathComponent(LiveLadder.fragmentFolder(n))) { n += 1 }
        return n
    }

    /// Whether a fragment folder is complete (its ladder renames it into place whole).
    private static func isComplete(_ folder: URL) -> Bool {
        FileManager.default.fileExists(atPath: folder.appendingPathComponent("master.m3u8").path)
    }

    /// The complete fragment uploads of `video` by index (the first complete one of an index
    /// sent twice), and the others of an index sent twice.
    private func fragments(of video: Int64) async throws -> (chosen: [Int: UploadRow], twice: [UploadRow]) {
        var chosen: [Int: UploadRow] = [:]
        var twice: [UploadRow] = []
        for u in try await database.uploads(ofVideo: video).sorted(by: { ($0.completedAt ?? 0) < ($1.completedAt ?? 0) }) where u.isComplete {
            guard let i = Self.fragmentIndex(u) else { continue }
            if chosen[i] == nil { chosen[i] = u } else { twice.append(u) }
        }
        return (chosen, twice)
    }

    /// Appends what arrived in order, closes an ended recording whose fragments are all in, and
    /// merges a closed one. A step that fails is tried again at the next look, `attempts` times
    /// in a row at most; then the recording ends with what plays (`giveUp`), or, its merge
    /// failing, stays as it played.
    private func advance(_ video: Int64) async {
        guard let v = try? await database.video(video), let files else { return }
        let live = liveFolder(video)
        do {
            if v.status == .recording {
                let (fragments, twice) = try await fragments(of: video)
                // A fragment sent again (its answer lost) is stored once.
                for u in twice { _ = try? await files.discard(u.id, from: database) }
                var count = completeFragments(video)
                var seconds = count > 0 ? try LiveLadder.seconds(live, count: count) : 0
                let end = v.fragments.map(Int.init)
                while let upload = fragments[count], end.map({ count < $0 }) ?? true {
                    // Removed meanwhile (`DELETE`): nothing is made again in its folder.
                    guard try await database.video(video) != nil else { return }
                    let folder = live.appendingPathComponent(LiveLadder.fragmentFolder(count))
                    try FileManager.default.createDirectory(at: live, withIntermediateDirectories: true)
                    do { try await processor.copyFragment(video, input: files.path(upload.id), into: folder, timelineStart: seconds) } catch {
                        // Made meanwhile by another server sharing the data folder: the same copy.
                        guard Self.isComplete(folder) else { throw error }
                    }
                    count += 1
                    seconds = try LiveLadder.write(live, count: count, ended: false)
                    try await database.publishLive(video, status: .recording, duration: seconds)
                    report(video, .recording, since: upload.completedAt)
                    if seconds > processor.limits.media.maxDuration {
                        _ = try await database.endRecording(video, fragments: Int64(count), replacing: true)
                        failed(video, "the recording reached \(Int(processor.limits.media.maxDuration)) s (--max-duration): it ends there")
                        arrived(video)
                        return
                    }
                }
                guard let end, count >= end else {
                    succeeded(video)
                    return
                }
                seconds = try LiveLadder.write(live, count: end, ended: true)
                try await database.publishLive(video, status: .viewable, duration: seconds)
                report(video, .viewable, since: fragments[end - 1]?.completedAt)
            }
            try await merge(video, count: Int(v.fragments ?? Int64(completeFragments(video))), files: files)
            succeeded(video)
        } catch {
            let reason = processor.dataPaths.scrub("\(error)")
            let tries = failures.withLock { f -> Int in
                f[video, default: 0] += 1
                return f[video]!
            }
            guard tries >= Self.attempts else {
                var e = JobEvent(kind: .requeued, video: video, job: 0, phase: "live")
                e.reason = reason
                processor.observer.job(e)
                return
            }
            succeeded(video)
            await giveUp(video, reason)
        }
    }

    /// Times in a row a recording's step is tried before `giveUp`.
    static let attempts = 3

    private func succeeded(_ video: Int64) { failures.withLock { _ = $0.removeValue(forKey: video) } }

    /// Ends `video` for good because of `reason`: a recording with fragments in its playlists
    /// ends with them; one with none is in `error`; one whose merge keeps failing stays as it
    /// played, `ready`, its `error` saying why it has no merged file.
    private func giveUp(_ video: Int64, _ reason: String) async {
        guard var v = try? await database.video(video) else { return }
        let count = completeFragments(video)
        if v.status == .recording, count > 0 {
            _ = try? await database.endRecording(video, fragments: Int64(count), replacing: true)
            failed(video, "\(reason); the recording ends with its \(count) fragments")
            arrived(video)
            return
        }
        v.status = v.status == .recording ? .error : .ready
        v.error = v.status == .error ? "the recording has no fragment: \(reason)" : "its fragments could not be merged (it plays as recorded): \(reason)"
        try? await database.update(v)
        failed(video, v.error ?? reason)
    }

    private func failed(_ video: Int64, _ reason: String) {
        var e = JobEvent(kind: .failed, video: video, job: 0, phase: "live")
        e.reason = reason
        processor.observer.job(e)
    }

    /// Merges an ended recording's `count` fragments into a new upload bound to the video, which
    /// queues its processing.
    private func merge(_ video: Int64, count: Int, files: UploadFiles) async throws {
        guard let v = try await database.video(video), v.status == .viewable, v.uploadID == nil else { return }
        let (fragments, _) = try await fragments(of: video)
        let inputs = try (0..<count).map { i in
            guard let u = fragments[i] else { throw ClipFlowError.failure("fragment \(i) of video \(video) is gone") }
            return files.path(u.id)
        }
        let key = TUSServer.key(TUSServer.newID())
        let output = URL(fileURLWithPath: files.path(key))
        try await processor.mergeFragments(video, inputs: inputs, into: output)
        let size = (try? FileManager.default.attributesOfItem(atPath: output.path)[.size] as? Int64) ?? 0
        let now = Date().timeIntervalSince1970
        _ = try await database.insert(
            UploadRow(
                id: key, length: size, offset: size, metadata: TUSMetadata.encode(["video_id": String(video), Self.mergedKey: String(count)]), createdAt: now,
                expiresAt: now, completedAt: now, videoID: video),
            carrying: nil)
        try await database.uploaded(video: video, upload: key, trace: nil)
        processor.wake()
    }

    /// Tells the observer that `video` plays from its live folder with `status`, `since` seconds
    /// after the last byte of the fragment that made it so.
    private func report(_ video: Int64, _ status: VideoRow.Status, since lastByte: Double?) {
        var e = JobEvent(kind: .published, video: video, job: 0, phase: "live")
        e.status = status
        e.renditions = [Self.liveName]
        e.seconds = lastByte.map { max(0, Date().timeIntervalSince1970 - $0) }
        processor.observer.job(e)
    }
}

/// The recordings as a service of the server's application: goes on with those a restart left,
/// and ends those whose recorder went silent, until the server shuts down.
struct LiveRecordingService: Service {
    let recordings: LiveRecordings

    func run() async {
        await cancelWhenGracefulShutdown { await recordings.run() }
    }
}
