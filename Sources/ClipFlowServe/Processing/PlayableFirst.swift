import ClipFlowMedia
import Foundation

/// How an upload becomes playable before its ladder exists, and what its ladder then makes.
///
/// The `playable` step publishes, as fast as it can, something every browser plays: a `copy` of
/// the upload (its packets cut into fMP4 segments, nothing decoded) when the upload allows it
/// (`BrowserCopy`, checked by the step's `inspect` stage), else the ladder's smallest rung (with the audio and the poster; a
/// small H.264 source that fits it stands in for it, `Passthrough`). The `ladder`
/// step then encodes the other rungs from one decode and takes over, as they are, what the first
/// step made that the ladder also needs (the copied or encoded audio, the smallest rung, and the
/// copy when it fits the top rung, `Passthrough`: that rung is then not encoded), so no
/// rendition is made twice. The poster is taken from a copy (the upload's own pictures); after the
/// smallest rung, the ladder makes it again from its decoded pictures, at its top rung's size
/// (a cover as sharp as the video).
enum PlayableFirst {
    /// The rungs of an upload whose picture, as displayed, is `width`x`height`: the standard ones
    /// at or below its short side, never fewer than the smallest.
    static func rungs(width: Int, height: Int) -> [LadderRung] {
        let short = min(width, height)
        let fitting = LadderRung.standard.filter { $0.height <= short }
        return fitting.isEmpty ? [smallest] : fitting
    }

    static var smallest: LadderRung { LadderRung.standard[LadderRung.standard.count - 1] }

    /// The `playable` step's ladder: the copy, or the smallest rung (which a small H.264 source
    /// that fits stands in for, `Passthrough`).
    static func first(copyable: Bool) -> LadderChoice {
        copyable ? LadderChoice(rungs: [], copy: true) : LadderChoice(rungs: [smallest])
    }

    /// The `ladder` step after a first step of `copyable`'s kind: nil when the first step made the
    /// whole ladder already (a picture no larger than the smallest rung, not copied).
    static func ladder(rungs: [LadderRung], copyable: Bool) -> LadderStepPlan? {
        if copyable { return LadderStepPlan(rungs: rungs.map(\.name), reuse: [LadderReuse.audio, LadderReuse.poster, "copy"]) }
        let rest = rungs.filter { $0 != smallest }
        return rest.isEmpty ? nil : LadderStepPlan(rungs: rest.map(\.name), reuse: [smallest.name, LadderReuse.audio])
    }
}

/// What a job's `ladder` step makes: the rungs it encodes, and the renditions it takes from the
/// folder the `playable` step published (`LadderReuse`). Kept in the job (`JobRow.plan`, JSON).
struct LadderStepPlan: Codable, Sendable, Equatable {
    var rungs: [String]
    var reuse: [String]

    var json: String { String(decoding: (try? JSONEncoder().encode(self)) ?? Data(), as: UTF8.self) }

    init(rungs: [String], reuse: [String]) {
        self.rungs = rungs
        self.reuse = reuse
    }

    init?(json: String?) {
        guard let json, let p = try? JSONDecoder().decode(LadderStepPlan.self, from: Data(json.utf8)) else { return nil }
        self = p
    }

}
