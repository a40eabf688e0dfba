import Foundation
import HTTPTypes
import Hummingbird

/// The pages the server serves to a browser:
/// - `/` and `/v/ID`: the feed (`FeedPage`), public, as `/feed.json` is: it shows only videos that
///   play;
/// - `/videos` (asked for as HTML): every video with its cover (a link to it in the feed once it
///   plays), name, duration, status and, for a failed one, why. It shows what the JSON list shows,
///   so it asks for the same key (`HostingAPI`);
/// - `/studio`: uploads and the videos to manage (`StudioPage`), behind the same key;
/// - `/favicon.ico`, which browsers ask every site for: a play button, 32x32.
enum Pages {
    /// The feed page carrying `feed` (`/feed.json`'s document). `mediaOrigin`: where media bytes
    /// come from when not from this server (`MediaStorage`).
    /// `preload`: what the first video's player fetches first (`FeedPage.firstFetches`).
    static func feed(_ feed: Data, preload: [String], mediaOrigin: String?) -> Response {
        html(FeedPage.page(feed: feed, preload: preload), mediaOrigin: mediaOrigin)
    }

    /// The studio carrying an access token (`StudioPage`).
    static func studio(token: String, mediaOrigin: String?) -> Response {
        var page = html(StudioPage.page(token: token), mediaOrigin: mediaOrigin, framed: false)
        page.headers[.cacheControl] = "no-store"  // it carries an access token
        return page
    }

    /// The icon: a white play button on blue, an ICO holding one 32x32 PNG.
    static func favicon() -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "image/x-icon"
        headers[.cacheControl] = "public, max-age=86400"
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(bytes: icon)))
    }

    private static let icon = [UInt8](
        Data(
            base64Encoded:
                "AAABAAEAICAAAAEAIACrAAAAFgAAAIlQTkcNChoKAAAADUlIRFIAAAAgAAAAIAgGAAAAc3p69AAAAHJJREFUeNrt17ENwCAMBEAvkpWYn22CaCiIEgX85hNsS9R/BQK/"
                + "SDdHyqflkbuxDn6ErA6/IKgAVnhDBOBXgDp0ABoxBUBCVAAEBALQIGCAWQgcMAoxA7xF7Avwdwl9PkQ+P6PYiAKwVTf4TjWjl1NmPS+KbnPYxYwd9wAAAABJRU5ErkJggg=="
        ) ?? Data())

    static func list(_ videos: [VideoResource], mediaOrigin: String?) -> Response {
        var rows = ""
        for v in videos {
            let cover = v.screenshot.isEmpty ? nil : v.screenshot
            let seconds = v.duration.map { String(format: "%d:%02d", Int($0) / 60, Int($0) % 60) } ?? "–"
            var picture = cover.map { "<img src=\"\(escape($0))\" alt=\"\" loading=\"lazy\">" } ?? ""
            if let status = VideoRow.Status(rawValue: v.status), status == .viewable || status == .ready {
                picture = "<a href=\"/v/\(v.id)\" aria-label=\"play\">\(picture)</a>"
            }
            let reason = v.error.map { "<div class=\"error\">\(escape($0))</div>" } ?? ""
            rows += """
                <li class="video" data-id="\(v.id)"><div class="cover">\(picture)</div>\
                <div><div class="name">\(escape(v.name))</div>\
                <div class="meta">\(seconds) · <span class="status">\(escape(v.status))</span></div>\(reason)</div></li>

                """
        }
        let body =
            videos.isEmpty
            ? """
            <p class="empty">No videos yet. Upload one with <code>clipflow upload VIDEO --to clipflow --endpoint URL</code> \
            (or any TUS client, with the API key when the server has one); it appears here at once and in the <a href="/">feed</a> once it plays.</p>
            """ : "<ul>\n\(rows)</ul>"
        return html(
            """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
            <title>clipflow videos</title>
            <style>
            body { margin: 0; padding: 16px; font: 15px system-ui, sans-serif; background: #fafafa; }
            ul { list-style: none; padding: 0; display: grid; grid-template-columns: repeat(auto-fill, minmax(200px, 1fr)); gap: 16px; }
            .cover { aspect-ratio: 16 / 9; background: #ddd; display: flex; align-items: center; justify-content: center; overflow: hidden; }
            .cover a { display: flex; width: 100%; height: 100%; align-items: center; justify-content: center; }
            .cover img { max-width: 100%; max-height: 100%; }
            .name { font-weight: 600; margin-top: 6px; overflow-wrap: anywhere; }
            .meta { color: #555; }
            .error { color: #a40000; margin-top: 4px; overflow-wrap: anywhere; }
            </style></head>
            <body><h1>Videos</h1><p><a href="/">Feed</a></p>
            \(body)</body></html>
            """, mediaOrigin: mediaOrigin, framed: false)
    }

    /// 401 for the list page: why, and what to give.
    static func refusal(_ reason: String) -> Response {
        var response = html(
            """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><title>clipflow videos</title></head>
            <body><h1>Videos</h1><p>\(escape(reason)). The list needs the server's API key: give it as the password \
            (any user name). The <a href="/">feed</a> is public.</p></body></html>
            """)
        response.status = .unauthorized
        return response
    }

    /// A page: only this origin (and `mediaOrigin`, for covers, video and the player's fetches);
    /// `framed` false: no other site may show it in a frame (the pages behind the key, whose
    /// buttons act: no clickjacking).
    private static func html(_ text: String, mediaOrigin: String? = nil, framed: Bool = true) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.cacheControl] = "no-cache"
        let media = mediaOrigin.map { " " + $0 } ?? ""
        headers[.contentSecurityPolicy] =
            "default-src 'self'; style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline'; img-src 'self'\(media); "
            + "media-src 'self' blob:\(media); connect-src 'self'\(media)" + (framed ? "" : "; frame-ancestors 'none'")
        if !framed { headers[HTTPField.Name("X-Frame-Options")!] = "DENY" }
        return Response(status: .ok, headers: headers, body: .init(byteBuffer: ByteBuffer(string: text)))
    }

    /// Text for HTML content and attribute values.
    static func escape(_ s: String) -> String {
        var out = ""
        for ch in s {
            switch ch {
            case "&": out += "&amp;"
            case "<": out += "&lt;"
            case ">": out += "&gt;"
            case "\"": out += "&quot;"
            case "'": out += "&#39;"
            default: out.append(ch)
            }
        }
        return out
    }
}
