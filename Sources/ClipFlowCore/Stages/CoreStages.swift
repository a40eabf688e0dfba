import Foundation

/// Stage kinds that need no media library: `files`, `directory`, and the `synthetic` source and
/// `null` sink used by tests and the backpressure benchmark.
public enum CoreStages {
    public static func register(into r: StageRegistry) {
        r.register(FilesStage.kind)
        r.register(DirectoryStage.kind)
        r.register(SyntheticSource.kind)
        r.register(NullSink.kind)
    }
}

// MARK: files

/// Source: a list of clip files, or a glob, in order. Paths are relative to the working directory.
/// Belongs to its stage queue.
public final class FilesStage: Stage {
    public let id: String
    public let paths: [String]
    public let glob: String?
    public let sort: Order
    public var inputTypes: Set<PortType> { [] }

    /// The order the clips go out in.
    public enum Order: String, CaseIterable, Sendable {
        /// As listed (a glob's matches: by name).
        case none
        /// By file name.
        case name
        /// By modification time, oldest first.
        case mtime
    }
    public var outputType: PortType? { .clips }

    public static let kind = StageKind(
        name: "files", summary: "clip files to join: a list (\"paths\") or a pattern (\"glob\")",
        output: .clips,
        params: [
            ParamSpec("paths", .pathList, role: .reads, help: "clip files, in order"),
            ParamSpec("glob", .path, role: .readsPattern, help: "a pattern such as clips/*.mp4 (*, ?, [...]); matches are sorted by name"),
            ParamSpec(
                "sort", .choice(Order.allCases.map(\.rawValue)), default: .string(Order.none.rawValue),
                help: "order: as listed (glob: by name), by file name, or by modification time")
        ],
        check: { params, path in FilesStage.check(params, path) },
        files: { p in
            if let g = p.string("glob") { return StageFiles(reads: FilesStage.expandGlob(g).map { FileField("glob", $0) }) }
            return StageFiles(reads: (p.strings("paths") ?? []).enumerated().map { FileField("paths[\($0)]", $1) })
        },
        make: { id, p in FilesStage(id: id, paths: p.strings("paths") ?? [], glob: p.string("glob"), sort: p.string("sort").flatMap(Order.init) ?? .none) })

    public init(id: String, paths: [String], glob: String?, sort: Order = .none) {
        self.id = id
        self.paths = paths
        self.glob = glob
        self.sort = sort
    }

    static func check(_ p: StageParams, _ path: String) -> [PipelineIssue] {
        let list = p.strings("paths"), g = p.string("glob")
        if list == nil && g == nil { return [PipelineIssue(path, "expected \"paths\" (a list of clips) or \"glob\" (a pattern)")] }
        if list != nil && g != nil { return [PipelineIssue(path, "give \"paths\" or \"glob\", not both")] }
        if let list {
            return list.enumerated().compactMap { j, f in readableProblem(f).map { PipelineIssue("\(path).paths[\(j)]", $0) } }
        }
        if let g {
            let m = expandGlob(g)
            if m.isEmpty { return [PipelineIssue("\(path).glob", "\"\(g)\" matches no files")] }
            return m.compactMap { f in readableProblem(f).map { PipelineIssue("\(path).glob", $0) } }
        }
        return []
    }

    /// Why `f` cannot be read as an input, or nil.
    static func readableProblem(_ f: String) -> String? {
        var isDir: ObjCBool = false
        guard FileManager.default.fileExists(atPath: f, isDirectory: &isDir) else { return "'\(f)': no such file" }
        if isDir.boolValue { return "'\(f)' is a directory, expected a clip file" }
        guard FileManager.default.isReadableFile(atPath: f) else { return "'\(f)': permission denied (cannot read it)" }
        return nil
    }

    /// Matches of a pattern, sorted by name. Wildcards in any path component.
    public static func expandGlob(_ pattern: String) -> [String] {
        var g = glob_t()
        defer { globfree(&g) }
        guard Glibc.glob(pattern, 0, nil, &g) == 0 else { return [] }
        var out: [String] = []
        for i in 0..<Int(g.gl_pathc) {
            if let c = g.gl_pathv[i] { out.append(String(decoding: UnsafeRawBufferPointer(start: c, count: strlen(c)), as: UTF8.self)) }
        }
        return out.sorted().filter {
            var d: ObjCBool = false; return FileManager.default.fileExists(atPath: $0, isDirectory: &d) && !d.boolValue
        }
    }

