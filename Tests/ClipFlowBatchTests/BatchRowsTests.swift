import ClipFlowBatch
import ClipFlowCore
import XCTest

/// Reading rows (CSV as spreadsheets and Python's csv module write it, JSON lines) and choosing
/// them the way batch engines index tasks.
final class BatchRowsTests: XCTestCase {
    func testCSVQuotedFieldsCommasQuotesLineBreaksAndCRLF() throws {
        let text = "CLIPS,OUT,TITLE\r\nsets/a,out/a,\"Hello, \"\"world\"\"\"\r\nsets/b,out/b,\"two\nlines\"\r\n\r\nsets/c,out/c,\r\n"
        let rows = try BatchRows.csv(text, file: "rows.csv")
        XCTAssertEqual(rows.count, 3)
        XCTAssertEqual(rows[0].values, ["CLIPS": "sets/a", "OUT": "out/a", "TITLE": "Hello, \"world\""])
        XCTAssertEqual(rows[1].values["TITLE"], "two\nlines")
        XCTAssertEqual(rows[2].values["TITLE"], "")
        XCTAssertEqual(rows.map(\.origin), ["rows.csv:2", "rows.csv:3", "rows.csv:6"])
        XCTAssertEqual(rows.map(\.index), [0, 1, 2])
        XCTAssertTrue(rows.allSatisfy { $0.problem == nil })
    }

    func testCSVBadLineIsABadRowAndTheOthersStay() throws {
        let rows = try BatchRows.csv("A,B\n1,2\n1,2,3\n\"open,4\n", file: "r.csv")
        XCTAssertEqual(rows.count, 3)
        XCTAssertNil(rows[0].problem)
        XCTAssertEqual(rows[1].problem, "3 field(s), the header has 2 (A,B)")
        XCTAssertEqual(rows[2].problem, "a quoted field is not closed before the end of the file")
    }

    func testCSVHeaderMustNameVariables() {
        XCTAssertThrowsError(try BatchRows.csv("CLIPS,out dir\nx,y\n", file: "r.csv")) { e in
            XCTAssertEqual(
                (e as? ClipFlowError)?.message,
                "rows 'r.csv':1: column 2 header \"out dir\" is not a variable name (letters, digits, '_'); the first line names the variables")
        }
        XCTAssertThrowsError(try BatchRows.csv("A,A\n1,2\n", file: "r.csv"))
        XCTAssertThrowsError(try BatchRows.csv("\n\n", file: "r.csv"))
    }

    func testJSONLinesTakeStringsNumbersAndBooleansAndABadLineFailsAlone() throws {
        let text = """
            {"CLIPS": "sets/a", "ROTATE": 90, "CONFORM": true}

            [1, 2]
            {"CLIPS": {"nested": 1}}
            {"CLIPS": "sets/b"
            {"bad name": "x"}
            {"CLIPS": "sets/c"}
            """
        let rows = try BatchRows.jsonLines(text, file: "rows.jsonl")
        XCTAssertEqual(rows.count, 6)
        XCTAssertEqual(rows[0].values, ["CLIPS": "sets/a", "ROTATE": "90", "CONFORM": "true"])
        XCTAssertEqual(rows[1].problem, "expected a JSON object of variables, got an array")
        XCTAssertEqual(rows[2].problem, "\"CLIPS\": expected a string, number or boolean, got an object")
        XCTAssertNotNil(rows[3].problem)
        XCTAssertEqual(rows[4].problem, "\"bad name\" is not a variable name (letters, digits, '_')")
        XCTAssertEqual(rows[5].values, ["CLIPS": "sets/c"])
        XCTAssertEqual(rows[5].origin, "rows.jsonl:7")
    }

