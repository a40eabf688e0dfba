// swift-tools-version:6.0
import PackageDescription

// Module layout (see ../shared/ENGINEERING.md):
//   clipflow (CLI) -> ClipFlowMedia   -> CClipFlowFFmpeg (the only importer of FFmpeg)
//                  -> ClipFlowCapture -> CClipFlowV4L2   (the only importer of the V4L2 headers)
//                  -> ClipFlowUpload  -> CClipFlowCurl   (the only importer of libcurl)
//                  \-> ClipFlowCore (imports no C)
let package = Package(
    name: "clipflow",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "clipflow", targets: ["clipflow"]),
        .library(name: "ClipFlowCore", targets: ["ClipFlowCore"]),
        .library(name: "ClipFlowMedia", targets: ["ClipFlowMedia"]),
        .library(name: "ClipFlowCapture", targets: ["ClipFlowCapture"]),
        .library(name: "ClipFlowUpload", targets: ["ClipFlowUpload"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        .target(
            name: "CClipFlowFFmpeg",
            linkerSettings: [
                .linkedLibrary("avformat"), .linkedLibrary("avcodec"),
                .linkedLibrary("swscale"), .linkedLibrary("avutil"),
            ]
        ),
        .target(name: "CClipFlowV4L2"),
        .target(name: "CClipFlowCurl", linkerSettings: [.linkedLibrary("curl"), .linkedLibrary("crypto")]),
        .target(name: "ClipFlowCore"),
        .target(name: "ClipFlowMedia", dependencies: ["ClipFlowCore", "CClipFlowFFmpeg"]),
        .target(name: "ClipFlowCapture", dependencies: ["ClipFlowCore", "ClipFlowMedia", "CClipFlowV4L2"]),
        .target(name: "ClipFlowUpload", dependencies: ["ClipFlowCore", "CClipFlowCurl"]),
        .executableTarget(
            name: "clipflow",
            dependencies: [
                "ClipFlowCore", "ClipFlowMedia", "ClipFlowCapture", "ClipFlowUpload",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Test helpers: fixtures made with the ffmpeg CLI and oracles (ffprobe, ffmpeg, mediainfo).
        .target(name: "ClipFlowTestSupport", path: "Tests/ClipFlowTestSupport"),
        .testTarget(name: "ClipFlowCoreTests", dependencies: ["ClipFlowCore"]),
        .testTarget(name: "ClipFlowMediaTests", dependencies: ["ClipFlowMedia", "ClipFlowCore", "ClipFlowTestSupport"]),
        .testTarget(name: "ClipFlowCaptureTests", dependencies: ["ClipFlowCapture", "ClipFlowMedia", "ClipFlowCore", "ClipFlowTestSupport"]),
        .testTarget(name: "ClipFlowUploadTests", dependencies: ["ClipFlowUpload", "ClipFlowCore", "ClipFlowTestSupport"]),
        .testTarget(name: "ClipFlowCLITests", dependencies: ["clipflow", "ClipFlowTestSupport"]),
    ]
)
