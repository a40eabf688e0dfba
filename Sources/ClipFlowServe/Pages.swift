import Foundation
import HTTPTypes
import Hummingbird

/// The pages the server serves to a browser (public, read-only):
/// - `/`: a vertical feed, one video per screen with scroll snapping; the video on screen plays
///   muted (the browser's own HLS, so its own ABR), the others pause; when a video comes on screen
///   the first segments of the next two are fetched, so they start at once;
/// - `/videos` (asked for as HTML): every video with its cover, name, duration and status.
enum Pages {
    static func feed() -> Response {
        html(
            """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
            <title>clipflow feed</title>
            <style>
            html, body { margin: 0; height: 100%; background: #000; color: #fff; font: 15px system-ui, sans-serif; }
            #feed { height: 100vh; overflow-y: scroll; scroll-snap-type: y mandatory; scroll-behavior: smooth; }
            .item { height: 100vh; scroll-snap-align: start; scroll-snap-stop: always; position: relative;
                    display: flex; align-items: center; justify-content: center; }
            .item video { max-width: 100%; max-height: 100%; }
            .item .name { position: absolute; left: 16px; bottom: 20px; text-shadow: 0 1px 3px #000; }
            #empty { padding: 2em; }
            </style></head>
            <body><main id="feed"></main>
            <script>
            // A log a test (or a curious person) can read: what played when, what was prefetched.
            window.feedLog = [];
            const log = (what, index) => window.feedLog.push({ what, index, t: performance.now() });
            const fetched = new Set();
            function prefetch(entry, index) {
              for (const p of entry.prefetch || []) for (const url of [p.init, p.segment]) {
                if (fetched.has(url)) continue;
                fetched.add(url);
                fetch(url).then(() => log('prefetched', index)).catch(() => {});
              }
            }
            fetch('/feed.json').then(r => r.json()).then(({ videos }) => {
              const feed = document.getElementById('feed');
              if (videos.length === 0) { feed.innerHTML = '<p id="empty">No videos yet.</p>'; return; }
              videos.forEach((entry, index) => {
                const item = document.createElement('section');
                item.className = 'item';
                item.dataset.index = index;
                const video = document.createElement('video');
                Object.assign(video, { muted: true, playsInline: true, loop: true, preload: 'none', poster: entry.cover });
                video.dataset.src = entry.master;
                video.addEventListener('playing', () => log('playing', index));
                const name = document.createElement('div');
                name.className = 'name';
                name.textContent = entry.name;
                item.append(video, name);
                feed.append(item);
              });
              const observer = new IntersectionObserver(changes => {
                for (const change of changes) {
                  const index = Number(change.target.dataset.index);
                  const video = change.target.querySelector('video');
                  if (change.isIntersecting && change.intersectionRatio >= 0.6) {
                    if (!video.src) video.src = video.dataset.src;
                    video.play().catch(() => {});
                    window.currentIndex = index;
                    log('visible', index);
                    for (const next of [index + 1, index + 2]) if (videos[next]) prefetch(videos[next], next);
                  } else {
                    video.pause();
                  }
                }
              }, { threshold: [0, 0.6] });
              document.querySelectorAll('.item').forEach(item => observer.observe(item));
            });
            </script></body></html>
            """)
    }

    static func list(_ videos: [[String: Any]]) -> Response {
        var rows = ""
        for v in videos {
            let cover = (v["screenshot"] as? String).flatMap { $0.isEmpty ? nil : $0 }
            let seconds = (v["duration"] as? Double).map { String(format: "%d:%02d", Int($0) / 60, Int($0) % 60) } ?? "–"
            rows += """
                <li class="video"><div class="cover">\(cover.map { "<img src=\"\(escape($0))\" alt=\"\">" } ?? "")</div>\
                <div><div class="name">\(escape(v["name"] as? String ?? ""))</div>\
                <div class="meta">\(seconds) · <span class="status">\(escape(v["status"] as? String ?? ""))</span></div></div></li>

                """
        }
        return html(
            """
            <!doctype html>
            <html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,initial-scale=1">
            <title>clipflow videos</title>
            <style>
            body { margin: 0; padding: 16px; font: 15px system-ui, sans-serif; background: #fafafa; }
            ul { list-style: none; padding: 0; display: grid; grid-template-columns: repeat(auto-fill, minmax(200px, 1fr)); gap: 16px; }
            .cover { aspect-ratio: 16 / 9; background: #ddd; display: flex; align-items: center; justify-content: center; overflow: hidden; }
            .cover img { max-width: 100%; max-height: 100%; }
            .name { font-weight: 600; margin-top: 6px; overflow-wrap: anywhere; }
            .meta { color: #555; }
            </style></head>
            <body><h1>Videos</h1><p><a href="/">Feed</a></p>
            <ul>
            \(rows)</ul></body></html>
            """)
    }

    private static func html(_ text: String) -> Response {
        var headers = HTTPFields()
        headers[.contentType] = "text/html; charset=utf-8"
        headers[.cacheControl] = "no-cache"
        headers[.contentSecurityPolicy] =
            "default-src 'self'; style-src 'self' 'unsafe-inline'; script-src 'self' 'unsafe-inline'; img-src 'self'; media-src 'self' blob:"
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
