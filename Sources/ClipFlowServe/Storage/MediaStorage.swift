import ClipFlowCore
import ClipFlowUpload
import Foundation

/// Where published ladders live: folders under `DATA/media` (`LocalMedia`, the default) or
/// objects under `media/` in a bucket (`BucketMedia`). A ladder is written by a worker into a
/// new folder of the video's `workFolder`, made public by `put`, then published by the
/// database's switch of the video's `published` folder; a folder is never changed once put.
/// Implementations are thread-safe.
protocol MediaStorage: Sendable {
    /// The origin (`scheme://host[:port]`) a browser fetches media bytes from when it is not this
    /// server's (a bucket's presigned URLs): what the pages' Content-Security-Policy must allow.
    var mediaOrigin: String? { get }

    /// The local folder step `step` (a name unique among the steps running here) of a job of
    /// `video` writes its ladders into, where the published folder is found for reuse once
    /// `prepare` made it so.
    func workFolder(_ video: Int64, step: String) -> URL
    /// Makes the published folder `name` of `video` readable in `work` (where `resume` may have
    /// put it already).
    func prepare(_ video: Int64, published name: String, in work: URL) async throws
    /// Makes folder `name` of `video`, complete in `work`, public (before it is published). Its
    /// files that are the very files (hard links: renditions a ladder took over, `LadderReuse`) of
    /// folder `earlier` in `work`, public already, or the same bytes under the same name, are
    /// taken from there, not sent again.
    func put(_ video: Int64, _ name: String, from work: URL, reusing earlier: String) async throws
    /// Step `job` of `video` that had `work` succeeded, and the job's next step builds on what
    /// `work` holds (the upload, folder `published`, which it published): it is kept for that step
    /// should it run here (`resume`), for a bounded time. The step's `release` then finds nothing
    /// to remove.
    func keep(_ video: Int64, job: Int64, from work: URL, published: String) async
    /// Puts what `keep` kept of `job` of `video` (if anything) into `work`, a step folder just
    /// made; nothing is kept of it afterwards.
    func resume(_ video: Int64, job: Int64, into work: URL) async
    /// Folder `name` of `video` was superseded: its grace period (`grace` seconds, players in the
    /// middle of its playlists keep working) starts now; it goes after.
    func superseded(_ video: Int64, _ name: String, grace: Double) async
    /// The step that had work folder `work` ended: what it holds locally only for the step goes.
    func release(_ work: URL) async
    /// Removes `video`'s folders no player can be using: unfinished ones, and any but `published`
    /// whose grace period is over.
    func removeLeftovers(_ video: Int64, keeping published: String, grace: Double) async
    /// Removes every video's superseded folders whose grace is over (`published` answers a
    /// video's published folder; videos `skip` says are being processed are left alone).
    func sweepSuperseded(grace: Double, skip: @Sendable (Int64) -> Bool, published: @Sendable (Int64) async -> String?) async
    /// Removes everything of `video`.
    func remove(_ video: Int64) async throws
    /// A small file of a published folder (`ID/FOLDER/feed.json`), nil when it cannot be read.
    func read(_ video: Int64, _ path: String) async -> Data?
}

/// Published ladders in `DATA/media/ID/FOLDER`: written in place (the work folder is the media
/// folder), served by `MediaFiles`. A folder's time (its modification time, touched when it is
/// superseded) starts its grace period.
struct LocalMedia: MediaStorage {
    var mediaOrigin: String? { nil }
    let folder: URL

    init(folder: URL) throws {
        self.folder = folder
        do { try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true) } catch {
            throw ClipFlowError.output("cannot create '\(folder.path)': \(error.localizedDescription)")
        }
    }

    func workFolder(_ video: Int64, step: String) -> URL { videoFolder(video) }

    func videoFolder(_ video: Int64) -> URL { folder.appendingPathComponent(String(video)) }

    func prepare(_ video: Int64, published name: String, in work: URL) async throws {}

    func put(_ video: Int64, _ name: String, from work: URL, reusing earlier: String) async throws {}

    /// The work folder is the video's media folder: what a step leaves there stays anyway.
    func keep(_ video: Int64, job: Int64, from work: URL, published: String) async {}

    func resume(_ video: Int64, job: Int64, into work: URL) async {}

    func superseded(_ video: Int64, _ name: String, grace: Double) async {
        _ = utimes(videoFolder(video).appendingPathComponent(name).path, nil)
    }

    func release(_ work: URL) async {}

    func removeLeftovers(_ video: Int64, keeping published: String, grace: Double) async {
        let fm = FileManager.default
        let cutoff = Date().addingTimeInterval(-grace)
        let folder = videoFolder(video)
        for name in (try? fm.contentsOfDirectory(atPath: folder.path)) ?? [] where name != published {
            let path = folder.appendingPathComponent(name)
            let time = (try? fm.attributesOfItem(atPath: path.path)[.modificationDate] as? Date) ?? .distantPast
            if name.hasPrefix(".") || time < cutoff { try? fm.removeItem(at: path) }
        }
    }

    /// Only a video folder holding more than the published ladder costs a look at the database.
    func sweepSuperseded(grace: Double, skip: @Sendable (Int64) -> Bool, published: @Sendable (Int64) async -> String?) async {
        let fm = FileManager.default
        let cutoff = Date().addingTimeInterval(-grace)
        for id in (try? fm.contentsOfDirectory(atPath: folder.path)) ?? [] {
            guard let video = Int64(id), !skip(video) else { continue }
            let videoFolder = self.videoFolder(video)
            let names = ((try? fm.contentsOfDirectory(atPath: videoFolder.path)) ?? []).filter { !$0.hasPrefix(".") }
            guard names.count > 1, let kept = await published(video), !kept.isEmpty else { continue }
            for name in names where name != kept {
                let path = videoFolder.appendingPathComponent(name)
                let time = (try? fm.attributesOfItem(atPath: path.path)[.modificationDate] as? Date) ?? .distantPast
                if time < cutoff { try? fm.removeItem(at: path) }
            }
        }
    }

    func remove(_ video: Int64) async throws {
        do { try FileManager.default.removeItem(at: videoFolder(video)) } catch CocoaError.fileNoSuchFile {} catch {
            throw ClipFlowError.output("cannot remove the media of video \(video): \(error.localizedDescription)")
        }
    }

    func read(_ video: Int64, _ path: String) async -> Data? {
        FileManager.default.contents(atPath: videoFolder(video).appendingPathComponent(path).path)
    }
}
