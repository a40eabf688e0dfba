import Foundation
import Synchronization

/// The type of a stage parameter, as the validator, `clipflow stages` and the JSON Schema see it.
public enum ParamType: Sendable, Equatable {
    case string
    /// A file or directory path (variables allowed).
    case path
    case integer(min: Int?, max: Int?)
    case number(min: Double?, max: Double?)
    case boolean
    /// One of these strings.
    case choice([String])
    /// One of these integers.
    case integerChoice([Int])
    /// A list of paths.
    case pathList
    /// A list of strings (tags, ids): not paths.
    case stringList

    public var describe: String {
        switch self {
        case .string: return "a string"
        case .path: return "a path (string)"
        case .integer(let lo, let hi): return "an integer" + Self.range(lo.map(Double.init), hi.map(Double.init), integer: true)
        case .number(let lo, let hi): return "a number" + Self.range(lo, hi, integer: false)
        case .boolean: return "true or false"
        case .choice(let c): return "one of " + c.map { "\"\($0)\"" }.joined(separator: ", ")
        case .integerChoice(let c): return "one of " + c.map(String.init).joined(separator: ", ")
        case .pathList: return "a list of paths (strings)"
        case .stringList: return "a list of strings"
        }
    }

    private static func range(_ lo: Double?, _ hi: Double?, integer: Bool) -> String {
        func f(_ v: Double) -> String { integer || v == v.rounded() ? String(Int64(v)) : String(v) }
        switch (lo, hi) {
        case let (l?, h?): return " from \(f(l)) to \(f(h))"
        case let (l?, nil): return " of at least \(f(l))"
        case let (nil, h?): return " of at most \(f(h))"
        default: return ""
        }
    }
}

public struct ParamSpec: Sendable {
    public var name: String
    public var type: ParamType
    public var required: Bool
    /// Default when absent (nil: absent means "not set").
    public var defaultValue: JSONValue?
    public var help: String
    /// Never printed back (tokens, keys).
    public var secret: Bool
    /// For a path: whether the stage reads or writes what it names (`RemotePaths` serves only
    /// those); `.local` for any other parameter.
    public var role: PathRole

    public init(
        _ name: String, _ type: ParamType, required: Bool = false, default defaultValue: JSONValue? = nil,
        secret: Bool = false, role: PathRole = .local, help: String
    ) {
        self.name = name
        self.type = type
        self.required = required
        self.defaultValue = defaultValue
        self.help = help
        self.secret = secret
        self.role = role
    }
}

/// Parameters of one stage after variables and defaults, with typed accessors. Values were
/// checked against the kind's `ParamSpec`s, so accessors do not fail for declared names.
public struct StageParams: Sendable {
    public var values: [String: JSONValue]
    public init(_ values: [String: JSONValue]) { self.values = values }

    public func string(_ k: String) -> String? { if case .string(let s)? = values[k] { return s }; return nil }
    public func int(_ k: String) -> Int? { if case .number(let n)? = values[k] { return Int(exactly: n) }; return nil }
    public func double(_ k: String) -> Double? { if case .number(let n)? = values[k] { return n }; return nil }
    public func bool(_ k: String) -> Bool? { if case .bool(let b)? = values[k] { return b }; return nil }
    public func strings(_ k: String) -> [String]? {
        guard case .array(let a)? = values[k] else { return nil }
        return a.compactMap {
            if case .string(let s) = $0.value { return s }; return nil
        }
    }
}

/// A problem found in a pipeline: where (JSON path, and line/column when known) and what is
/// expected. `description` is what `clipflow validate` prints.
public struct PipelineIssue: Sendable, Equatable, CustomStringConvertible {
    public var path: String
    public var message: String
    public var line: Int
    public var column: Int
    public init(_ path: String, _ message: String, line: Int = 0, column: Int = 0) {
        self.path = path
        self.message = message
        self.line = line
        self.column = column
    }
    /// One line, with any control character (from a key or value in the file) escaped.
    public var description: String {
        let at = line > 0 ? "\(line):\(column): " : ""
        let text = path.isEmpty ? "\(at)\(message)" : "\(at)\(path): \(message)"
        guard text.unicodeScalars.contains(where: PipelineValidator.isControl) else { return text }
        var out = ""
        for u in text.unicodeScalars {
            if PipelineValidator.isControl(u) { out += String(format: "\\u%04x", u.value) } else { out.unicodeScalars.append(u) }
        }
        return out
    }
}

