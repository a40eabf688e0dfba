import Foundation
import XCTest
import ClipFlowUpload

// Small stand-ins for Tests/ClipFlowTestSupport/Servers.swift (being written on branch `servers`):
// the real resumable-upload TUS server, faultproxy.py and gcore_api.py, started on 127.0.0.1 and
// killed with the test. Replace with the shared helpers once they land.

enum Local {
    static let serversDir = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Servers").path

    static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    static func waitForPort(_ port: Int, timeout: Double = 10) throws {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var addr = sockaddr_in()
            addr.sin_family = sa_family_t(AF_INET)
            addr.sin_addr.s_addr = inet_addr("127.0.0.1")
            addr.sin_port = in_port_t(UInt16(port).bigEndian)
            let rc = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            close(fd)
            if rc == 0 { return }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw NSError(domain: "Local", code: 1, userInfo: [NSLocalizedDescriptionKey: "nothing listens on \(port)"])
    }

    static func waitForFile(_ path: String, timeout: Double = 10) throws -> String {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            if let s = try? String(contentsOfFile: path, encoding: .utf8), !s.isEmpty { return s.trimmingCharacters(in: .whitespacesAndNewlines) }
            Thread.sleep(forTimeInterval: 0.05)
        }
        throw NSError(domain: "Local", code: 2, userInfo: [NSLocalizedDescriptionKey: "\(path) never appeared"])
    }

    static func launch(_ args: [String], log: String) throws -> Process {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = args
        FileManager.default.createFile(atPath: log, contents: nil)
        let h = try FileHandle(forWritingTo: URL(fileURLWithPath: log))
        p.standardOutput = h
        p.standardError = h
        p.standardInput = FileHandle.nullDevice
        try p.run()
        return p
    }

    static func stop(_ p: Process?) {
        guard let p, p.isRunning else { return }
        kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
    }

    /// A plain HTTP call (control endpoints, oracles).
    static func http(_ method: String, _ url: String, json: Any? = nil) throws -> (Int, Any?) {
        let t = try CurlTransport()
        var req = HTTPRequest(method: method, url: url)
        if let json {
            req.body = .bytes(try JSONSerialization.data(withJSONObject: json))
            req.setHeader("Content-Type", "application/json")
        }
        let r = try t.perform(req)
        return (r.status, try? JSONSerialization.jsonObject(with: r.body))
    }
}

/// The resumable-upload TUS server, stored files in `directory/uploads/<id>`.
final class LocalTUS: @unchecked Sendable {
    let directory: String
    var port: Int
    var process: Process?
    let extraArgs: [String]

    init(directory: String, extraArgs: [String] = []) throws {
        self.directory = directory
        self.extraArgs = extraArgs
        port = Local.freePort()
        try start()
    }

    var baseURL: String { "http://127.0.0.1:\(port)/files" }
    var hostPort: String { "127.0.0.1:\(port)" }
    var uploadDir: String { directory + "/uploads" }

    func start() throws {
        try FileManager.default.createDirectory(atPath: uploadDir, withIntermediateDirectories: true)
        process = try Local.launch(["python3", "-m", "resumable_upload", "serve", "--host", "127.0.0.1", "--port", String(port),
                                    "--upload-dir", uploadDir, "--db-path", directory + "/db.sqlite",
                                    "--checksum-algorithms", "sha1,sha256,md5"] + extraArgs,
                                   log: directory + "/server.log")
        try Local.waitForPort(port)
    }

    func restart() throws {
        Local.stop(process)
        try start()
    }

    func stop() { Local.stop(process) }
    deinit { stop() }

    /// The stored file of an upload URL.
    func storedPath(_ uploadURL: String) -> String {
        uploadDir + "/" + (uploadURL.split(separator: "/").last.map(String.init) ?? "")
    }

    /// The server's Upload-Offset for `url`, or its HTTP status when not 200.
    func head(_ url: String) throws -> (status: Int, offset: Int64?) {
        let r = try CurlTransport().perform(HTTPRequest(method: "HEAD", url: url, headers: [("Tus-Resumable", "1.0.0")]))
        return (r.status, r.header("upload-offset").flatMap { Int64($0) })
    }
}

/// faultproxy.py in front of `upstream`.
final class LocalProxy {
    let process: Process
    let port: Int

    init(upstreamPort: Int, directory: String) throws {
        let portFile = directory + "/proxy.port"
        try? FileManager.default.removeItem(atPath: portFile)
        process = try Local.launch(["python3", Local.serversDir + "/faultproxy.py", "--upstream", "http://127.0.0.1:\(upstreamPort)",
                                    "--port", "0", "--port-file", portFile, "--max-seconds", "600"], log: directory + "/proxy.log")
        guard let p = Int(try Local.waitForFile(portFile)) else { throw NSError(domain: "Local", code: 3) }
        port = p
    }

    deinit { Local.stop(process) }

    var baseURL: String { "http://127.0.0.1:\(port)/files" }
    var hostPort: String { "127.0.0.1:\(port)" }

    func rules(_ rules: [[String: Any]]) throws {
        let (status, _) = try Local.http("POST", "http://127.0.0.1:\(port)/__proxy/rules", json: rules)
        XCTAssertEqual(status, 200)
    }

    func stats() throws -> (faults: Int, requests: [[Any]]) {
        let (_, obj) = try Local.http("GET", "http://127.0.0.1:\(port)/__proxy/stats")
        let d = obj as? [String: Any] ?? [:]
        return (d["faults_applied"] as? Int ?? 0, d["requests"] as? [[Any]] ?? [])
    }

    /// Outcomes recorded for requests of `method` ("cut", "drop_response", "status:503", 204...).
    func outcomes(_ method: String) throws -> [String] {
        try stats().requests.filter { ($0.first as? String) == method }.map { "\($0[2])" }
    }
}

/// gcore_api.py pointing its upload servers at `tusHost`.
final class LocalGcore {
    let process: Process
    let port: Int

    init(tusHost: String, directory: String, access: String, refresh: String) throws {
        let portFile = directory + "/gcore.port"
        try? FileManager.default.removeItem(atPath: portFile)
        process = try Local.launch(["python3", Local.serversDir + "/gcore_api.py", "--port", "0", "--port-file", portFile,
                                    "--tus-host", tusHost, "--max-seconds", "600", "--access", access, "--refresh", refresh],
                                   log: directory + "/gcore.log")
        guard let p = Int(try Local.waitForFile(portFile)) else { throw NSError(domain: "Local", code: 3) }
        port = p
    }

    deinit { Local.stop(process) }

    var apiBase: String { "http://127.0.0.1:\(port)" }

    func expireAccess() throws { _ = try Local.http("POST", apiBase + "/__control/expire-access", json: [String: Any]()) }

    func state() throws -> [String: Any] { (try Local.http("GET", apiBase + "/__control/state").1 as? [String: Any]) ?? [:] }
}

/// sha256 of a whole file, hex.
func fileSHA256(_ path: String) throws -> String {
    let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.int64Value ?? 0
    return try Digest.hash(.sha256, file: path, offset: 0, length: size).hex
}
