#if canImport(Glibc)
import Glibc
#endif

/// Turns mangled symbol names into readable ones: Swift names with the Swift runtime's own
/// `swift_demangle` (exported by libswiftCore), C++ names with the C++ runtime's `__cxa_demangle`
/// (when libstdc++ is loaded in this process). Both are found with `dlsym` at first use.
public enum Demangler {
    private typealias SwiftDemangleFunction = @convention(c) (
        UnsafePointer<CChar>?, Int, UnsafeMutablePointer<CChar>?, UnsafeMutablePointer<Int>?, UInt32
    ) -> UnsafeMutablePointer<CChar>?
    private typealias CxaDemangleFunction = @convention(c) (
        UnsafePointer<CChar>?, UnsafeMutablePointer<CChar>?, UnsafeMutablePointer<Int>?, UnsafeMutablePointer<Int32>?
    ) -> UnsafeMutablePointer<CChar>?

    private static let swiftDemangleFunction: SwiftDemangleFunction? = {
        guard let address = dlsym(nil, "swift_demangle") else { return nil }
        return unsafeBitCast(address, to: SwiftDemangleFunction.self)
    }()

    private static let cxaDemangleFunction: CxaDemangleFunction? = {
        guard let address = dlsym(nil, "__cxa_demangle") else { return nil }
        return unsafeBitCast(address, to: CxaDemangleFunction.self)
    }()

    /// The readable form of `symbol`: Swift names (`$s…`, `$e…`, `_T0…`, `_$s…`) demangled in full
    /// (`$s4demo9crashHereySiSaySiGF` → `demo.crashHere([Swift.Int]) -> Swift.Int`), C++ names (`_Z…`)
    /// demangled when `__cxa_demangle` is available, anything else (C names) returned unchanged.
    public static func demangle(_ symbol: String) -> String {
        if symbol.hasPrefix("_Z"), let name = demangleCxx(symbol) { return name }
        if let name = demangleSwift(symbol) { return name }
        return symbol
    }

    /// `symbol` demangled by libswiftCore's `swift_demangle`, or `nil` when it is not a Swift mangled name
    /// (or `swift_demangle` is not loaded in this process).
    public static func demangleSwift(_ symbol: String) -> String? {
        guard let demangle = swiftDemangleFunction else { return nil }
        let prefixes = ["$s", "$S", "$e", "_$s", "_$S", "_T0", "@__swiftmacro_"]
        guard prefixes.contains(where: { symbol.hasPrefix($0) }) else { return nil }
        let utf8 = Array(symbol.utf8)
        guard let result = utf8.withUnsafeBufferPointer({ buffer in
            buffer.withMemoryRebound(to: CChar.self) { chars in
                demangle(chars.baseAddress, chars.count, nil, nil, 0)
            }
        }) else { return nil }
        defer { free(result) }
        let name = String(cString: result)
        return name.isEmpty || name == symbol ? nil : name
    }

    /// `symbol` demangled by the C++ runtime's `__cxa_demangle`, or `nil` when it is not a C++ mangled name
    /// or no C++ runtime is loaded in this process.
    public static func demangleCxx(_ symbol: String) -> String? {
        guard let demangle = cxaDemangleFunction, symbol.hasPrefix("_Z") else { return nil }
        var status: Int32 = -1
        guard let result = demangle(symbol, nil, nil, &status) else { return nil }
        defer { free(result) }
        return status == 0 ? String(cString: result) : nil
    }
}
