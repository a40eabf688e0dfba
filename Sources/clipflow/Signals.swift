import ClipFlowCore
import Dispatch
import Foundation
#if canImport(Glibc)
    import Glibc
#endif

/// SIGINT/SIGTERM: the first signal sets the cancellation flag (work stops at the next packet,
/// removes its temporary output and exits 130); a second signal removes temporary files and exits
/// at once.
enum SignalHandling {
    nonisolated(unsafe) private static var sources: [DispatchSourceSignal] = []

    static func install() -> CancellationFlag {
        let flag = CancellationFlag()
        for sig in [SIGINT, SIGTERM] {
            signal(sig, SIG_IGN)
            let src = DispatchSource.makeSignalSource(signal: sig, queue: .global())
            src.setEventHandler {
                if flag.isCancelled {
                    TemporaryFiles.shared.removeAll()
                    _exit(130)
                }
                flag.cancel()
            }
            src.resume()
            sources.append(src)
        }
        return flag
    }
}
