import Foundation

/// The scope of one capture call: what ``Vaka/capture(_:fingerprint:scope:)`` and
/// ``Vaka/capture(message:level:fingerprint:scope:)`` hand their closure, to set for that one event only.
///
/// It starts empty and is laid over the global scope (``Vaka/setTag(_:_:)``, ``Vaka/setUser(_:)``,
/// ``Vaka/setContext(_:_:)``, ``Vaka/setExtra(_:_:)``, ``Vaka/addAttachment(path:filename:contentType:)``)
/// for that event: a tag, context or extra set here replaces the global one of the same key or name, a user
/// set here replaces the global user, `fingerprint` and `level` replace the call's, attachments are added after
/// the global ones (``clearAttachments()`` leaves the global ones out of this event). Nothing set here reaches
/// any other event or the global scope.
///
/// ```swift
/// Vaka.capture(error) { scope in
///     scope.setTag("payment", "card")
///     scope.setContext("order", ["id": 1042, "total": 99.5])
///     scope.fingerprint = ["checkout", "card-declined"]
/// }
/// ```
public struct Scope: Sendable, Equatable {
    /// Tags of this event (`tags`), over the global ones.
    public var tags: [String: String] = [:]
    /// The user of this event (`user`), instead of the global one; `nil` keeps the global one, a user with no
    /// field set sends none.
    public var user: User?
    /// Contexts of this event by name (`contexts.NAME`), over the global ones.
    public var contexts: [String: [String: JSONValue]] = [:]
    /// Extra data of this event (`extra`), over the global.
    public var extra: [String: JSONValue] = [:]
    /// How the server groups this event (`fingerprint`); `nil` keeps the call's `fingerprint:` argument.
    public var fingerprint: [String]?
    /// The level of this event, instead of the call's; `nil` keeps it.
    public var level: Event.Level?
    /// Attachments of this event, sent after the global ones.
    public var attachments: [Attachment] = []
    /// Whether the global attachments are left out of this event (``clearAttachments()``).
    public var clearsGlobalAttachments = false

    /// An empty scope.
    public init() {}

    /// Sets (or with `nil` removes from this event) tag `key`.
    public mutating func setTag(_ key: String, _ value: String?) { tags[key] = value }

    /// Sets the user of this event.
    public mutating func setUser(_ user: User?) { self.user = user }

    /// Sets context `name` of this event (`nil`: none of this name from this scope).
    public mutating func setContext(_ name: String, _ value: [String: JSONValue]?) { contexts[name] = value }

    /// Sets extra `key` of this event (`nil`: none of this key from this scope).
    public mutating func setExtra(_ key: String, _ value: JSONValue?) { extra[key] = value }

    /// Attaches the file at `path` to this event (read when the event is sent; see ``Attachment``).
    public mutating func addAttachment(path: String, filename: String? = nil, contentType: String? = nil) {
        attachments.append(Attachment(path: path, filename: filename, contentType: contentType))
    }

    /// Attaches `data` named `filename` to this event.
    public mutating func addAttachment(data: Data, filename: String, contentType: String? = nil) {
        attachments.append(Attachment(data: data, filename: filename, contentType: contentType))
    }

    /// Removes this scope's attachments and leaves the global ones out of this event.
    public mutating func clearAttachments() {
        attachments = []
        clearsGlobalAttachments = true
    }

