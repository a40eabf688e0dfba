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
/// ahead of it (`ahead`): maps each clip, opens its demuxer over the mapping with the payloads of its
/// samples skipped (the demuxer reads only sample tables), and lists its video and audio packets
/// in file order (`ClipPacket`). Demuxing is then off the copy's critical path. The mapping is
/// made on the helper and handed over whole to the thread that takes it, which owns it from then on.
/// `@unchecked Sendable`: its state is guarded by `cond`; what `take` returns belongs to the caller.
final class ClipOpener: @unchecked Sendable {
    typealias Opened = (MappedClip, [ClipPacket])
    /// How far past the next clip the copy will take the helper may prepare (so up to three
    /// clips are ready): slack for the times the helpers' core is busy with other work.
    static let ahead = 2
    private let cond = NSCondition()
    private var ready: [Int: Result<Opened, Error>] = [:]
    private var taken = 0
    private var stopped = false
    private var finished = false

    init(clips: [ClipInfo], audio: Bool) {
        Thread { [self] in
            MediaThreads.yieldToCopy()
            for i in clips.indices {
                cond.lock()
                while !stopped && i > taken + Self.ahead { cond.wait() }
                let stop = stopped
                cond.unlock()
                if stop { break }
                let r = Result { try Self.open(clips[i], audio: audio, stop: stopFlag) }
                cond.lock()
                if !stopped { ready[i] = r }
                cond.broadcast()
                cond.unlock()
            }
            cond.lock(); finished = true; cond.broadcast(); cond.unlock()
        }.start()
    }

    /// `stopped`, for the per-packet check while opening: read without the lock, which the copy
    /// thread takes for every clip (a copy thread blocked on it could lose its core to a helper).
    private let stopFlag = CancellationFlag()

    /// Clip i (in order), waiting for it if needed; rethrows the error preparing it.
    func take(_ i: Int) throws -> Opened {
        cond.lock()
        while ready[i] == nil { cond.wait() }
        let r = ready.removeValue(forKey: i)!
        taken = i + 1
        cond.broadcast()
        cond.unlock()
        return try r.get()
    }

    /// Ends the helper and drops what it prepared that nobody took; waits until it is done.
    func stop() {
        stopFlag.cancel()
        cond.lock()
        stopped = true
        cond.broadcast()
        while !finished { cond.wait() }
        ready = [:]
        cond.unlock()
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
