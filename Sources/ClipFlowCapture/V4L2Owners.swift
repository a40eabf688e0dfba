internal import CClipFlowV4L2
import ClipFlowCore
import ClipFlowMedia
import Foundation

// The owners of the kernel objects a camera uses, one owner per object, released in its deinit:
// `DeviceDescriptor` closes the fd, `MappedBuffer` unmaps one buffer; `V4L2Device` owns both.
// Plus the checked ioctl helper (every failure carries the call and the OS's words) and the C
// string conversions.

/// A failed V4L2 call: which one and the errno (the operation and the OS's words).
struct V4L2CallError: Error, CustomStringConvertible {
    let operation: String
    let errno: SyscallErrno
    var code: Int32 { errno.code }
    var description: String { "\(operation) failed: \(errno)" }
}

/// The device's file descriptor. Closed by `close()` or deinit.
final class DeviceDescriptor {
    let fd: Int32
    let syscalls: any V4L2Syscalls
    private var open = true

    init(path: String, syscalls: any V4L2Syscalls) throws(SyscallErrno) {
        fd = try syscalls.open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC)
        self.syscalls = syscalls
    }
    deinit { close() }

    func close() {
        guard open else { return }
        open = false
        try? syscalls.close(fd)
    }

    /// The one checked helper for V4L2 ioctls: runs `request` on `value` (the request's struct).
    func ioctl<T>(_ operation: String, _ request: UInt, _ value: inout T) throws(V4L2CallError) {
        do { try withUnsafeMutablePointer(to: &value) { p throws(SyscallErrno) in _ = try syscalls.ioctl(fd, request, UnsafeMutableRawPointer(p)) } } catch {
            throw V4L2CallError(operation: operation, errno: error)
        }
    }
}

/// One memory-mapped capture buffer. Unmapped in deinit.
final class MappedBuffer {
    let address: UnsafeMutableRawPointer
    let length: Int
    private let syscalls: any V4L2Syscalls
    init(fd: Int32, length: Int, offset: Int, syscalls: any V4L2Syscalls) throws(V4L2CallError) {
        do { address = try syscalls.mmap(length: length, prot: PROT_READ | PROT_WRITE, flags: MAP_SHARED, fd: fd, offset: offset) } catch {
            throw V4L2CallError(operation: "mmap of a \(length)-byte buffer", errno: error)
        }
        self.length = length
        self.syscalls = syscalls
    }
    deinit { try? syscalls.munmap(address, length: length) }
}

/// A NUL-terminated C char array (a tuple) as a String.
func cString<T>(_ field: inout T) -> String {
    withUnsafeBytes(of: &field) { raw in
        let bytes = raw.prefix { $0 != 0 }
        return String(decoding: bytes, as: UTF8.self)
    }
}

/// "YUYV", "MJPG", ... from a fourcc.
func fourccString(_ code: UInt32) -> String {
    let bytes = (0..<4).map { UInt8((code >> (8 * UInt32($0))) & 0xff) }
    return String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespaces)
}
