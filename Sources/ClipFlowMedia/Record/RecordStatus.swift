import Synchronization

/// How a recording stands right now, for a status line: written by the record stage as it takes
/// pictures and audio, read from any thread (a terminal's redraw timer). Thread-safe.
public final class RecordStatus: Sendable {
    public struct Snapshot: Sendable, Equatable {
        /// Number of the open fragment (`<prefix>-NNNN.mp4`), or of the one the next picture
        /// opens (before the first picture, just after a split); nil while paused and after the last.
        public var fragment: Int?
        /// Seconds in the open fragment.
        public var fragmentSeconds = 0.0
        /// Seconds of every fragment of this recording, and (with a maximum record time, which
        /// counts them) of those already in the directory; a fragment deleted through the
        /// recorder (`RecordControl.Command.deleteLast`) no longer counts.
        public var totalSeconds = 0.0
        public var paused = false
        /// Fragments this recording closed and renamed into place.
        public var fragmentsClosed = 0
        /// Pictures missing from the source's sequence (lost by the camera or on the queue to the encoder).
        public var picturesMissing: Int64 = 0
        /// Times the microphone lost audio (an overrun, or a gap seen in its timestamps), and
        /// the seconds filled with silence for them.
        public var audioOverruns = 0
        public var audioGapSeconds = 0.0
        /// Peak level of the latest audio, dBFS (0: full scale); nil: no audio.
        public var audioLevel: Double?

        public init() {}
    }

    private let state = Mutex(Snapshot())

    public init() {}

    public var snapshot: Snapshot { state.withLock { $0 } }

    public func update(_ body: (inout Snapshot) -> Void) { state.withLock { body(&$0) } }
}
