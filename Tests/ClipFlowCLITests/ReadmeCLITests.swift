import ClipFlowTestSupport
import Foundation
import XCTest

#if canImport(Glibc)
    import Glibc
#endif

/// The README and the manual (docs/) say what the program does, and cannot drift from it:
///
/// - The README's quick start (its "## Quick start" section) runs as written: every command, in
///   order, through `/bin/sh` as a person types it (globs and all), with `clipflow` on `PATH`, in a
///   folder holding made-up versions of the files it names: clips made by the ffmpeg CLI (a `.MOV`
///   is a phone's, cut from one recording and tagged as a phone held it), a batch's table from the
///   quick start's csv block and the folders its rows name. The webcam is the emulated camera
///   (`CLIPFLOW_V4L2_EMULATE`), the microphone a private PulseAudio through alsa-lib. `clipflow
///   serve` runs in the background on a free port (the README's 8080 becomes it) and is stopped
///   with SIGINT at the end; a recording that runs until Ctrl-C gets SIGINT once it has written a
///   fragment. Every command must succeed, and what it wrote must be media ffmpeg decodes.
/// - Every other `clipflow` command line in the code blocks of the README and docs/*.md:
///   - a synopsis (`[...]`, `A|B`, `...`): every option it names is one its command offers;
///   - an example that needs what a test machine does not have (a server on the internet or one it
///     names, a camera, a microphone): checked as a run would check it, nothing run
///     (`CLIPFLOW_PARSE_ONLY=1`);
///   - any other example: run for real, in a folder holding the files it names (made by the ffmpeg
///     CLI); a recording that runs until stopped is stopped once it has written a clip.
/// - Every relative link of the README, CHANGELOG.md, benchmarks/README.md and docs/*.md leads to a
///   file that exists (and a `#heading` to a heading there), and every docs page is linked from the
///   README.
final class ReadmeCLITests: XCTestCase {
    let fx = Fixtures.shared
    /// The folder of the built products (the test bundle's and `clipflow`'s).
    var products: String { URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().path }
    var binary: String { products + "/clipflow" }
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    var readme: URL { root.appendingPathComponent("README.md") }

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

