import ArgumentParser
import ClipFlowCore
import ClipFlowUpload
import Foundation

/// The exit status of every command: the one table (docs/events.md, "Exit status"). ArgumentParser exits
/// 64 itself for a bad command line (`ValidationError`, an unknown option).
enum ExitStatus: Int32, CaseIterable {
    /// The work was done.
    case success = 0
    /// The work failed: a library, I/O, the network or a server.
    case failure = 1
    /// A bad command line.
    case usage = 64
    /// Bad input: an unusable file, pipeline or field, clips that cannot be joined.
    case badInput = 65
    /// `batch`: a row failed in a way running it again may fix (network, storage, a stop);
    /// EX_TEMPFAIL, which batch engines are told to retry.
    case retryable = 75
    /// Interrupted (SIGINT/SIGTERM): complete outputs kept, unfinished ones removed, uploads paused.
    case interrupted = 130

    init(_ kind: ClipFlowError.Kind) {
        switch kind {
        case .badInput, .incompatible: self = .badInput
        case .interrupted: self = .interrupted
        case .output, .failure: self = .failure
        }
    }

    /// How a graph run ended, as an exit status.
    init(_ outcome: GraphOutcome) {
        switch outcome {
        case .completed: self = .success
        case .interrupted: self = .interrupted
        case .failed(_, let e): self.init(e.kind)
        }
    }

    var exitCode: ExitCode { ExitCode(rawValue) }
}

/// The one mapping from errors to what the person at the terminal reads and the exit status.
enum ErrorReport {
    /// The error as `ClipFlowError` (an upload's error keeps its meaning: a missing file is bad
    /// input, a server's refusal a failure), or nil for errors ArgumentParser reports itself.
    static func classify(_ error: Error) -> ClipFlowError? {
        switch error {
        case let e as ClipFlowError: return e
        case let e as UploadError: return e.asClipFlowError
        default: return nil
        }
    }

    /// A graph run that did not complete, as the error to report; nil when it completed.
    static func error(_ outcome: GraphOutcome) -> ClipFlowError? {
        switch outcome {
        case .completed: return nil
        case .interrupted: return .interrupted
        case .failed(_, let e): return e
        }
    }

    /// Prints `error: MESSAGE` on stderr (each line of a several-line message prefixed; secrets
    /// redacted) and returns the exit status to throw. An interruption (SIGINT/SIGTERM) is what
    /// the person asked for, not a fault: its message is printed as it is (`stopped: ...`), and
    /// the exit status (130) says the work did not run to its end.
    static func print(_ e: ClipFlowError) -> ExitCode {
        let prefix = e.kind == .interrupted ? "" : "error: "
        let text = Secrets.shared.redact(e.message).split(separator: "\n", omittingEmptySubsequences: true).map { "\(prefix)\($0)\n" }.joined()
        FileHandle.standardError.write(Data(text.utf8))
        return ExitStatus(e.kind).exitCode
    }

    /// Ends the process for an error that left a command: what ArgumentParser asked for (help,
    /// the version, a completion script) printed as it prints it, a command's help (and the
    /// description man pages are made from) with its default subcommand's options
    /// (`DefaultSubcommandHelp`); an error already reported
    /// (`ExitCode`) with its status; a bad command line as one `error:` line (the message, a
    /// "did you mean" for a misspelt subcommand, where to read more), status 64.
    static func exit(_ error: Error, arguments: [String]) -> Never {
        if let code = error as? ExitCode { Foundation.exit(code.rawValue) }
        if let e = classify(error) { Foundation.exit(print(e).rawValue) }
        let status = ClipFlow.exitCode(for: error)
        if status == .success {
            let shown = ClipFlow.fullMessage(for: error)
            let dump = arguments.contains("--experimental-dump-help") ? DefaultSubcommandHelp.expandedDump(shown) : nil
            if let help = dump ?? DefaultSubcommandHelp.expanded(shown) {
                Swift.print(help, terminator: "")
                Foundation.exit(0)
            }
            ClipFlow.exit(withError: error)
        }
        let text = Secrets.shared.redact(commandLineMessage(ClipFlow.fullMessage(for: error), arguments: arguments))
        FileHandle.standardError.write(Data("error: \(text)\n".utf8))
        Foundation.exit(status.rawValue)
    }

    /// ArgumentParser's report (`Error: MESSAGE`, usage lines, `See 'clipflow merge --help' for
    /// more information.`) as one line: "MESSAGE; did you mean 'merge'? (see 'clipflow --help')".
    static func commandLineMessage(_ full: String, arguments: [String]) -> String {
        let lines = full.split(separator: "\n").map { $0.trimmingCharacters(in: .whitespaces) }
        var message = lines.first.map { $0.hasPrefix("Error: ") ? String($0.dropFirst(7)) : $0 } ?? "bad command line"
        if let first = message.first { message = first.lowercased() + message.dropFirst() }
        message = message.replacingOccurrences(of: ". Did you mean ", with: "; did you mean ")
        // "unexpected argument(s) 'mrege', ...": a misspelt command, where one stands.
        if message.hasPrefix("unexpected argument") || message.contains(" unexpected arguments: "),
            let word = message.split(separator: "'").dropFirst().first,
            let hint = subcommandSuggestion(for: String(word), arguments: arguments)
        {
            message = "unknown command '\(word)'; did you mean '\(hint)'?"
        }
        if let see = lines.first(where: { $0.hasPrefix("See '") }), let help = see.split(separator: "'").dropFirst().first {
            message += " (see '\(help)')"
        }
        return message
    }

    /// The subcommand `word` most likely meant, where it stands in place of one: the commands
    /// named before it lead to the command whose subcommands are the candidates.
    static func subcommandSuggestion(for word: String, arguments: [String]) -> String? {
        var command: ParsableCommand.Type = ClipFlow.self
        for a in arguments {
            let subs = command.configuration.subcommands
            if a == word { return didYouMean(word, in: subs.map { $0._commandName }) }
            guard let next = subs.first(where: { $0._commandName == a }) else { return nil }
            command = next
        }
        return nil
    }

    /// Runs a command's body: a `ClipFlowError` or `UploadError` is printed and becomes its exit
    /// status; anything else (`ExitCode`, `ValidationError`) passes to ArgumentParser.
    static func run(_ body: () throws -> Void) throws {
        do {
            try body()
        } catch {
            guard let e = classify(error) else { throw error }
            throw print(e)
        }
    }
}
