import Hummingbird
import NIOCore

/// The context of each request `clipflow serve` answers: Hummingbird's own, and the address of
/// the connection's peer (what beacons are counted by, `BeaconLimiter`; never logged or kept).
struct ServeRequestContext: RequestContext, RemoteAddressRequestContext {
    var coreContext: CoreRequestContextStorage
    let remoteAddress: SocketAddress?

    init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}
