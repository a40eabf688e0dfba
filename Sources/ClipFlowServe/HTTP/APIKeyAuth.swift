import Foundation
import HTTPTypes
import Hummingbird

/// The hosting API's management routes: a request passes with `Authorization: Bearer` holding the
/// API key or an access token (`Tokens`), or with anything on a server without an API key.
///
/// A browser asking for a page (the list, `GET /videos` whose `Accept` names `text/html`; the
/// studio, `GET /studio`, and its token, `GET /studio/token`) may give the key as a Basic password
/// instead, which is what a browser sends once asked; it is refused with the page's own 401 and
/// `WWW-Authenticate: Basic`. Any other request (another video route included) is refused with
/// `HTTPRefusal` (401): a Basic password, which a browser sends by itself, changes nothing.
struct APIKeyAuth<Context: RequestContext>: RouterMiddleware {
    let tokens: Tokens

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard Self.wantsPage(request) else {
            try tokens.authorize(request.headers[.authorization])
            return try await next(request, context)
        }
        do { try tokens.authorize(Self.bearer(fromBasic: request.headers[.authorization])) } catch let refusal as HTTPRefusal {
            var response = Pages.refusal(refusal.reason)
            response.headers[.wwwAuthenticate] = "Basic realm=\"clipflow videos\", charset=\"UTF-8\""
            return response
        }
        return try await next(request, context)
    }

    /// Whether `request` is a browser's asking for a page (or the studio's token).
    static func wantsPage(_ request: Request) -> Bool {
        guard request.method == .get else { return false }
        if ["/studio", "/studio/token"].contains(request.uri.path) { return true }
        return ["/videos", "/videos/"].contains(request.uri.path) && (request.headers[.accept] ?? "").contains("text/html")
    }

    /// A Basic header's password as a Bearer header; any other header as it is.
    private static func bearer(fromBasic header: String?) -> String? {
        guard let header, header.hasPrefix("Basic "),
            let decoded = Data(base64Encoded: String(header.dropFirst(6))).map({ String(decoding: $0, as: UTF8.self) }),
            let colon = decoded.firstIndex(of: ":")
        else { return header }
        return "Bearer " + decoded[decoded.index(after: colon)...]
    }
}

extension Tokens {
    /// Whether an `Authorization` header carries the API key or an access token (401 otherwise);
    /// on a server without an API key, anything passes.
    func authorize(_ header: String?) throws {
        let header = header ?? ""
        let bearer = header.hasPrefix("Bearer ") ? String(header.dropFirst(7)) : nil
        switch checkBearer(bearer) {
        case .valid: return
        case .expired: throw HTTPRefusal(.unauthorized, "token expired")
        case .wrong: throw HTTPRefusal(.unauthorized, "an API key or access token is needed (Authorization: Bearer)")
        }
    }
}
