import HTTPTypes

/// A request refused on purpose: the status and the reason (never a secret). The TUS server sends
/// the reason as text, the hosting API as JSON (`{"detail": reason}`).
struct HTTPRefusal: Error {
    var status: HTTPResponse.Status
    var reason: String
    init(_ status: HTTPResponse.Status, _ reason: String) {
        self.status = status
        self.reason = reason
    }
}
