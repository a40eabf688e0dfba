import Foundation

/// A validated pipeline: stages in file order with resolved parameters, and the links between
/// them. Made only by `PipelineValidator`; everything a run needs has been checked.
public struct Pipeline: Sendable {
    public struct StageSpec: Sendable {
        public var id: String
        public var kind: String
        public var inputs: [String]
        public var params: StageParams
        public var queue: LinkLimits
        public var policy: OverflowPolicy
    }
    public var description: String?
    public var stages: [StageSpec]

    /// The stages and links `GraphRunner` runs: each pipeline stage as its kind's `StageGraph`
    /// (one node for most kinds), a pipeline link going from a stage's own node to the entries
    /// of its consumer. Nodes are made by the runner, each on its own queue.
    public func makeGraph(_ registry: StageRegistry) throws -> (nodes: [StageNode], edges: [Edge]) {
        var nodes: [StageNode] = [], edges: [Edge] = []
        var entries: [String: [String]] = [:]
        for s in stages {
            guard let k = registry.kind(s.kind) else { throw ClipFlowError.failure("internal: unknown kind \(s.kind)") }
            let g: StageGraph
            do { g = try k.graph(s.id, s.params) } catch let e as ClipFlowError { throw ClipFlowError(e.kind, "stage '\(s.id)': \(e.message)") }
            let id = s.id
            nodes += g.nodes.map { n in
                StageNode(n.id) {
                    do { return try n.make() } catch let e as ClipFlowError { throw ClipFlowError(e.kind, "stage '\(id)': \(e.message)") }
                }
            }
            edges += g.edges
            entries[s.id] = g.entries
        }
        for s in stages {
            for from in s.inputs {
                for entry in entries[s.id] ?? [s.id] { edges.append(Edge(from: from, to: entry, limits: s.queue, policy: s.policy)) }
            }
        }
        return (nodes, edges)
    }
}

/// Checks a pipeline document against the registry and reports every problem it finds, each
/// at its JSON path with what is expected.
///
/// Variables: `${NAME}` inside a string is replaced by `--set NAME=value` or else the environment
/// variable NAME; `$$` is a literal `$`. A parameter that takes a number or boolean may be given as
/// a string that is exactly one variable reference (`"rotate": "${ROTATE}"`).
public struct PipelineValidator {
    public let registry: StageRegistry
    public let variables: [String: String]
    public let environment: [String: String]
    /// Serves path parameters that name objects elsewhere (`s3://`); nil: every path is local.
    public let remote: RemotePaths?
    /// false: a plan only (what a pipeline would read and write, e.g. to see whether a batch row
    /// is already done): no kind checks (inputs may not exist yet) and no remote paths mapped.
    public let checksFiles: Bool
    /// Every stage that writes may replace what it writes (`clipflow run -y`): its `overwrite`
    /// field is set. Otherwise an output that exists is refused unless its stage sets `overwrite`.
    public let overwrite: Bool

    public static let idPattern = "^[A-Za-z0-9][A-Za-z0-9_.-]*$"
    static let common: Set<String> = ["id", "kind", "inputs", "queue", "description"]
    static let queueKeys = ["max-items", "max-bytes", "max-time", "low-watermark", "policy"]

    public init(
        registry: StageRegistry, variables: [String: String] = [:],
        environment: [String: String] = ProcessInfo.processInfo.environment, remote: RemotePaths? = nil, checksFiles: Bool = true, overwrite: Bool = false
    ) {
        self.overwrite = overwrite
        self.registry = registry
        self.variables = variables
        self.environment = environment
        self.remote = remote
        self.checksFiles = checksFiles
    }

    public enum Result {
        case valid(Pipeline)
        case invalid([PipelineIssue])
    }

