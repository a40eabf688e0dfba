import ClipFlowCore
import Foundation
import XCTest

@testable import clipflow

/// The description the man pages are made from (`--experimental-dump-help`): a command with a
/// default subcommand takes that subcommand's arguments, and everything else is kept as it was.
final class DefaultSubcommandHelpTests: XCTestCase {
    func testADefaultSubcommandsArgumentsBecomeItsParentsAndTheRestIsKept() throws {
        let dump = #"""
            {"serializationVersion": 0, "command": {"commandName": "top", "abstract": "a/b é", "arguments": [],
              "subcommands": [
                {"commandName": "hls", "defaultSubcommand": "write", "arguments": [{"valueName": "old"}],
                 "subcommands": [{"commandName": "probe", "arguments": [{"valueName": "p"}]},
                                 {"commandName": "write", "arguments": [{"valueName": "in", "isOptional": false}], "extra": {"x": null}}]},
                {"commandName": "odd", "defaultSubcommand": "w", "arguments": [1], "subcommands": [{"commandName": "w", "arguments": [2]}, 5]},
                {"commandName": "none", "defaultSubcommand": "missing", "arguments": [3], "subcommands": [{"commandName": "w"}]}]}}
            """#
        let out = try XCTUnwrap(DefaultSubcommandHelp.expandedDump(dump))
        XCTAssertTrue(out.hasSuffix("}\n"), out)
        XCTAssertTrue(out.contains(#""abstract" : "a/b é""#), "pretty-printed, slashes and letters as they are:\n\(out)")
        let root = try JSONDecoder().decode(CodableJSON.self, from: Data(out.utf8))
        let expected = try JSONDecoder().decode(
            CodableJSON.self,
            from: Data(
                #"""
                {"serializationVersion": 0, "command": {"commandName": "top", "abstract": "a/b é", "arguments": [],
                  "subcommands": [
                    {"commandName": "hls", "defaultSubcommand": "write", "arguments": [{"valueName": "in", "isOptional": false}],
                     "subcommands": [{"commandName": "probe", "arguments": [{"valueName": "p"}]},
                                     {"commandName": "write", "arguments": [{"valueName": "in", "isOptional": false}], "extra": {"x": null}}]},
                    {"commandName": "odd", "defaultSubcommand": "w", "arguments": [1], "subcommands": [{"commandName": "w", "arguments": [2]}, 5]},
                    {"commandName": "none", "defaultSubcommand": "missing", "arguments": [3], "subcommands": [{"commandName": "w"}]}]}}
                """#.utf8))
        XCTAssertEqual(root, expected, out)
        for notADump in ["", "[]", #"{"command": []}"#, #"{"commands": {}}"#] {
            XCTAssertNil(DefaultSubcommandHelp.expandedDump(notADump), notADump)
        }
    }
}
