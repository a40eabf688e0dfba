internal import CClipFlowV4L2
import ClipFlowCore
import Foundation
import Synchronization

// The syscall seam of the V4L2 driver code (after swift-system's Syscalls/Mocking): every call the
// driver makes to the kernel goes through `V4L2Syscalls`. Production uses `LinuxV4L2Syscalls`;
// tests and CI (no camera, no v4l2loopback) use `EmulatedVivid` (module ClipFlowCaptureEmulation),
// which answers the same ioctls with the same structs and errnos as the kernel's vivid test
// driver. The code above the seam (`V4L2Device`, `V4L2Source`) is the same in both cases.

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

/// The process-wide syscalls the capture stages use unless given others: the real kernel, unless
/// the program chose others with `setDefault` before opening a camera (the clipflow binary does so
/// for its "no camera here" feature, `V4L2Emulation` in ClipFlowCaptureEmulation).
public enum V4L2System {
    /// Makes the default syscalls; runs at most once, on first use.
    public typealias Provider = @Sendable () throws -> any V4L2Syscalls

    private static let shared = DefaultSyscalls()

    /// Sets what `defaultSyscalls()` returns. Takes effect only before its first call.
    public static func setDefault(_ provider: @escaping Provider) { shared.set(provider) }

    /// The process-wide default (made once, on first use). Throws what the provider threw, e.g.
    /// an emulation option this build does not know.
    public static func defaultSyscalls() throws -> any V4L2Syscalls { try shared.get() }
}

/// A default made once, on first use, by a provider that can be replaced until then.
final class DefaultSyscalls: Sendable {
    private struct State {
        var provider: V4L2System.Provider = { LinuxV4L2Syscalls() }
        var made: Result<any V4L2Syscalls, ClipFlowError>?
    }
    private let state = Mutex(State())

    func set(_ provider: @escaping V4L2System.Provider) {
        state.withLock { s in if s.made == nil { s.provider = provider } }
    }

    /// The provider's result, made on the first call and returned (or rethrown) on every call.
    func get() throws -> any V4L2Syscalls {
        try state.withLock { s in
            if let made = s.made { return try made.get() }
            let result: Result<any V4L2Syscalls, ClipFlowError>
            do { result = .success(try s.provider()) } catch let e as ClipFlowError {
                result = .failure(e)
            } catch { result = .failure(.failure("\(error)")) }
            s.made = result
            return try result.get()
        }
    }
}