    public func validate(text: String) -> Result {
        let root: JSONNode
        do { root = try JSONParser.parse(text) } catch let e as JSONSyntaxError {
            return .invalid([PipelineIssue("", "JSON syntax error: \(e.message)", line: e.line, column: e.column)])
        } catch {
            return .invalid([PipelineIssue("", "JSON syntax error: \(error)")])
        }
        return validate(root: root)
    }

    public func validate(root: JSONNode) -> Result {
        var issues: [PipelineIssue] = []
        func issue(_ path: String, _ node: JSONNode?, _ m: String) {
            issues.append(PipelineIssue(path, m, line: node?.line ?? 0, column: node?.column ?? 0))
        }
        guard case .object(let top) = root.value else {
            issue("", root, "expected an object with \"version\" and \"stages\", got \(root.value.typeName)")
            return .invalid(issues)
        }
        var seenTop = Set<String>()
        var duplicateTop: [(key: String, value: JSONNode)] = []
        for (k, v) in top {
            if !seenTop.insert(k).inserted { duplicateTop.append((k, v)) }
            if !["version", "stages", "description"].contains(k) {
                issue(
                    k, v,
                    "unknown key\(suggestion(for: k, in: ["version", "stages", "description"])); expected \"version\", \"stages\" and optionally \"description\""
                )
            }
        }
        summarised(duplicateTop, { issue($0.key, $0.value, "duplicate key") }, more: { issue("", $1.value, "... and \($0) more duplicate keys") })
        if let v = root["version"] {
            if v.value != .number(1) { issue("version", v, "expected 1 (the only format version), got \(v.value.serialized)") }
        } else {
            issue("version", root, "missing; expected \"version\": 1")
        }
        var description: String?
        if let d = root["description"] {
            if case .string(let s) = d.value { description = s } else { issue("description", d, "expected a string, got \(d.value.typeName)") }
        }
        guard let stagesNode = root["stages"] else {
            issue("stages", root, "missing; expected a list of stages")
            return .invalid(issues)
        }
        guard case .array(let list) = stagesNode.value else {
            issue("stages", stagesNode, "expected a list of stages, got \(stagesNode.value.typeName)")
            return .invalid(issues)
        }
        if list.isEmpty { issue("stages", stagesNode, "expected at least one stage") }

        // Pass 1: ids and kinds, so inputs can be checked against all of them.
        var ids: [String: Int] = [:]
        var kinds: [Int: StageKind] = [:]
        var flaggedInPass1 = Set<Int>()
        for (i, node) in list.enumerated() {
            let p = "stages[\(i)]"
            guard case .object = node.value else { issue(p, node, "expected an object (a stage), got \(node.value.typeName)"); continue }
            let before = issues.count
            defer { if issues.count > before { flaggedInPass1.insert(i) } }
            if let idn = node["id"] {
                if case .string(let id) = idn.value {
                    if id.range(of: Self.idPattern, options: .regularExpression) == nil {
                        issue("\(p).id", idn, "\"\(id)\" is not a valid id; expected letters, digits, '_', '.', '-', starting with a letter or digit")
                    } else if let other = ids[id] {
                        issue("\(p).id", idn, "duplicate id \"\(id)\" (also stages[\(other)].id)")
                    } else {
                        ids[id] = i
                    }
                } else {
                    issue("\(p).id", idn, "expected a string, got \(idn.value.typeName)")
                }
            } else {
                issue("\(p).id", node, "missing; every stage needs an \"id\"")
            }
            if let kn = node["kind"] {
                if case .string(let k) = kn.value {
                    if let kind = registry.kind(k) {
                        kinds[i] = kind
                    } else {
                        issue(
                            "\(p).kind", kn,
                            "unknown stage kind \"\(k)\"\(suggestion(for: k, in: registry.kinds.map(\.name))); known kinds: \(registry.kinds.map(\.name).joined(separator: ", "))"
                        )
                    }
                } else {
                    issue("\(p).kind", kn, "expected a string, got \(kn.value.typeName)")
                }
            } else {
                issue("\(p).kind", node, "missing; expected one of: \(registry.kinds.map(\.name).joined(separator: ", "))")
            }
        }

        // What an unknown input reference is told: made once, and short however many stages there are.
        let sortedIDs = ids.keys.sorted()
        let knownIDs =
            sortedIDs.count <= Self.summaryLimit * 2
            ? sortedIDs.joined(separator: ", ")
            : sortedIDs.prefix(Self.summaryLimit * 2).joined(separator: ", ") + ", ... (\(sortedIDs.count) in all)"
        func idSuggestion(_ ref: String) -> String { sortedIDs.count <= 1000 ? suggestion(for: ref, in: sortedIDs) : "" }

        // Pass 2: inputs, parameters, queues.
        var specs: [Pipeline.StageSpec?] = Array(repeating: nil, count: list.count)
        var inputsOf: [Int: [Int]] = [:]
        var filesOf: [Int: StageFiles] = [:]
        var replaces = Set<Int>()  // stages whose outputs may replace what is there
        for (i, node) in list.enumerated() {
            let p = "stages[\(i)]"
            guard case .object(let members) = node.value else { continue }
            let issuesBefore = issues.count
            let kind = kinds[i]
            var seen = Set<String>()
            var duplicateKeys: [(key: String, value: JSONNode)] = []
            for m in members where !seen.insert(m.key).inserted { duplicateKeys.append(m) }
            summarised(
                duplicateKeys, { issue("\(p).\($0.key)", $0.value, "duplicate key") },
                more: { issue(p, $1.value, "... and \($0) more duplicate keys") })

            // inputs
            var inputIDs: [String] = []
            var inputIdx: [Int] = []
            var listedIDs = Set<String>()
            var listedTwice: [(path: String, node: JSONNode, ref: String)] = []
            if let inNode = node["inputs"] {
                if case .array(let arr) = inNode.value {
                    for (j, e) in arr.enumerated() {
                        let ip = "\(p).inputs[\(j)]"
                        guard case .string(let ref) = e.value else { issue(ip, e, "expected a stage id (string), got \(e.value.typeName)"); continue }
                        if !listedIDs.insert(ref).inserted { listedTwice.append((ip, e, ref)); continue }
                        guard let src = ids[ref] else {
                            issue(ip, e, "unknown stage id \"\(ref)\"\(idSuggestion(ref)); known ids: \(knownIDs)")
                            continue
                        }
                        if src == i { issue(ip, e, "a stage cannot be its own input"); continue }
                        inputIDs.append(ref)
                        inputIdx.append(src)
                        // Connection types.
                        if let kind, let up = kinds[src] {
                            if kind.isSource {
                                issue(ip, e, "a \(kind.name) stage is a source and takes no inputs")
                            } else if let out = up.output {
                                if !kind.inputs.contains(out) {
                                    issue(
                                        ip, e,
                                        "stage \"\(ref)\" (\(up.name)) produces \(out.rawValue), but \(kind.name) takes \(kind.inputs.map(\.rawValue).sorted().joined(separator: " or "))"
                                    )
                                }
                            } else {
                                issue(ip, e, "stage \"\(ref)\" (\(up.name)) is a sink and produces nothing to connect")
                            }
                        }
                    }
                } else {
                    issue("\(p).inputs", inNode, "expected a list of stage ids, got \(inNode.value.typeName)")
                }
            }
            summarised(
                listedTwice, { issue($0.path, $0.node, "\"\($0.ref)\" is listed twice") },
                more: { issue("\(p).inputs", $1.node, "... and \($0) more inputs listed twice") })
            inputsOf[i] = inputIdx
            if let kind, !kind.isSource {
                var listed = 0
                if case .array(let arr)? = node["inputs"]?.value { listed = arr.count }
                if listed < kind.minInputs
                    && node["inputs"].map({
                        if case .array = $0.value { return true }; return false
                    }) ?? true
                {
                    issue(
                        "\(p).inputs", node["inputs"] ?? node,
                        node["inputs"] == nil
                            ? "missing; a \(kind.name) stage needs at least \(kind.minInputs) input(s) (stage ids producing \(kind.inputs.map(\.rawValue).sorted().joined(separator: " or ")))"
                            : "a \(kind.name) stage needs at least \(kind.minInputs) input(s)")
                }
                if let mx = kind.maxInputs, inputIDs.count > mx {
                    issue("\(p).inputs", node["inputs"], "a \(kind.name) stage takes at most \(mx) input(s), got \(inputIDs.count)")
                }
            }

            guard let kind else { continue }
            // Parameters.
            var values: [String: JSONValue] = [:]
            let known = kind.params.map(\.name)
            for (k, v) in members where !Self.common.contains(k) && !known.contains(k) {
                issue(
                    "\(p).\(k)", v,
                    "unknown parameter for a \(kind.name) stage\(suggestion(for: k, in: known + ["inputs", "queue"])); \(known.isEmpty ? "it takes none" : "it takes: " + known.joined(separator: ", "))"
                )
            }
            if let d = node["description"],
                !{
                    if case .string = d.value { return true }; return false
                }()
            {
                issue("\(p).description", d, "expected a string, got \(d.value.typeName)")
            }
            for spec in kind.params {
                let pp = "\(p).\(spec.name)"
                guard let raw = node[spec.name] else {
                    if spec.required {
                        issue(pp, node, "missing; expected \(spec.type.describe): \(spec.help)")
                    } else if let d = spec.defaultValue {
                        values[spec.name] = d
                    }
                    continue
                }
                if let v = check(raw, spec, pp, &issues) { values[spec.name] = v }
            }
            if checksFiles, let remote { mapRemotePaths(kind, &values, node, p, remote, &issues) }
            if overwrite, kind.params.contains(where: { $0.name == ParamSpec.overwrite.name }) { values[ParamSpec.overwrite.name] = .bool(true) }
            var limits = kind.queue, policy = kind.policy
            if let q = node["queue"] {
                if kind.isSource { issue("\(p).queue", q, "a source has no input queue") }
                parseQueue(q, "\(p).queue", &limits, &policy, &issues)
            }
            let params = StageParams(values)
            let paramsValid =
                !flaggedInPass1.contains(i)
                && !issues[issuesBefore...].contains(where: { $0.path.hasPrefix(p + ".") && !$0.path.hasPrefix(p + ".inputs") })
            if paramsValid, checksFiles, let check = kind.check {
                issues += check(params, p).map {
                    var x = $0; if x.line == 0 { x.line = node.line; x.column = node.column }; return x
                }
            }
            // Valid values only (a bad one is absent), so the outputs it names are still checked.
            if let files = kind.files {
                filesOf[i] = files(params)
                if params.bool(ParamSpec.overwrite.name) == true { replaces.insert(i) }
            }
            if case .string(let id)? = node["id"]?.value {
                specs[i] = Pipeline.StageSpec(id: id, kind: kind.name, inputs: inputIDs, params: params, queue: limits, policy: policy)
            }
        }

        // Cycles (inputs are edges from input to stage).
        // Depth-first without recursion (a chain of stages may be as long as the file allows).
        var state = Array(repeating: 0, count: list.count)  // 0 new, 1 on the path, 2 done
        var reported = Set<Int>()
        var path: [(stage: Int, next: Int)] = []
        var depthOf = Array(repeating: -1, count: list.count)
        for root in list.indices where state[root] == 0 {
            state[root] = 1
            depthOf[root] = 0
            path = [(root, 0)]
            while let top = path.last {
                let i = top.stage, edges = inputsOf[i] ?? []
                guard top.next < edges.count else {
                    state[i] = 2
                    path.removeLast()
                    continue
                }
                path[path.count - 1].next += 1
                let j = edges[top.next]
                if state[j] == 1 {
                    if reported.insert(j).inserted {
                        let names = path[depthOf[j]...].map { specs[$0.stage]?.id ?? "stages[\($0.stage)]" }
                        issue(
                            "stages[\(i)].inputs", list[i]["inputs"],
                            "cycle: \(names.joined(separator: " -> ")) -> \(names[names.startIndex]); a pipeline must flow one way")
                    }
                } else if state[j] == 0 {
                    state[j] = 1
                    depthOf[j] = path.count
                    path.append((j, 0))
                }
            }
        }

        checkOutputs(list, filesOf, inputsOf, replaces: replaces, &issues)

        if !issues.isEmpty {
            // In reading order (stable: several issues at one place keep their order).
            let sorted = issues.enumerated().sorted { a, b in
                (a.element.line, a.element.column, a.offset) < (b.element.line, b.element.column, b.offset)
            }.map(\.element)
            return .invalid(sorted)
        }
        return .valid(Pipeline(description: description, stages: specs.compactMap { $0 }))
    }

