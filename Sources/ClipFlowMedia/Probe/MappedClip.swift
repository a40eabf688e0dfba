internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

// Zero-copy packet path of the merge (see Merger): the demuxer reads only sample tables, packets
// point into a read-only mapping of their clip, and the output sink turns writes of mapped bytes
// into `sendfile` from the clip's file descriptor. Video payloads never pass through user space.

/// A clip file mapped read-only (MAP_SHARED), plus a "shadow": anonymous, never written memory
/// laid out like the file. Each is followed by one zero page so the AV_INPUT_BUFFER_PADDING_SIZE
/// bytes after a packet that ends the file are readable.
///
/// Why the shadow: the MP4 muxer reads the first two bytes of every AAC packet (a check that the
/// stream is not ADTS-framed; an MP4 sample never is). In the file mapping each such touch would
/// map the 64 KiB around it (fault-around), most of the clip for its audio alone, all of it peak
/// RSS. Audio packets point into the shadow instead, whose untouched pages read as the kernel's
/// shared zero page (a huge one where it can): no memory, no read. Both views map to the same
/// file offsets (`fileOffset(of:)`), so the sink sends audio and video alike from the file.
///
/// Owner of the file descriptor and the mapping, which go with the object. Packets pointing into
/// it hold no reference (`point(_:at:)`): the copy loop holds the clip while it writes them, and
/// the output sink while a range of it is still to be sent. Made on the opener's thread, then
/// used on the merge thread only.
final class MappedClip {
    let path: String
    let fd: Int32
    let base: UnsafeMutableRawPointer
    /// Start of the shadow (same offsets as the file).
    let shadow: UnsafeMutableRawPointer
    /// File size in bytes.
    let size: Int64
    private let mapLength: Int

    init(path: String) throws {
        self.path = path
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 { throw ClipFlowError.badInput("input '\(path)': \(String(cString: strerror(errno)))") }
        var st = stat()
        guard fstat(fd, &st) == 0, st.st_size > 0 else {
            let reason = errno == 0 ? "it is empty" : String(cString: strerror(errno))
            Glibc.close(fd)
            throw ClipFlowError.badInput("input '\(path)': \(reason)")
        }
        let page = Int(sysconf(Int32(_SC_PAGESIZE)))
        let size = Int(st.st_size)
        let view = (size + page - 1) / page * page + page
        // The shadow starts on a 2 MiB boundary and may use transparent huge pages: a read in an
        // untouched 2 MiB then maps the kernel's huge zero page, one fault for all the audio
        // packets there instead of one per 4 KiB page.
        let huge = 2 << 20
        let length = view + huge + view
        // Reserve both views (each followed by a zero page), then map the file over the first.
        guard let area = mmap(nil, length, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), area != MAP_FAILED else {
            Glibc.close(fd)
            throw ClipFlowError.failure("input '\(path)': cannot map it: \(String(cString: strerror(errno)))")
        }
        guard let m = mmap(area, size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0), m != MAP_FAILED else {
            let reason = String(cString: strerror(errno))
            munmap(area, length)
            Glibc.close(fd)
            throw ClipFlowError.failure("input '\(path)': cannot map it: \(reason)")
        }
        // The reserved second view: read-only zero pages.
        let shadow = UnsafeMutableRawPointer(bitPattern: (Int(bitPattern: m) + view + huge - 1) / huge * huge)!
        _ = madvise(shadow, view, MADV_HUGEPAGE)  // best effort: without it, 4 KiB zero pages
        self.fd = fd
        self.base = m
        self.shadow = shadow
        self.size = Int64(size)
        self.mapLength = length
    }

    deinit {
        munmap(base, mapLength)
        Glibc.close(fd)
    }

    /// The file offset of `p` if it points into the file mapping or the shadow.
    func fileOffset(of p: UnsafeRawPointer) -> Int64? {
        let a = UnsafeRawPointer(base), s = UnsafeRawPointer(shadow)
        if p >= a && p < a + Int(size) { return Int64(p - a) }
        if p >= s && p < s + Int(size) { return Int64(p - s) }
        return nil
    }

    /// Whether file bytes [pos, pos + size) lie in the file.
    func contains(pos: Int64, size: Int32) -> Bool {
        pos >= 0 && size >= 0 && pos + Int64(size) <= self.size
    }

    /// Points `pkt` at the bytes of `e` in the file mapping, or at their place in the shadow for
    /// a shadowed sample, without a reference (`buf` nil): for a packet given to `av_write_frame`,
    /// which writes it before returning and keeps nothing, while the caller holds this clip (the
    /// output sink keeps it while a range of it is still to be sent).
    func point(_ pkt: UnsafeMutablePointer<AVPacket>, at e: ClipPacket) {
        av_packet_unref(pkt)
        pkt.pointee.data = (e.shadowed ? shadow : base).assumingMemoryBound(to: UInt8.self) + Int(e.pos)
        pkt.pointee.size = e.size
    }
}

