import Foundation

/// How the server's data folder is kept out of what it shows (a video's `error`): the folder's
/// spellings (as given, absolute, with symbolic links resolved) and the one rewrite of a message
/// without them. `Sendable`.
struct DataPaths: Sendable {
    /// The data folder's spellings, longest first (so that none is rewritten inside a longer one).
    let spellings: [String]

    init(_ data: URL) {
        let absolute = URL(fileURLWithPath: data.path).standardizedFileURL
        spellings = Set([data.path, absolute.path, absolute.resolvingSymlinksInPath().path]).filter { $0.hasPrefix("/") && $0 != "/" }
            .sorted { $0.count > $1.count }
    }

    /// `message` as it may be shown: the data folder is `DATA` (its files `DATA/media/7/...`), and
    /// a quoted upload file in it (kept, or downloaded into a worker's scratch), with the word
    /// "input" that names it in a media error, is "the upload".
    func scrub(_ message: String) -> String {
        var text = message
        for path in spellings {
            text = text.replacingOccurrences(of: path + "/", with: "DATA/").replacingOccurrences(of: path, with: "DATA")
        }
        return text.replacingOccurrences(of: "(input )?'DATA/(uploads/[^'/]+|scratch/[^'/]+/upload)'", with: "the upload", options: .regularExpression)
    }
}
