import Foundation

/// The bodies of Gcore's video hosting API, as far as clipflow speaks it: one set of types for the
/// client (`GcoreUploader`, `GcoreAuth`) and for `clipflow serve`, which answers the same API
/// (`HostingAPI`).
///
///     POST   /auth/refresh        Refresh   -> Tokens
///     POST   /videos              NewVideo  -> Video
///     GET    /videos, /videos/ID            -> [Video], Video
///     GET    /videos/ID/upload              -> UploadTarget
///     a refusal                             -> Refusal
///
/// Reading:
/// - answers (`Video`, `UploadTarget`, `Tokens`, `Refusal`) are read leniently, as a client of
///   Gcore's own API must read them: fields they do not name are ignored, and a field that is
///   absent, null or of another type than clipflow sends reads as absent (nil, "" or []), so a
///   field Gcore shapes otherwise (its `created_at` is a date, clipflow's is seconds) costs
///   nothing. Ids and tokens are numbers or strings (`ID`). Only a video's `id` must be there.
/// - requests (`NewVideo`, `Refresh`) are read strictly: a field that is missing (`name`) or of
///   the wrong type, or a number out of its type's range, throws a `DecodingError` whose coding
///   path names the field, which the server answers 400 naming it.
///
/// Writing: a `Video` with every field, absent values as null (as `clipflow serve` answers);
/// everything else without its absent fields.
public enum Gcore {
    /// An id as the API gives it: a number (Gcore, `clipflow serve`) or a string; never empty.
    /// Written back as it came.
    public enum ID: Codable, Sendable, Hashable, CustomStringConvertible, ExpressibleByIntegerLiteral, ExpressibleByStringLiteral {
        case number(Int64)
        case text(String)

        public init(integerLiteral value: Int64) { self = .number(value) }
        public init(stringLiteral value: String) { self = .text(value) }

        public var description: String {
            switch self {
            case .number(let n): String(n)
            case .text(let s): s
            }
        }

        public init(from decoder: any Decoder) throws {
            let c = try decoder.singleValueContainer()
            if let n = try? c.decode(Int64.self) {
                self = .number(n)
                return
            }
            let s = try c.decode(String.self)
            guard !s.isEmpty else { throw DecodingError.dataCorruptedError(in: c, debugDescription: "an empty id") }
            self = .text(s)
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.singleValueContainer()
            switch self {
            case .number(let n): try c.encode(n)
            case .text(let s): try c.encode(s)
            }
        }
    }

    /// The body of `POST /videos`. `clientID` and `mode` are `clipflow serve`'s (`mode`: "ladder"
    /// or "copy"); Gcore takes more fields, which clipflow does not send.
    public struct NewVideo: Codable, Sendable, Equatable {
        public var name: String
        public var description: String?
        public var clientID: Int64?
        public var mode: String?
        /// `clipflow serve`: the video is a recording whose fragments arrive as it is recorded.
        public var recording: Bool?
        /// `clipflow serve`: "public" or "signed" (played only with a token).
        public var access: String?

        public init(
            name: String, description: String? = nil, clientID: Int64? = nil, mode: String? = nil, recording: Bool? = nil, access: String? = nil
        ) {
            self.name = name
            self.description = description
            self.clientID = clientID
            self.mode = mode
            self.recording = recording
            self.access = access
        }

