import Foundation

/// `Upload-Metadata` (TUS 1.0): comma-separated pairs, each a key and, after a space, its value in
/// base64; a key alone has the empty value. The one codec of the header: the client writes it
/// (`TUSSession`), `clipflow serve` reads it (`TUSServer`), so both sides keep one policy.
///
/// What `decode` takes, as real clients send it (tus-js-client, Uppy, tuspy: base64 of UTF-8 text):
/// - a key with no value, or with nothing after its space: the empty value (the spec allows it);
/// - spaces around pairs, more than one space between key and value, empty pairs (`a YQ==,,b`, a
///   trailing comma): passed over;
/// - base64 without its `=` padding: read as if padded;
/// - a value that is not UTF-8 (the spec does not require text): read with each invalid sequence as
///   U+FFFD, so the key stays present and a `video_id` or `token` of that kind fails as a wrong
///   value would, instead of being taken for a missing one.
///
/// What it refuses (`Problem`, which the server answers 400 with): a pair of more than a key and a
/// value, a key that is not printable ASCII (the spec's SHOULD: a header's non-ASCII bytes have no
/// agreed encoding), a key given twice (the spec's MUST), a value that is not base64.
public enum TUSMetadata {
    /// Why a header cannot be read, said for a person (the server's 400 carries it).
    public struct Problem: Error, Equatable, CustomStringConvertible, Sendable {
        public let description: String

        public init(_ description: String) { self.description = description }
    }

    /// The header for `pairs`, in their order. A key's characters that a key may not hold (space,
    /// comma, anything but printable ASCII) become `_`, an empty key `_`; a key that then repeats an
    /// earlier one is left out, so `decode` accepts whatever this makes. An empty value is sent as the
    /// key alone.
    public static func encode(_ pairs: [(key: String, value: String)]) -> String {
        var seen = Set<String>()
        var out: [String] = []
        for (k, v) in pairs {
            var key = String(k.map { isKeyCharacter($0) ? $0 : "_" })
            if key.isEmpty { key = "_" }
            guard seen.insert(key).inserted else { continue }
            out.append(v.isEmpty ? key : "\(key) \(Data(v.utf8).base64EncodedString())")
        }
        return out.joined(separator: ",")
    }

    /// The header for `metadata`, keys sorted (so the same metadata always gives the same header).
    public static func encode(_ metadata: [String: String]) -> String {
        encode(metadata.sorted { $0.key < $1.key }.map { (key: $0.key, value: $0.value) })
    }

    /// The metadata the header carries (an empty header: none).
    public static func decode(_ header: String) throws(Problem) -> [String: String] {
        var out: [String: String] = [:]
        for pair in try pairs(header) {
            guard out[pair.key] == nil else { throw Problem("key \"\(pair.key)\" appears twice") }
            guard let encoded = pair.value else {
                out[pair.key] = ""
                continue
            }
            guard let bytes = base64(encoded) else { throw Problem("the value of \"\(pair.key)\" is not base64") }
            out[pair.key] = String(decoding: bytes, as: UTF8.self)
        }
        return out
    }

    /// `header` without the pair of `key`; every other pair is kept as it was sent.
    public static func removing(_ key: String, from header: String) -> String {
        header.split(separator: ",", omittingEmptySubsequences: false).filter { element in
            element.trimmingCharacters(in: .whitespaces).split(separator: " ").first.map(String.init) != key
        }.joined(separator: ",")
    }

    /// The header's pairs, in order: each key checked, each value still in base64 (nil: none).
    private static func pairs(_ header: String) throws(Problem) -> [(key: String, value: Substring?)] {
        var out: [(key: String, value: Substring?)] = []
        for element in header.split(separator: ",", omittingEmptySubsequences: false) {
            let parts = element.trimmingCharacters(in: .whitespaces).split(separator: " ")
            guard let key = parts.first else { continue }
            guard parts.count <= 2, key.allSatisfy(isKeyCharacter) else {
                throw Problem("\"\(element.trimmingCharacters(in: .whitespaces).prefix(40))\" is not KEY or KEY BASE64")
            }
            out.append((String(key), parts.count == 2 ? parts[1] : nil))
        }
        return out
    }

    /// Printable ASCII other than space and comma.
    private static func isKeyCharacter(_ c: Character) -> Bool {
        guard let a = c.asciiValue else { return false }
        return a > 0x20 && a < 0x7f && c != ","
    }

    /// Standard base64, its `=` padding optional.
    private static func base64(_ text: Substring) -> Data? {
        var padded = String(text)
        switch padded.utf8.count % 4 {
        case 2: padded += "=="
        case 3: padded += "="
        default: break
        }
        return Data(base64Encoded: padded)
    }
}
