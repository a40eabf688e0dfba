/// Something a stage learned about an item and hands on with it (a clip's probe, the clips a
/// file was joined from, a picture chosen for a cover), so that a stage further on uses it
/// instead of finding it out again. The core does not look inside a fact; the stages of one
/// family agree on its type.
public protocol ItemFact: Sendable {}

/// The facts an item carries, at most one of each type, looked up by type:
/// `item.facts[ClipInfo.self]`. A value type: a stage that passes an item on passes its facts
/// with it unless it removes them, so a stage that changes the payload removes the facts that
/// describe the old one.
public struct ItemFacts: Sendable {
    private var byType: [ObjectIdentifier: any ItemFact] = [:]

    public init() {}

    /// The fact of type `type`, if the item carries one; setting nil removes it.
    public subscript<Fact: ItemFact>(_ type: Fact.Type) -> Fact? {
        get { byType[ObjectIdentifier(type)] as? Fact }
        set { byType[ObjectIdentifier(type)] = newValue }
    }

    public var isEmpty: Bool { byType.isEmpty }
}

/// For a file made from other files (a merged video): where each stretch of it came from, in
/// order, so that a problem found later (a picture that cannot be decoded) is blamed on the
/// input it came from rather than on the file made from it.
public struct FileOrigins: ItemFact, Equatable {
    public var stretches: [FileOrigin]
    public init(_ stretches: [FileOrigin]) { self.stretches = stretches }
}
