import Foundation

/// The JSON Schema (draft 2020-12) of the pipeline format, generated from the registry so that it
/// cannot drift from the validator. It checks structure, types, ranges and names; it cannot check
/// what needs the whole document or the machine (unknown input ids, cycles, connection types,
/// unique ids, readable files), which `clipflow validate` adds.
public enum PipelineSchema {
    static let variable = #"^\$\{[A-Za-z_][A-Za-z0-9_]*\}$"#
    /// A path as written: no control characters (the validator checks again after ${NAME}).
    static let noControlCharacters = #"^[^\u0000-\u001f\u007f-\u009f]*$"#
    /// The validator's bound on every number (`PipelineValidator.largestNumber`, 2^53).
    static let largest = Int64(PipelineValidator.largestNumber)

    public static func generate(_ registry: StageRegistry) -> String {
        let stageSchemas: [[String: Any]] = registry.kinds.map { kind in
            var props: [String: Any] = [
                "id": ["type": "string", "pattern": PipelineValidator.idPattern, "description": "unique name of the stage"],
                "kind": ["const": kind.name, "description": kind.summary],
                "description": ["type": "string"]
            ]
            var required = ["id", "kind"]
            if !kind.isSource {
                var inputs: [String: Any] = [
                    "type": "array", "items": ["type": "string", "pattern": PipelineValidator.idPattern],
                    "uniqueItems": true, "minItems": kind.minInputs,
                    "description": "ids of the stages feeding this one (\(kind.inputs.map(\.rawValue).sorted().joined(separator: " or ")))"
                ]
                if let mx = kind.maxInputs { inputs["maxItems"] = mx }
                props["inputs"] = inputs
                props["queue"] = queueSchema(kind)
                if kind.minInputs > 0 { required.append("inputs") }
            } else {
                props["inputs"] = ["type": "array", "maxItems": 0, "description": "a source takes no inputs"]
            }
            for p in kind.params {
                props[p.name] = paramSchema(p)
                if p.required { required.append(p.name) }
            }
            return [
                "type": "object", "title": kind.name, "properties": props, "required": required, "additionalProperties": false,
                "if": ["properties": ["kind": ["const": kind.name]], "required": ["kind"]]
            ]
        }
        // Dispatch on "kind": each branch applies only when kind matches; an unknown kind fails.
        let kindNames = registry.kinds.map(\.name)
        var allOf: [[String: Any]] = []
        for s in stageSchemas {
            var then = s
            let cond = then.removeValue(forKey: "if")!
            allOf.append(["if": cond, "then": then])
        }
        let stage: [String: Any] = [
            "type": "object",
            "required": ["id", "kind"],
            "properties": ["kind": ["enum": kindNames]],
            "allOf": allOf
        ]
        let root: [String: Any] = [
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": "https://clipflow.dev/schema/pipeline-v1.json",
            "title": "clipflow pipeline",
            "description": "A clipflow pipeline: stages (sources, processors, sinks) connected by their inputs. Strings may use ${NAME} variables.",
            "type": "object",
            "required": ["version", "stages"],
            "additionalProperties": false,
            "properties": [
                "version": ["const": 1],
                "description": ["type": "string"],
                "stages": ["type": "array", "minItems": 1, "items": stage]
            ]
        ]
        let data = (try? JSONSerialization.data(withJSONObject: root, options: [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes])) ?? Data()
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    static func queueSchema(_ kind: StageKind) -> [String: Any] {
        [
            "type": "object",
            "additionalProperties": false,
            "description": "the bounded queue on this stage's inputs",
            "properties": [
                "max-items": ["type": "integer", "minimum": 1, "maximum": 1_000_000, "default": kind.queue.maxItems],
                "max-bytes": ["type": "integer", "minimum": 1, "maximum": largest, "default": kind.queue.maxBytes],
                "max-time": ["type": "number", "exclusiveMinimum": 0, "maximum": largest],
                "low-watermark": ["type": "number", "minimum": 0, "exclusiveMaximum": 1, "default": kind.queue.lowWatermark],
                "policy": ["enum": OverflowPolicy.allCases.map(\.rawValue), "default": kind.policy.rawValue]
            ] as [String: Any]
        ]
    }

    static func paramSchema(_ p: ParamSpec) -> [String: Any] {
        var s: [String: Any]
        let varRef: [String: Any] = ["type": "string", "pattern": variable]
        switch p.type {
        case .string: s = ["type": "string"]
        case .path: s = ["type": "string", "minLength": 1, "pattern": noControlCharacters]
        case .boolean: s = ["anyOf": [["type": "boolean"], varRef]]
        case .choice(let c): s = ["anyOf": [["enum": c], varRef]]
        case .integerChoice(let c): s = ["anyOf": [["enum": c], varRef]]
        case .integer(let lo, let hi):
            let n: [String: Any] = ["type": "integer", "minimum": lo.map(Int64.init) ?? -largest, "maximum": hi.map(Int64.init) ?? largest]
            s = ["anyOf": [n, varRef]]
        case .number(let lo, let hi):
            var n: [String: Any] = ["type": "number"]
            n["minimum"] = lo ?? -Double(largest)
            n["maximum"] = hi ?? Double(largest)
            s = ["anyOf": [n, varRef]]
        case .pathList, .stringList: s = ["type": "array", "minItems": 1, "items": ["type": "string", "minLength": 1, "pattern": noControlCharacters]]
        }
        s["description"] = p.help
        if let d = p.defaultValue { s["default"] = jsonObject(d) }
        return s
    }

    static func jsonObject(_ v: JSONValue) -> Any {
        switch v {
        case .null: return NSNull()
        case .bool(let b): return b
        case .number(let n): return n == n.rounded() && abs(n) < 1e15 ? Int64(n) as Any : n
        case .string(let s): return s
        case .array(let a): return a.map { jsonObject($0.value) }
        case .object(let o): return Dictionary(o.map { ($0.key, jsonObject($0.value.value)) }, uniquingKeysWith: { $1 })
        }
    }
}
