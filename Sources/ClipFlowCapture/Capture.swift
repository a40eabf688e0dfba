import ClipFlowCore
import Foundation

/// Stage kinds of the capture module (`testpattern`, `v4l2`).
public enum CaptureStages {
    public static func register(into r: StageRegistry) {
    }
}
