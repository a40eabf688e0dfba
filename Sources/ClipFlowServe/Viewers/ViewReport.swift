import Foundation

/// What a player reports of one view of a video (`POST /beacon`): how long the first picture took,
/// how often and how long playback stalled after it, how long it was watched, the rendition it
/// played last and whether it failed. No personal data: no address, no agent, no identifier of
/// the viewer is taken or kept.
struct ViewReport: Sendable, Equatable {
    var video: Int64
    /// Milliseconds from the video becoming the one on screen to its first picture playing (nil:
    /// it never played).
    var startupMs: Int?
    var rebuffers: Int
    var rebufferMs: Int
    var watchedMs: Int
    /// A rendition of the video's, "native" (the browser's own HLS), or "other".
    var rendition: String
    /// A short code of the player's failure (nil: none).
    var error: String?

    /// The body as the page sends it, every field checked (nil: a field is missing, of the wrong
    /// type or out of range, with its name).
    struct Body: Decodable {
        var video: Int64
        var startupMs: Int?
        var rebuffers: Int
        var rebufferMs: Int
        var watchedMs: Int
        var rendition: String?
        var error: String?
        /// A signed video's playback token (the page's URIs carry it): a signed video's views are
        /// taken only with it.
        var token: String?
        enum CodingKeys: String, CodingKey {
            case video, rebuffers, rendition, error, token
            case startupMs = "startup_ms", rebufferMs = "rebuffer_ms", watchedMs = "watched_ms"
        }
    }

    static let longest = 24 * 3600 * 1000

    /// The report of `body` for a video whose renditions are `renditions`; the field at fault
    /// when a value is out of range.
    init(_ body: Body, renditions: Set<String>) throws(BeaconRefusal) {
        guard (0...Self.longest).contains(body.startupMs ?? 0) else { throw BeaconRefusal("startup_ms: expected 0 to \(Self.longest) or null") }
        guard (0...100_000).contains(body.rebuffers) else { throw BeaconRefusal("rebuffers: expected 0 to 100000") }
        guard (0...Self.longest).contains(body.rebufferMs) else { throw BeaconRefusal("rebuffer_ms: expected 0 to \(Self.longest)") }
        guard (0...Self.longest).contains(body.watchedMs) else { throw BeaconRefusal("watched_ms: expected 0 to \(Self.longest)") }
        video = body.video
        startupMs = body.startupMs
        rebuffers = body.rebuffers
        // Stalled time is part of the time on screen.
        rebufferMs = min(body.rebufferMs, body.watchedMs)
        watchedMs = body.watchedMs
        let named = body.rendition ?? "other"
        rendition = renditions.contains(named) || named == "native" ? named : "other"
        // A code, not a message: letters, digits and `_-` only, at most 32 of them.
        error = body.error.map { text in
            let code = String(
                String.UnicodeScalarView(
                    text.lowercased().unicodeScalars.filter { ("a"..."z").contains($0) || ("0"..."9").contains($0) || $0 == "_" || $0 == "-" }.prefix(32)))
            return code.isEmpty ? "error" : code
        }
    }
}

/// Why a beacon was refused (400), naming the field.
struct BeaconRefusal: Error {
    let reason: String
    init(_ reason: String) { self.reason = reason }
}

/// What the studio shows of a video's views: from its last `ViewSummary.window` views.
struct ViewSummary: Encodable, Sendable, Equatable {
    static let window = 1000
    var views: Int
    var startupP50Ms: Int?
    var startupP95Ms: Int?
    /// Stalled time over watched time (0 when nothing was watched).
    var rebufferRatio: Double
    var errors: Int

    enum CodingKeys: String, CodingKey {
        case views, errors
        case startupP50Ms = "startup_p50_ms", startupP95Ms = "startup_p95_ms", rebufferRatio = "rebuffer_ratio"
    }

    /// The summary of `views` (startup, rebuffer and watched milliseconds, and whether it failed).
    init(_ views: [(startup: Int?, rebufferMs: Int, watchedMs: Int, failed: Bool)]) {
        self.views = views.count
        let startups = views.compactMap(\.startup).sorted()
        func percentile(_ p: Double) -> Int? {
            startups.isEmpty ? nil : startups[min(startups.count - 1, Int((p * Double(startups.count)).rounded(.up)) - 1)]
        }
        startupP50Ms = percentile(0.5)
        startupP95Ms = percentile(0.95)
        let watched = views.reduce(0) { $0 + $1.watchedMs }
        let stalled = views.reduce(0) { $0 + $1.rebufferMs }
        rebufferRatio = watched > 0 ? (Double(stalled) / Double(watched) * 10000).rounded() / 10000 : 0
        errors = views.filter(\.failed).count
    }
}
