import ClipFlowTestSupport
import Foundation
import XCTest

/// Every `clipflow` command line in README.md's code blocks still works as written.
///
/// - A synopsis (`[...]`, `A|B`, `...`): every option it names is one its command offers.
/// - An example that needs what a test machine does not have (a server on the internet or one
///   it names, a camera, a microphone): checked as a run would check it, nothing run
///   (`CLIPFLOW_PARSE_ONLY=1`).
/// - Any other example: run for real, in a folder holding the files it names (made by the
///   ffmpeg CLI); a recording that runs until stopped is stopped once it has written a clip.
final class ReadmeCLITests: XCTestCase {
    let fx = Fixtures.shared
    var binary: String {
        URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().appendingPathComponent("clipflow").path
    }
    let readme = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("README.md")

    /// One command line of a code block: its environment assignments and its words.
    struct Example: CustomStringConvertible {
        var text: String
        var env: [String: String]
        var words: [String]
        var description: String { text }
        /// Options in brackets, choices, repeats, or placeholders (`DIR`, `PIPELINE.json`).
        var isSynopsis: Bool {
            words.contains { w in
                w.contains("[") || w.contains("|") || w.hasSuffix("...")
                    || w.split(separator: ".").first.map { $0.count > 1 && $0.allSatisfy(\.isUppercase) && (w.count == $0.count || w.hasSuffix(".json")) }
                        == true
            }
        }
    }

    /// The `clipflow` command lines of the README's code blocks: continuation lines joined,
    /// `;`-separated commands split, `# comments` dropped, words split as a shell would.
    static func examples(_ text: String) -> [Example] {
        var found: [Example] = []
        let parts = text.components(separatedBy: "```")
        for (n, block) in parts.enumerated() where n % 2 == 1 {
            var lines = block.components(separatedBy: "\n").dropFirst()[...]  // the fence's language
            while let first = lines.first {
                lines = lines.dropFirst()
                var line = first
                while line.hasSuffix("\\"), let next = lines.first {
                    line = String(line.dropLast()) + " " + next.trimmingCharacters(in: .whitespaces)
                    lines = lines.dropFirst()
                }
                for command in shellWords(line) {
                    var env: [String: String] = [:]
                    var words = command
                    while let w = words.first, let eq = w.firstIndex(of: "="), w[..<eq].allSatisfy({ $0.isUppercase || $0 == "_" }) {
                        env[String(w[..<eq])] = String(w[w.index(after: eq)...])
                        words.removeFirst()
                    }
                    guard words.first == "clipflow", words.count > 1, !words[1].hasPrefix("(") else { continue }
                    found.append(Example(text: line.trimmingCharacters(in: .whitespaces), env: env, words: Array(words.dropFirst())))
                }
            }
        }
        return found
    }

    /// The commands of one line (split at `;`), each as words: quotes removed, a `#` starting a
    /// word ends the line.
    static func shellWords(_ line: String) -> [[String]] {
        var commands: [[String]] = [[]]
        var word = "", inWord = false, quote: Character?
        func endWord() {
            if inWord { commands[commands.count - 1].append(word) }
            word = ""
            inWord = false
        }
        for c in line {
            if let q = quote {
                if c == q { quote = nil } else { word.append(c) }
                continue
            }
            switch c {
            case "'", "\"": quote = c; inWord = true
            case " ", "\t": endWord()
            case ";": endWord(); commands.append([])
            case "#" where !inWord: return commands.filter { !$0.isEmpty }
            default: word.append(c); inWord = true
            }
        }
        endWord()
        return commands.filter { !$0.isEmpty }
    }

    /// The words that name the command (`upload send`), and its help text (with its default
    /// subcommand's: `clipflow hls IN -o DIR` is `hls write`).
    func help(of words: [String]) throws -> (path: [String], text: String) {
        var path: [String] = []
        for w in words {
            guard w.allSatisfy({ $0.isLowercase || $0 == "-" }), !w.hasPrefix("-") else { break }
            let r = try Run.run([binary] + path + [w, "--help"], check: false)
            guard r.status == 0, r.out.contains("USAGE: clipflow \((path + [w]).joined(separator: " "))") else { break }
            path.append(w)
        }
        var text = try Run.run([binary] + path + ["--help"]).out
        if let line = text.split(separator: "\n").first(where: { $0.contains(" (default) ") }), let name = line.split(separator: " ").first {
            text += try Run.run([binary] + path + [String(name), "--help"]).out
        }
        return (path, text)
    }

    /// Needs what a test machine does not have: a server on the network, a camera, a microphone.
    func needsTheWorld(_ e: Example) -> Bool {
        e.words.first == "serve" || e.words.contains { $0.contains("://") || ["--to", "--source", "--audio", "--interactive"].contains($0) }
    }

