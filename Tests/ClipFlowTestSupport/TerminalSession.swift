import Foundation

/// A command as a person at a terminal sees it: run in a pseudo-terminal and rendered by a
/// terminal emulator (pyte, `Tests/Terminal/pty_session.py`), driven by steps (wait for the
/// screen to match, type keys, keep the screen). What the driver saw.
public struct TerminalSession {
    public static let driver = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Terminal/pty_session.py").path

    public var json: [String: Any]
    public var status: Int? { json["status"] as? Int }
    /// Why a step did not succeed, or nil.
    public var failed: String? { json["failed"] as? String }
    /// Every byte the command printed, as text.
    public var raw: String { json["raw"] as? String ?? "" }
    public func screen(_ name: String) -> (lines: [String], cursor: Int) {
        let s = (json["screens"] as? [String: Any])?[name] as? [String: Any]
        return ((s?["lines"] as? [String]) ?? [], (s?["cursor"] as? Int) ?? -1)
    }
    /// The line the cursor is on: where a status line is drawn.
    public func statusRow(_ name: String) -> String {
        let s = screen(name)
        return s.lines.indices.contains(s.cursor) ? s.lines[s.cursor] : ""
    }
    public func mode(_ name: String) -> [String: Any] { ((json["modes"] as? [String: Any])?[name] as? [String: Any]) ?? [:] }
    public var before: [String: Any] { json["before"] as? [String: Any] ?? [:] }
    public var after: [String: Any] { json["after"] as? [String: Any] ?? [:] }
    /// The terminal's mode is exactly what it was before the command.
    public var modeRestored: Bool {
        func canonical(_ m: [String: Any]) -> Data? { try? JSONSerialization.data(withJSONObject: m, options: .sortedKeys) }
        return !before.isEmpty && canonical(before) == canonical(after)
    }
    public var screenNames: [String] { Array((json["screens"] as? [String: Any])?.keys ?? [String: Any]().keys) }

    /// Runs `command` (argv) through the driver with `steps` (see pty_session.py). Throws when the
    /// driver itself could not run.
    public static func run(_ steps: [[String: Any]], _ command: [String], env: [String: String] = [:]) throws -> TerminalSession {
        let stepsJSON = String(decoding: try JSONSerialization.data(withJSONObject: steps), as: UTF8.self)
        let r = try Run.run(["python3", driver, stepsJSON, "--"] + command, env: env, check: false)
        guard r.status == 0, let json = try? JSONSerialization.jsonObject(with: r.stdout) as? [String: Any] else {
            throw NSError(domain: "TerminalSession", code: Int(r.status), userInfo: [NSLocalizedDescriptionKey: "the pty driver failed: \(r.stderr)"])
        }
        return TerminalSession(json: json)
    }
}