    func testEachDirectoryIsOneRowPerSubFolderInNameOrder() throws {
        let d = FileManager.default.temporaryDirectory.appendingPathComponent("each-dir-\(UInt32.random(in: 0...UInt32.max))")
        for name in ["b", "a", ".hidden", "c"] {
            try FileManager.default.createDirectory(at: d.appendingPathComponent(name), withIntermediateDirectories: true)
        }
        XCTAssertTrue(FileManager.default.createFile(atPath: d.appendingPathComponent("file.txt").path, contents: Data()))
        defer { try? FileManager.default.removeItem(at: d) }
        let rows = try BatchRows.eachDirectory(d.path)
        XCTAssertEqual(rows.map { $0.values["NAME"] }, ["a", "b", "c"])
        XCTAssertEqual(rows[1].values["DIR"], d.path + "/b")
        XCTAssertThrowsError(try BatchRows.eachDirectory(d.path + "/missing"))
    }

    func testSelectionFromEnginesFlagsAndShards() throws {
        XCTAssertEqual(try RowSelection.resolve(index: nil, shard: nil, indexCount: nil, environment: [:]), .all)
        XCTAssertEqual(try RowSelection.resolve(index: nil, shard: nil, indexCount: nil, environment: [:]).indices(of: 3), [0, 1, 2])
        // Kubernetes first, then Slurm, then AWS Batch; --index wins over all.
        let env = ["SLURM_ARRAY_TASK_ID": "4", "AWS_BATCH_JOB_ARRAY_INDEX": "5"]
        XCTAssertEqual(try RowSelection.resolve(index: nil, shard: nil, indexCount: nil, environment: env).indices(of: 10), [4])
        XCTAssertEqual(
            try RowSelection.resolve(index: nil, shard: nil, indexCount: nil, environment: env.merging(["JOB_COMPLETION_INDEX": "2"]) { a, _ in a }).indices(
                of: 10), [2])
        XCTAssertEqual(try RowSelection.resolve(index: 7, shard: nil, indexCount: nil, environment: env).indices(of: 10), [7])
        XCTAssertEqual(try RowSelection.resolve(index: nil, shard: nil, indexCount: 4, environment: ["SLURM_ARRAY_TASK_ID": "1"]).indices(of: 10), [1, 5, 9])
        XCTAssertEqual(try RowSelection.resolve(index: nil, shard: "2/3", indexCount: nil, environment: [:]).indices(of: 10), [2, 5, 8])
        XCTAssertThrowsError(try RowSelection.resolve(index: nil, shard: nil, indexCount: nil, environment: env).indices(of: 4)) { e in
            XCTAssertEqual((e as? ClipFlowError)?.message, "row 4 (from SLURM_ARRAY_TASK_ID) does not exist: the batch has 4 row(s), 0 to 3")
        }
        XCTAssertThrowsError(try RowSelection.resolve(index: nil, shard: "3/3", indexCount: nil, environment: [:]))
        XCTAssertThrowsError(try RowSelection.resolve(index: nil, shard: nil, indexCount: 2, environment: [:]))
        XCTAssertThrowsError(try RowSelection.resolve(index: nil, shard: nil, indexCount: nil, environment: ["JOB_COMPLETION_INDEX": "x"]))
    }

    /// A stride as large as an index can be takes the first row alone, without overflowing.
    func testHugeStrideSelectsItsFirstRowOnly() throws {
        let shard = try RowSelection.resolve(index: nil, shard: "1/9223372036854775807", indexCount: nil, environment: [:])
        XCTAssertEqual(try shard.indices(of: 3), [1])
        XCTAssertEqual(try shard.indices(of: 1), [])
        XCTAssertEqual(shard.description, "row 1 (--shard 1/9223372036854775807)")
        let counted = try RowSelection.resolve(index: 9_223_372_036_854_775_806, shard: nil, indexCount: Int.max, environment: [:])
        XCTAssertEqual(try counted.indices(of: Int.max), [Int.max - 1])
    }

    func testFolderPublishOrderPutsPlaylistsLastAndTheMasterLast() {
        XCTAssertEqual(
            BatchOutputs.publishOrder(["master.m3u8", "720p/index.m3u8", "720p/seg-1.m4s", "720p/init.mp4", "cover.jpg"]),
            ["720p/init.mp4", "720p/seg-1.m4s", "cover.jpg", "720p/index.m3u8", "master.m3u8"])
    }
}