    /// The `clipflow` command lines of the text's code blocks: continuation lines joined,
    /// `;`-separated commands split, `# comments` dropped, words split as a shell would.
    static func examples(_ text: String) -> [Example] {
        var found: [Example] = []
        for block in codeBlocks(text) {
            for line in commandLines(block.body) {
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

    /// The fenced code blocks of a Markdown text: each one's language (after the opening fence) and
    /// its body.
    static func codeBlocks(_ text: String) -> [(language: String, body: String)] {
        let parts = text.components(separatedBy: "```")
        return parts.enumerated().filter { $0.offset % 2 == 1 }.map { _, block in
            let lines = block.components(separatedBy: "\n")
            return (lines[0].trimmingCharacters(in: .whitespaces), lines.dropFirst().joined(separator: "\n"))
        }
    }

    /// The lines of a code block as a shell reads them: continuation lines (`\`) joined; blank
    /// lines and whole-line comments left out.
    static func commandLines(_ body: String) -> [String] {
        var found: [String] = []
        var lines = body.components(separatedBy: "\n")[...]
        while let first = lines.first {
            lines = lines.dropFirst()
            var line = first
            while line.hasSuffix("\\"), let next = lines.first {
                line = String(line.dropLast()) + " " + next.trimmingCharacters(in: .whitespaces)
                lines = lines.dropFirst()
            }
            let trimmed = line.trimmingCharacters(in: .whitespaces)
            if !trimmed.isEmpty && !trimmed.hasPrefix("#") { found.append(trimmed) }
        }
        return found
    }

    /// The part of a Markdown text from the line starting with `heading` to the next `## ` heading.
    static func section(_ text: String, _ heading: String) -> String? {
        let lines = text.components(separatedBy: "\n")
        guard let start = lines.firstIndex(where: { $0.hasPrefix(heading) }) else { return nil }
        let end = lines[(start + 1)...].firstIndex { $0.hasPrefix("## ") } ?? lines.endIndex
        return lines[start..<end].joined(separator: "\n")
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

    // MARK: - The quick start

    func testTheQuickStartRunsAsWritten() throws {
        let text = try String(contentsOf: readme, encoding: .utf8)
        XCTAssertLessThanOrEqual(
            text.components(separatedBy: "\n").count, 250, "README.md is the page a person reads in five minutes; the manual is docs/")
        XCTAssertTrue(text.contains("\nmake test"), "CI reads the test command (`make test`) from README.md")
        let quickStart = try XCTUnwrap(Self.section(text, "## Quick start"), "README.md has no \"## Quick start\" section")
        var commands: [String] = [], tables: [String] = []
        for block in Self.codeBlocks(quickStart) {
            switch block.language {
            case "csv": tables.append(block.body)
            case "sh": commands += Self.commandLines(block.body)
            default: XCTFail("the quick start's code blocks are `sh` (commands, each one run) or `csv` (a batch's table), not `\(block.language)`")
            }
        }
        XCTAssertGreaterThanOrEqual(commands.count, 8, "\(commands)")
        for c in commands {
            XCTAssertEqual(Self.examples("```sh\n\(c)\n```").count, 1, "every line of the quick start's commands is one clipflow command: \(c)")
        }

        let dir = fx.scratch("quickstart")
        try FileManager.default.createSymbolicLink(at: dir.appendingPathComponent("pipelines"), withDestinationURL: root.appendingPathComponent("pipelines"))
        let pulse = try PulseAudioServer.start()
        defer { pulse.stop() }
        let port = ServerProcess.freePort()
        var env = pulse.environment
        env["PATH"] = products + ":" + (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin")
        env["XDG_STATE_HOME"] = dir.appendingPathComponent("state").path
        env["CLIPFLOW_V4L2_EMULATE"] = "1"
        let envWords = env.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
        /// `line` through the shell, in `dir`; `exec env` so that the process is clipflow's own.
        func shell(_ line: String) -> [String] { ["/bin/sh", "-c", "cd \"$0\" && exec env \(line)", dir.path] }

        var serve: Process?
        defer {
            if let s = serve, s.isRunning {
                kill(s.processIdentifier, SIGKILL)
                s.waitUntilExit()
            }
        }
        var made = MadeUp()
        var ran: [String] = []
        for command in commands {
            var line = command.replacingOccurrences(of: "127.0.0.1:8080", with: "127.0.0.1:\(port)")
            let words = try XCTUnwrap(Self.examples("```sh\n\(line)\n```").first).words
            try makeInputs(words, in: dir, tables: tables, made: &made)
            switch words.first {
            case "serve":
                // In a second terminal: in the background here, until the end.
                if !words.contains("--listen") {
                    line = line.replacingOccurrences(of: "clipflow serve", with: "clipflow serve --listen 127.0.0.1:\(port)")
                }
                let p = Process()
                p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
                p.arguments = envWords + shell(line)
                let log = dir.appendingPathComponent("serve.log")
                _ = FileManager.default.createFile(atPath: log.path, contents: nil)
                p.standardError = try FileHandle(forWritingTo: log)
                p.standardOutput = FileHandle.nullDevice
                p.standardInput = FileHandle.nullDevice
                try p.run()
                serve = p
                let deadline = Date().addingTimeInterval(30)
                while !ServerProcess.acceptsConnections(port: port) && p.isRunning && Date() < deadline { usleep(50_000) }
                let said = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
                XCTAssertTrue(ServerProcess.acceptsConnections(port: port), "\(command): not listening on \(port): \(said)")
            case "record" where !words.contains("--duration"):
                // Until Ctrl-C: stopped once it has written its first fragment (or, recording one
                // fragment until stopped, once the camera started).
                let marker = words.contains("--segment") ? "record: wrote" : "camera: "
                let (status, out) = try Run.interrupt("/usr/bin/env", envWords + shell(line), after: marker)
                XCTAssertEqual(status, 130, "\(command): \(out)")
                XCTAssertTrue(out.contains("stopped: recorded "), "\(command): \(out)")
                if words.contains("--audio"), let o = words.firstIndex(of: "-o").map({ words[$0 + 1] }) {
                    let first = dir.appendingPathComponent(o).appendingPathComponent("clip-0001.mp4").path
                    XCTAssertEqual(try Probe.stream(first, "a:0", "codec_name"), "aac", "\(command): the microphone's sound is in the fragments")
                }
            default:
                let r = try Run.run(shell(line), env: env, check: false)
                XCTAssertEqual(r.status, 0, "\(command): \(r.stderr)")
                if words.first == "upload" && words.contains("clipflow") {
                    try watch(r.out + r.stderr, port: port, command: command)
                }
            }
            // What it wrote is there, and is media a tool we did not write decodes.
            for (i, w) in words.enumerated() where i > 0 && ["-o", "--output", "--thumbnail"].contains(words[i - 1]) {
                let path = dir.appendingPathComponent(w).path
                XCTAssertTrue(FileManager.default.fileExists(atPath: path), "\(command): wrote no \(w)")
                if w.hasSuffix(".mp4") { XCTAssertEqual(try Probe.decodeErrors(path), "", "\(command): \(w)") }
            }
            ran.append(words[0])
        }
        XCTAssertEqual(ran.count, commands.count)
        for expected in ["merge", "record", "transcode", "hls", "serve", "upload", "batch"] {
            XCTAssertTrue(ran.contains(expected), "the quick start shows `clipflow \(expected)`: \(ran)")
        }
        // Ctrl-C ends the server cleanly.
        if let s = serve {
            kill(s.processIdentifier, SIGINT)
            let deadline = Date().addingTimeInterval(30)
            while s.isRunning && Date() < deadline { usleep(50_000) }
            XCTAssertFalse(s.isRunning, "clipflow serve still runs 30 s after SIGINT")
            if !s.isRunning { XCTAssertEqual(s.terminationStatus, 0) }
        }
    }

    /// The upload printed the video's watch link; the video appears in the feed, and the feed page
    /// and the watch page answer.
    func watch(_ output: String, port: Int, command: String) throws {
        let base = "http://127.0.0.1:\(port)"
        let link = try XCTUnwrap(
            output.split(whereSeparator: \.isWhitespace).first { $0.hasPrefix(base + "/v/") }.map(String.init),
            "\(command) printed no watch link (\(base)/v/ID): \(output)")
        var listed = false
        let deadline = Date().addingTimeInterval(120)
        while !listed && Date() < deadline {
            let feed = try HTTP.request("GET", base + "/feed.json")
            listed = ((try? feed.json() as? [String: Any])?["videos"] as? [Any])?.isEmpty == false
            if !listed { usleep(200_000) }
        }
        XCTAssertTrue(listed, "the uploaded video never appeared in \(base)/feed.json")
        for page in [base + "/", link] {
            let r = try HTTP.request("GET", page)
            XCTAssertEqual(r.status, 200, page)
            XCTAssertTrue(r.header("Content-Type")?.hasPrefix("text/html") ?? false, "\(page): \(r.headers)")
        }
    }

    /// How many made-up phone clips exist: each goes on where the one before ended.
    struct MadeUp { var phoneClips = 0 }

    /// Made-up versions of what a quick-start command reads and nobody made: a video it names
    /// (`.MOV`: a phone's clip, the next cut of one recording, tagged as a phone held it; `.mp4`,
    /// `.mkv`: a camera-like clip; `.webm`: VP8 and Opus), and for `batch --rows TABLE` the table
    /// (the quick start's csv block) and, for each row, two clips where the pipeline's `files`
    /// patterns look.
    func makeInputs(_ words: [String], in dir: URL, tables: [String], made: inout MadeUp) throws {
        let fm = FileManager.default
        func clip(_ name: String) throws {
            let path = dir.appendingPathComponent(name).path
            guard !fm.fileExists(atPath: path) else { return }
            try fm.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
            switch (name as NSString).pathExtension.lowercased() {
            case "mov":
                let cut = try fx.toneClip(made.phoneClips, seconds: 2, size: "640x360", channels: 2)
                made.phoneClips += 1
                try Run.run(["ffmpeg", "-v", "error", "-y", "-i", cut, "-c", "copy", "-metadata:s:v:0", "rotate=90", "-f", "mov", path])
            case "mp4", "m4v", "mkv":
                try Run.run(["ffmpeg", "-v", "error", "-y", "-i", try fx.toneClip(0, seconds: 1, size: "640x360"), "-c", "copy", path])
            case "webm":
                try Run.run([
                    "ffmpeg", "-v", "error", "-y", "-f", "lavfi", "-i", "testsrc2=size=640x360:rate=30", "-f", "lavfi", "-i", "sine=r=48000", "-t", "1",
                    "-c:v", "libvpx", "-c:a", "libopus", path
                ])
            default: XCTFail("no made-up clip for \(name): name a .MOV, .mp4, .mkv or .webm")
            }
        }
        for (i, w) in words.enumerated() where i > 0 && !["-o", "--output", "--thumbnail", "--rows", "--data"].contains(words[i - 1]) {
            guard ["mov", "mp4", "m4v", "mkv", "webm"].contains((w as NSString).pathExtension.lowercased()), !w.contains("*") else { continue }
            try clip(w)
        }
        guard words.first == "batch", let r = words.firstIndex(of: "--rows"), r + 1 < words.count else { return }
        let rows = dir.appendingPathComponent(words[r + 1])
        if !fm.fileExists(atPath: rows.path) {
            let table = try XCTUnwrap(tables.first, "the quick start's batch reads \(words[r + 1]): show it in a csv block")
            try table.write(to: rows, atomically: true, encoding: .utf8)
        }
        let pipeline = try JSONSerialization.jsonObject(with: Data(contentsOf: dir.appendingPathComponent(words[1]))) as? [String: Any]
        let patterns = ((pipeline?["stages"] as? [[String: Any]]) ?? []).filter { $0["kind"] as? String == "files" }.compactMap { $0["glob"] as? String }
        XCTAssertFalse(patterns.isEmpty, "\(words[1]): no files stage with a glob")
        let lines = try String(contentsOf: rows, encoding: .utf8).split(separator: "\n").map {
            $0.split(separator: ",", omittingEmptySubsequences: false).map(String.init)
        }
        guard let header = lines.first else { return XCTFail("\(words[r + 1]) is empty") }
        for row in lines.dropFirst() {
            for pattern in patterns {
                var p = pattern
                for (name, value) in zip(header, row) { p = p.replacingOccurrences(of: "${\(name)}", with: value) }
                for n in 1...2 { try clip(p.replacingOccurrences(of: "*", with: "clip\(n)")) }
            }
        }
    }

    // MARK: - The manual's command lines

    func testEveryCommandLineInTheDocsWorksAsWritten() throws {
        let readmeText = try String(contentsOf: readme, encoding: .utf8)
        let quickStart = Self.section(readmeText, "## Quick start") ?? ""
        var all = Self.examples(readmeText.replacingOccurrences(of: quickStart, with: ""))  // the quick start has its own test
        for page in try docsPages() { all += Self.examples(try String(contentsOf: page, encoding: .utf8)) }
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
        let fragments = dir.appendingPathComponent("fragments")
        try FileManager.default.createDirectory(at: fragments, withIntermediateDirectories: true)
        for i in 0..<3 {
            try FileManager.default.copyItem(atPath: try fx.toneClip(i, seconds: 1), toPath: fragments.appendingPathComponent("fragment\(i).mp4").path)
        }
        try FileManager.default.createSymbolicLink(at: dir.appendingPathComponent("pipelines"), withDestinationURL: root.appendingPathComponent("pipelines"))
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

    // MARK: - Links

    func docsPages() throws -> [URL] {
        let docs = root.appendingPathComponent("docs")
        return try FileManager.default.contentsOfDirectory(atPath: docs.path).filter { $0.hasSuffix(".md") }.sorted().map {
            docs.appendingPathComponent($0)
        }
    }

    /// The targets of a Markdown text's links (`[text](target)`), code blocks and code spans left out.
    static func links(_ text: String) -> [String] {
        let prose = text.components(separatedBy: "```").enumerated().filter { $0.offset % 2 == 0 }.map(\.element).joined(separator: "\n")
            .replacingOccurrences(of: "`[^`\n]*`", with: "", options: .regularExpression)
        let pattern = try! NSRegularExpression(pattern: #"\]\(([^)\s]+)\)"#)
        return pattern.matches(in: prose, range: NSRange(prose.startIndex..., in: prose)).compactMap {
            Range($0.range(at: 1), in: prose).map { String(prose[$0]) }
        }
    }

    /// The anchors of a Markdown text's headings, as GitHub makes them: lower case, punctuation
    /// dropped, spaces as `-`; a repeated one gets `-1`, `-2`, ...
    static func anchors(_ text: String) -> Set<String> {
        var seen: [String: Int] = [:]
        var found = Set<String>()
        let prose = text.components(separatedBy: "```").enumerated().filter { $0.offset % 2 == 0 }.map(\.element).joined(separator: "\n")
        for line in prose.components(separatedBy: "\n") where line.hasPrefix("#") {
            let title = line.drop { $0 == "#" }.trimmingCharacters(in: .whitespaces)
            let slug = String(
                title.lowercased().compactMap { c -> Character? in
                    c == " " ? "-" : (c.isLetter || c.isNumber || c == "-" || c == "_") ? c : nil
                })
            let n = seen[slug, default: 0]
            seen[slug] = n + 1
            found.insert(n == 0 ? slug : "\(slug)-\(n)")
        }
        return found
    }

    func testEveryLinkInTheDocsLeadsSomewhere() throws {
        let fm = FileManager.default
        let pages = try docsPages()
        XCTAssertFalse(pages.isEmpty, "docs/ holds the manual")
        let files =
            ["README.md", "CHANGELOG.md", "benchmarks/README.md"].map { root.appendingPathComponent($0) }.filter { fm.fileExists(atPath: $0.path) } + pages
        var checked = 0
        for file in files {
            let name = String(file.path.dropFirst(root.path.count + 1))
            for target in Self.links(try String(contentsOf: file, encoding: .utf8)) where !target.contains("://") && !target.hasPrefix("mailto:") {
                checked += 1
                let parts = target.split(separator: "#", maxSplits: 1, omittingEmptySubsequences: false).map(String.init)
                let destination = parts[0].isEmpty ? file : URL(fileURLWithPath: parts[0], relativeTo: file.deletingLastPathComponent()).standardizedFileURL
                guard fm.fileExists(atPath: destination.path) else {
                    XCTFail("\(name): the link \(target) leads nowhere (no \(destination.path))")
                    continue
                }
                if parts.count > 1, destination.pathExtension == "md" {
                    let headings = Self.anchors(try String(contentsOf: destination, encoding: .utf8))
                    XCTAssertTrue(headings.contains(parts[1]), "\(name): the link \(target): no such heading; there are \(headings.sorted())")
                }
            }
        }
        XCTAssertGreaterThan(checked, 40, "links checked")
        // Every page of the manual can be found from the README.
        let fromReadme = Set(Self.links(try String(contentsOf: readme, encoding: .utf8)).map { String($0.prefix { $0 != "#" }) })
        for page in pages {
            XCTAssertTrue(fromReadme.contains("docs/" + page.lastPathComponent), "README.md does not link docs/\(page.lastPathComponent)")
        }
    }
}