/// The input AVIOContext of a demuxer over a `MappedClip`: reads with pread (the mapping itself is
/// not touched, so it adds nothing to the resident set), and once `skipPayloads` is set, a read of
/// exactly one sample of the index (position and size) returns without copying anything into the
/// demuxer's packet: the packet then points into the mapping or, for shadowed (audio) samples, the
/// shadow (`MappedClip.point`). Any other read (box headers, a sample read in pieces) is a real read.
/// Owner of the AVIOContext; one thread.
final class MappedReader {
    /// The mapped clip whose file descriptor this reader reads (held so the descriptor stays
    /// open), or nil for a reader of its own descriptor (`init(path:)`).
    let clip: MappedClip?
    let fd: Int32
    let size: Int64
    let path: String
    private let ownsFD: Bool
    private(set) var pb: UnsafeMutablePointer<AVIOContext>!
    fileprivate var position: Int64 = 0
    /// Sample position -> size, for the samples whose reads are skipped.
    fileprivate var payloads: [Int64: Int32] = [:]
    /// Positions of the samples whose packets point into the shadow.
    fileprivate var shadowed: Set<Int64> = []
    fileprivate var skipping = false
    /// Reads skipped since the last `takeSkipped()`.
    fileprivate var skipped = 0

    static let bufferSize = 1 << 16

    convenience init(clip: MappedClip) throws {
        try self.init(clip: clip, fd: clip.fd, size: clip.size, path: clip.path, ownsFD: false)
    }

    /// A reader of the file itself, for sample tables and timestamps only (no mapping).
    convenience init(path: String) throws {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        if fd < 0 { throw ClipFlowError.badInput("input '\(path)': \(String(cString: strerror(errno)))") }
        var st = stat()
        guard fstat(fd, &st) == 0 else {
            let reason = String(cString: strerror(errno))
            Glibc.close(fd)
            throw ClipFlowError.badInput("input '\(path)': \(reason)")
        }
        try self.init(clip: nil, fd: fd, size: Int64(st.st_size), path: path, ownsFD: true)
    }

    private init(clip: MappedClip?, fd: Int32, size: Int64, path: String, ownsFD: Bool) throws {
        self.clip = clip
        self.fd = fd
        self.size = size
        self.path = path
        self.ownsFD = ownsFD
        guard let buf = av_malloc(Self.bufferSize)?.assumingMemoryBound(to: UInt8.self) else {
            if ownsFD { Glibc.close(fd) }
            throw ClipFlowError.failure("out of memory for reading '\(path)'")
        }
        let opaque = Unmanaged.passUnretained(self).toOpaque()
        guard let pb = avio_alloc_context(buf, Int32(Self.bufferSize), 0, opaque, mappedRead, nil, mappedSeek) else {
            av_free(buf)
            if ownsFD { Glibc.close(fd) }
            throw ClipFlowError.failure("out of memory for reading '\(path)'")
        }
        self.pb = pb
    }

    deinit {
        av_freep(&pb.pointee.buffer)
        avio_context_free(&pb)
        if ownsFD { Glibc.close(fd) }
    }

    /// From now on, reads of exactly one of these samples (position, size) copy nothing; packets
    /// of the `shadowed` ones (position, size) are to point into the shadow. Reads go straight to
    /// the callback (AVIO direct mode) so a sample arrives as one read.
    func skipPayloads(_ samples: [Int64: Int32], shadowed: [(pos: Int64, size: Int32)]) {
        payloads = samples
        for s in shadowed {
            payloads[s.pos] = s.size
            self.shadowed.insert(s.pos)
        }
        skipping = true
        pb.pointee.direct = 1
    }

    func isShadowed(pos: Int64) -> Bool { shadowed.contains(pos) }

    /// Every read goes straight to pread at its exact size (AVIO direct mode, nothing skipped):
    /// for a demuxer that reads a few small samples between large ones it does not read.
    func directReads() {
        pb.pointee.direct = 1
    }

    func takeSkipped() -> Int {
        defer { skipped = 0 }
        return skipped
    }

    func isSample(pos: Int64, size: Int32) -> Bool { payloads[pos] == size }
}

private func mappedRead(_ opaque: UnsafeMutableRawPointer?, _ buf: UnsafeMutablePointer<UInt8>?, _ size: Int32) -> Int32 {
    guard let opaque, let buf else { return cf_averror(EINVAL) }
    let r = Unmanaged<MappedReader>.fromOpaque(opaque).takeUnretainedValue()
    let left = r.size - r.position
    if left <= 0 { return cf_averror_eof() }
    if r.skipping, let n = r.payloads[r.position], n == size, Int64(size) <= left {
        r.position += Int64(size)
        r.skipped += 1
        return size
    }
    let want = Int(min(Int64(size), left))
    while true {
        let n = pread(r.fd, buf, want, off_t(r.position))
        if n < 0 {
            if errno == EINTR { continue }
            return cf_averror(errno)
        }
        if n == 0 { return cf_averror_eof() }
        r.position += Int64(n)
        return Int32(n)
    }
}

private func mappedSeek(_ opaque: UnsafeMutableRawPointer?, _ offset: Int64, _ whence: Int32) -> Int64 {
    guard let opaque else { return Int64(cf_averror(EINVAL)) }
    let r = Unmanaged<MappedReader>.fromOpaque(opaque).takeUnretainedValue()
    switch whence & ~AVSEEK_FORCE {
    case AVSEEK_SIZE: return r.size
    case SEEK_SET: r.position = offset
    case SEEK_CUR: r.position += offset
    case SEEK_END: r.position = r.size + offset
    default: return Int64(cf_averror(EINVAL))
    }
    return r.position
}
