import ClipFlowTestSupport
import ClipFlowUpload
import Foundation
import XCTest

/// `Upload-Metadata`, the one codec of the client and `clipflow serve`: what real clients send is
/// read, only damage is refused, and what we send reads back.
final class TUSMetadataTests: XCTestCase {
    private func problem(_ header: String, file: StaticString = #filePath, line: UInt = #line) -> String? {
        do {
            let decoded = try TUSMetadata.decode(header)
            XCTFail("\(header): read as \(decoded), expected a refusal", file: file, line: line)
            return nil
        } catch { return error.description }
    }

    /// tuspy (a real TUS client) encodes; we decode: base64 of UTF-8, an empty value as `key `
    /// (with its space), and a client set to Latin-1, whose value is not UTF-8.
    func testWhatTuspySendsIsRead() throws {
        let script = """
            import io, json, sys
            from tusclient import client
            c = client.TusClient("http://127.0.0.1:9/files")
            def header(metadata, **kw):
                return ",".join(c.uploader(file_stream=io.BytesIO(b"x"), metadata=metadata, **kw).encode_metadata())
            print(json.dumps([header(json.loads(sys.argv[1])), header({"title": "Café"}, metadata_encoding="latin-1")]))
            """
        let metadata = ["filename": "Café ☕ clip.mp4", "filetype": "video/mp4", "is_confidential": "", "title": "a, b c\nd", "video_id": "7"]
        let arguments = String(decoding: try JSONSerialization.data(withJSONObject: metadata), as: UTF8.self)
        let headers = try XCTUnwrap(try JSONSerialization.jsonObject(with: Run.run(["python3", "-c", script, arguments]).stdout) as? [String])
        XCTAssertTrue(headers[0].contains("is_confidential ,") || headers[0].hasSuffix("is_confidential "), headers[0])
        XCTAssertEqual(try TUSMetadata.decode(headers[0]), metadata)
        XCTAssertEqual(headers[1], "title Q2Fm6Q==")
        XCTAssertEqual(try TUSMetadata.decode(headers[1]), ["title": "Caf\u{FFFD}"], "not UTF-8: read, the bad byte as U+FFFD")
    }

    /// As tus-js-client and Uppy send it (`key base64`, joined by commas; Uppy's `null` values are
    /// the text "null"), and the spec's own example.
    func testWhatBrowserClientsSendIsRead() throws {
        XCTAssertEqual(
            try TUSMetadata.decode("filename bXkgdmlkZW8ubXA0,filetype dmlkZW8vbXA0,relativePath bnVsbA==,name bXkgdmlkZW8ubXA0,type dmlkZW8vbXA0"),
            ["filename": "my video.mp4", "filetype": "video/mp4", "relativePath": "null", "name": "my video.mp4", "type": "video/mp4"])
        XCTAssertEqual(
            try TUSMetadata.decode("filename d29ybGRfZG9taW5hdGlvbl9wbGFuLnBkZg==,is_confidential"),
            ["filename": "world_domination_plan.pdf", "is_confidential": ""])
    }

    func testKeysWithoutValuesEmptyValuesAndSpacingAreRead() throws {
        XCTAssertEqual(try TUSMetadata.decode(""), [:])
        XCTAssertEqual(try TUSMetadata.decode("a"), ["a": ""])
        XCTAssertEqual(try TUSMetadata.decode("a ,b"), ["a": "", "b": ""])
        XCTAssertEqual(try TUSMetadata.decode(" a YQ== ,  b   Yg==,c"), ["a": "a", "b": "b", "c": ""])
        XCTAssertEqual(try TUSMetadata.decode("a YQ==,,b Yg==,"), ["a": "a", "b": "b"], "empty pairs are passed over")
        XCTAssertEqual(try TUSMetadata.decode(",, ,"), [:])
    }

    func testBase64WithoutPaddingIsRead() throws {
        XCTAssertEqual(try TUSMetadata.decode("a YQ,b YWI,c YWJj"), ["a": "a", "b": "ab", "c": "abc"])
    }

    func testInvalidUTF8IsReadWithReplacementCharacters() throws {
        let bytes = Data([0x66, 0xff, 0x6f, 0xc3]).base64EncodedString()
        XCTAssertEqual(try TUSMetadata.decode("title \(bytes),video_id MQ=="), ["title": "f\u{FFFD}o\u{FFFD}", "video_id": "1"])
    }

    func testDamageIsRefusedSayingWhat() {
        XCTAssertEqual(problem("filename not*base64"), "the value of \"filename\" is not base64")
        XCTAssertEqual(problem("a YQ=,b Y"), "the value of \"b\" is not base64")
        XCTAssertEqual(problem("a YQ==,a Yg=="), "key \"a\" appears twice")
        XCTAssertEqual(problem("a,a"), "key \"a\" appears twice")
        XCTAssertEqual(problem("a b c"), "\"a b c\" is not KEY or KEY BASE64")
        XCTAssertEqual(problem("ключ YQ=="), "\"ключ YQ==\" is not KEY or KEY BASE64")
        XCTAssertNotNil(problem("a\u{1}b YQ=="), "a control character in a key")
        XCTAssertNotNil(problem("a\tYQ=="), "a tab is not the separator")
    }

    func testEncodeIsSortedAndReadsBack() throws {
        let metadata = ["title": "Hällo, world ☕", "filename": "clip one.mp4", "is_confidential": "", "token": "t-1"]
        let header = TUSMetadata.encode(metadata)
        XCTAssertEqual(header, "filename Y2xpcCBvbmUubXA0,is_confidential,title SMOkbGxvLCB3b3JsZCDimJU=,token dC0x")
        XCTAssertEqual(try TUSMetadata.decode(header), metadata)
        XCTAssertEqual(TUSMetadata.encode([(key: "z", value: "1"), (key: "a", value: "2")]), "z MQ==,a Mg==", "pairs keep their order")
    }

    /// Keys a key may not be are made into keys; a key that then repeats one is left out, so every
    /// header we make reads back.
    func testEncodeMakesOnlyHeadersThatDecode() throws {
        XCTAssertEqual(TUSMetadata.encode([(key: "a b", value: "1"), (key: "a,b", value: "2"), (key: "", value: "3")]), "a_b MQ==,_ Mw==")
        XCTAssertEqual(try TUSMetadata.decode(TUSMetadata.encode(["ключ": "v"])), ["____": "v"])
        // Seeded (a linear congruential generator), so a failure repeats.
        var state: UInt64 = 0x5eed
        func next(_ n: Int) -> Int {
            state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
            return Int(state >> 33) % n
        }
        let alphabet = Array("ab ,=\t\u{1}é☕\n")
        func text(_ most: Int) -> String { String((0..<next(most + 1)).map { _ in alphabet[next(alphabet.count)] }) }
        for _ in 0..<500 {
            let pairs = (0..<next(6)).map { _ in (key: text(4), value: text(6)) }
            let header = TUSMetadata.encode(pairs)
            XCTAssertNoThrow(try TUSMetadata.decode(header), "\(pairs) -> \(header)")
        }
    }

    func testRemovingAKeyKeepsEveryOtherPairAsSent() {
        XCTAssertEqual(TUSMetadata.removing("token", from: "video_id MQ==,token dA==, title  VA"), "video_id MQ==, title  VA")
        XCTAssertEqual(TUSMetadata.removing("token", from: "token"), "")
        XCTAssertEqual(TUSMetadata.removing("token", from: "tokens dA=="), "tokens dA==")
    }
}
