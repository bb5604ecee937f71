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

    /// Splits an absolute URL `scheme://[user[:password]@]host[:port][/path][?query][#fragment]` (RFC 3986) into
    /// the parts a DSN needs, user, host and path percent-decoded, as `URLComponents` gives them; query and
    /// fragment are dropped. By byte, without `URLComponents`, whose first use in a process cost `Vaka.start`
    /// about 0.3 ms (IDNA tables among them).
    /// - Throws: ``DSNError/notAURL`` for a string that is not such a URL (no scheme or `//`, a character no URL
    ///   may hold, such as a space or `"`, a bad `%` escape, a second `@`, an unclosed `[`, a port that is not
    ///   digits), and the errors of the scheme, host and port checks.
    private static func split(_ string: String) throws -> Parts {
        // Trimmed only when it has to be: `trimmingCharacters` goes through `NSString`, whose first use in a
        // process costs `Vaka.start` about 0.75 M instructions.
        let padded = string.unicodeScalars.first.map(isSpace) == true || string.unicodeScalars.last.map(isSpace) == true
        let trimmed = padded ? string.trimmingCharacters(in: .whitespacesAndNewlines) : string
        let bytes = Array(trimmed.utf8)
        guard !bytes.isEmpty, bytes.allSatisfy(urlByte), validEscapes(bytes) else { throw DSNError.notAURL }
        // scheme ":" "//"
        guard let colon = bytes.firstIndex(of: UInt8(ascii: ":")), colon > 0, isLetter(bytes[0]),
              bytes[..<colon].allSatisfy({ isLetter($0) || isDigit($0) || $0 == UInt8(ascii: "+") || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: ".") }),
              bytes.count >= colon + 3, bytes[colon + 1] == UInt8(ascii: "/"), bytes[colon + 2] == UInt8(ascii: "/")
        else { throw DSNError.notAURL }
        let scheme = String(decoding: bytes[..<colon], as: UTF8.self).lowercased()
        guard scheme == "http" || scheme == "https" else { throw DSNError.unsupportedScheme(scheme) }
        // authority: up to the first "/", "?" or "#"; path: up to the first "?" or "#" after it.
        let authorityStart = colon + 3
        let authorityEnd = bytes[authorityStart...].firstIndex(where: { $0 == UInt8(ascii: "/") || $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }) ?? bytes.count
        let pathEnd = bytes[authorityEnd...].firstIndex(where: { $0 == UInt8(ascii: "?") || $0 == UInt8(ascii: "#") }) ?? bytes.count
        var authority = bytes[authorityStart..<authorityEnd]
        var user: String?
        if let at = authority.firstIndex(of: UInt8(ascii: "@")) {
            let userinfo = authority[..<at]
            authority = authority[(at + 1)...]
            guard !authority.contains(UInt8(ascii: "@")) else { throw DSNError.notAURL }
            user = percentDecoded(userinfo.prefix(while: { $0 != UInt8(ascii: ":") }))
        }
        let hostBytes: ArraySlice<UInt8>
        var portBytes: ArraySlice<UInt8>?
        if authority.first == UInt8(ascii: "[") {
            guard let close = authority.firstIndex(of: UInt8(ascii: "]")) else { throw DSNError.notAURL }
            hostBytes = authority[(authority.startIndex + 1)..<close]
            let rest = authority[(close + 1)...]
            if let first = rest.first {
                guard first == UInt8(ascii: ":") else { throw DSNError.notAURL }
                portBytes = rest.dropFirst()
            }
        } else if let c = authority.firstIndex(of: UInt8(ascii: ":")) {
            hostBytes = authority[..<c]
            portBytes = authority[(c + 1)...]
        } else {
            hostBytes = authority
        }
        var port: Int?
        if let portBytes, !portBytes.isEmpty {
            guard portBytes.allSatisfy(isDigit) else { throw DSNError.notAURL }
            // More than 5 digits is out of range (and would overflow `Int` for long strings).
            let digits = portBytes.drop(while: { $0 == UInt8(ascii: "0") })
            port = digits.count > 5 ? 0 : digits.reduce(0) { $0 * 10 + Int($1 - UInt8(ascii: "0")) }
        }
        let host = percentDecoded(hostBytes)
        guard !host.isEmpty else { throw DSNError.missingHost }
        guard validHost(host) else { throw DSNError.invalidHost }
        if let port, !(1...65535).contains(port) { throw DSNError.invalidPort }
        return Parts(scheme: scheme, user: user, host: host.lowercased(), port: port,
                     path: percentDecoded(bytes[authorityEnd..<pathEnd]))
    }

    /// Whether `scalar` is white space or a line end (`CharacterSet.whitespacesAndNewlines`), without building
    /// the character set for an ASCII scalar.
    private static func isSpace(_ scalar: Unicode.Scalar) -> Bool {
        if scalar.isASCII { return scalar == " " || (0x09...0x0D).contains(scalar.value) }
        return CharacterSet.whitespacesAndNewlines.contains(scalar)
    }

    private static func isLetter(_ b: UInt8) -> Bool { (b | 0x20) >= UInt8(ascii: "a") && (b | 0x20) <= UInt8(ascii: "z") }
    private static func isDigit(_ b: UInt8) -> Bool { b >= UInt8(ascii: "0") && b <= UInt8(ascii: "9") }
    private static func hexValue(_ b: UInt8) -> UInt8? {
        if isDigit(b) { return b - UInt8(ascii: "0") }
        let l = b | 0x20
        return l >= UInt8(ascii: "a") && l <= UInt8(ascii: "f") ? l - UInt8(ascii: "a") + 10 : nil
    }

    /// A byte a URL may hold as written (RFC 3986 unreserved, reserved and `%`): printable ASCII except space,
    /// `"`, `<`, `>`, `\`, `^`, `` ` ``, `{`, `|`, `}`.
    private static func urlByte(_ b: UInt8) -> Bool {
        guard b > 0x20 && b < 0x7F else { return false }
        switch b {
        case UInt8(ascii: "\""), UInt8(ascii: "<"), UInt8(ascii: ">"), UInt8(ascii: "\\"), UInt8(ascii: "^"),
             UInt8(ascii: "`"), UInt8(ascii: "{"), UInt8(ascii: "|"), UInt8(ascii: "}"):
            return false
        default:
            return true
        }
    }

    /// Whether every `%` is followed by two hex digits.
    private static func validEscapes(_ bytes: [UInt8]) -> Bool {
        var i = 0
        while i < bytes.count {
            if bytes[i] == UInt8(ascii: "%") {
                guard i + 2 < bytes.count, hexValue(bytes[i + 1]) != nil, hexValue(bytes[i + 2]) != nil else { return false }
                i += 3
            } else {
                i += 1
            }
        }
        return true
    }

    /// `bytes` with `%XX` escapes decoded (already checked by ``validEscapes(_:)``), as UTF-8 (invalid sequences
    /// replaced).
    private static func percentDecoded(_ bytes: ArraySlice<UInt8>) -> String {
        guard bytes.contains(UInt8(ascii: "%")) else { return String(decoding: bytes, as: UTF8.self) }
        var out: [UInt8] = []
        out.reserveCapacity(bytes.count)
        var i = bytes.startIndex
        while i < bytes.endIndex {
            if bytes[i] == UInt8(ascii: "%"), i + 2 < bytes.endIndex, let hi = hexValue(bytes[i + 1]), let lo = hexValue(bytes[i + 2]) {
                out.append(hi << 4 | lo)
                i += 3
            } else {
                out.append(bytes[i])
                i += 1
            }
        }
        return String(decoding: out, as: UTF8.self)
    }

    /// An IPv6 address (`inet_pton`; the brackets already removed, no zone id), or a name / IPv4 address of
    /// ASCII letters, digits, `-`, `_` and `.` that does not start or end with `.` or `-`. What libcurl cannot
    /// connect to is refused here, at `start`, instead of failing every send.
    private static func validHost(_ host: String) -> Bool {
        if host.contains(":") {
            var address = in6_addr()
            return inet_pton(AF_INET6, host, &address) == 1
        }
        let utf8 = host.utf8
        guard utf8.allSatisfy({ isLetter($0) || isDigit($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: ".") }),
              let first = utf8.first, let last = utf8.last else { return false }
        return first != UInt8(ascii: ".") && first != UInt8(ascii: "-") && last != UInt8(ascii: "-") && !host.contains("..")
    }

    /// A key is non-empty and holds no white space, control or format character (`CharacterSet`'s
    /// `whitespacesAndNewlines` and `controlCharacters`), nor `@ : / , " =`.
    private static func validateKey(_ key: String) throws {
        guard !key.isEmpty else { throw DSNError.missingPublicKey }
        for scalar in key.unicodeScalars {
            if scalar.isASCII {
                let b = UInt8(scalar.value)
                guard b > 0x20, b < 0x7F, !"@:/,\"=".utf8.contains(b) else { throw DSNError.invalidPublicKey }
            } else if CharacterSet.whitespacesAndNewlines.contains(scalar) || CharacterSet.controlCharacters.contains(scalar) {
                throw DSNError.invalidPublicKey
            }
        }
    }

    private static func validateProject(_ project: String) throws {
        guard !project.isEmpty else { throw DSNError.missingProjectID }
        guard project.utf8.allSatisfy({ isLetter($0) || isDigit($0) || $0 == UInt8(ascii: "-") || $0 == UInt8(ascii: "_") }) else {
            throw DSNError.invalidProjectID
        }
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
