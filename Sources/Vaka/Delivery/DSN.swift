import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Where and as whom envelopes are delivered: the facts carried by a Sentry DSN.
///
/// Two spellings are accepted:
/// - a DSN, `{scheme}://{public_key}@{host}[:{port}][/{path_prefix}]/{project_id}` (``init(_:)``);
/// - a key and an endpoint, `{scheme}://{host}[:{port}][/{path_prefix}]/api/{project_id}` (``init(key:endpoint:)``),
///   as shown on a project's settings card (a trailing `/` or `/envelope/` is tolerated).
///
/// Both give the same three facts: the envelope URL
/// `{scheme}://{host}[:{port}][/{path_prefix}]/api/{project_id}/envelope/`, the public key, and the
/// `X-Sentry-Auth` header value. The public key is never part of ``description``, ``debugDescription`` or the
/// mirror (so `print`, string interpolation and `dump` show `***` instead), nor of any ``DSNError``.
public struct DSN: Equatable, Sendable, CustomStringConvertible, CustomDebugStringConvertible, CustomReflectable {
    /// `http` or `https` (lower-cased).
    public let scheme: String
    /// Host name or IP address as written (IPv6 without brackets), lower-cased.
    public let host: String
    /// Explicit port, or `nil` for the scheme's default.
    public let port: Int?
    /// Path before the project id (DSN) or before `/api` (endpoint): `""` or `/segment[/segment...]`, no trailing `/`.
    public let pathPrefix: String
    /// The project id (the last path segment of a DSN; the segment after `api/` of an endpoint).
    public let projectID: String
    /// The project's public key (the DSN's user part, or the `key` argument). Secret: never printed.
    public let publicKey: String

    /// The `sentry_client` value sent in ``authHeader``: `vaka.swift/0.1.0` (from ``SDKInfo/vaka``).
    public static let clientName = "\(SDKInfo.vaka.name)/\(SDKInfo.vaka.version)"

    /// Parses a DSN such as `https://0123abcd@o1.ingest.example.com/42` or `http://KEY@127.0.0.1:8000/prefix/7`.
    /// A `KEY:SECRET` user part is accepted and the (deprecated) secret ignored; query and fragment are ignored.
    /// The scheme is case-insensitive (`HTTPS://` is `https`), the host may be a name, an IPv4 address or a
    /// bracketed IPv6 address (`[::1]`, no zone id), and a trailing `/` after the project id is accepted.
    /// - Throws: ``DSNError`` when the string is not an absolute URL, the scheme is not http(s), or the host,
    ///   port, public key or project id is missing or malformed.
    public init(_ string: String) throws {
        let parts = try DSN.split(string)
        guard let user = parts.user, !user.isEmpty else { throw DSNError.missingPublicKey }
        let key = String(user.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)[0])
        try DSN.validateKey(key)
        var segments = parts.path.split(separator: "/").map(String.init)
        guard let project = segments.popLast() else { throw DSNError.missingProjectID }
        try DSN.validateProject(project)
        self.init(scheme: parts.scheme, host: parts.host, port: parts.port,
                  pathPrefix: segments.isEmpty ? "" : "/" + segments.joined(separator: "/"),
                  projectID: project, publicKey: key)
    }

    /// Builds the DSN facts from a public key and an endpoint such as `https://sentry.example.com/api/42`
    /// (also `.../api/42/` and `.../api/42/envelope/`; a path prefix before `/api` is kept).
    /// - Parameters:
    ///   - key: the project's public key (non-empty, no whitespace, `@`, `:`, `/` or `,`).
    ///   - endpoint: an absolute http(s) URL whose path ends in `api/{project_id}` (optionally followed by
    ///     `envelope`); it must not carry a user part.
    /// - Throws: ``DSNError`` for a malformed key, URL, scheme, host or path.
    public init(key: String, endpoint: String) throws {
        try DSN.validateKey(key)
        let parts = try DSN.split(endpoint)
        var segments = parts.path.split(separator: "/").map(String.init)
        if segments.last == "envelope" { segments.removeLast() }
        guard segments.count >= 2, segments[segments.count - 2] == "api" else {
            throw DSNError.endpointPathNotAPI
        }
        let project = segments.removeLast()
        segments.removeLast()  // "api"
        try DSN.validateProject(project)
        self.init(scheme: parts.scheme, host: parts.host, port: parts.port,
                  pathPrefix: segments.isEmpty ? "" : "/" + segments.joined(separator: "/"),
                  projectID: project, publicKey: key)
    }

    /// Memberwise initializer; values are taken as given (no validation).
    public init(scheme: String, host: String, port: Int?, pathPrefix: String, projectID: String, publicKey: String) {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.pathPrefix = pathPrefix
        self.projectID = projectID
        self.publicKey = publicKey
    }

    /// `host[:port]`, with brackets around an IPv6 address.
    var authority: String {
        let h = host.contains(":") ? "[\(host)]" : host
        return port.map { "\(h):\($0)" } ?? h
    }

    /// Where envelopes are POSTed: `{scheme}://{host}[:{port}]{path_prefix}/api/{project_id}/envelope/`,
    /// e.g. `http://[::1]:8000/prefix/api/42/envelope/`. Always a valid URL for a parsed DSN; a DSN built with
    /// the memberwise initializer from parts no URL can hold gives `file:///invalid-dsn`, which the transport
    /// refuses as a permanent error (sending stops; nothing traps).
    public var envelopeURL: URL {
        URL(string: "\(scheme)://\(authority)\(pathPrefix)/api/\(projectID)/envelope/")
            ?? URL(fileURLWithPath: "/invalid-dsn")
    }

    /// The `X-Sentry-Auth` header value:
    /// `Sentry sentry_version=7, sentry_key={public_key}, sentry_client=vaka.swift/0.1.0`.
    /// Contains the public key: send it, never log it.
    public var authHeader: String {
        "Sentry sentry_version=7, sentry_key=\(publicKey), sentry_client=\(DSN.clientName)"
    }

    /// The DSN with the key redacted, e.g. `https://***@host:8000/prefix/42`. Safe to print.
    public var description: String {
        "\(scheme)://***@\(authority)\(pathPrefix)/\(projectID)"
    }

    /// Same as ``description`` (key redacted).
    public var debugDescription: String { "DSN(\(description))" }

    /// A mirror without the key, so `dump(dsn)` does not reveal it.
    public var customMirror: Mirror {
        Mirror(self, children: ["redacted": description], displayStyle: .struct)
    }

    // MARK: - Parsing helpers

    private struct Parts { var scheme: String; var user: String?; var host: String; var port: Int?; var path: String }

    private static func split(_ string: String) throws -> Parts {
        // Trimmed only when it has to be: `trimmingCharacters` goes through `NSString`, whose first use in a
        // process costs `Vaka.start` about 0.75 M instructions.
        let space = CharacterSet.whitespacesAndNewlines
        let padded = string.unicodeScalars.first.map(space.contains) == true || string.unicodeScalars.last.map(space.contains) == true
        let trimmed = padded ? string.trimmingCharacters(in: space) : string
        guard !trimmed.isEmpty, let c = URLComponents(string: trimmed), let rawScheme = c.scheme else {
            throw DSNError.notAURL
        }
        let scheme = rawScheme.lowercased()
        guard scheme == "http" || scheme == "https" else { throw DSNError.unsupportedScheme(scheme) }
        var host = (c.host ?? "")
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        guard !host.isEmpty else { throw DSNError.missingHost }
        guard validHost(host) else { throw DSNError.invalidHost }
        if let port = c.port, !(1...65535).contains(port) { throw DSNError.invalidPort }
        return Parts(scheme: scheme, user: c.user, host: host.lowercased(), port: c.port, path: c.path)
    }

    /// An IPv6 address (`inet_pton`; the brackets already removed, no zone id), or a name / IPv4 address of
    /// ASCII letters, digits, `-`, `_` and `.` that does not start or end with `.` or `-`. What libcurl cannot
    /// connect to is refused here, at `start`, instead of failing every send.
    private static func validHost(_ host: String) -> Bool {
        if host.contains(":") {
            var address = in6_addr()
            return inet_pton(AF_INET6, host, &address) == 1
        }
        let allowed = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.")
        guard host.unicodeScalars.allSatisfy({ allowed.contains($0) }),
              let first = host.first, let last = host.last else { return false }
        return first != "." && first != "-" && last != "-" && !host.contains("..")
    }

    private static func validateKey(_ key: String) throws {
        guard !key.isEmpty else { throw DSNError.missingPublicKey }
        let bad = CharacterSet.whitespacesAndNewlines.union(.controlCharacters).union(CharacterSet(charactersIn: "@:/,\"="))
        guard key.unicodeScalars.allSatisfy({ !bad.contains($0) }) else { throw DSNError.invalidPublicKey }
    }

    private static func validateProject(_ project: String) throws {
        let ok = CharacterSet(charactersIn: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_")
        guard !project.isEmpty else { throw DSNError.missingProjectID }
        guard project.unicodeScalars.allSatisfy({ ok.contains($0) }) else { throw DSNError.invalidProjectID }
    }
}

