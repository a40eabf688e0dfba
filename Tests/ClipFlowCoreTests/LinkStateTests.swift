import XCTest
@testable import ClipFlowCore

/// Table tests of the link state machine: each row is a sequence of operations and the decision
/// expected for each.
///
/// Operations: `oN` offer an item of N bytes (appended when accepted), `oN@T` with timestamp T,
/// `t` take, `e` producer ends, `c` consumer ends, `f` flush.
/// Decisions: `A` accepted, `A2` accepted after dropping 2 oldest, `D` arriving item dropped,
/// `W` producer waits, `Reos`/`Rflush`/`Rerr` refused; takes: `I` item, `I!` item after a gap,
/// `I+` item that re-opens the link to a waiting producer, `E` end of stream, `w` consumer waits,
/// `F` flushing; `-` for e/c/f.
final class LinkStateTests: XCTestCase {
    struct Row {
        var name: String
        var limits: LinkLimits
        var policy: OverflowPolicy
        var ops: String
        var expect: String
        var dropped: Int = 0
    }

    static func run(_ row: Row) -> (String, LinkState) {
        var s = LinkState(limits: row.limits, policy: row.policy)
        var out: [String] = []
        for op in row.ops.split(separator: " ") {
            switch op.first! {
            case "o":
                let body = op.dropFirst()
                let parts = body.split(separator: "@")
                let e = LinkState.Entry(bytes: Int64(parts[0])!, time: parts.count > 1 ? Double(parts[1])! : nil)
                switch s.offer(e) {
                case .accept(let n): s.append(e); out.append(n == 0 ? "A" : "A\(n)")
                case .dropArriving: out.append("D")
                case .wait: out.append("W")
                case .refuse(let r):
                    switch r {
                    case .endOfStream: out.append("Reos")
                    case .flushing: out.append("Rflush")
                    default: out.append("Rerr")
                    }
                }
            case "t":
                switch s.take() {
                case .item(let d, let w): out.append("I" + (d ? "!" : "") + (w ? "+" : ""))
                case .endOfStream: out.append("E")
                case .wait: out.append("w")
                case .flushing: out.append("F")
                }
            case "e": s.endProducer(); out.append("-")
            case "c": s.endConsumer(); out.append("-")
            case "f": s.flush(); out.append("-")
            default: XCTFail("bad op \(op)")
            }
        }
        return (out.joined(separator: " "), s)
    }

    static let items3 = LinkLimits(maxItems: 3, maxBytes: 1000, lowWatermark: 0.34)

    let rows: [Row] = [
        Row(
            name: "block: fills to the item limit, then waits",
            limits: items3, policy: .block, ops: "o1 o1 o1 o1 o1", expect: "A A A W W"),
        Row(
            name: "block: stays closed until the low watermark (1 of 3), then wakes the producer once",
            limits: items3, policy: .block, ops: "o1 o1 o1 o1 t o1 t o1", expect: "A A A W I W I+ A"),
        Row(
            name: "block: the byte limit counts too (one take brings 12 bytes down to 4, under 5)",
            limits: LinkLimits(maxItems: 100, maxBytes: 10, lowWatermark: 0.5), policy: .block,
            ops: "o4 o4 o4 t t o4", expect: "A A W I+ I A"),
        Row(
            name: "block: an item larger than the byte limit passes an empty link",
            limits: LinkLimits(maxItems: 100, maxBytes: 10), policy: .block, ops: "o50 o1 t o1", expect: "A W I+ A"),
        Row(
            name: "block: the time limit (live media): 1.5 s would span more than 1 s",
            limits: LinkLimits(maxItems: 100, maxBytes: 1000, maxDuration: 1.0, lowWatermark: 0.5), policy: .block,
            ops: "o1@0 o1@0.5 o1@1.0 o1@1.5 t t o1@1.5", expect: "A A A W I+ I A"),
        Row(
            name: "drop-newest: arriving items are dropped, the next accepted one is marked",
            limits: items3, policy: .dropNewest, ops: "o1 o1 o1 o1 o1 t o1 t t t", expect: "A A A D D I A I I I!", dropped: 2),
        Row(
            name: "drop-oldest: the oldest make room; the new front is marked",
            limits: items3, policy: .dropOldest, ops: "o1 o1 o1 o1 o1 t t t t", expect: "A A A A1 A1 I! I I w", dropped: 2),
        Row(
            name: "drop-oldest: bytes limit can drop several at once",
            limits: LinkLimits(maxItems: 100, maxBytes: 10), policy: .dropOldest, ops: "o3 o3 o3 o9 t t", expect: "A A A A3 I! w", dropped: 3),
        Row(
            name: "end of stream after the queued items",
            limits: items3, policy: .block, ops: "o1 e t t t", expect: "A - I E E"),
        Row(
            name: "push after end of stream is an error",
            limits: items3, policy: .block, ops: "e o1", expect: "- Rerr"),
        Row(
            name: "consumer ended: producers get end of stream, even a waiting one",
            limits: items3, policy: .block, ops: "o1 o1 o1 o1 c o1", expect: "A A A W - Reos"),
        Row(
            name: "consumer ended: a waiting consumer gets end of stream, not a wait",
            limits: items3, policy: .block, ops: "t o1 c t", expect: "w A - E"),
        Row(
            name: "flush: producers and consumers are released, queued items discarded",
            limits: items3, policy: .block, ops: "o1 o1 o1 o1 f o1 t", expect: "A A A W - Rflush F"),
        Row(
            name: "empty link: the consumer waits",
            limits: items3, policy: .block, ops: "t o1 t t", expect: "w A I w")
    ]

    func testTable() {
        for row in rows {
            let (got, state) = Self.run(row)
            XCTAssertEqual(got, row.expect, row.name)
            XCTAssertEqual(state.dropped, row.dropped, "\(row.name): drop counter")
            XCTAssertLessThanOrEqual(state.peakItems, max(1, row.limits.maxItems), "\(row.name): never above the item limit")
        }
    }

    /// Exhaustive small check: whatever the interleaving, a blocking link never holds more than
    /// its limit and loses nothing; a dropping link accounts for every item (taken + dropped +
    /// still queued == offered).
    func testInvariantsOverRandomInterleavings() {
        var rng = SystemRandomNumberGenerator()
        for policy in OverflowPolicy.allCases {
            for _ in 0..<300 {
                var s = LinkState(limits: LinkLimits(maxItems: Int.random(in: 1...5, using: &rng), maxBytes: 1000, lowWatermark: 0.5), policy: policy)
                var offered = 0, taken = 0, refusedWaits = 0
                for _ in 0..<60 {
                    if Bool.random(using: &rng) {
                        let e = LinkState.Entry(bytes: 1)
                        switch s.offer(e) {
                        case .accept: s.append(e); offered += 1
                        case .dropArriving: offered += 1
                        case .wait: refusedWaits += 1
                        case .refuse: XCTFail("refused while open")
                        }
                    } else if case .item = s.take() {
                        taken += 1
                    }
                    XCTAssertLessThanOrEqual(s.count, s.limits.maxItems)
                }
                XCTAssertEqual(taken + s.dropped + s.count, offered, "\(policy): every item accounted for")
                if policy == .block { XCTAssertEqual(s.dropped, 0) } else { XCTAssertEqual(refusedWaits, 0) }
            }
        }
    }
}
