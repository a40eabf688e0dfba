/// The inputs of one stage, read as their items come: whichever input has an item gives it
/// (taking turns among those that have one), so no producer waits on a full link while the
/// stage waits on another input. Each input's items keep their order; the inputs interleave.
/// This is what lets a graph branch and join again (a diamond: a source feeding two stages that
/// both feed one) stream without deadlock. A stage that needs its inputs one after another (a
/// merge joining clips) collects them with `InputOrdered`.
///
/// Owned by the consumer stage's queue; the links ring its doorbell from their producers' threads.
final class FanIn {
    private let links: [Link]
    private var open: [Bool]
    private let doorbell = Doorbell()
    /// Where the next look starts (turns).
    private var next = 0

    init(_ links: [Link]) {
        self.links = links
        open = Array(repeating: true, count: links.count)
        if links.count > 1 { for l in links { l.ring(doorbell) } }
    }

    enum Next {
        case item(input: Int, Item)
        /// This input ended; others are still open.
        case ended(input: Int)
    }

    /// The next item and the input it came from (or the end of one of several inputs), waiting
    /// for one; nil once every input has ended (or the graph is flushed).
    func pull() -> Next? {
        if links.count == 1 {
            guard open[0], let item = links[0].pull() else { return nil }
            return .item(input: 0, item)
        }
        while true {
            let seen = doorbell.count
            var waiting = false
            for k in 0..<links.count {
                let i = (next + k) % links.count
                guard open[i] else { continue }
                switch links[i].poll() {
                case .element(let p):
                    next = (i + 1) % links.count
                    return .item(input: i, p.element)
                case .ended:
                    open[i] = false
                    if open.contains(true) { return .ended(input: i) }
                case .empty: waiting = true
                }
            }
            guard waiting else { return nil }
            doorbell.wait(after: seen)
        }
    }

    /// The stage wants no more from `input`: its producer is released.
    func close(_ input: Int) {
        open[input] = false
        links[input].consumerDone()
    }
}

/// What a stage collects from several inputs, in the inputs' order (every item of input 0, then
/// of input 1, ...) whatever order they arrive in (`FanIn` interleaves them): the order a merge
/// or a transcode joins its clips in. A value type owned by its stage.
public struct InputOrdered<Element> {
    private var byInput: [[Element]] = []

    public init() {}

    public mutating func append(_ element: Element, input: Int) {
        while byInput.count <= input { byInput.append([]) }
        byInput[input].append(element)
    }

    /// Everything collected, input by input, each input's in arrival order.
    public var all: [Element] { byInput.flatMap { $0 } }
    public var isEmpty: Bool { byInput.allSatisfy(\.isEmpty) }
}