    func testEveryCommandLineInTheReadmeWorksAsWritten() throws {
        let all = Self.examples(try String(contentsOf: readme, encoding: .utf8))
        XCTAssertGreaterThan(all.count, 30, "\(all)")
        let dir = fx.scratch("readme")
        let cwd = dir.path
        // The files the examples name.
        let clip = try fx.toneClip(0, seconds: 1)
        let hd = try fx.clip("readme-720p.mp4", seconds: 1, size: "1280x720")
        for (name, args) in [
            ("phone.mov", ["-i", hd, "-c", "copy", "-metadata:s:v:0", "rotate=270", "-f", "mov"]),
            (
                "webcam.mkv",
                ["-f", "lavfi", "-i", "testsrc2=size=640x480:rate=25", "-f", "lavfi", "-i", "sine=r=44100", "-t", "1", "-c:v", "libx264", "-c:a", "aac"]
            ),
            (
                "screen.webm",
                ["-f", "lavfi", "-i", "testsrc2=size=960x540:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "1", "-c:v", "libvpx", "-c:a", "libopus"]
            ),
            ("IN.mp4", ["-i", hd, "-c", "copy"]), ("video.mp4", ["-i", clip, "-c", "copy"]), ("a.mp4", ["-i", clip, "-c", "copy"]),
            ("b.mp4", ["-i", clip, "-c", "copy"])
        ] {
            try Run.run(["ffmpeg", "-v", "error", "-y"] + args + [dir.appendingPathComponent(name).path])
        }
        try Run.run([binary, "hls", "-q", "-o", dir.appendingPathComponent("out/hls").path, hd])
        let env = ["XDG_STATE_HOME": dir.appendingPathComponent("state").path, "DB": "postgres://clipflow@127.0.0.1/clipflow", "CLIPFLOW_API_KEY": "readme-key"]
        func expand(_ w: String) -> String {
            w.hasPrefix("$") ? env[String(w.dropFirst())] ?? w : w
        }

        var ran = 0, parsed = 0, synopses = 0
        for e in all {
            let words = e.words.map(expand)
            if e.isSynopsis {
                synopses += 1
                let (path, text) = try help(of: words)
                XCTAssertFalse(path.isEmpty, "\(e): no such command")
                for option in words.flatMap({ $0.split(separator: "[").flatMap { $0.split(separator: "|") } }).map({
                    $0.trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
                })
                where option.hasPrefix("-") {
                    let name = option.split(separator: "=").first.map(String.init) ?? option
                    XCTAssertTrue(text.contains(name), "\(e): `clipflow \(path.joined(separator: " "))` has no \(name)")
                }
                continue
            }
            var runEnv = env.merging(e.env.mapValues(expand)) { $1 }
            if needsTheWorld(e) {
                parsed += 1
                runEnv["CLIPFLOW_PARSE_ONLY"] = "1"
                let r = try Run.run(["/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", cwd, binary] + words, env: runEnv, check: false)
                XCTAssertEqual(r.status, 0, "\(e): \(r.stderr)")
                XCTAssertTrue(r.out.hasPrefix("would run: clipflow \(words[0])"), "\(e): \(r.out)")
                continue
            }
            ran += 1
            if words.first == "record" {
                // Recording runs in real time until its duration or a stop: stopped once it has
                // written its first fragment (or, recording one until stopped, once it started).
                let marker = words.contains("--segment") ? "record: wrote" : "camera: "
                let (status, text) = try Run.interrupt("/bin/sh", ["-c", "cd \"$0\" && exec \"$@\"", cwd, binary] + words, after: marker)
                XCTAssertEqual(status, 130, "\(e): \(text)")
                XCTAssertTrue(text.contains("stopped: recorded "), "\(e): \(text)")
                continue
            }
            let r = try Run.run(["/bin/sh", "-c", "cd \"$0\" && exec \"$@\"", cwd, binary] + words, env: runEnv, check: false)
            XCTAssertEqual(r.status, 0, "\(e): \(r.stderr)")
        }
        XCTAssertGreaterThan(ran, 10, "examples run for real")
        XCTAssertGreaterThan(parsed, 5, "examples checked without a network")
        XCTAssertGreaterThan(synopses, 5)
        // What the examples made is media a tool we did not write reads.
        XCTAssertEqual(Double(try Probe.stream(dir.appendingPathComponent("joined.mp4").path, "v:0", "duration")) ?? 0, 3, accuracy: 0.1)
        XCTAssertEqual(try Probe.stream(dir.appendingPathComponent("OUT.mp4").path, "v:0", "height"), "720")
    }
}
