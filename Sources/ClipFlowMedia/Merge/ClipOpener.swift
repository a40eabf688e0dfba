internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// One sample of a clip, as the copy loop needs it: where it is in the file and its timing as the
/// demuxer gives it (stream time base).
struct ClipPacket {
    var stream: Int
    var pos: Int64
    var size: Int32
    var pts: Int64
    var dts: Int64
    var duration: Int64
    var flags: Int32
    /// Audio: the packet is to point into the shadow (the muxer peeks at its first bytes).
    var shadowed: Bool
    /// A packet whose bytes the demuxer really read (not a whole sample of the index), or nil.
    var own: Packet?
}

/// Prepares the clips of a merge for the copy loop, in order, on a helper thread a few clips
/// ahead of it: maps each clip, opens its demuxer over the mapping with the payloads of its
/// samples skipped (the demuxer reads only sample tables), and lists its video and audio packets
/// in file order (`ClipPacket`). Demuxing is then off the copy's critical path. The mapping is
/// made on the helper and handed over whole, through a `BoundedQueue`, to the thread that takes
/// it, which owns it from then on. The helper owns nothing else; `stop` joins it.
final class ClipOpener: Sendable {
    typealias Opened = (MappedClip, [ClipPacket])
    /// Clips the helper may have ready in the queue while the copy works on one; it opens one
    /// more and waits with it (so up to three clips are ready): slack for the times the helpers'
    /// core is busy with other work.
    static let ahead = 2
    private let opened = BoundedQueue<Result<Opened, Error>>(capacity: ClipOpener.ahead)
    /// Checked per packet while opening, so `stop` ends a clip half opened.
    private let stopFlag = CancellationFlag()
    private let helper = DispatchGroup()

    /// Starts the helper, one of `threads`.
    init(clips: [ClipInfo], audio: Bool, threads: HelperThreads) {
        let opened = self.opened, stopFlag = self.stopFlag, helper = self.helper
        helper.enter()
        threads.start("clip opener") {
            MediaThreads.yieldToCopy()
            for clip in clips {
                if stopFlag.isCancelled { break }
                let r = Result { try Self.open(clip, audio: audio, stop: stopFlag) }
                guard opened.push(r) == .ok else { break }
            }
            opened.endOfStream()
            helper.leave()
        }
    }

    /// The next clip (in order), waiting for it if needed; rethrows the error preparing it.
    func next() throws -> Opened {
        guard let p = opened.pull() else { throw ClipFlowError.interrupted }
        return try p.element.get()
    }

    /// Ends the helper and releases what it prepared that nobody took; waits until it is done.
    func stop() {
        stopFlag.cancel()
        opened.flush()
        helper.wait()
    }

    private static func open(_ clip: ClipInfo, audio: Bool, stop: CancellationFlag) throws -> Opened {
        let mapped = try MappedClip(path: clip.path)
        let reader = try MappedReader(clip: mapped)
        let dmx = try Demuxer(path: clip.path, format: ClipProbe.demuxerName, reader: reader)
        let audioIndex = audio ? clip.audio?.streamIndex : nil
        var samples: [Int64: Int32] = [:]
        var shadowed: [(pos: Int64, size: Int32)] = []
        for i in 0..<dmx.streamCount {
            if i == clip.video.streamIndex {
                dmx.forEachIndexEntry(i) { pos, size in samples[pos] = size }
            } else if i == audioIndex {
                dmx.forEachIndexEntry(i) { pos, size in shadowed.append((pos, size)) }
            } else {
                dmx.stream(i).pointee.discard = AVDISCARD_ALL
            }
        }
        reader.skipPayloads(samples, shadowed: shadowed)
        var packets: [ClipPacket] = []
        packets.reserveCapacity(samples.count + shadowed.count)
        let pkt = try Packet()
        while try dmx.read(into: pkt) {
            try stop.check()
            let p = pkt.p.pointee
            let si = Int(p.stream_index)
            guard si == clip.video.streamIndex || si == audioIndex else { continue }
            let skipped = reader.takeSkipped()
            var e = ClipPacket(
                stream: si, pos: p.pos, size: p.size, pts: p.pts, dts: p.dts,
                duration: p.duration, flags: p.flags,
                shadowed: reader.isShadowed(pos: p.pos), own: nil)
            if !reader.isSample(pos: p.pos, size: p.size) || !mapped.contains(pos: p.pos, size: p.size) {
                // Read for real (not as one whole sample of the index): keep the bytes read.
                guard skipped == 0 else {
                    throw ClipFlowError.failure(
                        "internal: input '\(clip.path)': a packet at byte \(p.pos) is not one of its samples")
                }
                e.own = try pkt.clone()
            }
            packets.append(e)
        }
        return (mapped, packets)
    }
}
