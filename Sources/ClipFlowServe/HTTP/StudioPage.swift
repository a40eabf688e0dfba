import Foundation

/// The studio (`/studio`, behind the API key as a Basic password): drop or choose videos to upload
/// (TUS from the page, with `fetch` and `Blob.slice`, 1 MiB a PATCH; an upload's URL is kept in
/// `localStorage` under the file's name, size and date, so the same file added after a reload goes
/// on from the offset the server has, asked with HEAD), a progress bar per file, and the videos
/// (refreshed every 2 s) with their status and progress, cover, length, access, what viewers saw
/// (`GET /videos/{id}/views`) and buttons to rename, make private or public, copy the watch link
/// (with a token for a private video) and delete.
///
/// The page carries an access token (1 h; renewed from `GET /studio/token` every 20 minutes)
/// that its calls send as `Authorization: Bearer`; the API takes neither cookies nor Basic
/// passwords, which a browser would send by itself, so another site cannot act through it (no
/// CSRF). `window.studioLog` records what happened ({what, t, ...}: `created`, `resumed` with its
/// `offset`, `uploaded`, `listed`, `renamed`, `copied` with the `link`, `deleted`), for tests.
///
/// The page is one file beside this one, `StudioPage/studio.html`, embedded in the binary at build
/// time (`Package.swift`: `.embedInCode`).
enum StudioPage {
    static let html = String(decoding: PackageResources.studio_html, as: UTF8.self)

    /// The page with its settings (`<script id="studio-config" type="application/json">`) before
    /// its script: the access token and where uploads go.
    static func page(token: String) -> String {
        let config = "{\"token\": \"\(token)\", \"uploads\": \"/files\"}"
        return html.replacingOnce(
            FeedPage.scriptStart, with: #"<script id="studio-config" type="application/json">"# + config + "</script>\n" + FeedPage.scriptStart)
    }
}
