import ClipFlowCore
import Foundation

/// Reads the top-level boxes of an ISO-BMFF (MP4/MOV) file: type, offset and size. Used to verify
/// fast start (moov before mdat) after writing.
public enum MP4Boxes {
    public struct Box: Equatable, Sendable {
        public var type: String
        public var offset: Int64
        public var size: Int64
    }

    public static func topLevel(path: String) throws -> [Box] {
        guard let fh = FileHandle(forReadingAtPath: path) else {
            throw ClipFlowError.failure("cannot open '\(path)' to check its boxes")
        }
        defer { try? fh.close() }
        let end = try fh.seekToEnd()
        var off: UInt64 = 0
        var boxes: [Box] = []
        while off + 8 <= end {
            try fh.seek(toOffset: off)
            guard let head = try fh.read(upToCount: 16), head.count >= 8 else { break }
            let b = [UInt8](head)
            var size = UInt64(b[0]) << 24 | UInt64(b[1]) << 16 | UInt64(b[2]) << 8 | UInt64(b[3])
            let type = String(decoding: b[4..<8], as: UTF8.self)
            if size == 1 {
                guard b.count >= 16 else { break }
                size = b[8..<16].reduce(0) { $0 << 8 | UInt64($1) }
            } else if size == 0 {
                size = end - off
            }
            guard size >= 8 else {
                throw ClipFlowError.failure("'\(path)': malformed box '\(type)' at byte \(off)")
            }
            boxes.append(Box(type: type, offset: Int64(off), size: Int64(size)))
            off += size
        }
        if off != end {
            throw ClipFlowError.failure("'\(path)': boxes do not add up to the file size (\(off) vs \(end))")
        }
        return boxes
    }

    /// True if `moov` comes before `mdat`.
    public static func isFastStart(_ boxes: [Box]) -> Bool {
        guard let m = boxes.firstIndex(where: { $0.type == "moov" }),
            let d = boxes.firstIndex(where: { $0.type == "mdat" })
        else { return false }
        return m < d
    }
}
