internal import CClipFlowFFmpeg
import ClipFlowCore
import Foundation

/// The output file descriptor behind the muxer's AVIOContext. Owned by one OutputMuxer; used on
/// the merge thread only.
///
/// Writes whose bytes lie in a registered `MappedClip` (its file mapping or its shadow, which
/// hold the file's bytes at the same offsets) are not copied: consecutive ones that are
/// also consecutive in the clip's file are gathered into one range and sent with `sendfile` (one
/// copy, in the kernel, from the page cache; `copy_file_range` refuses most cross-filesystem
/// pairs, e.g. ext4 to tmpfs). Any other write, a seek or closing sends the pending range first,
/// so the file is written in call order.
final class MuxerOutputFile {
    static let bufferSize = 1 << 20
    let fd: Int32
    let shownAs: String
    private var closed = false
    private var clips: [Weak] = []
    private var pendingClip: MappedClip? = nil
    private var pendingOffset: Int64 = 0
    private var pendingLength = 0
    private var useSendfile = true
    /// First write error (errno), kept so a failed trailer is not mistaken for a short reservation.
    private(set) var writeError: Int32 = 0

    private struct Weak { weak var clip: MappedClip? }

    init(path: String, shownAs: String) throws {
        self.shownAs = shownAs
        fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        if fd < 0 { throw ClipFlowError.output("cannot write '\(shownAs)'", errno: errno) }
    }

    /// Writes of bytes inside `clip` are sent from its file from now on (until it is freed).
    func register(_ clip: MappedClip) {
        clips.removeAll { $0.clip == nil }
        clips.append(Weak(clip: clip))
    }

    /// Returns 0 or a negative AVERROR.
    func write(_ p: UnsafeRawPointer, _ n: Int) -> Int32 {
        for w in clips {
            guard let c = w.clip, let off = c.fileOffset(of: p) else { continue }
            if pendingClip === c, pendingOffset + Int64(pendingLength) == off {
                pendingLength += n
                return 0
            }
            let rc = flush()
            if rc < 0 { return rc }
            pendingClip = c
            pendingOffset = off
            pendingLength = n
            return 0
        }
        let rc = flush()
        if rc < 0 { return rc }
        return writeAll(p, n)
    }

    /// Sends the pending range of a mapped clip. Returns 0 or a negative AVERROR.
    func flush() -> Int32 {
        guard let c = pendingClip else { return 0 }
        defer { pendingClip = nil; pendingLength = 0 }
        var off = off_t(pendingOffset)
        var left = pendingLength
        while left > 0 && useSendfile {
            let n = sendfile(fd, c.fd, &off, left)
            if n > 0 { left -= n; continue }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EINVAL || errno == ENOSYS || errno == EOPNOTSUPP) && left == pendingLength {
                useSendfile = false  // this pair of files cannot splice: write from the mapping
                break
            }
            return fail(n < 0 ? errno : EIO)
        }
        if left > 0 { return writeAll(UnsafeRawPointer(c.base) + Int(off), left) }
        return 0
    }

    private func writeAll(_ p: UnsafeRawPointer, _ n: Int) -> Int32 {
        var done = 0
        while done < n {
            let k = Glibc.write(fd, p + done, n - done)
            if k < 0 {
                if errno == EINTR { continue }
                return fail(errno)
            }
            done += k
        }
        return 0
    }

    private func fail(_ e: Int32) -> Int32 {
        if writeError == 0 { writeError = e }
        return cf_averror(e)
    }

    func close() throws {
        guard !closed else { return }
        let rc = flush()
        closed = true
        pendingClip = nil
        let ok = Glibc.close(fd) == 0
        if rc < 0 {
            if writeError != 0 { throw ClipFlowError.output("writing '\(shownAs)' failed", errno: writeError) }
            throw ClipFlowError.output("writing '\(shownAs)' failed: \(FF.describe(rc))")
        }
        if !ok { throw ClipFlowError.output("closing '\(shownAs)' failed", errno: errno) }
    }
    deinit { if !closed { _ = Glibc.close(fd) } }
}

/// AVIOContext write callback; `opaque` is an unretained `MuxerOutputFile`.
func fileSinkWrite(_ opaque: UnsafeMutableRawPointer?, _ buf: UnsafeMutablePointer<UInt8>?, _ size: Int32) -> Int32 {
    guard let opaque, let buf else { return cf_averror(EINVAL) }
    let sink = Unmanaged<MuxerOutputFile>.fromOpaque(opaque).takeUnretainedValue()
    let rc = sink.write(buf, Int(size))
    return rc < 0 ? rc : size
}

/// AVIOContext seek callback; `opaque` is an unretained `MuxerOutputFile`.
func fileSinkSeek(_ opaque: UnsafeMutableRawPointer?, _ offset: Int64, _ whence: Int32) -> Int64 {
    guard let opaque else { return Int64(cf_averror(EINVAL)) }
    let sink = Unmanaged<MuxerOutputFile>.fromOpaque(opaque).takeUnretainedValue()
    let rc = sink.flush()
    if rc < 0 { return Int64(rc) }
    if whence == AVSEEK_SIZE {
        var st = stat()
        return fstat(sink.fd, &st) == 0 ? Int64(st.st_size) : Int64(cf_averror(errno))
    }
    let r = lseek(sink.fd, off_t(offset), whence & ~AVSEEK_FORCE)
    return r < 0 ? Int64(cf_averror(errno)) : Int64(r)
}
