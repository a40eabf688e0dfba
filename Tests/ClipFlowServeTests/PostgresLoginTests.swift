import Foundation
import XCTest

@testable import ClipFlowServe

/// Where `clipflow serve` finds its PostgreSQL password, as libpq does: the URL, PGPASSWORD, then
/// the password file (its format, its matching, its permissions); and never a password in a
/// message or a warning.
final class PostgresLoginTests: XCTestCase {
    var folder: URL!

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("pg-login-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: folder, withIntermediateDirectories: true)
    }

    override func tearDown() { try? FileManager.default.removeItem(at: folder) }

    func passfile(_ text: String, mode: mode_t = 0o600) throws -> String {
        let path = folder.appendingPathComponent("pgpass").path
        try text.write(toFile: path, atomically: true, encoding: .utf8)
        XCTAssertEqual(chmod(path, mode), 0)
        return path
    }

    func testTheURLsPasswordComesFirstThenPGPASSWORDThenThePasswordFile() throws {
        let file = try passfile("db.internal:5432:site:web:from-file\n")
        let env = ["PGPASSWORD": "from-env", "PGPASSFILE": file]
        let inURL = try PostgresLogin(url: "postgres://web:from-url@db.internal/site", source: "CLIPFLOW_DATABASE_URL", environment: env)
        XCTAssertEqual(inURL.password, "from-url")
        XCTAssertFalse(inURL.passwordInArguments, "the environment is not the command line")
        XCTAssertEqual(inURL.warnings, [])
        let fromEnv = try PostgresLogin(url: "postgres://web@db.internal/site", source: "--database", environment: env)
        XCTAssertEqual(fromEnv.password, "from-env")
        let fromFile = try PostgresLogin(url: "postgres://web@db.internal/site", source: "--database", environment: ["PGPASSFILE": file, "PGPASSWORD": ""])
        XCTAssertEqual(fromFile.password, "from-file")
        XCTAssertEqual(fromFile.display, "postgres://web@db.internal:5432/site")
    }

    func testAPasswordInTheArgumentsIsUsedWithAWarningThatDoesNotShowIt() throws {
        let login = try PostgresLogin(url: "postgres://web:s3cret-word@db.internal:6543/site", source: "--database", environment: [:])
        XCTAssertEqual(login.password, "s3cret-word")
        XCTAssertTrue(login.passwordInArguments)
        XCTAssertEqual(login.warnings.count, 1)
        XCTAssertTrue(login.warnings[0].contains("PGPASSWORD"), login.warnings[0])
        XCTAssertFalse(login.warnings[0].contains("s3cret-word"))
        XCTAssertFalse(login.display.contains("s3cret-word"))
    }

    func testThePasswordFileMatchesAsLibpqDoes() throws {
        let file = try passfile(
            """
            # a comment: db.internal:5432:site:web:commented
            other:5432:site:web:wrong-host
            db.internal:6543:site:web:wrong-port
            db.internal:*:other:web:wrong-database
            *:*:site:web:first\\:match\\\\ok
            *:*:*:*:any
            """)
        let login = try PostgresLogin(url: "postgres://web@db.internal/site", source: "--database", environment: ["PGPASSFILE": file])
        XCTAssertEqual(login.password, "first:match\\ok", "the first line that matches, unescaped")
        let byUser = try PostgresLogin(url: "postgres://web@db.internal/", source: "--database", environment: ["PGPASSFILE": file])
        XCTAssertEqual(byUser.password, "any", "no database: the user's name is matched")
        let escaped = try passfile("h\\:x:5432:d:u:p\n")
        XCTAssertEqual(PostgresLogin.fields("h\\:x:5432:d:u:p:q").map(\.value), ["h:x", "5432", "d", "u", "p:q"])
        var warnings: [String] = []
        XCTAssertEqual(PostgresLogin.password(inFile: escaped, host: "h:x", port: 5432, database: "d", user: "u", warnings: &warnings), "p")
        XCTAssertEqual(PostgresLogin.password(inFile: escaped, host: "h", port: 5432, database: "d", user: "u", warnings: &warnings), nil)
        XCTAssertEqual(warnings, [])
    }

    func testAPasswordFileOthersMayUseIsNotReadAndSaysWhy() throws {
        for mode: mode_t in [0o640, 0o604, 0o660] {
            let file = try passfile("*:*:*:*:secret-in-file\n", mode: mode)
            let login = try PostgresLogin(url: "postgres://web@db.internal/site", source: "--database", environment: ["PGPASSFILE": file])
            XCTAssertNil(login.password, String(mode, radix: 8))
            XCTAssertEqual(login.warnings, ["password file \(file) has group or world access; permissions should be u=rw (0600) or less; it is not read"])
        }
        let absent = try PostgresLogin(
            url: "postgres://web@db.internal/site", source: "--database", environment: ["PGPASSFILE": folder.appendingPathComponent("none").path])
        XCTAssertNil(absent.password)
        XCTAssertEqual(absent.warnings, [], "no file: nothing to say")
        let notFile = try PostgresLogin(url: "postgres://web@db.internal/site", source: "--database", environment: ["PGPASSFILE": folder.path])
        XCTAssertEqual(notFile.warnings, ["password file \(folder.path) is not a plain file; it is not read"])
    }

    func testABadURLNamesWhereItCameFromAndNotThePassword() {
        for source in ["--database", "CLIPFLOW_DATABASE_URL"] {
            XCTAssertThrowsError(try PostgresLogin(url: "postgres://:hunter2@/x", source: source, environment: [:])) { e in
                XCTAssertEqual(
                    "\(e)", "\(source): expected sqlite or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
            }
        }
    }
}