    public func resolvedPaths() throws -> [String] {
        var list = paths
        if let glob {
            list = Self.expandGlob(glob)
            if list.isEmpty { throw ClipFlowError.badInput("glob \"\(glob)\" matches no files") }
        }
        for f in list { if let p = Self.readableProblem(f) { throw ClipFlowError.badInput("input \(p)") } }
        switch sort {
        case .name: list.sort { ($0 as NSString).lastPathComponent < ($1 as NSString).lastPathComponent }
        case .mtime:
            func m(_ f: String) -> Date { ((try? FileManager.default.attributesOfItem(atPath: f))?[.modificationDate] as? Date) ?? .distantPast }
            list = list.map { ($0, m($0)) }.sorted { $0.1 < $1.1 }.map(\.0)
        case .none: break
        }
        return list
    }

    public func produce(_ context: StageContext) throws {
        let list = try resolvedPaths()
        for (n, f) in list.enumerated() {
            if context.stopRequested { return }
            if context.push(.file(f, type: .clips)) != .ok { return }
            context.progress(Int64(n + 1), of: Int64(list.count), unit: "files")
        }
    }
}

// MARK: directory

/// Sink: copies every file it receives into a directory (temporary name, then rename).
/// Belongs to its stage queue; a cancel reaches it through `cancelFlag` (thread-safe).
public final class DirectoryStage: Stage {
    public let id: String
    public let directory: String
    public let mode: Mode

    /// How a received file gets into the folder.
    public enum Mode: String, CaseIterable, Sendable {
        /// A copy of its bytes.
        case copy
        /// A hard link when on the same filesystem (a copy otherwise).
        case link
    }
    public let overwrite: Bool
    private let cancelFlag = CancellationFlag()
    public private(set) var written: [String] = []
    public var inputTypes: Set<PortType> { [.clips, .video, .image] }
    public var outputType: PortType? { nil }

    public static let kind = StageKind(
        name: "directory", summary: "sink: copy every file it receives into a directory",
        inputs: [.clips, .video, .image], minInputs: 1, output: nil,
        params: [
            ParamSpec("path", .path, required: true, role: .writesFolder, help: "destination directory (created if missing)"),
            ParamSpec(
                "mode", .choice(Mode.allCases.map(\.rawValue)), default: .string(Mode.copy.rawValue),
                help: "copy the file, or hard-link it when on the same filesystem (copies otherwise)"),
            .overwrite
        ],
        check: { p, path in
            guard let d = p.string("path") else { return [] }
            var isDir: ObjCBool = false
            if FileManager.default.fileExists(atPath: d, isDirectory: &isDir) {
                if !isDir.boolValue { return [PipelineIssue("\(path).path", "'\(d)' exists and is not a directory")] }
                if !FileManager.default.isWritableFile(atPath: d) { return [PipelineIssue("\(path).path", "'\(d)': permission denied (cannot write there)")] }
            }
            return []
        },
        files: { p in StageFiles(copiesInto: p.string("path").map { FileField("path", $0) }) },
        make: { id, p in
            DirectoryStage(id: id, directory: p.string("path")!, mode: p.string("mode").flatMap(Mode.init) ?? .copy, overwrite: p.bool("overwrite") ?? false)
        })

    public init(id: String, directory: String, mode: Mode = .copy, overwrite: Bool = false) {
        self.id = id
        self.directory = directory
        self.mode = mode
        self.overwrite = overwrite
    }

    public func prepare(_ context: StageContext) throws {
        context.onCancel { [cancelFlag] in cancelFlag.cancel() }
        do { try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true) } catch {
            throw ClipFlowError.output("cannot create directory '\(directory)'", writing: error)
        }
    }

    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        guard let src = item.path else { return .ok }
        let target = URL(fileURLWithPath: directory).appendingPathComponent((src as NSString).lastPathComponent)
        // The same file already there (an earlier run's hard link) is this copy, done.
        let existing = FileIdentity(path: target.path).file
        if existing == nil || existing != FileIdentity(path: src).file {
            let out: AtomicOutput
            if mode == .link, let linked = try AtomicOutput.hardLink(from: src, target: target, label: "directory copy", replacing: overwrite) {
                out = linked
            } else {
                out = try AtomicOutput(target: target, label: "directory copy", replacing: overwrite)
                try copy(src, to: out.temporary.path, context)
            }
            try out.commit()
        }
        written.append(target.path)
        context.emit(.output(path: target.path))
        return .ok
    }

    /// Copies in 1 MiB chunks (bounded memory), checking for cancellation.
    private func copy(_ src: String, to dst: String, _ context: StageContext) throws {
        guard let inp = FileHandle(forReadingAtPath: src) else { throw ClipFlowError.badInput("cannot read '\(src)'") }
        defer { try? inp.close() }
        // `dst` exists (made by AtomicOutput): written in place, never replaced.
        guard let outp = FileHandle(forWritingAtPath: dst) else {
            throw ClipFlowError.output("cannot write into '\(directory)'")
        }
        defer { try? outp.close() }
        let total = ((try? FileManager.default.attributesOfItem(atPath: src))?[.size] as? NSNumber)?.int64Value ?? 0
        var done: Int64 = 0
        while true {
            if context.cancellation.isCancelled || cancelFlag.isCancelled { throw ClipFlowError.interrupted }
            let chunk: Data
            do { chunk = try inp.read(upToCount: 1 << 20) ?? Data() } catch { throw ClipFlowError.badInput("reading '\(src)': \(error.localizedDescription)") }
            if chunk.isEmpty { break }
            do { try outp.write(contentsOf: chunk) } catch { throw ClipFlowError.output("writing into '\(directory)'", writing: error) }
            done += Int64(chunk.count)
            context.progress(done, of: total)
        }
    }
}

