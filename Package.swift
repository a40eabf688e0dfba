// swift-tools-version:6.0
import PackageDescription

// Module layout (see ../shared/ENGINEERING.md):
//   clipflow (CLI) -> ClipFlowMedia -> CClipFlowFFmpeg (the only importer of FFmpeg)
//                  \-> ClipFlowCore (imports no C)
let package = Package(
    name: "clipflow",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "clipflow", targets: ["clipflow"]),
        .library(name: "ClipFlowCore", targets: ["ClipFlowCore"]),
        .library(name: "ClipFlowMedia", targets: ["ClipFlowMedia"]),
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
        .target(name: "ClipFlowCore"),
        .target(name: "ClipFlowMedia", dependencies: ["ClipFlowCore", "CClipFlowFFmpeg"]),
        .executableTarget(
            name: "clipflow",
            dependencies: [
                "ClipFlowCore", "ClipFlowMedia",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        // Test helpers: fixtures made with the ffmpeg CLI and oracles (ffprobe, ffmpeg, mediainfo).
        .target(name: "ClipFlowTestSupport", path: "Tests/ClipFlowTestSupport"),
        .testTarget(name: "ClipFlowCoreTests", dependencies: ["ClipFlowCore"]),
        .testTarget(name: "ClipFlowMediaTests", dependencies: ["ClipFlowMedia", "ClipFlowCore", "ClipFlowTestSupport"]),
        .testTarget(name: "ClipFlowCLITests", dependencies: ["clipflow", "ClipFlowTestSupport"]),
    ]
)
