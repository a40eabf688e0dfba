import ClipFlowCore
import Foundation

/// How `clipflow serve` logs in to PostgreSQL, found as libpq finds it: the URL given
/// (`--database`, else CLIPFLOW_DATABASE_URL); its password when it has one, else PGPASSWORD,
/// else the password of the first line of the password file (PGPASSFILE, else `~/.pgpass`) that
/// matches the host, port, database and user. A password file that is not a plain file, or that
/// its group or others may use (permissions above 0600), is not read: a warning says why (as
/// libpq does). The password is never in `display`, a message or a warning.
struct PostgresLogin: Sendable {
    var host: String
    var port: Int
    var user: String
    /// The database as the URL names it ("": the server's default, the user's name).
    var database: String
    var password: String?
    /// The URL's `sslmode` (nil: not given).
    var sslmode: String?
    /// Where the URL came from, as messages name it: `--database` or `CLIPFLOW_DATABASE_URL`.
    var source: String
    /// Whether the password was in the process's arguments, which every local user may read.
    var passwordInArguments: Bool
    /// What the operator should be told before the server starts (no password in any).
    var warnings: [String] = []

    /// The source named by the command line's flag: a password there is in the arguments.
    static let argumentSource = "--database"
    /// The environment variable that may hold the whole URL, password included.
    static let urlVariable = "CLIPFLOW_DATABASE_URL"

    /// `postgres://USER@HOST:PORT/DATABASE`: the URL without its password, for messages.
    var display: String { "postgres://\(user)@\(host):\(port)/\(database)" }

    /// The database name a password file's line is matched against (libpq's default: the user's).
    var databaseForMatching: String { database.isEmpty ? user : database }

    /// The login `url` (from `source`) describes, its password found in `environment` or a password
    /// file when the URL has none. Throws a bad-input error naming `source` (never the password)
    /// when the URL is not `postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE`.
    init(url: String, source: String, environment: [String: String]) throws {
        guard let c = URLComponents(string: url), ["postgres", "postgresql"].contains(c.scheme ?? ""), let host = c.host, !host.isEmpty,
            let user = c.user, !user.isEmpty
        else {
            throw ClipFlowError.badInput("\(source): expected sqlite or postgres://USER[:PASSWORD]@HOST[:PORT]/DATABASE")
        }
        self.host = host
        self.port = c.port ?? 5432
        self.user = user
        self.database = String(c.path.dropFirst())
        self.sslmode = c.queryItems?.first { $0.name == "sslmode" }?.value
        self.source = source
        let given = c.password.flatMap { $0.isEmpty ? nil : $0 }
        self.passwordInArguments = given != nil && source == Self.argumentSource
        if passwordInArguments {
            warnings.append(
                "\(source): a password in the command line is visible to every local user (ps); give it in PGPASSWORD, a password file "
                    + "(PGPASSFILE) or \(Self.urlVariable) instead")
        }
        if let given {
            password = given
        } else if let variable = environment["PGPASSWORD"], !variable.isEmpty {
            password = variable
        } else if let file = Self.passwordFile(environment) {
            password = Self.password(inFile: file, host: host, port: port, database: databaseForMatching, user: user, warnings: &warnings)
        }
    }

    /// The password file libpq reads: PGPASSFILE, else `.pgpass` in the home folder (HOME, else
    /// the user's entry in the password database); nil when there is no home folder.
    static func passwordFile(_ environment: [String: String]) -> String? {
        if let path = environment["PGPASSFILE"], !path.isEmpty { return path }
        if let home = environment["HOME"], !home.isEmpty { return home + "/.pgpass" }
        guard let entry = getpwuid(geteuid()), let dir = entry.pointee.pw_dir else { return nil }
        return String(cString: dir) + "/.pgpass"
    }

    /// The password of the first line of the password file at `path` that matches (libpq's format:
    /// `HOST:PORT:DATABASE:USER:PASSWORD`, `*` matching anything in the first four fields, `\`
    /// escaping `:` and `\`, lines starting with `#` ignored). A file that is absent gives none;
    /// one that is not a plain file, or that its group or others may use, is not read (a warning).
    static func password(inFile path: String, host: String, port: Int, database: String, user: String, warnings: inout [String]) -> String? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        guard info.st_mode & S_IFMT == S_IFREG else {
            warnings.append("password file \(path) is not a plain file; it is not read")
            return nil
        }
        guard info.st_mode & (S_IRWXG | S_IRWXO) == 0 else {
            warnings.append("password file \(path) has group or world access; permissions should be u=rw (0600) or less; it is not read")
            return nil
        }
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            warnings.append("password file \(path) cannot be read")
            return nil
        }
        let wanted = [host, String(port), database, user]
        for line in text.split(omittingEmptySubsequences: true, whereSeparator: { $0 == "\n" || $0 == "\r" }) where !line.hasPrefix("#") {
            let fields = Self.fields(line)
            guard fields.count == 5 else { continue }
            let matches = zip(fields.prefix(4), wanted).allSatisfy { field, value in field.raw == "*" || field.value == value }
            if matches { return fields[4].value.isEmpty ? nil : fields[4].value }
        }
        return nil
    }

    /// A password file's line as its five fields, each as written (`raw`) and unescaped
    /// (`value`); the fifth takes the rest of the line, colons and all.
    static func fields(_ line: Substring) -> [(raw: String, value: String)] {
        var out: [(raw: String, value: String)] = []
        var raw = "", value = "", escaped = false
        for ch in line {
            if escaped {
                raw.append(ch)
                value.append(ch)
                escaped = false
            } else if ch == "\\" {
                raw.append(ch)
                escaped = true
            } else if ch == ":", out.count < 4 {
                out.append((raw, value))
                raw = ""
                value = ""
            } else {
                raw.append(ch)
                value.append(ch)
            }
        }
        out.append((raw, value))
        return out
    }
}
