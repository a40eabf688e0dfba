import XCTest
import Foundation
import ClipFlowTestSupport
@testable import ClipFlowUpload

// The names the TUS and Gcore tests use for the shared test servers (ClipFlowTestSupport's
// TUSServer, FaultProxy and GcoreAPI), with the few conveniences those tests want.

/// The real TUS server (PyPI resumable-upload) on 127.0.0.1.
final class LocalTUS: @unchecked Sendable {
    let server: TUSServer

    init(directory: String, extraArgs: [String] = []) throws {
        server = try TUSServer.start(directory: URL(fileURLWithPath: directory), extraArgs: extraArgs)
    }

    deinit { server.stop() }

    var port: Int { server.port }
    var pid: Int32? { server.process.pid }
    var baseURL: String { server.baseURL }
    var hostPort: String { server.hostPort }
    func restart() throws { try server.restart() }
    func stop() { server.stop() }

    /// The stored file of an upload URL.
    func storedPath(_ uploadURL: String) -> String { server.storedFile(for: uploadURL).path }

    /// The server's Upload-Offset for `url` (through whatever is in front of it), or its status.
    func head(_ url: String) throws -> (status: Int, offset: Int64?) {
        let r = try CurlTransport().perform(HTTPRequest(method: "HEAD", url: url, headers: [("Tus-Resumable", "1.0.0")]))
        return (r.status, r.header("upload-offset").flatMap { Int64($0) })
    }
}

/// faultproxy.py in front of the TUS server.
final class LocalProxy {
    let proxy: FaultProxy

    init(upstreamPort: Int, directory: String) throws {
        proxy = try FaultProxy.start(upstream: "http://127.0.0.1:\(upstreamPort)")
    }

    deinit { proxy.process.stop() }

    var port: Int { proxy.port }
    var baseURL: String { "http://127.0.0.1:\(port)/files" }

    func rules(_ rules: [[String: Any]]) throws { try proxy.setRules(rules) }

    func stats() throws -> (faults: Int, requests: [ProxyStats.Entry]) {
        let s = try proxy.stats()
        return (s.faultsApplied, s.requests)
    }

    /// Outcomes recorded for requests of `method` ("cut", "drop_response", "status:503", "204"...).
    func outcomes(_ method: String) throws -> [String] {
        try proxy.stats().requests.filter { $0.method == method }.map(\.outcome)
    }
}

/// gcore_api.py pointing its upload servers at `tusHost`.
final class LocalGcore {
    let api: GcoreAPI

    init(tusHost: String, directory: String, access: String, refresh: String) throws {
        api = try GcoreAPI.start(tusHost: tusHost, access: access, refresh: refresh)
    }

    deinit { api.stop() }

    var apiBase: String { api.url }
    func expireAccess() throws { try api.expireAccess() }
    func state() throws -> [String: Any] { try api.state() }
}

/// sha256 of a whole file, hex (sha256sum, an independent oracle).
func fileSHA256(_ path: String) throws -> String { try sha256(ofFile: path) }
