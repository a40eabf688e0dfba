import ClipFlowCore
import Foundation
import Synchronization

/// Sink: publishes a recording on `clipflow serve` while it is recorded. The video is made as a
/// recording when the first fragment arrives; each fragment (a complete MP4, as the recorder
/// closes it) is uploaded by TUS, resumably, in order, as fragment N of that video; after the
/// last, the server is told how many there were, and the video is in its feed at once (the server
/// assembled it as the fragments came). A lost network holds the fragments here, in order: each
/// is sent again (resumed where the server stopped) every `retryDelay` seconds until it is
/// taken, and the server stores a fragment once whatever is sent twice. The local fragments stay
/// unless `removeFragments`, which removes each once the server has it.
/// A stop is for the recording before it (the fragments it then closes are published); a cancel
/// gives up at once. Belongs to its stage queue; the uploads run on one helper thread.
public final class PublishStage: Stage {
    public let id: String
    public let endpoint: String
    public let name: String?
    public let removeFragments: Bool
    public let retryDelay: Double
    private let makeUploader: @Sendable () throws -> GcoreUploader
    /// The fragments to send, in order; ended by `drain`.
    private let fragments = BoundedQueue<String>(limits: LinkLimits(maxItems: 1 << 20, maxBytes: LinkLimits.noByteLimit))
    /// What the sender ended with (one element): nil, or why it failed.
    private let outcome = BoundedQueue<String?>(limits: LinkLimits(maxItems: 1, maxBytes: LinkLimits.noByteLimit))
    private let control = UploadControl()
    private var started = false
    public var inputTypes: Set<PortType> { [.clips] }
    public var outputType: PortType? { nil }

    public static let kind = StageKind(
        name: "publish",
        summary: "sink: publish a recording on clipflow serve as it is recorded (each fragment uploaded by TUS as it closes; watchable live)",
        inputs: [.clips], minInputs: 1, output: nil,
        params: [
            ParamSpec("endpoint", .string, required: true, help: "the clipflow serve to publish on (http://HOST:PORT)"),
            ParamSpec("name", .string, help: "the video's name (default: the first fragment's file name)"),
            ParamSpec("remove-fragments", .boolean, default: .bool(false), help: "remove each local fragment once the server has it"),
            ParamSpec("retry-delay", .number(min: 0.1, max: 600), default: .number(1), help: "seconds between tries of a fragment the network lost")
        ],
        make: { id, p in
            PublishStage(
                id: id, endpoint: p.string("endpoint") ?? "", name: p.string("name"), removeFragments: p.bool("remove-fragments") ?? false,
                retryDelay: p.double("retry-delay") ?? 1)
        })

    public init(
        id: String, endpoint: String, name: String? = nil, removeFragments: Bool = false, retryDelay: Double = 1,
        makeUploader: (@Sendable () throws -> GcoreUploader)? = nil
    ) {
        self.id = id
        self.endpoint = endpoint
        self.name = name
        self.removeFragments = removeFragments
        self.retryDelay = retryDelay
        let destination = UploadDestination(method: .clipflow, endpoint: endpoint)
        self.makeUploader =
            makeUploader ?? {
                let store = try ResumeStore(path: UploadQueue.defaultDirectory + "/resume.json")
                guard let uploader = try destination.makeUploader(store: store) as? GcoreUploader else {
                    throw ClipFlowError.failure("internal: a clipflow destination made another uploader")
                }
                return uploader
            }
    }

    public func prepare(_ context: StageContext) throws {
        context.onCancel { [control] in control.cancel() }
    }

    public func receive(_ item: Item, input: Int, _ context: StageContext) throws -> FlowResult {
        guard let path = item.path else { return .ok }
        if !started {
            started = true
            startSender(firstName: (path as NSString).lastPathComponent, context)
        }
        _ = fragments.push(path)
        return .ok
    }

    public func drain(_ context: StageContext) throws {
        fragments.endOfStream()
        guard started else { return }
        guard let ended = outcome.pull() else { throw ClipFlowError.failure("publish: the sender ended without a word") }
        if let failure = ended.element { throw ClipFlowError.failure(failure) }
    }

    public func finish(_ context: StageContext, outcome: StageOutcome) {
        fragments.endOfStream()
        if outcome != .completed { control.cancel() }
    }

    /// The sender: makes the recording, then uploads each fragment in order, then ends it.
    private func startSender(firstName: String, _ context: StageContext) {
        let (fragments, outcome, control) = (self.fragments, self.outcome, self.control)
        let (makeUploader, retryDelay, remove) = (self.makeUploader, self.retryDelay, removeFragments)
        let name = self.name ?? firstName
        let emit: @Sendable (String) -> Void = { context.emit(.notice($0)) }
        context.helpers.start("publish") {
            do {
                let uploader = try makeUploader()
                let video = try Self.persist("making the recording", delay: retryDelay, control: control, emit) {
                    try uploader.createRecording(name: name, control: control)
                }
                emit("publishing as video \(video)")
                var count = 0
                while let path = fragments.pull()?.element {
                    let index = count
                    let metadata = [GcoreUploader.recordingVideo: video, GcoreUploader.recordingFragment: String(index)]
                    // Sent again after a lost answer, a fragment is taken again and stored once.
                    try Self.persist("fragment \(index) (\((path as NSString).lastPathComponent))", delay: retryDelay, control: control, emit) {
                        _ = try uploader.upload(file: path, id: "\(video)-\(index)", metadata: metadata, control: control, observer: NoUploadObserver())
                    }
                    if remove { try? FileManager.default.removeItem(atPath: path) }
                    count += 1
                }
                if count > 0 {
                    try Self.persist("ending the recording", delay: retryDelay, control: control, emit) {
                        try uploader.endRecording(video, fragments: count, control: control)
                    }
                    emit("published \(count) fragment\(count == 1 ? "" : "s") as video \(video)")
                }
                _ = outcome.push(nil)
            } catch {
                _ = outcome.push("publish: \(error)")
            }
        }
    }

    /// Runs `body` until it succeeds: a failure the network may cure (no answer, or a retryable
    /// answer such as 503, after the uploader's own tries) is told (`emit`) and tried again
    /// `delay` seconds later; any other failure (the server refused: the recording ended, a
    /// conflict), or a cancel, ends it.
    private static func persist<T>(
        _ what: String, delay: Double, control: UploadControl, _ emit: (String) -> Void, _ body: () throws -> T
    ) throws -> T {
        var told = false
        while true {
            do { return try body() } catch let e as UploadError where (e.retryable || e.kind == .transport) && e.kind != .conflict {
                if !told { emit("\(what): \(e.message); trying again every \(delay) s") }
                told = true
                try control.sleep(delay)
            }
        }
    }
}
