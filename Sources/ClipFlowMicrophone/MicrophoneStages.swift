import ClipFlowCore

/// Stage kinds of the microphone module (`microphone`).
public enum MicrophoneStages {
    public static func register(into r: StageRegistry) {
        r.register(MicrophoneSource.kind)
    }
}