    /// Refuses outputs that would overwrite an input or another output (`OutputSafety`): what
    /// stages write, and what `directory` sinks copy from the stages feeding them; and, when files
    /// are checked, outputs that exist already, unless their stage (index in `replaces`) may
    /// replace them.
    func checkOutputs(
        _ list: [JSONNode], _ filesOf: [Int: StageFiles], _ inputsOf: [Int: [Int]], replaces: Set<Int>, _ issues: inout [PipelineIssue]
    ) {
        var inputs: [OutputSafety.Use] = [], outputs: [OutputSafety.Use] = [], places: [(path: String, node: JSONNode)] = []
        var kept: [Int] = []  // indices into `outputs` whose stage does not replace
        /// The node of a field such as "output" or "paths[2]" in stage i.
        func node(_ i: Int, _ field: String) -> JSONNode {
            let parts = field.split(separator: "[", maxSplits: 1)
            guard let value = list[i][String(parts[0])] else { return list[i] }
            if parts.count == 2, let j = Int(parts[1].dropLast()), case .array(let a) = value.value, a.indices.contains(j) { return a[j] }
            return value
        }
        for i in list.indices {
            guard let f = filesOf[i] else { continue }
            for r in f.reads { inputs.append(OutputSafety.Use(path: r.path, label: "stages[\(i)].\(r.field)")) }
            for w in f.writes {
                if !replaces.contains(i) { kept.append(outputs.count) }
                outputs.append(OutputSafety.Use(path: w.path, label: "stages[\(i)].\(w.field)"))
                places.append(("stages[\(i)].\(w.field)", node(i, w.field)))
            }
            if let into = f.copiesInto {
                for j in inputsOf[i] ?? [] {
                    for src in filesOf[j]?.passesOn ?? [] {
                        let target = (into.path as NSString).appendingPathComponent((src.path as NSString).lastPathComponent)
                        if !replaces.contains(i) { kept.append(outputs.count) }
                        outputs.append(OutputSafety.Use(path: target, label: "stages[\(i)].\(into.field)", copyOf: src.path))
                        places.append(("stages[\(i)].\(into.field)", node(i, into.field)))
                    }
                }
            }
        }
        guard !outputs.isEmpty else { return }
        let clashes = OutputSafety.clashes(inputs: inputs, outputs: outputs)
        for c in clashes {
            let o = outputs[c.outputIndex], at = places[c.outputIndex]
            let what = o.copyOf.map { "would write '\(c.output)' (the copy of '\($0)'), which" } ?? "'\(c.output)'"
            issues.append(PipelineIssue(at.path, "\(what) \(c.reason)", line: at.node.line, column: at.node.column))
        }
        guard checksFiles else { return }
        let clashing = Set(clashes.map(\.outputIndex))
        for n in OutputSafety.existing(kept.map { outputs[$0] }) where !clashing.contains(kept[n]) {
            let o = outputs[kept[n]], at = places[kept[n]]
            let what = o.copyOf.map { "would write '\(o.path)' (the copy of '\($0)'), which" } ?? "'\(o.path)'"
            issues.append(
                PipelineIssue(
                    at.path, "\(what) exists; it is replaced only when asked (\"overwrite\": true on this stage, or -y)", line: at.node.line,
                    column: at.node.column))
        }
    }