extension ParamSpec {
    /// The `overwrite` field of every stage kind that writes files: the one way a pipeline lets
    /// an existing output be replaced (`clipflow run -y` sets it on every stage).
    public static let overwrite = ParamSpec(
        "overwrite", .boolean, default: .bool(false), help: "replace an existing output (otherwise it is refused; `clipflow run -y` sets this on every stage)")
}

/// A file a stage reads or writes, with the parameter that names it (`output`, `paths[2]`, `glob`).
public struct FileField: Sendable, Equatable {
    public var field: String
    public var path: String
    /// For a folder a stage writes whole: the file in it (relative path) whose presence means the
    /// folder is complete (an HLS ladder's master playlist). A copy of the folder elsewhere (object
    /// storage) puts it last and is whole only once it is there.
    public var commitMarker: String?
    public init(_ field: String, _ path: String, commitMarker: String? = nil) {
        self.field = field
        self.path = path
        self.commitMarker = commitMarker
    }
}

/// The files a stage touches, known from its parameters before it runs: what the validator needs
/// to refuse an output that would overwrite an input or another output (`OutputSafety`).
public struct StageFiles: Sendable {
    /// Files it reads (a source's clips).
    public var reads: [FileField]
    /// Files it writes.
    public var writes: [FileField]
    /// A sink that writes every file it receives into this folder under the file's own name.
    public var copiesInto: FileField?
    public init(reads: [FileField] = [], writes: [FileField] = [], copiesInto: FileField? = nil) {
        self.reads = reads
        self.writes = writes
        self.copiesInto = copiesInto
    }
    /// The files it passes on: those it writes, else (a source) those it reads.
    public var passesOn: [FileField] { writes.isEmpty ? reads : writes }
}
public typealias StageFilesOf = @Sendable (_ params: StageParams) -> StageFiles

/// Checks a stage kind makes beyond types (readable inputs, a glob that matches, ...). It gets
/// the resolved parameters and reports issues at `path + "." + parameter`.
public typealias StageCheck = @Sendable (_ params: StageParams, _ path: String) -> [PipelineIssue]
public typealias StageFactory = @Sendable (_ id: String, _ params: StageParams) throws -> any Stage

/// What one stage of a pipeline runs as: one stage, or several linked ones (an HLS ladder: a
/// decode fanning out to its renditions, which fan in to the ladder). `nodes` hold one with the
/// stage's own id (the one whose output leaves the group; its results are the stage's);
/// `entries` take the stage's inputs, in their order; `edges` link the nodes inside. Events of
/// the inner nodes carry their own ids (`ladder.720p`).
public struct StageGraph: Sendable {
    public var nodes: [StageNode]
    public var edges: [Edge]
    public var entries: [String]
    public init(nodes: [StageNode], edges: [Edge], entries: [String]) {
        self.nodes = nodes
        self.edges = edges
        self.entries = entries
    }
}
public typealias StageGraphFactory = @Sendable (_ id: String, _ params: StageParams) throws -> StageGraph

/// A kind of stage that pipelines can name: its parameters, ports and factory. Modules register
/// their kinds in a `StageRegistry`; the CLI wires the registries together.
public struct StageKind: Sendable {
    public var name: String
    public var summary: String
    /// Accepted input types; empty for a source.
    public var inputs: Set<PortType>
    public var minInputs: Int
    public var maxInputs: Int?
    public var output: PortType?
    public var params: [ParamSpec]
    /// The queue on this stage's inputs unless the pipeline says otherwise.
    public var queue: LinkLimits
    public var policy: OverflowPolicy
    public var check: StageCheck?
    /// The files a stage of this kind reads and writes (nil: none that are known in advance).
    public var files: StageFilesOf?
    /// The stages a pipeline stage of this kind runs as.
    public var graph: StageGraphFactory

