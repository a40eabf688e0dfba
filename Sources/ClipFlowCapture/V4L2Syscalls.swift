internal import CClipFlowV4L2
import ClipFlowCore
import Foundation

// The syscall seam of the V4L2 driver code (after swift-system's Syscalls/Mocking): every call the
// driver makes to the kernel goes through `V4L2Syscalls`. Production uses `LinuxV4L2Syscalls`;
// tests and CI (no camera, no v4l2loopback) use `EmulatedVivid`, which answers the same ioctls
// with the same structs and errnos as the kernel's vivid test driver. The code above the seam
// (`V4L2Device`, `V4L2Source`) is the same in both cases.

/// An errno from a failed call, with the OS's own words for it.
public struct SyscallErrno: Error, Equatable, Sendable, CustomStringConvertible {
    public let code: Int32
    public init(_ code: Int32) { self.code = code }
    /// strerror text, e.g. "Device or resource busy".
    public var description: String { String(cString: strerror(code)) }
}

/// The kernel calls a V4L2 driver client makes. Failures throw the errno.
///
/// Implementations must be thread-safe (several devices may be used from different queues).
public protocol V4L2Syscalls: AnyObject, Sendable {
    /// open(2). Returns the file descriptor.
    func open(_ path: String, _ flags: Int32) throws(SyscallErrno) -> Int32
    func close(_ fd: Int32) throws(SyscallErrno)
    /// ioctl(2) with a pointer argument (the V4L2 struct of `request`). Returns the result (>= 0).
    @discardableResult
    func ioctl(_ fd: Int32, _ request: UInt, _ arg: UnsafeMutableRawPointer) throws(SyscallErrno) -> Int32
    /// mmap(2) of `length` bytes of `fd` at `offset`.
    func mmap(length: Int, prot: Int32, flags: Int32, fd: Int32, offset: Int) throws(SyscallErrno) -> UnsafeMutableRawPointer
    func munmap(_ address: UnsafeMutableRawPointer, length: Int) throws(SyscallErrno)
    /// poll(2) on one descriptor. Returns the `revents` (0 when the timeout passed).
    func poll(_ fd: Int32, events: Int16, timeoutMs: Int32) throws(SyscallErrno) -> Int16
    /// Device nodes that may be cameras (real: /dev/video*, sorted by number).
    func deviceNodes() -> [String]
}

/// The real kernel.
public final class LinuxV4L2Syscalls: V4L2Syscalls {
    public init() {}

    public func open(_ path: String, _ flags: Int32) throws(SyscallErrno) -> Int32 {
        while true {
            let fd = Glibc.open(path, flags)
            if fd >= 0 { return fd }
            if errno != EINTR { throw SyscallErrno(errno) }
        }
    }

    public func close(_ fd: Int32) throws(SyscallErrno) {
        // Linux frees the descriptor even when close reports EINTR: never retry.
        if Glibc.close(fd) != 0, errno != EINTR { throw SyscallErrno(errno) }
    }

    public func ioctl(_ fd: Int32, _ request: UInt, _ arg: UnsafeMutableRawPointer) throws(SyscallErrno) -> Int32 {
        while true {
            let rc = cf_v4l2_ioctl(fd, request, arg)
            if rc >= 0 { return rc }
            if errno != EINTR { throw SyscallErrno(errno) }
        }
    }

    public func mmap(length: Int, prot: Int32, flags: Int32, fd: Int32, offset: Int) throws(SyscallErrno) -> UnsafeMutableRawPointer {
        guard let p = Glibc.mmap(nil, length, prot, flags, fd, off_t(offset)), p != MAP_FAILED else { throw SyscallErrno(errno) }
        return p
    }

    public func munmap(_ address: UnsafeMutableRawPointer, length: Int) throws(SyscallErrno) {
        if Glibc.munmap(address, length) != 0 { throw SyscallErrno(errno) }
    }

    public func poll(_ fd: Int32, events: Int16, timeoutMs: Int32) throws(SyscallErrno) -> Int16 {
        var p = pollfd(fd: fd, events: events, revents: 0)
        while true {
            let rc = Glibc.poll(&p, 1, timeoutMs)
            if rc >= 0 { return rc == 0 ? 0 : p.revents }
            if errno != EINTR { throw SyscallErrno(errno) }
        }
    }

    public func deviceNodes() -> [String] {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: "/dev")) ?? []
        return names.compactMap { n -> (Int, String)? in
            guard n.hasPrefix("video"), let k = Int(n.dropFirst(5)) else { return nil }
            return (k, "/dev/" + n)
        }.sorted { $0.0 < $1.0 }.map(\.1)
    }
}

/// The process-wide syscalls the capture stages use unless given others.
///
/// Normally the real kernel. When the environment variable `CLIPFLOW_V4L2_EMULATE` is set, an
/// emulated vivid camera (see `EmulatedVivid`, paced by the system clock) appears at
/// `/dev/video0` instead and no real device is touched. Its value is `1`, or comma-separated
/// options:
/// - `formats=yuyv,nv12,yuv420,mjpeg`: the pixel formats the camera offers (default: all four);
/// - `unplug-after=N`: the camera is unplugged after delivering N frames;
/// - `jitter=MS`: buffer timestamps are late by up to MS milliseconds, the first frame's most;
/// - `stall=FRAMES:MS`: after FRAMES frames the reader stalls for MS milliseconds (as under load);
/// - `busy`: another program is streaming from it (EBUSY);
/// - `denied`: opening it is not permitted (EACCES);
/// - `missing`: there is no camera (ENOENT);
/// - `output`: the device is not a capture device (an output-only node).
/// For example `CLIPFLOW_V4L2_EMULATE=formats=mjpeg,unplug-after=30`.
public enum V4L2System {
    public static let environmentVariable = "CLIPFLOW_V4L2_EMULATE"

    private static let shared: Result<any V4L2Syscalls, ClipFlowError> = {
        do { return .success(try syscalls(environment: ProcessInfo.processInfo.environment)) } catch let e as ClipFlowError {
            return .failure(e)
        } catch { return .failure(.failure("\(error)")) }
    }()

    /// The process-wide default (made once). Throws when `CLIPFLOW_V4L2_EMULATE` has an option
    /// this build does not know.
    public static func defaultSyscalls() throws -> any V4L2Syscalls { try shared.get() }

    /// The syscalls `environment` asks for: the real kernel, or a new emulated camera.
    public static func syscalls(environment: [String: String], clock: any Clock = SystemClock()) throws -> any V4L2Syscalls {
        guard let value = environment[environmentVariable], !value.isEmpty, value != "0" else { return LinuxV4L2Syscalls() }
        return EmulatedVivid(try EmulatedVivid.Configuration(options: value), clock: clock)
    }
}
