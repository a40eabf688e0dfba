import ClipFlowCore
import Foundation
import XCTest

/// `CodableJSON`: any JSON read with `JSONDecoder` and written back with `JSONEncoder` whole.
final class CodableJSONTests: XCTestCase {
    func decode(_ text: String) throws -> CodableJSON { try JSONDecoder().decode(CodableJSON.self, from: Data(text.utf8)) }

    func testEveryKindOfValueIsReadAndWrittenBackAsItWas() throws {
        let text = #"{"a":[null,true,false,0,-7,1.5,"s/é\n😀"],"b":{"c":{},"d":[]},"n":9007199254740993}"#
        let value = try decode(text)
        XCTAssertEqual(
            value,
            .object([
                "a": .array([.null, .bool(true), .bool(false), .integer(0), .integer(-7), .double(1.5), .string("s/é\n😀")]),
                "b": .object(["c": .object([:]), "d": .array([])]), "n": .integer(9_007_199_254_740_993)
            ]))
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        XCTAssertEqual(String(decoding: try encoder.encode(value), as: UTF8.self), text)
        XCTAssertEqual(try decode("true"), .bool(true), "a boolean is not read as a number")
        XCTAssertEqual(try decode("1"), .integer(1), "nor a number as a boolean")
    }

    func testAccessors() throws {
        let value = try decode(#"{"s": "x", "a": [1], "o": {"k": null}}"#)
        XCTAssertEqual(value["s"]?.string, "x")
        XCTAssertEqual(value["a"]?.array, [.integer(1)])
        XCTAssertEqual(value["o"]?.object, ["k": .null])
        XCTAssertEqual(value["o"]?["k"], .null)
        XCTAssertNil(value["S"], "keys are spelt exactly")
        XCTAssertNil(value["a"]?.string)
        XCTAssertNil(value["s"]?["k"])
    }

    func testABrokenStringAnywhereFailsTheWholeDocument() {
        XCTAssertThrowsError(try decode(#"{"ok": "x", "deep": [{"bad": "\ud800"}]}"#))
        XCTAssertThrowsError(try decode(#"{"ok": "x""#))
    }
}