    /// A kind that runs as one stage, made by `make`.
    public init(
        name: String, summary: String, inputs: Set<PortType> = [], minInputs: Int = 0, maxInputs: Int? = nil,
        output: PortType?, params: [ParamSpec], queue: LinkLimits = LinkLimits(), policy: OverflowPolicy = .block,
        check: StageCheck? = nil, files: StageFilesOf? = nil, make: @escaping StageFactory
    ) {
        self.init(
            name: name, summary: summary, inputs: inputs, minInputs: minInputs, maxInputs: maxInputs, output: output, params: params, queue: queue,
            policy: policy, check: check, files: files,
            graph: { id, params in StageGraph(nodes: [StageNode(id) { try make(id, params) }], edges: [], entries: [id]) })
    }

    /// A kind that runs as several stages (`StageGraph`), made by `graph`.
    public init(
        name: String, summary: String, inputs: Set<PortType> = [], minInputs: Int = 0, maxInputs: Int? = nil,
        output: PortType?, params: [ParamSpec], queue: LinkLimits = LinkLimits(), policy: OverflowPolicy = .block,
        check: StageCheck? = nil, files: StageFilesOf? = nil, graph: @escaping StageGraphFactory
    ) {
        self.name = name
        self.summary = summary
        self.inputs = inputs
        self.minInputs = minInputs
        self.maxInputs = maxInputs
        self.output = output
        self.params = params
        self.queue = queue
        self.policy = policy
        self.check = check
        self.files = files
        self.graph = graph
    }

    public var isSource: Bool { inputs.isEmpty }
}

extension LinkLimits {
    /// A byte limit no link reaches (the largest a pipeline file can state), for a stage that only
    /// collects the files it receives (their bytes are on disk, not in the queue).
    public static let noByteLimit: Int64 = 1 << 53
}

/// The stage kinds a program knows. Filled by the module registrations at start-up, then read;
/// thread-safe (the table is behind a mutex).
public final class StageRegistry: Sendable {
    private let byName = Mutex<[String: StageKind]>([:])
    public init() {}
    public func register(_ kind: StageKind) {
        byName.withLock { table in
            precondition(table[kind.name] == nil, "stage kind '\(kind.name)' registered twice")
            table[kind.name] = kind
        }
    }
    public func kind(_ name: String) -> StageKind? { byName.withLock { $0[name] } }
    public var kinds: [StageKind] { byName.withLock { $0.values.sorted { $0.name < $1.name } } }
}

/// Levenshtein distance, for "did you mean" suggestions.
func editDistance(_ a: String, _ b: String) -> Int {
    let x = Array(a.lowercased()), y = Array(b.lowercased())
    if x.isEmpty { return y.count }
    if y.isEmpty { return x.count }
    var prev = Array(0...y.count)
    for i in 1...x.count {
        var cur = [i] + Array(repeating: 0, count: y.count)
        for j in 1...y.count {
            cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x[i - 1] == y[j - 1] ? 0 : 1))
        }
        prev = cur
    }
    return prev[y.count]
}

/// The candidate `word` most likely meant: the closest by spelling (a typo: `mrege` for `merge`),
/// else one of the same stem (another form of the word: `rotation` for `rotate`, `thumb` for
/// `thumbnail`); nil when none is near.
public func didYouMean(_ word: String, in candidates: [String]) -> String? {
    let best = candidates.map { ($0, editDistance(word, $0)) }.min { $0.1 < $1.1 }
    if let (name, d) = best, d <= max(2, word.count / 3) { return name }
    return candidates.map { ($0, sharedStem(word, $0)) }.filter { $0.1 > 0 }.max { $0.1 < $1.1 }?.0
}

/// The length of the beginning `a` and `b` share, when it is a stem: at least 4 letters and
/// most of the shorter word; 0 otherwise.
func sharedStem(_ a: String, _ b: String) -> Int {
    let x = Array(a.lowercased()), y = Array(b.lowercased())
    var n = 0
    while n < min(x.count, y.count) && x[n] == y[n] { n += 1 }
    return n >= 4 && Double(n) >= 0.6 * Double(min(x.count, y.count)) ? n : 0
}

/// " (did you mean 'NAME'?)", or "" (see `didYouMean`).
func suggestion(for word: String, in candidates: [String]) -> String {
    didYouMean(word, in: candidates).map { " (did you mean '\($0)'?)" } ?? ""
}
