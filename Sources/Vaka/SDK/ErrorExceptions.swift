import Foundation

/// A Swift error that wraps another (its cause): ``Vaka/capture(_:fingerprint:scope:)`` sends the wrapped error
/// as a chained exception before this one, as it does for an `NSError`'s `NSUnderlyingErrorKey`.
///
/// ```swift
/// struct CheckoutFailed: WrappingError {
///     var underlyingError: (any Error)?
/// }
/// ```
public protocol WrappingError: Error {
    /// The error this one wraps, or `nil` when it wraps none.
    var underlyingError: (any Error)? { get }
}

/// The `exception.values` of a captured error: the error and its causes (``WrappingError/underlyingError``,
/// `NSUnderlyingErrorKey`), in Sentry's order for chained exceptions: the innermost cause first, the captured
/// error last (it alone carries the stack trace), as `sentry_sdk` writes `raise ... from ...`.
///
/// Each entry:
/// - `type`: the error's Swift type as `String(reflecting:)` names it, with the enum case for an enum error
///   (`MyModule.CheckoutError.cardDeclined`); for an `NSError` object its domain (`NSCocoaErrorDomain`), or
///   its class (`Foundation.NSError`) when the domain is empty;
/// - `value`: `String(describing:)` of the error (`localizedDescription` for an `NSError` object);
/// - `mechanism`: `{type: "swift.error", handled: true}`, with `meta.ns_error {code, domain}` for an `NSError`
///   object or a `CustomNSError`, and for a cause `source`: `"underlyingError"` or `"NSUnderlyingErrorKey"`.
///
/// The chain holds at most ``maxChainedErrors`` errors (deeper causes are left out) and stops at an error object
/// met before (a cycle of `NSError`s or classes).
enum ErrorExceptions {
    /// Most errors in one chain (the captured one included): 10.
    static let maxChainedErrors = 10

    /// The exceptions of `error`, its causes first (see the type's documentation); `stacktrace` goes to the last.
    static func exceptions(for error: any Error, stacktrace: Stacktrace?) -> [Exception] {
        var chain: [(error: any Error, source: String?)] = [(error, nil)]
        var seen = Set<ObjectIdentifier>()
        if let id = identity(error) { seen.insert(id) }
        var current = error
        while chain.count < maxChainedErrors, let (next, source) = cause(of: current) {
            if let id = identity(next), !seen.insert(id).inserted { break }
            chain.append((next, source))
            current = next
        }
        var out: [Exception] = []
        out.reserveCapacity(chain.count)
        for (index, link) in chain.enumerated().reversed() {
            var exception = describe(link.error)
            exception.mechanism = Mechanism(type: "swift.error", handled: true, meta: nsErrorMeta(link.error).map { MechanismMeta(nsError: $0) },
                                            source: link.source)
            if index == 0 { exception.stacktrace = stacktrace }
            out.append(exception)
        }
        return out
    }

    /// `type` and `value` of one error (see the type's documentation).
    static func describe(_ error: any Error) -> Exception {
        if type(of: error) is NSError.Type {
            let ns = error as NSError
            // Relay drops an exception with neither type nor value (and its stack trace): an empty domain is
            // the class's name.
            return Exception(type: ns.domain.isEmpty ? String(reflecting: type(of: error)) : ns.domain, value: ns.localizedDescription)
        }
        var name = String(reflecting: type(of: error))
        if let caseName = enumCaseName(error) { name += "." + caseName }
        return Exception(type: name, value: String(describing: error))
    }

    /// The enum case of `error` when it is an enum value: the label of a case with a payload; for a case without
    /// one its default description (`nil` when the type overrides both `description` and `debugDescription`).
    static func enumCaseName(_ error: any Error) -> String? {
        let mirror = Mirror(reflecting: error)
        guard mirror.displayStyle == .enum else { return nil }
        if let label = mirror.children.first?.label { return label }
        let value: Any = error  // as `Any`: a cast of `any Error` is always said to succeed (NSError bridging)
        if !(value is CustomStringConvertible) { return String(describing: error) }
        if !(value is CustomDebugStringConvertible) {
            return String(reflecting: error).split(separator: ".").last.map(String.init)
        }
        return nil
    }

    /// `ns_error` of an `NSError` object or a `CustomNSError` (domain and code as `NSError` bridging gives them).
    static func nsErrorMeta(_ error: any Error) -> NSErrorMeta? {
        guard type(of: error) is NSError.Type || error is CustomNSError else { return nil }
        let ns = error as NSError
        return NSErrorMeta(code: Int64(ns.code), domain: ns.domain)
    }

    /// The error `error` wraps and where it was found: ``WrappingError/underlyingError`` first, then
    /// `NSUnderlyingErrorKey` of an `NSError` object's (or a `CustomNSError`'s) user info.
    static func cause(of error: any Error) -> (any Error, String)? {
        if let wrapping = error as? any WrappingError, let inner = wrapping.underlyingError { return (inner, "underlyingError") }
        if type(of: error) is NSError.Type || error is CustomNSError,
           let inner = (error as NSError).userInfo[NSUnderlyingErrorKey] as? any Error {
            return (inner, "NSUnderlyingErrorKey")
        }
        return nil
    }

    /// The object identity of an error that is a class instance (an `NSError`, a class conforming to `Error`),
    /// for the cycle check; `nil` for a value.
    static func identity(_ error: any Error) -> ObjectIdentifier? {
        guard type(of: error) is AnyObject.Type else { return nil }
        return ObjectIdentifier(error as AnyObject)
    }
}