    /// Replaces each path value `remote` serves by its local stand-in (fetching inputs), per the
    /// parameter's role; a remote value where the stage takes a local path only is an issue.
    func mapRemotePaths(
        _ kind: StageKind, _ values: inout [String: JSONValue], _ node: JSONNode, _ p: String, _ remote: RemotePaths, _ issues: inout [PipelineIssue]
    ) {
        func mapped(_ s: String, _ spec: ParamSpec, _ at: String, _ n: JSONNode) -> String? {
            guard remote.handles(s) else { return s }
            guard spec.role != .local else {
                issues.append(
                    PipelineIssue(
                        at, "'\(s)': object storage is taken only for files a stage reads or writes; give a local path", line: n.line, column: n.column))
                return nil
            }
            do { return try remote.local(for: s, role: spec.role) } catch {
                issues.append(PipelineIssue(at, (error as? ClipFlowError)?.message ?? "'\(s)': \(error)", line: n.line, column: n.column))
                return nil
            }
        }
        for spec in kind.params {
            let at = "\(p).\(spec.name)", n = node[spec.name] ?? node
            switch values[spec.name] {
            case .string(let s)? where spec.type == .path:
                if let m = mapped(s, spec, at, n) { values[spec.name] = .string(m) } else { values[spec.name] = nil }
            case .array(let a)? where spec.type == .pathList:
                var out: [JSONNode] = []
                for (j, e) in a.enumerated() {
                    guard case .string(let s) = e.value else { out.append(e); continue }
                    if let m = mapped(s, spec, "\(at)[\(j)]", e) { out.append(JSONNode(.string(m), line: e.line, column: e.column)) }
                }
                values[spec.name] = out.count == a.count ? .array(out) : nil
            default: break
            }
        }
    }

