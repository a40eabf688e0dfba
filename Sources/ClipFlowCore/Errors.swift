import Foundation

/// An error written for the person at the terminal: what failed, on which file or field, why,
/// and (when known) what to do. `description` is exactly what the CLI prints after "error: ".
public struct ClipFlowError: Error, CustomStringConvertible, Equatable, Sendable {
    public enum Kind: Sendable, Equatable {
        /// The user's input (a file, an argument, a pipeline field) is unusable.
        case badInput
        /// Inputs are individually fine but cannot be combined.
        case incompatible
        /// The work was interrupted (SIGINT/SIGTERM or cancel).
        case interrupted
        /// Writing an output failed (disk full, permissions, ...).
        case output
        /// A library or internal failure.
        case failure
    }

    public let kind: Kind
    public let message: String
    public var description: String { message }

    public init(_ kind: Kind, _ message: String) {
        self.kind = kind
        self.message = message
    }

    public static func badInput(_ message: String) -> ClipFlowError { .init(.badInput, message) }
    public static func incompatible(_ message: String) -> ClipFlowError { .init(.incompatible, message) }
    public static func output(_ message: String) -> ClipFlowError { .init(.output, message) }
    public static func failure(_ message: String) -> ClipFlowError { .init(.failure, message) }
    public static let interrupted = ClipFlowError(.interrupted, "stopped: no output was written")

    /// Process exit status for this kind of error: the CLI's `ExitStatus` table (65 bad input, 130
    /// an interruption, as shells report SIGINT, 1 any other failure).
    public var exitCode: Int32 {
        switch kind {
        case .interrupted: return 130
        case .badInput, .incompatible: return 65
        case .output, .failure: return 1
        }
    }
}

/// How a message names a setting the person can change, as they asked for the work: an option
/// of the command line (`--conform`) or a field of a pipeline's stage (`"conform": true`), so a
/// suggestion is one they can follow where they read it.
public enum SettingSpelling: Sendable, Equatable {
    case commandLine
    case pipelineField

    /// The yes-or-no setting `name` turned on: `--conform`, or `"conform": true`.
    public func on(_ name: String) -> String {
        switch self {
        case .commandLine: return "--\(name)"
        case .pipelineField: return "\"\(name)\": true"
        }
    }
}