// MARK: synthetic source and null sink (tests, benchmarks)

/// Source: `count` buffers of `size` bytes (real memory), at `rate` per second (0: as fast as
/// possible), time-stamped when `live`. Stops when told to.
/// Belongs to its stage queue; others read `produced` after the run.
public final class SyntheticSource: Stage {
    public let id: String
    public let count: Int
    public let size: Int
    public let rate: Double
    public private(set) var produced = 0
    public var inputTypes: Set<PortType> { [] }
    public var outputType: PortType? { .buffers }

    public static let kind = StageKind(
        name: "synthetic", summary: "source of test buffers (benchmarks, tests): count x size bytes at a rate",
        output: .buffers,
        params: [
            ParamSpec("count", .integer(min: 0, max: nil), default: .number(100), help: "buffers to produce (0: until stopped)"),
            ParamSpec("size", .integer(min: 0, max: 1 << 30), default: .number(1_048_576), help: "bytes per buffer"),
            ParamSpec("rate", .number(min: 0, max: nil), default: .number(0), help: "buffers per second (0: as fast as possible)")
        ],
        make: { id, p in SyntheticSource(id: id, count: p.int("count") ?? 100, size: p.int("size") ?? (1 << 20), rate: p.double("rate") ?? 0) })

    public init(id: String, count: Int, size: Int, rate: Double) {
        self.id = id
        self.count = count
        self.size = size
        self.rate = rate
    }

    public func produce(_ context: StageContext) throws {
        let start = context.clock.now()
        var n = 0
        while count == 0 || n < count {
            if context.stopRequested { break }
            if rate > 0 { context.clock.sleep(until: start + Double(n) / rate, stop: { context.stopRequested }) }
            if context.stopRequested { break }
            var data = Data(count: size)
            if size > 0 { data[0] = UInt8(truncatingIfNeeded: n) }  // touch: the memory is real
            let item = Item(.buffer(sequence: Int64(n), data: data, time: rate > 0 ? Double(n) / rate : nil), type: .buffers)
            let r = context.push(item)
            n += 1
            produced = n
            if r != .ok { break }
            if n % 64 == 0 { context.progress(Int64(n), of: Int64(count), unit: "buffers") }
        }
        context.progress(Int64(n), of: Int64(count), unit: "buffers")
    }
}

/// Sink: takes anything, waits `delay` seconds per item (a deliberately slow consumer), counts
/// items and discontinuities.
/// Belongs to its stage queue; tests read `received` after the run has finished.
public final class NullSink: Stage {
    public let id: String
    public let delay: Double
    public private(set) var received = 0
    public private(set) var discontinuities = 0
    /// Buffers missing between consecutive sequence numbers received (what was dropped upstream).
    public private(set) var missing: Int64 = 0
    private var lastSequence: Int64 = -1
    public var inputTypes: Set<PortType> { Set(PortType.allCases) }
    public var outputType: PortType? { nil }

    public static let kind = StageKind(
        name: "null", summary: "sink that discards what it receives, optionally slowly (tests, benchmarks)",
        inputs: Set(PortType.allCases), minInputs: 1, output: nil,
        params: [ParamSpec("delay", .number(min: 0, max: 60), default: .number(0), help: "seconds to spend on each item")],
        make: { id, p in NullSink(id: id, delay: p.double("delay") ?? 0) })

    public init(id: String, delay: Double) {
        self.id = id
        self.delay = delay
    }

    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        if delay > 0 { context.clock.sleep(until: context.clock.now() + delay, stop: { context.cancellation.isCancelled }) }
        received += 1
        if item.discontinuity { discontinuities += 1 }
        if case .buffer(let s, _, _) = item.payload {
            missing += max(0, s - lastSequence - 1)
            lastSequence = s
        }
        if received % 64 == 0 { context.progress(Int64(received), of: 0, unit: "items") }
        return .ok
    }

    public func drain(_ context: StageContext) throws {
        context.progress(Int64(received), of: 0, unit: "items")
    }
}