    /// How many of a run of like problems (duplicates) are reported one by one.
    public static let summaryLimit = 5

    /// Reports the first `summaryLimit` items one by one, then the rest in one line (given their
    /// count and the first of them, for its place in the file).
    func summarised<T>(_ items: [T], _ each: (T) -> Void, more: (Int, T) -> Void) {
        for x in items.prefix(Self.summaryLimit) { each(x) }
        if items.count > Self.summaryLimit { more(items.count - Self.summaryLimit, items[Self.summaryLimit]) }
    }

    // MARK: values

    /// Expands variables in a string; reports unknown ones.
    func expand(_ s: String, _ path: String, _ node: JSONNode, _ issues: inout [PipelineIssue]) -> String? {
        guard s.contains("$") else { return s }
        var out = ""
        var ok = true
        var it = s.startIndex
        while it < s.endIndex {
            let c = s[it]
            if c == "$" {
                let next = s.index(after: it)
                if next < s.endIndex, s[next] == "$" { out.append("$"); it = s.index(after: next); continue }
                if next < s.endIndex, s[next] == "{", let close = s[next...].firstIndex(of: "}") {
                    let name = String(s[s.index(after: next)..<close])
                    if name.range(of: "^[A-Za-z_][A-Za-z0-9_]*$", options: .regularExpression) == nil {
                        issues.append(
                            PipelineIssue(path, "\"${\(name)}\" is not a valid variable name (letters, digits, '_')", line: node.line, column: node.column))
                        ok = false
                    } else if let v = variables[name] ?? environment[name] {
                        out += v
                    } else {
                        issues.append(
                            PipelineIssue(
                                path, "variable ${\(name)} is not set; pass --set \(name)=VALUE or export \(name)", line: node.line, column: node.column))
                        ok = false
                    }
                    it = s.index(after: close)
                    continue
                }
                issues.append(PipelineIssue(path, "'$' must start ${NAME} (write $$ for a literal '$')", line: node.line, column: node.column))
                return nil
            }
            out.append(c)
            it = s.index(after: it)
        }
        return ok ? out : nil
    }

