internal import CClipFlowFFmpeg
import Foundation

/// How a track's stored pictures are shown, read from its display matrix: mirrored left to right
/// (or not), then turned `turn` degrees clockwise (0, 90, 180 or 270). Every matrix that is a
/// rotation by a multiple of 90 degrees and/or a flip is one of these eight (a vertical flip is a
/// mirror turned 180 degrees); any other matrix (another angle, a shear) is taken as upright.
struct DisplayOrientation: Equatable, Sendable {
    var turn: Int
    var mirrored: Bool

    static let upright = DisplayOrientation(turn: 0, mirrored: false)

    init(turn: Int, mirrored: Bool) {
        self.turn = turn
        self.mirrored = mirrored
    }

    /// From FFmpeg's display matrix `m` (AV_PKT_DATA_DISPLAYMATRIX): a stored pixel (x, y) is
    /// shown at (m[0] x + m[3] y, m[1] x + m[4] y) plus a translation, with y growing downwards
    /// (so a picture whose x axis goes to (0, 1) is turned clockwise). A negative determinant
    /// is a mirror (as `av_display_matrix_flip` makes); what remains once the mirror (x -> -x,
    /// applied first) is taken out is the turn.
    init(matrix m: [Int32]) {
        guard m.count == 9 else {
            self = .upright
            return
        }
        let a = Double(m[0]), b = Double(m[1]), c = Double(m[3]), d = Double(m[4])
        let determinant = a * d - b * c
        guard determinant != 0 else {
            self = .upright
            return
        }
        let mirrored = determinant < 0
        let degrees = atan2(mirrored ? -b : b, mirrored ? -a : a) * 180 / .pi
        let quarter = (degrees / 90).rounded()
        guard abs(degrees - quarter * 90) < 1 else {
            self = .upright
            return
        }
        self.init(turn: ((Int(quarter) * 90) % 360 + 360) % 360, mirrored: mirrored)
    }

    /// The orientation of stream `index` of `demuxer` (upright when it has no display matrix).
    init(of demuxer: Demuxer, stream index: Int) {
        var m = [Int32](repeating: 0, count: 9)
        guard cf_stream_display_matrix(demuxer.stream(index), &m) == 1 else {
            self = .upright
            return
        }
        self.init(matrix: m)
    }
}
