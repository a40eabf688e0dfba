import ClipFlowCore

/// Stage kinds of the capture module (`testpattern`, `v4l2`).
public enum CaptureStages {
    public static func register(into r: StageRegistry) {
        r.register(TestPatternSource.kind)
        r.register(V4L2Source.kind)
    }
}