    /// The largest magnitude of any number in a pipeline: 2^53, up to which every integer is exact
    /// in a Double and fits every integer type a stage converts it to.
    public static let largestNumber = 9_007_199_254_740_992.0
    static let largestNumberText = "9007199254740992"

    /// C0 and C1 control characters and DEL: never part of a usable path.
    public static func isControl(_ u: Unicode.Scalar) -> Bool { u.value < 0x20 || (0x7F...0x9F).contains(u.value) }

    /// A string as a JSON literal with every control character escaped, safe to print.
    public static func escaped(_ s: String) -> String {
        var out = ""
        for u in JSONValue.quote(s).unicodeScalars {
            if isControl(u) { out += String(format: "\\u%04x", u.value) } else { out.unicodeScalars.append(u) }
        }
        return out
    }

    static let wholeVariable = #"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$"#

    func check(_ raw: JSONNode, _ spec: ParamSpec, _ path: String, _ issues: inout [PipelineIssue]) -> JSONValue? {
        var from = ""
        func bad(_ got: String) -> JSONValue? {
            issues.append(PipelineIssue(path, "expected \(spec.type.describe), got \(got)\(from)", line: raw.line, column: raw.column))
            return nil
        }
        func shown(_ v: JSONValue) -> String { spec.secret ? v.typeName : v.serialized }
        /// A number beyond what any parameter takes, which an unbounded range would not explain.
        func tooLarge() -> JSONValue? {
            bad(shown(value) + (spec.secret ? "" : " (larger than any number a pipeline takes, \(Self.largestNumberText))"))
        }
        func pathProblem(_ e: String, _ at: String, _ node: JSONNode) -> Bool {
            guard let c = e.unicodeScalars.first(where: Self.isControl) else { return false }
            issues.append(
                PipelineIssue(
                    at, "expected a path without control characters, got \(Self.escaped(e)) (U+\(String(format: "%04X", c.value)))\(from)",
                    line: node.line, column: node.column))
            return true
        }
        var value = raw.value
        // A number or boolean given as one variable reference.
        if case .string(let s) = value, s.range(of: Self.wholeVariable, options: .regularExpression) != nil {
            switch spec.type {
            case .integer, .number, .boolean, .integerChoice:
                guard let e = expand(s, path, raw, &issues) else { return nil }
                from = " (from \(s))"
                if let d = Double(e) {
                    value = .number(d)
                } else if e == "true" || e == "false" {
                    value = .bool(e == "true")
                } else {
                    return bad(spec.secret ? "a value that is not a number" : "\"\(e)\"")
                }
            default: break
            }
        }
        switch spec.type {
        case .string, .path:
            guard case .string(let s) = value else { return bad(shown(value)) }
            guard let e = expand(s, path, raw, &issues) else { return nil }
            if spec.type == .path && e.isEmpty { return bad("an empty string") }
            if spec.type == .path && pathProblem(e, path, raw) { return nil }
            return .string(e)
        case .choice(let options):
            guard case .string(let s) = value else { return bad(shown(value)) }
            guard let e = expand(s, path, raw, &issues) else { return nil }
            guard options.contains(e) else { return bad("\"\(e)\"\(suggestion(for: e, in: options))") }
            return .string(e)
        case .boolean:
            guard case .bool = value else { return bad(shown(value)) }
            return value
        // Numbers are compared as Doubles, never converted before they are known to fit.
        case .integer(let lo, let hi):
            guard case .number(let n) = value, n.isFinite, n == n.rounded() else { return bad(shown(value)) }
            if let lo, n < Double(lo) { return bad(shown(value)) }
            if let hi, n > Double(hi) { return bad(shown(value)) }
            if abs(n) > Self.largestNumber { return tooLarge() }
            return value
        case .number(let lo, let hi):
            guard case .number(let n) = value, n.isFinite else { return bad(shown(value)) }
            if let lo, n < lo { return bad(shown(value)) }
            if let hi, n > hi { return bad(shown(value)) }
            if abs(n) > Self.largestNumber { return tooLarge() }
            return value
        case .integerChoice(let options):
            guard case .number(let n) = value, options.contains(where: { Double($0) == n }) else { return bad(shown(value)) }
            return value
        case .pathList, .stringList:
            let what = spec.type == .pathList ? "a path" : "a string"
            guard case .array(let arr) = value else { return bad(shown(value)) }
            if arr.isEmpty { return bad("an empty list") }
            var out: [JSONNode] = []
            var ok = true
            for (j, e) in arr.enumerated() {
                guard case .string(let s) = e.value, !s.isEmpty else {
                    issues.append(
                        PipelineIssue("\(path)[\(j)]", "expected \(what) (non-empty string), got \(e.value.typeName)", line: e.line, column: e.column))
                    ok = false
                    continue
                }
                guard let x = expand(s, "\(path)[\(j)]", e, &issues) else { ok = false; continue }
                if spec.type == .pathList, pathProblem(x, "\(path)[\(j)]", e) { ok = false; continue }
                out.append(JSONNode(.string(x), line: e.line, column: e.column))
            }
            return ok ? .array(out) : nil
        }
    }