/// Why a DSN or key/endpoint pair was rejected. Never contains the key or the input string.
public enum DSNError: Error, Equatable, CustomStringConvertible {
    /// The string is empty or not an absolute URL with a scheme.
    case notAURL
    /// The scheme (given, lower-cased) is not `http` or `https`.
    case unsupportedScheme(String)
    /// No host after `//`.
    case missingHost
    /// The host is neither a name of letters, digits, `-`, `_`, `.` nor an IPv4 or bracketed IPv6 address.
    case invalidHost
    /// The port is outside 1...65535.
    case invalidPort
    /// A DSN without a `KEY@` user part, or an empty key.
    case missingPublicKey
    /// The key contains whitespace, control characters or one of `@ : / , " =`.
    case invalidPublicKey
    /// The path has no last segment to use as project id.
    case missingProjectID
    /// The project id contains characters other than letters, digits, `-` and `_`.
    case invalidProjectID
    /// An endpoint whose path does not end in `api/{project_id}` (optionally `/envelope`).
    case endpointPathNotAPI

    /// A one-line explanation without secrets.
    public var description: String {
        switch self {
        case .notAURL: return "DSN/endpoint is not an absolute URL"
        case .unsupportedScheme(let s): return "DSN/endpoint scheme '\(s)' is not http or https"
        case .missingHost: return "DSN/endpoint has no host"
        case .invalidHost: return "DSN/endpoint host is not a host name, IPv4 address or [IPv6] address"
        case .invalidPort: return "DSN/endpoint port is out of range"
        case .missingPublicKey: return "DSN has no public key (expected scheme://KEY@host/PROJECT)"
        case .invalidPublicKey: return "public key contains characters not allowed in a key"
        case .missingProjectID: return "DSN/endpoint has no project id"
        case .invalidProjectID: return "project id contains characters other than letters, digits, '-' and '_'"
        case .endpointPathNotAPI: return "endpoint path must end in /api/PROJECT"
        }
    }
}
