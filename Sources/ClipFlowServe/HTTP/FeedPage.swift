import ClipFlowMedia
import Foundation

/// The feed page (`/`, and `/v/ID` to open it at one video): one video per screen, vertical,
/// scroll snapping; the video on screen plays, the others are paused.
///
/// What a viewer gets:
/// - sound: off until asked for (a tap on a muted video, the sound button, `m`), then on for every
///   next video, remembered across visits (`localStorage` `clipflow.sound`); a browser that refuses
///   sound without a gesture gets the video muted and the button showing it;
/// - pause: a tap on a video with sound, `space`, or holding a press (resumes on release);
/// - a progress bar to seek on (pointer or `←`/`→`, 5 s), showing the storyboard's picture of the
///   time under the pointer (`feed.json`'s WebVTT `storyboard`), the name, the time and the duration;
/// - paging by exactly one video: `↓`/`↑`, `PageDown`/`PageUp`, `j`/`k`, and one wheel or
///   trackpad gesture (its inertia is the same gesture), without a click first;
/// - the address follows the video on screen (`/v/ID`), so it can be shared or reloaded;
/// - a portrait video fills a portrait screen; anything else is fitted (letterboxed).
/// - a recording being recorded (`feed.json` entry `live`) has a LIVE mark and starts at its live
///   edge (the newest segment of its playlist), which it reads again as it grows; once the
///   playlist is closed it is a video like the others (mark gone, looping).
///
/// How it starts fast: the player is Media Source Extensions over the ladder's fMP4 segments
/// (`feed.json` lists every rendition's codecs, peak rate, init and first segment). The start rung
/// is the highest whose peak rate fits 70% of the throughput measured on the page's media
/// fetches (the smallest before anything was measured) and no larger than the screen shows; later
/// segments follow the measure. The first video's init and first segments are asked for as soon as
/// the script runs (the page carries the feed), a player's init and first segment side by side,
/// and a first segment is appended as its bytes arrive, so its first pictures show before its
/// last byte is in.
/// Once a video's first segments are in, it and the next two get their covers (the smallest
/// `feed.json` cover that fills the screen, in view order), and then the next two the init and
/// first segment of the chosen rung and of the audio, appended to their own paused players,
/// nothing more; the video on screen keeps 10 s buffered ahead. Videos scrolled more than one
/// past lose their players, and any download still running for a video no longer on screen or
/// next is aborted. Without Media Source Extensions (or for a video whose `feed.json` predates the
/// renditions list), the browser's own HLS plays the master playlist; a browser with neither says
/// so on the video instead of a black box.
///
/// `window.feedLog` records what happened ({what, index, t}: `visible`, `playing`, `prefetched`,
/// `waiting`, `error`, `sound`, `paused`), for tests and the curious.
///
/// The page is three files beside this one, `FeedPage/feed.html`, `feed.css` and `feed.js`, embedded
/// in the binary at build time (`Package.swift`: `.embedInCode`, as `PackageResources`), so an
/// installed clipflow needs no resource files. The page links its style sheet and script
/// (`<link rel="stylesheet" href="feed.css">`, `<script src="feed.js"></script>`), so the files
/// open as they are; `html` puts them inline in those places, once, and `page(feed:)` adds the feed
/// itself (`/feed.json`'s document) before the script, which is what the server sends (its
/// Content-Security-Policy allows inline style and script): the page costs one request, and the
/// first video's first fetches start as soon as the script runs.
enum FeedPage {
    /// The page as served: `feed.html` with `feed.css` and `feed.js` inline.
    static let html = assemble(
        page: String(decoding: PackageResources.feed_html, as: UTF8.self),
        css: String(decoding: PackageResources.feed_css, as: UTF8.self),
        script: String(decoding: PackageResources.feed_js, as: UTF8.self))

    /// The page carrying `feed` (a `HostedFeed` as JSON) in `<script id="feed-doc"
    /// type="application/json">`, every `<` in it as `\u003c` so no text in it ends the element,
    /// and asking the browser in its head to fetch `preload` (paths) at once, as the script's
    /// `fetch` will (`<link rel="preload" as="fetch" crossorigin>`).
    static func page(feed: Data, preload: [String] = []) -> String {
        let json = String(decoding: feed, as: UTF8.self).replacingOccurrences(of: "<", with: "\\u003c")
        let links = preload.map { #"<link rel="preload" as="fetch" crossorigin href=""# + Pages.escape($0) + #"">"# }.joined()
        return html.replacingOnce("</head>", with: links + "</head>")
            .replacingOnce(scriptStart, with: #"<script id="feed-doc" type="application/json">"# + json + "</script>\n" + scriptStart)
    }

    /// What a cold start of `entry` fetches first, as the script chooses it before anything is
    /// measured: the init and first segment of the smallest H.264 rendition (of the smallest
    /// rendition when there is none), and of the audio. A ladder with AV1 rungs leaves the video
    /// to the script, which takes AV1 only where the browser decodes it.
    static func firstFetches(_ entry: FeedEntry) -> [String] {
        let av1 = entry.renditions.contains { $0.codecs.hasPrefix("av01") }
        let h264 = entry.renditions.filter { $0.codecs.hasPrefix("avc") }
        let video = av1 ? nil : (h264.isEmpty ? entry.renditions : h264).min { $0.bandwidth < $1.bandwidth }
        return [video, entry.audio].compactMap { $0 }.flatMap { [$0.`init`, $0.segment] }
    }

    /// Where the page's script begins (`assemble` puts it there, once).
    static let scriptStart = "<script>\n"

    static let styleLink = #"<link rel="stylesheet" href="feed.css">"#
    static let scriptLink = #"<script src="feed.js"></script>"#

    /// `page` with its one `styleLink` replaced by `<style>` holding `css`, its one `scriptLink` by
    /// `<script>` holding `script`, and without the file's final line break.
    static func assemble(page: String, css: String, script: String) -> String {
        var page = page
        if page.hasSuffix("\n") { page.removeLast() }
        return page.replacingOnce(styleLink, with: "<style>\n" + css + "</style>")
            .replacingOnce(scriptLink, with: scriptStart + script + "</script>")
    }
}

extension String {
    /// `self` with `target`, which must occur exactly once (a feed page file without it is a build
    /// mistake the first request would show at once), replaced by `replacement`.
    func replacingOnce(_ target: String, with replacement: String) -> String {
        let parts = components(separatedBy: target)
        precondition(parts.count == 2, "the feed page must hold \(target) exactly once")
        return parts[0] + replacement + parts[1]
    }
}
