import ClipFlowCore
import Foundation

/// A clip's probe as `ProbeStage` made it: its sample tables and streams (`ClipInfo`), or why it
/// is not a clip that can be copied. A merge names the first such clip in order, or (conforming)
/// re-encodes it.
public struct ProbedClip: ItemFact {
    public let outcome: Result<ClipInfo, Error>
    public init(_ outcome: Result<ClipInfo, Error>) { self.outcome = outcome }
}

/// Probes every clip it receives (`ClipProbe`: sample tables, streams, parameter sets) as it
/// arrives and passes it on carrying the probe (`ProbedClip`), in the inputs' order: every item
/// of input 0, then of input 1, ... (`InputOrdered`'s order), each input's as soon as the inputs
/// before it have ended. The first stage of a merge's graph: clips a recorder writes are probed
/// while it records, and the merge reads them once. A clip that cannot be probed still goes on,
/// its failure carried. After a stop or a cancel, clips go on unprobed (whoever still wants one
/// probes it). Graph-internal (no kind of its own). Belongs to its stage queue.
final class ProbeStage: Stage {
    let id: String
    var inputTypes: Set<PortType> { [.clips] }
    var outputType: PortType? { .clips }
    /// The input whose clips go on as they come; later inputs' wait in `waiting`.
    private var current = 0
    private var ended: Set<Int> = []
    private var waiting: [Int: [Item]] = [:]
    private var probed = 0

    init(id: String) { self.id = id }

    func negotiate(_ inputs: [StreamParameters], _ context: StageContext) throws -> StreamParameters? {
        try checkPorts(inputs)
        return StreamParameters(port: .clips)
    }

    func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        var item = item
        if let path = item.path, !context.stopRequested {
            item.facts[ProbedClip.self] = ProbedClip(Result { try ClipProbe.probe(path) })
            probed += 1
        }
        if input == current { return context.push(item) }
        waiting[input, default: []].append(item)
        return .ok
    }

    func inputEnded(_ input: Int, _ context: StageContext) throws -> FlowResult {
        ended.insert(input)
        while ended.contains(current) {
            current += 1
            for item in waiting.removeValue(forKey: current) ?? [] where context.push(item) == .flushing { return .flushing }
        }
        return .ok
    }

    func drain(_ context: StageContext) throws {
        for input in waiting.keys.sorted() {
            for item in waiting[input]! where context.push(item) == .flushing { return }
        }
        waiting = [:]
        context.emit(ProbeSummary(probed: probed))
    }
}

/// How many clips a probe stage probed: its `result` event.
public struct ProbeSummary: StageResult, Equatable {
    public var probed: Int

    public init(probed: Int) { self.probed = probed }

    public var fields: [EventField] { [.init("probed", .integer(Int64(probed)))] }

    public init(fields: [EventField]) { self.init(probed: fields.int("probed")) }
}