        enum CodingKeys: String, CodingKey {
            case name, description, mode, recording, access
            case clientID = "client_id"
        }

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            name = try c.strict(String.self, .name, required: true) ?? ""
            description = try c.strict(String.self, .description)
            clientID = try c.strict(Int64.self, .clientID)
            mode = try c.strict(String.self, .mode)
            recording = try c.strict(Bool.self, .recording)
            access = try c.strict(String.self, .access)
        }
    }

    /// The body of `POST /auth/refresh`.
    public struct Refresh: Codable, Sendable, Equatable {
        public var refresh: String?

        public init(refresh: String?) { self.refresh = refresh }

        enum CodingKeys: String, CodingKey { case refresh }

        public init(from decoder: any Decoder) throws {
            refresh = try decoder.container(keyedBy: CodingKeys.self).strict(String.self, .refresh)
        }
    }

    /// The answer of `POST /auth/refresh` (and of Gcore's `/auth/login`): `access` (or
    /// `access_token`) and, from a login, `refresh` (or `refresh_token`). `access` is "" when the
    /// answer has none.
    public struct Tokens: Codable, Sendable, Equatable {
        public var access: String
        public var refresh: String?

        public init(access: String, refresh: String? = nil) {
            self.access = access
            self.refresh = refresh
        }

        enum CodingKeys: String, CodingKey {
            case access, refresh
            case accessToken = "access_token", refreshToken = "refresh_token"
        }

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            access = c.text(.access) ?? c.text(.accessToken) ?? ""
            refresh = c.text(.refresh) ?? c.text(.refreshToken)
        }

        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(access, forKey: .access)
            try c.encodeIfPresent(refresh, forKey: .refresh)
        }
    }

    /// A video. `clipflow serve` sets every field; Gcore's answers leave out what it does not
    /// have (`mode`, `renditions`, `progress` are `clipflow serve`'s).
    public struct Video: Codable, Sendable, Equatable {
        public var id: ID
        public var name: String
        public var description: String?
        public var clientID: ID?
        /// `clipflow serve`: pending, processing, viewable, ready, error; Gcore has its own.
        public var status: String
        /// `clipflow serve`: "ladder" or "copy".
        public var mode: String?
        /// Why processing failed.
        public var error: String?
        /// Seconds.
        public var duration: Double?
        /// The poster's URL; "" until there is one.
        public var screenshot: String
        /// The master playlist's URL; "" until there is one.
        public var hlsURL: String
        public var renditions: [Rendition]
        /// 0 to 1.
        public var progress: Double?
        /// Seconds since 1970 (`clipflow serve`; Gcore's date text reads as nil).
        public var createdAt: Double?
        /// `clipflow serve`: "public" or "signed".
        public var access: String?

        public struct Rendition: Codable, Sendable, Equatable {
            public var name: String
            public var status: String
            /// 0 to 1, while it is made; absent once made.
            public var progress: Double?

            public init(name: String, status: String, progress: Double? = nil) {
                self.name = name
                self.status = status
                self.progress = progress
            }

            public init(from decoder: any Decoder) throws {
                let c = try decoder.container(keyedBy: CodingKeys.self)
                name = c.lenient(String.self, .name) ?? ""
                status = c.lenient(String.self, .status) ?? ""
                progress = c.lenient(Double.self, .progress)
            }
        }

        public init(
            id: ID, name: String = "", description: String? = nil, clientID: ID? = nil, status: String = "", mode: String? = nil,
            error: String? = nil, duration: Double? = nil, screenshot: String = "", hlsURL: String = "", renditions: [Rendition] = [],
            progress: Double? = nil, createdAt: Double? = nil, access: String? = nil
        ) {
            self.access = access
            self.id = id
            self.name = name
            self.description = description
            self.clientID = clientID
            self.status = status
            self.mode = mode
            self.error = error
            self.duration = duration
            self.screenshot = screenshot
            self.hlsURL = hlsURL
            self.renditions = renditions
            self.progress = progress
            self.createdAt = createdAt
        }

        enum CodingKeys: String, CodingKey {
            case id, name, description, status, mode, error, duration, screenshot, renditions, progress, access
            case clientID = "client_id", hlsURL = "hls_url", createdAt = "created_at"
        }

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            id = try c.decode(ID.self, forKey: .id)
            name = c.lenient(String.self, .name) ?? ""
            description = c.lenient(String.self, .description)
            clientID = c.lenient(ID.self, .clientID)
            status = c.lenient(String.self, .status) ?? ""
            mode = c.lenient(String.self, .mode)
            error = c.lenient(String.self, .error)
            duration = c.lenient(Double.self, .duration)
            screenshot = c.lenient(String.self, .screenshot) ?? ""
            hlsURL = c.lenient(String.self, .hlsURL) ?? ""
            renditions = c.lenient([Rendition].self, .renditions) ?? []
            progress = c.lenient(Double.self, .progress)
            createdAt = c.lenient(Double.self, .createdAt)
            access = c.lenient(String.self, .access)
        }

        /// Every field, absent values as null.
        public func encode(to encoder: any Encoder) throws {
            var c = encoder.container(keyedBy: CodingKeys.self)
            try c.encode(id, forKey: .id)
            try c.encode(name, forKey: .name)
            try c.encode(description, forKey: .description)
            try c.encode(clientID, forKey: .clientID)
            try c.encode(status, forKey: .status)
            try c.encode(mode, forKey: .mode)
            try c.encode(error, forKey: .error)
            try c.encode(duration, forKey: .duration)
            try c.encode(screenshot, forKey: .screenshot)
            try c.encode(hlsURL, forKey: .hlsURL)
            try c.encode(renditions, forKey: .renditions)
            try c.encode(progress, forKey: .progress)
            try c.encode(createdAt, forKey: .createdAt)
            try c.encode(access, forKey: .access)
        }
    }

    /// The answer of `GET /videos/ID/upload`: the upload servers (the first is used), the upload
    /// token that goes in the TUS metadata, and the video. `token` and a server's `hostname` are ""
    /// when the answer has none.
    public struct UploadTarget: Codable, Sendable, Equatable {
        public var servers: [Server]
        public var token: String
        public var video: Video?

        public struct Server: Codable, Sendable, Equatable {
            public var id: ID?
            public var hostname: String

            public init(id: ID? = nil, hostname: String) {
                self.id = id
                self.hostname = hostname
            }

            public init(from decoder: any Decoder) throws {
                let c = try decoder.container(keyedBy: CodingKeys.self)
                id = c.lenient(ID.self, .id)
                hostname = c.text(.hostname) ?? ""
            }
        }

        /// The video the upload is for.
        public struct Video: Codable, Sendable, Equatable {
            public var id: ID?
            public var clientID: ID?

            public init(id: ID?, clientID: ID?) {
                self.id = id
                self.clientID = clientID
            }

            enum CodingKeys: String, CodingKey {
                case id
                case clientID = "client_id"
            }

            public init(from decoder: any Decoder) throws {
                let c = try decoder.container(keyedBy: CodingKeys.self)
                id = c.lenient(ID.self, .id)
                clientID = c.lenient(ID.self, .clientID)
            }
        }

        public init(servers: [Server], token: String, video: Video?) {
            self.servers = servers
            self.token = token
            self.video = video
        }

        enum CodingKeys: String, CodingKey { case servers, token, video }

        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            servers = c.lenient([Server].self, .servers) ?? []
            token = c.text(.token) ?? ""
            video = c.lenient(Video.self, .video)
        }
    }

    /// The answer of a refused request (Gcore's and `clipflow serve`'s): why.
    public struct Refusal: Codable, Sendable, Equatable {
        public var detail: String

        public init(detail: String) { self.detail = detail }

        enum CodingKeys: String, CodingKey { case detail }

        public init(from decoder: any Decoder) throws {
            detail = try decoder.container(keyedBy: CodingKeys.self).lenient(String.self, .detail) ?? ""
        }
    }
}

extension KeyedDecodingContainer {
    /// The field as `T` (nil when absent or null, unless `required`); anything else throws a
    /// `DecodingError` whose coding path ends at the field, whatever the decoder threw (Foundation's
    /// reports a number that does not fit the type as damage of the whole text).
    fileprivate func strict<T: Decodable>(_ type: T.Type, _ key: Key, required: Bool = false) throws -> T? {
        do {
            if required { return try decode(T.self, forKey: key) }
            return try decodeIfPresent(T.self, forKey: key)
        } catch {
            let context = DecodingError.Context(codingPath: codingPath + [key], debugDescription: "expected \(T.self)", underlyingError: error)
            throw DecodingError.typeMismatch(T.self, context)
        }
    }

    /// The field as `T`; nil when it is absent, null or not a `T`.
    fileprivate func lenient<T: Decodable>(_ type: T.Type, _ key: Key) -> T? {
        (try? decodeIfPresent(T.self, forKey: key)) ?? nil
    }

    /// Text given as a string or a whole number; nil when absent, empty or neither.
    fileprivate func text(_ key: Key) -> String? { lenient(Gcore.ID.self, key)?.description }
}
