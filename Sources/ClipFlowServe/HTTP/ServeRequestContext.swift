import Hummingbird
import NIOCore

/// The context of each request `clipflow serve` answers: Hummingbird's own, and the address of
/// the connection's peer (what beacons are counted by, `BeaconLimiter`; never logged or kept).
struct ServeRequestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    /// The connection, asked for its peer only by the requests that want it.
    let channel: any Channel

    var remoteAddress: SocketAddress? { channel.remoteAddress }

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        channel = source.channel
    }
}
