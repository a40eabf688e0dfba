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

        /// Its name in events (`--events json`'s `failed` event, `kind`).
        public var name: String {
            switch self {
            case .badInput: return "bad_input"
            case .incompatible: return "incompatible"
            case .interrupted: return "interrupted"
            case .output: return "output"
            case .failure: return "failure"
            }
        }
    }

    /// What a failure was, finer than its `Kind` (which sets the exit status): a full disk is an
    /// `output` error known where the write failed (ENOSPC or EDQUOT from a POSIX write, FFmpeg's
    /// AVERROR(ENOSPC), Foundation's `fileWriteOutOfSpace`), never read back from its message.
    /// Events name it (`kind`: `disk_full`, else the kind's name); `FailureKind` reads it back.
    public enum Cause: Sendable, Equatable {
        case diskFull
    }

    public let kind: Kind
    public let message: String
    /// What the failure was, when finer than `kind` (nil: just its kind).
    public let cause: Cause?
    public var description: String { message }

    public init(_ kind: Kind, _ message: String, cause: Cause? = nil) {
        self.kind = kind
        self.message = message
        self.cause = cause
    }

    /// No space was left where an output was written: an `output` error (exit status 1) whose
    /// cause is `diskFull`.
    public static func diskFull(_ message: String) -> ClipFlowError { .init(.output, message, cause: .diskFull) }

    /// Whether no space was left where an output was written.
    public var isDiskFull: Bool { cause == .diskFull }

    /// What the failure was, as events name it.
    public var failureKind: FailureKind { isDiskFull ? .diskFull : FailureKind(kind) }

    /// Whether a POSIX error number says that the disk (or the user's quota) is full.
    public static func isOutOfSpace(errno code: Int32) -> Bool { code == ENOSPC || code == EDQUOT }

    /// An output error after a POSIX call failed with `code` (errno): `message`, then the C
    /// library's words; a full disk when `code` says so.
    public static func output(_ message: String, errno code: Int32) -> ClipFlowError {
        let text = "\(message): \(String(cString: strerror(code)))"
        return isOutOfSpace(errno: code) ? .diskFull(text) : .output(text)
    }

    /// An output error after a Foundation write (FileManager, Data, FileHandle) threw `error`:
    /// `message`, then its description; a full disk when Foundation or the POSIX error says so.
    public static func output(_ message: String, writing error: Error) -> ClipFlowError {
        let text = "\(message): \(error.localizedDescription)"
        return isOutOfSpace(error) ? .diskFull(text) : .output(text)
    }

    /// Whether a Foundation error says that no space was left.
    public static func isOutOfSpace(_ error: Error) -> Bool {
        if let e = error as? CocoaError, e.code == .fileWriteOutOfSpace { return true }
        if let e = error as? POSIXError { return isOutOfSpace(errno: e.code.rawValue) }
        let ns = error as NSError
        if ns.domain == NSPOSIXErrorDomain { return isOutOfSpace(errno: Int32(ns.code)) }
        if let underlying = ns.userInfo[NSUnderlyingErrorKey] as? Error { return isOutOfSpace(underlying) }
        return false
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

/// What a failure was, as events name it (`--events json`'s `failed` event, field `kind`) and a
/// reader of those events reads it back: a `ClipFlowError.Kind`, or a full disk.
public enum FailureKind: String, Sendable, Equatable, Codable, CaseIterable {
    case badInput = "bad_input"
    case incompatible
    case interrupted
    case output
    case failure
    case diskFull = "disk_full"

    public init(_ kind: ClipFlowError.Kind) { self = FailureKind(rawValue: kind.name) ?? .failure }
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
