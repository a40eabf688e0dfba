import ClipFlowCore
import Foundation

/// Which rows this process runs: all of them, one (`--index`, or the index a batch engine gives
/// each task), or every N-th (`--shard I/N`, or `--index-count N` with the engine's index, for
/// arrays with fewer tasks than rows).
public struct RowSelection: Sendable, Equatable, CustomStringConvertible {
    public var first: Int
    /// Take `first`, `first + step`, ...; 0: `first` alone.
    public var step: Int
    /// Where the index came from ("--index", "SLURM_ARRAY_TASK_ID", ...); nil: every row.
    public var source: String?

    public static let all = RowSelection(first: 0, step: 1, source: nil)

    /// The variables batch engines set for each task of an array, in the order they are asked.
    public static let engineVariables = ["JOB_COMPLETION_INDEX", "SLURM_ARRAY_TASK_ID", "AWS_BATCH_JOB_ARRAY_INDEX"]

    /// The selection from the command line and the environment. `shard` is "I/N"; `index` wins
    /// over the engines' variables; `indexCount` spreads rows over that many tasks.
    public static func resolve(index: Int?, shard: String?, indexCount: Int?, environment: [String: String]) throws -> RowSelection {
        if let shard {
            guard index == nil, indexCount == nil else { throw ClipFlowError.badInput("--shard I/N cannot be combined with --index or --index-count") }
            let parts = shard.split(separator: "/", omittingEmptySubsequences: false)
            guard parts.count == 2, let i = Int(parts[0]), let n = Int(parts[1]), n > 0, i >= 0, i < n else {
                throw ClipFlowError.badInput("--shard '\(shard)': expected I/N with 0 <= I < N (e.g. 3/8)")
            }
            return RowSelection(first: i, step: n, source: "--shard \(shard)")
        }
        var found: (Int, String)?
        if let index {
            guard index >= 0 else { throw ClipFlowError.badInput("--index \(index): expected 0 or more") }
            found = (index, "--index")
        } else {
            for name in engineVariables {
                guard let raw = environment[name], !raw.isEmpty else { continue }
                guard let v = Int(raw), v >= 0 else { throw ClipFlowError.badInput("\(name)='\(raw)': expected a row index (0 or more)") }
                found = (v, name)
                break
            }
        }
        if let indexCount {
            guard indexCount > 0 else { throw ClipFlowError.badInput("--index-count \(indexCount): expected 1 or more") }
            guard let (i, from) = found else {
                throw ClipFlowError.badInput(
                    "--index-count needs an index: --index I, or one of \(engineVariables.joined(separator: ", ")) set by the batch engine")
            }
            guard i < indexCount else { throw ClipFlowError.badInput("\(from) \(i) is not below --index-count \(indexCount)") }
            return RowSelection(first: i, step: indexCount, source: from)
        }
        guard let (i, from) = found else { return .all }
        return RowSelection(first: i, step: 0, source: from)
    }

    /// The chosen rows of `count`. A single index beyond the rows is an error (an array larger
    /// than the batch is a mistake a retry cannot fix).
    public func indices(of count: Int) throws -> [Int] {
        if step == 0 {
            guard first < count else {
                throw ClipFlowError.badInput("row \(first) (from \(source ?? "--index")) does not exist: the batch has \(count) row(s), 0 to \(count - 1)")
            }
            return [first]
        }
        // Stepped by hand: a step near Int.max would overflow the next index (`stride` traps).
        var chosen: [Int] = []
        var i = first
        while i < count {
            chosen.append(i)
            let (next, overflowed) = i.addingReportingOverflow(step)
            if overflowed { break }
            i = next
        }
        return chosen
    }

    public var description: String {
        guard let source else { return "every row" }
        guard step > 0 else { return "row \(first) (\(source))" }
        let (second, overflowed) = first.addingReportingOverflow(step)
        // No index lies beyond Int.max: such a stride names its first row alone.
        return overflowed ? "row \(first) (\(source))" : "rows \(first), \(second), ... (\(source))"
    }
}
