import Foundation

/// One event for one receiver, as its row in `webhook_deliveries` holds it: a copy of the event
/// (`webhook_events`, written by the database's trigger on `videos` in the transaction that made
/// the change) and how its delivery goes.
struct WebhookDelivery: Sendable, Equatable {
    /// The event's number; receivers see it as `evt_N` and drop a second delivery of one id.
    var eventID: Int64
    var endpoint: String
    /// `video.created`, `video.viewable`, `video.ready`, `video.error` or `video.deleted`.
    var type: String
    var videoID: Int64
    /// The video as it was when the event happened.
    var name: String
    var clientID: Int64
    var status: String
    var error: String?
    /// When the event happened (seconds since 1970, the database's clock).
    var createdAt: Double
    /// Attempts made before this one.
    var attempts: Int
    /// Until when this attempt holds the delivery: its outcome is recorded only while it still
    /// does (a server that took it over after the lease ran out owns it then).
    var lease: Double = 0
}

/// What the database's trigger and the stores share about webhook events (one definition, so
/// the dialects cannot drift apart).
enum WebhookEvent {
    /// The statuses whose reaching is an event (`video.` + the status), as SQL.
    static let statuses = "('viewable', 'ready', 'error')"
    /// Every event type, in the order a video's life can have them.
    static let types = ["video.created", "video.viewable", "video.ready", "video.error", "video.deleted"]
    /// A delivery row `d` that waits: an earlier event of its video is still pending for its
    /// endpoint (a receiver sees each video's events in the order they happened).
    static let waitsForAnEarlierOne =
        "EXISTS (SELECT 1 FROM webhook_deliveries p WHERE p.endpoint = d.endpoint AND p.video_id = d.video_id AND p.state = 'pending' AND p.event_id < d.event_id)"
    /// The columns a delivery is read from, in `WebhookDelivery`'s order.
    static let columns = "event_id, endpoint, type, video_id, name, client_id, status, error, created_at, attempts, lease_until"
    /// The `settings` row that holds how far events were fanned out to `endpoint`: every event
    /// up to that id has its delivery row.
    static func cursorName(_ endpoint: String) -> String { "webhook cursor \(endpoint)" }
    /// Events this many seconds old are surely committed: a fan-out's cursor passes only them
    /// (a later id can commit before an earlier one), and looks at newer ones again next time.
    static let settleSeconds = 60.0
}
