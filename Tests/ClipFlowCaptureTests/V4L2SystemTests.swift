import XCTest
import Foundation
import ClipFlowCore
@testable import ClipFlowCapture

/// The process-wide default syscalls (`V4L2System`), through a private instance of its state.
final class V4L2SystemTests: XCTestCase {
    func testDefaultIsTheRealKernel() throws {
        XCTAssertTrue(try DefaultSyscalls().get() is LinuxV4L2Syscalls)
    }

    func testProviderRunsOnceAndCannotBeReplacedAfterFirstUse() throws {
        let d = DefaultSyscalls()
        let calls = Counter()
        let made = LinuxV4L2Syscalls()
        d.set {
            calls.add(); return made
        }
        XCTAssertTrue(try d.get() === made)
        d.set {
            XCTFail("replaced after first use"); return LinuxV4L2Syscalls()
        }
        XCTAssertTrue(try d.get() === made)
        XCTAssertEqual(calls.value, 1)
    }

    func testProviderErrorIsKeptAndRethrownAsAClipFlowError() {
        let d = DefaultSyscalls()
        d.set { throw ClipFlowError.badInput("CLIPFLOW_V4L2_EMULATE: unknown option 'warp'") }
        for _ in 0..<2 {
            XCTAssertThrowsError(try d.get()) { XCTAssertEqual("\($0)", "CLIPFLOW_V4L2_EMULATE: unknown option 'warp'") }
        }
        let other = DefaultSyscalls()
        other.set { throw SyscallErrno(ENOENT) }
        XCTAssertThrowsError(try other.get()) { XCTAssertTrue($0 is ClipFlowError, "\($0)") }
    }
}

private final class Counter: @unchecked Sendable {  // read and written under `lock`
    private let lock = NSLock()
    private var n = 0
    func add() { lock.lock(); n += 1; lock.unlock() }
    var value: Int { lock.lock(); defer { lock.unlock() }; return n }
}