    func parseQueue(
        _ q: JSONNode, _ path: String, _ limits: inout LinkLimits, _ policy: inout OverflowPolicy,
        _ issues: inout [PipelineIssue]
    ) {
        guard case .object(let members) = q.value else {
            issues.append(
                PipelineIssue(
                    path, "expected an object with \(Self.queueKeys.joined(separator: ", ")), got \(q.value.typeName)", line: q.line, column: q.column))
            return
        }
        for (k, v) in members {
            let p = "\(path).\(k)"
            func bad(_ what: String) { issues.append(PipelineIssue(p, "expected \(what), got \(v.value.serialized)", line: v.line, column: v.column)) }
            switch k {
            case "max-items":
                if case .number(let n) = v.value, n == n.rounded(), n >= 1, n <= 1_000_000 {
                    limits.maxItems = Int(n)
                } else {
                    bad("an integer from 1 to 1000000")
                }
            case "max-bytes":
                if case .number(let n) = v.value, n == n.rounded(), n >= 1, n <= Self.largestNumber {
                    limits.maxBytes = Int64(n)
                } else {
                    bad("an integer from 1 to \(Self.largestNumberText)")
                }
            case "max-time":
                if case .number(let n) = v.value, n > 0, n <= Self.largestNumber {
                    limits.maxDuration = n
                } else {
                    bad("a number of seconds above 0 (at most \(Self.largestNumberText))")
                }
            case "low-watermark":
                if case .number(let n) = v.value, n >= 0, n < 1 { limits.lowWatermark = n } else { bad("a number from 0 up to (not including) 1") }
            case "policy":
                if case .string(let s) = v.value, let pol = OverflowPolicy(rawValue: s) {
                    policy = pol
                } else {
                    bad("one of " + OverflowPolicy.allCases.map { "\"\($0.rawValue)\"" }.joined(separator: ", "))
                }
            default:
                issues.append(
                    PipelineIssue(
                        p, "unknown queue setting\(suggestion(for: k, in: Self.queueKeys)); expected \(Self.queueKeys.joined(separator: ", "))", line: v.line,
                        column: v.column))
            }
        }
    }
}
