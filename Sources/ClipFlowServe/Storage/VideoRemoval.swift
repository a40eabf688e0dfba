import ClipFlowCore
import Foundation

extension Processor {
    /// Removes video `id` and everything of it: its job is stopped first (its worker killed; no
    /// step starts after, so nothing recreates its media), then its files (every upload naming
    /// it, in progress ones interrupted; its media folder), then its rows, so that a full disk is
    /// freed before the database is asked to write, then its media folder once more: a worker of
    /// another server that put a folder before it saw the video gone (`publish`) put it before
    /// the rows went. A full store is a 507 `HTTPRefusal`. However it ends, the video is
    /// released: a removal that failed leaves it to be processed as before.
    func removeVideo(_ id: Int64) async throws {
        await stop(video: id)
        defer { release(video: id) }
        do {
            var names = try await database.uploads(ofVideo: id).map(\.id)
            if let bound = try await database.video(id)?.uploadID, !names.contains(bound) { names.append(bound) }
            for upload in names {
                guard try await uploads.discard(upload, from: database) else { throw HTTPRefusal(.locked, "an upload of video \(id) is busy; try again") }
            }
            try await media.remove(id)
            try await database.deleteVideo(id)
            try await media.remove(id)
        } catch let refusal as HTTPRefusal {
            throw refusal
        } catch {
            throw TUSServer.refusal(error, database: database)
        }
    }
}
