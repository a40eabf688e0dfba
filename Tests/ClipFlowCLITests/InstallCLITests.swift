import ClipFlowTestSupport
import Foundation
import XCTest

/// `make install PREFIX=...` puts the binary, a man page per command and bash/zsh/fish
/// completions where a Linux system looks for them. The test installs this build's products
/// (debug: `make test` builds generate-manual beside clipflow) with the script `make install`
/// runs after its release build, into a temporary prefix.
final class InstallCLITests: XCTestCase {
    let fx = Fixtures.shared
    var products: String { URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent().path }
    let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    func testMakeInstallPutsTheBinaryManPagesAndCompletionsInPlace() throws {
        let manual = products + "/generate-manual"
        guard FileManager.default.isExecutableFile(atPath: manual) else {
            return XCTFail("\(manual) is missing: `make test` builds it (swift build --product generate-manual)")
        }
        let prefix = fx.scratch("install").appendingPathComponent("usr").path

        // `make install` is the release build, then this script (a dry run shows the commands).
        let plan = try Run.run(["make", "-n", "-C", root.path, "install", "PREFIX=\(prefix)"])
        XCTAssertTrue(plan.out.contains("build -c release --product generate-manual"), plan.out)
        XCTAssertTrue(plan.out.contains("bash scripts/install.sh \"\(prefix)\" .build/release"), plan.out)

        let r = try Run.run(["bash", root.appendingPathComponent("scripts/install.sh").path, prefix, products], check: false)
        XCTAssertEqual(r.status, 0, r.stderr)
        let installed = prefix + "/bin/clipflow"
        XCTAssertEqual(try Run.run([installed, "--version"]).out, "0.1.0\n")

        // A man page per command, each read by man(1) from the file.
        let dump = try JSONSerialization.jsonObject(with: try Run.run([installed, "--experimental-dump-help"]).stdout) as? [String: Any]
        var commands: [String] = []
        func walk(_ c: [String: Any], _ path: [String]) {
            commands.append((["clipflow"] + path).joined(separator: "."))
            for s in c["subcommands"] as? [[String: Any]] ?? [] { if let n = s["commandName"] as? String { walk(s, path + [n]) } }
        }
        walk(try XCTUnwrap(dump?["command"] as? [String: Any]), [])
        let manDir = prefix + "/share/man/man1"
        let pages = try FileManager.default.contentsOfDirectory(atPath: manDir).sorted()
        XCTAssertEqual(pages, commands.map { $0 + ".1" }.sorted())
        for page in ["clipflow.1", "clipflow.merge.1", "clipflow.upload.send.1", "clipflow.hls.write.1"] {
            let shown = try Run.run(["man", "-P", "cat", "-l", manDir + "/" + page], env: ["MANWIDTH": "100"])
            XCTAssertEqual(shown.status, 0, shown.stderr)
            XCTAssertTrue(shown.out.contains("NAME"), page)
            XCTAssertTrue(shown.out.contains("SYNOPSIS"), page)
        }
        let merge = try Run.run(["man", "-P", "cat", "-l", manDir + "/clipflow.merge.1"], env: ["MANWIDTH": "100"]).out
        XCTAssertTrue(merge.contains("--set-rotation"), merge)
        XCTAssertTrue(merge.contains("--overwrite"), merge)

        // The bash completion, sourced as bash-completion does (extglob on), completes commands
        // and options from what the installed binary knows.
        let bash = prefix + "/share/bash-completion/completions/clipflow"
        func complete(_ words: [String]) throws -> [String] {
            let line = words.joined(separator: " ")
            let script = """
                shopt -s extglob
                source '\(bash)'
                COMP_WORDS=(\(words.map { "'\($0)'" }.joined(separator: " "))); COMP_CWORD=\(words.count - 1)
                COMP_LINE='\(line)'; COMP_POINT=${#COMP_LINE}; COMPREPLY=()
                _clipflow clipflow '\(words.last ?? "")' '\(words.dropLast().last ?? "")'
                printf '%s\\n' "${COMPREPLY[@]}"
                """
            let r = try Run.run(["bash", "-c", script], env: ["PATH": prefix + "/bin:/usr/bin:/bin"])
            return r.out.split(separator: "\n").map(String.init)
        }
        XCTAssertEqual(try complete(["clipflow", "mer"]), ["merge"])
        XCTAssertEqual(try complete(["clipflow", "merge", "--set-r"]), ["--set-rotation"])
        XCTAssertTrue(try complete(["clipflow", "upload", "l"]).contains("list"))
        XCTAssertTrue(try String(contentsOfFile: prefix + "/share/zsh/site-functions/_clipflow", encoding: .utf8).hasPrefix("#compdef clipflow"))
        XCTAssertTrue(try String(contentsOfFile: prefix + "/share/fish/vendor_completions.d/clipflow.fish", encoding: .utf8).contains("merge"))
    }
}
