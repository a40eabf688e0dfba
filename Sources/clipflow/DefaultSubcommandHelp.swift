import ArgumentParser
import ClipFlowCore
import Foundation

/// The help of a command whose common work is its default subcommand (`clipflow hls IN -o DIR`
/// is `hls write`, `clipflow upload FILE` is `upload send`). ArgumentParser lists only the
/// subcommands there; this help shows the default subcommand's usage, arguments and options too,
/// before the subcommands, so `clipflow hls --help` tells how to write a ladder. The same goes
/// for the description of the commands the man pages are made from (`--experimental-dump-help`,
/// read by generate-manual), so `man clipflow.hls` tells it too.
enum DefaultSubcommandHelp {
    /// `shown` (ArgumentParser's help text for a command) with its default subcommand's usage,
    /// arguments and options, when it is the help of a command under `root` that has a default
    /// subcommand; nil for any other text.
    static func expanded(_ shown: String, root: ParsableCommand.Type = ClipFlow.self) -> String? {
        var commands: [ParsableCommand.Type] = [root]
        while let command = commands.popLast() {
            commands += command.configuration.subcommands
            guard let sub = command.configuration.defaultSubcommand, root.helpMessage(for: command) == shown else { continue }
            return merged(parent: shown, child: root.helpMessage(for: sub), childName: sub._commandName)
        }
        return nil
    }

    /// `dump` (ArgumentParser's JSON description of every command, `--experimental-dump-help`)
    /// with each command that has a default subcommand taking that subcommand's arguments as its
    /// own; nil when it is not such a description.
    static func expandedDump(_ dump: String) -> String? {
        guard var root = (try? JSONDecoder().decode(CodableJSON.self, from: Data(dump.utf8)))?.object,
            let command = root["command"]?.object
        else { return nil }
        func expand(_ c: [String: CodableJSON]) -> [String: CodableJSON] {
            var c = c
            // The subcommands are expanded when every one is an object (as in ArgumentParser's).
            let listed = c["subcommands"]?.array ?? []
            let subs = listed.allSatisfy { $0.object != nil } ? listed.compactMap(\.object).map(expand) : []
            if !subs.isEmpty { c["subcommands"] = .array(subs.map(CodableJSON.object)) }
            if let name = c["defaultSubcommand"]?.string, let sub = subs.first(where: { $0["commandName"]?.string == name }),
                let arguments = sub["arguments"]
            {
                c["arguments"] = arguments
            }
            return c
        }
        root["command"] = .object(expand(command))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(CodableJSON.object(root)) else { return nil }
        return String(decoding: data, as: UTF8.self) + "\n"
    }

    /// The parent's overview, both usages (the default subcommand's name optional in its own),
    /// the default subcommand's arguments and options, then the parent's subcommands.
    static func merged(parent: String, child: String, childName: String) -> String {
        let p = sections(parent), c = sections(child)
        var out = p.filter { $0.title == "OVERVIEW" }.map(\.text)
        if let usage = p.first(where: { $0.title == "USAGE" })?.text, let own = c.first(where: { $0.title == "USAGE" })?.text {
            let command = usage.dropFirst("USAGE: ".count).split(separator: " ").dropLast().joined(separator: " ")
            let direct = own.replacingOccurrences(of: "USAGE: \(command) \(childName) ", with: "\(command) [\(childName)] ")
            out.append(usage + "\n       " + direct)
        }
        out += c.filter { !["OVERVIEW", "USAGE"].contains($0.title) }.map(\.text)
        out += p.filter { !["OVERVIEW", "USAGE", "OPTIONS"].contains($0.title) }.map(\.text)
        return out.joined(separator: "\n\n") + "\n"
    }

    /// Help text cut into its sections: each starts at a line such as `OPTIONS:` or
    /// `USAGE: ...` (a title in capitals at the line's start), the text before the first is the
    /// overview's.
    static func sections(_ text: String) -> [(title: String, text: String)] {
        var found: [(title: String, lines: [Substring])] = []
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            let head = line.prefix { $0 != ":" }
            if !head.isEmpty, head.count < line.count, head.allSatisfy({ $0.isUppercase || $0 == " " }), head.first != " " {
                found.append((String(head), [line]))
            } else if found.isEmpty {
                found.append(("OVERVIEW", [line]))
            } else {
                found[found.count - 1].lines.append(line)
            }
        }
        return found.map { s in
            (s.title, s.lines.joined(separator: "\n").trimmingCharacters(in: .newlines))
        }
    }
}
