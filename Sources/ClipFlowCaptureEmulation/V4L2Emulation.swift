import ClipFlowCapture
import ClipFlowCore
import Foundation

/// The "no camera here" feature: an emulated vivid camera (`EmulatedVivid`) in place of the
/// kernel, chosen by the environment variable `CLIPFLOW_V4L2_EMULATE`.
///
/// Its value is `1`, or comma-separated options:
/// - `formats=yuyv,nv12,yuv420,mjpeg`: the pixel formats the camera offers (default: all four);
/// - `unplug-after=N`: the camera is unplugged after delivering N frames;
/// - `jitter=MS`: buffer timestamps are late by up to MS milliseconds, the first frame's most;
/// - `stall=FRAMES:MS`: after FRAMES frames the reader stalls for MS milliseconds (as under load);
/// - `broken-every=N`: every Nth picture arrives flagged broken (V4L2_BUF_FLAG_ERROR);
/// - `flash`: frames fall due on CLOCK_MONOTONIC's grid of whole frame intervals, and the frame
///   due at each whole second is white (a microphone test beeps at the same instants);
/// - `busy`: another program is streaming from it (EBUSY);
/// - `denied`: opening it is not permitted (EACCES);
/// - `missing`: there is no camera (ENOENT);
/// - `output`: the device is not a capture device (an output-only node).
/// For example `CLIPFLOW_V4L2_EMULATE=formats=mjpeg,unplug-after=30`. The camera appears at
/// `/dev/video0` and no real device is touched. Unset, empty or `0`: the real kernel.
public enum V4L2Emulation {
    public static let environmentVariable = "CLIPFLOW_V4L2_EMULATE"

    /// The syscalls `environment` asks for: the real kernel, or a new emulated camera paced by
    /// `clock`. Throws naming the variable when an option is unknown.
    public static func syscalls(environment: [String: String], clock: any Clock = SystemClock()) throws -> any V4L2Syscalls {
        guard let value = environment[environmentVariable], !value.isEmpty, value != "0" else { return LinuxV4L2Syscalls() }
        return EmulatedVivid(try EmulatedVivid.Configuration(options: value), clock: clock)
    }

    /// Makes `V4L2System.defaultSyscalls()` follow this process's environment (read on first
    /// use, so a command that opens no camera never fails on a bad value).
    public static func installFromProcessEnvironment() {
        V4L2System.setDefault { try syscalls(environment: ProcessInfo.processInfo.environment) }
    }
}