    /// Lays this scope over `event` (see the type's documentation); tag keys and values and user fields cut to
    /// 200 Unicode scalars, NaN and infinities in contexts and extra written as text.
    func apply(to event: inout Event) {
        if !tags.isEmpty {
            var merged = event.tags ?? [:]
            for (key, value) in tags {
                merged[Vaka.Options.cut(key, maxChars: Vaka.Options.maxTagChars)] = Vaka.Options.cut(value, maxChars: Vaka.Options.maxTagChars)
            }
            event.tags = merged
        }
        if let user { event.user = user.bounded.isEmpty ? nil : user.bounded }
        if !contexts.isEmpty {
            var merged = event.contexts ?? Contexts()
            for (name, value) in contexts.sorted(by: { $0.key < $1.key }) { merged.set(name, value.mapValues(\.finite)) }
            event.contexts = merged
        }
        if !extra.isEmpty {
            var merged = event.extra ?? [:]
            for (key, value) in extra { merged[key] = value.finite }
            event.extra = merged
        }
        if let fingerprint { event.fingerprint = fingerprint }
        if let level { event.level = level }
    }
}

extension User {
    /// This user with each field cut to ``Vaka/Options/maxTagChars`` (200) Unicode scalars, an empty one left
    /// out (a user of empty fields only is no user), and an `ipAddress` left out unless it is an IPv4 or IPv6
    /// address or `{{auto}}` (Relay removes any other value from the event, noting an error).
    var bounded: User {
        func cut(_ s: String?) -> String? {
            s.flatMap { $0.isEmpty ? nil : Vaka.Options.cut($0, maxChars: Vaka.Options.maxTagChars) }
        }
        var user = User(id: cut(id), email: cut(email), username: cut(username),
                        ipAddress: ipAddress.flatMap { User.isIPAddress($0) ? $0 : nil })
        user.other = other
        return user
    }

    /// Whether `text` is what Relay takes as `user.ip_address`: an IPv4 or IPv6 address (`inet_pton`), or
    /// `{{auto}}` (the address the envelope came from).
    static func isIPAddress(_ text: String) -> Bool {
        if text == "{{auto}}" { return true }
        var buffer = in6_addr()
        return inet_pton(AF_INET, text, &buffer) == 1 || inet_pton(AF_INET6, text, &buffer) == 1
    }

    /// Whether no field is set.
    var isEmpty: Bool { id == nil && email == nil && username == nil && ipAddress == nil && (other?.isEmpty ?? true) }
}

extension Contexts {
    /// Sets context `name` to `value`: for a context Vaka fills (`os`, `device`, `app`) the members of `value` are
    /// laid over Vaka's (a member of the same name replaced, the others kept; a value of the wrong type for a
    /// member Vaka models, such as a number as `os.name`, leaves that context as it was); any other name is
    /// replaced whole.
    mutating func set(_ name: String, _ value: [String: JSONValue]) {
        switch name {
        case "os", "device", "app":
            var members = Contexts.members(of: self)[name] ?? [:]
            for (key, v) in value { members[key] = v }
            var all = Contexts.members(of: self)
            all[name] = members
            if let rebuilt = Contexts.decoded(all) { self = rebuilt }
        default:
            var others = other ?? [:]
            others[name] = .object(value)
            other = others
        }
    }

    /// Lays the contexts of `overlay` over these, name by name (``set(_:_:)``).
    mutating func overlay(_ overlay: Contexts) {
        for (name, value) in Contexts.members(of: overlay).sorted(by: { $0.key < $1.key }) { set(name, value) }
    }

    /// The contexts of `contexts` as JSON objects by name (its wire encoding read back).
    static func members(of contexts: Contexts) -> [String: [String: JSONValue]] {
        guard let data = try? Event.encoder(encoding: .wire).encode(contexts),
              case .object(let all)? = try? JSONDecoder().decode(JSONValue.self, from: data) else { return [:] }
        var out: [String: [String: JSONValue]] = [:]
        for (name, value) in all { if case .object(let members) = value { out[name] = members } }
        return out
    }

    /// Contexts decoded from JSON objects by name (`nil` when a modeled context has a member of the wrong type).
    static func decoded(_ all: [String: [String: JSONValue]]) -> Contexts? {
        guard let data = try? JSONEncoder().encode(all.mapValues(JSONValue.object)) else { return nil }
        return try? JSONDecoder().decode(Contexts.self, from: data)
    }
}
