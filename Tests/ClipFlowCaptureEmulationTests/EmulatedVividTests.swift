import XCTest
import Foundation
import ClipFlowCore
import ClipFlowCapture
import ClipFlowCaptureEmulation
import CClipFlowV4L2

// The emulated vivid camera itself: the kernel rules the driver code relies on, and how the
// environment selects it. How the driver code behaves against it: ClipFlowCaptureTests.

final class EmulatedVividTests: XCTestCase {
    func testEmulatorQueueRulesMatchTheKernel() throws {
        let emu = EmulatedVivid(clock: ManualClock(start: 100))
        let fd = try emu.open("/dev/video0", O_RDWR | O_NONBLOCK)
        var type: UInt32 = 1  // V4L2_BUF_TYPE_VIDEO_CAPTURE
        // STREAMON without buffers: EINVAL; unknown ioctl: ENOTTY; bad fd: EBADF.
        XCTAssertThrowsError(try emu.ioctl(fd, cf_VIDIOC_STREAMON, &type)) { XCTAssertEqual(($0 as? SyscallErrno)?.code, EINVAL) }
        XCTAssertThrowsError(try emu.ioctl(fd, 0x1234, &type)) { XCTAssertEqual(($0 as? SyscallErrno)?.code, ENOTTY) }
        XCTAssertThrowsError(try emu.ioctl(fd + 1, cf_VIDIOC_STREAMON, &type)) { XCTAssertEqual(($0 as? SyscallErrno)?.code, EBADF) }
        try emu.close(fd)
        XCTAssertEqual(emu.openDescriptors, 0)
    }

    func testEnvironmentSelectsTheEmulatorWithOptions() throws {
        let s = try V4L2Emulation.syscalls(environment: ["CLIPFLOW_V4L2_EMULATE": "formats=yuyv,mjpeg,unplug-after=7,busy"])
        let emu = try XCTUnwrap(s as? EmulatedVivid)
        XCTAssertEqual(emu.configuration.formats, [.yuyv, .mjpeg])
        XCTAssertEqual(emu.configuration.unplugAfterFrames, 7)
        XCTAssertTrue(emu.configuration.busy)
        let faults = try XCTUnwrap(try V4L2Emulation.syscalls(environment: ["CLIPFLOW_V4L2_EMULATE": "jitter=4,stall=10:300"]) as? EmulatedVivid)
        XCTAssertEqual(faults.configuration.timestampJitter, 0.004, accuracy: 1e-12)
        XCTAssertEqual(faults.configuration.readerStall?.afterFrames, 10)
        XCTAssertEqual(faults.configuration.readerStall?.seconds ?? 0, 0.3, accuracy: 1e-12)
        XCTAssertTrue(try V4L2Emulation.syscalls(environment: [:]) is LinuxV4L2Syscalls)
        XCTAssertEqual(try EmulatedVivid.Configuration(options: "broken-every=3").brokenEvery, 3)
        XCTAssertThrowsError(try EmulatedVivid.Configuration(options: "broken-every=0")) {
            XCTAssertTrue("\($0)".contains("CLIPFLOW_V4L2_EMULATE: broken-every needs a number of frames from 1, got '0'"), "\($0)")
        }
        XCTAssertThrowsError(try V4L2Emulation.syscalls(environment: ["CLIPFLOW_V4L2_EMULATE": "bogus"])) {
            XCTAssertTrue("\($0)".contains("unknown option 'bogus'"))
        }
    }
}
