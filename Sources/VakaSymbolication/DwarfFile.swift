import CLibdw
#if canImport(Glibc)
import Glibc
#endif

/// One source location for an address, from DWARF: the function it is in, and the file and line.
///
/// An address inside inlined code gives several locations (see ``DwarfFile/locations(at:)``): the inlined
/// function at the line the address is on, then each function it was inlined into, at the line of the call.
struct SourceLocation: Equatable, Sendable {
    /// The function's name as DWARF gives it: `DW_AT_linkage_name` (mangled for Swift and C++, e.g.
    /// `$s12vaka_crashme16swiftForceUnwraps5Int32VyF`), else `DW_AT_name` (C functions), following
    /// `DW_AT_abstract_origin` / `DW_AT_specification`. `nil` when the address is in a compile unit's line
    /// table but in no function DIE.
    var symbol: String?
    /// The source file: the line table's path, made absolute with the compile unit's `DW_AT_comp_dir` when
    /// it is relative. `nil` when the line table does not name one.
    var file: String?
    /// Line number, 1-based; `nil` when unknown (line 0 in DWARF means "no line").
    var line: Int?
    /// Column, 1-based; `nil` when unknown (column 0).
    var column: Int?
    /// `true` for a function that was inlined here (`DW_TAG_inlined_subroutine`): it has no frame of its own
    /// on the real stack. The last location of a lookup is the real (outermost) function and is never inlined.
    var isInlined: Bool
    /// ELF virtual address where the function starts (`DW_AT_low_pc` or the first range of its DIE);
    /// `nil` for inlined functions and when DWARF does not say.
    var functionStart: UInt64?

    /// Creates a location; every field is described on its property.
    init(symbol: String?, file: String?, line: Int?, column: Int? = nil, isInlined: Bool,
                functionStart: UInt64? = nil) {
        self.symbol = symbol
        self.file = file
        self.line = line
        self.column = column
        self.isInlined = isInlined
        self.functionStart = functionStart
    }
}

/// The DWARF debug information of one ELF file (libdw), for address → function/file/line lookups
/// including inlined frames.
///
/// Compile units are found through `.debug_aranges` when the file has it (GCC emits it), else through a
/// table of all units' address ranges (`DW_AT_ranges`, `DW_AT_low_pc` / `DW_AT_high_pc`), built on first
/// use, so files without `.debug_aranges` (Swift and clang do not emit it) work too. Each compile unit's
/// functions defined in it or in its namespaces and modules are indexed on its first lookup (the functions
/// nested in the one an address falls in are then read from its DIE; the unit's whole index, functions in
/// types and nested functions included, is built only for an address none of those contains). Thread-safe: lookups run with the ``ElfFile``'s lock held
/// (libdw reads through its `Elf *`) and then this file's own lock (the indexes built on first use).
public final class DwarfFile: Sendable {
    /// The ELF file the DWARF comes from (kept open while this object lives).
    public let file: ElfFile
    private let reader: Locked<DwarfReader>

    /// Why DWARF cannot be read in this process: libdw (`libdw.so.1`, opened with `dlopen` on first use, not
    /// at process start) cannot be opened or lacks a function — the loader's message, e.g. "libdw.so.1: cannot
    /// open shared object file: No such file or directory". `nil` when libdw is there. Without it, frames
    /// still get their symbols from the ELF symbol tables (libelf), but no file, line or inlined frames, and
    /// MiniDebugInfo (`.gnu_debugdata`) is not read. Opens libdw if it was not yet opened.
    public static var unavailableReason: String? {
        vaka_libdw_error().map { String(cString: $0) }
    }

    /// Opens the DWARF sections of `file`: its compressed sections are inflated first, only those a lookup
    /// reads (``ElfFile/withDwarfSections(_:)``), then handed to libdw.
    /// - Returns: `nil` when the file has no DWARF (`.debug_info`), libdw cannot read it, or libdw cannot be
    ///   loaded (``unavailableReason``).
    public init?(file: ElfFile) {
        guard file.sections.hasDebugInfo, let dw = vaka_libdw()?.pointee,
              let handle = file.withDwarfSections({ DwarfHandle(dwarf: dw.dwarf_begin_elf($0, DWARF_C_READ, nil)) }).dwarf else {
            return nil
        }
        self.file = file
        reader = Locked(DwarfReader(dwarf: handle, functions: dw))
    }

    /// The source locations of the ELF virtual address `vaddr`, innermost first: when the address is in
    /// inlined code, the inlined function (at the line of `vaddr`), then each caller it was inlined into
    /// (at the line of the call), ending with the real function. A single location when nothing is inlined.
    /// For a caller frame pass the return address − 1 (as a virtual address).
    /// - Returns: an empty array when no compile unit covers `vaddr`.
    func locations(at vaddr: UInt64) -> [SourceLocation] {
        file.withHandle { _ in reader.withLock { $0.locations(at: vaddr) } }
    }

    /// Does the per-file setup of lookups now (reading `.debug_aranges`, or building the compile-unit range
    /// table when the file has none), so the first lookup is not slower than the others.
    public func prepare() {
        file.withHandle { _ in reader.withLock { $0.prepare() } }
    }
}

/// A `Dwarf *` handed out of the ``ElfFile``'s lock right after `dwarf_begin_elf` made it. `@unchecked
/// Sendable` is safe: the handle is new, nothing else refers to it, and it is moved straight into a
/// ``DwarfReader`` behind its ``DwarfFile``'s lock.
private struct DwarfHandle: @unchecked Sendable {
    var dwarf: OpaquePointer?
}

/// The libdw handle of one ``DwarfFile`` and the indexes built on first use. Not thread-safe on its own:
/// ``DwarfFile`` keeps it behind its lock.
private final class DwarfReader {
    private let dwarf: OpaquePointer
    /// libdw's functions (``vaka_libdw()``).
    private let dw: vaka_libdw_functions

    private struct UnitRange {
        var start: UInt64
        var end: UInt64
        var unit: Int  // index into units
    }

    private struct FunctionRange {
        var start: UInt64
        var end: UInt64
        var die: Dwarf_Die
    }

    private final class Unit {
        var die: Dwarf_Die
        var compDir: String?
        var functions: [FunctionRange]?
        var outerFunctions: [FunctionRange]?
        var files: OpaquePointer??
        init(die: Dwarf_Die, compDir: String?) {
            self.die = die
            self.compDir = compDir
        }
    }

    private var units: [Unit] = []
    private var unitRanges: [UnitRange]?
    private var hasAranges: Bool?
    private var unitByOffset: [UInt64: Int] = [:]

    init(dwarf: OpaquePointer, functions: vaka_libdw_functions) {
        self.dwarf = dwarf
        dw = functions
    }

    deinit {
        _ = dw.dwarf_end(dwarf)
    }

    /// ``DwarfFile/locations(at:)``.
    func locations(at vaddr: UInt64) -> [SourceLocation] {
        guard let unit = unit(containing: vaddr) else { return [] }
        var cuDie = unit.die
        // The line table row for the address.
        var lineFile: String?
        var lineNumber: Int?
        var lineColumn: Int?
        if let line = dw.dwarf_getsrc_die(&cuDie, vaddr) {
            var number: Int32 = 0
            var column: Int32 = 0
            if dw.dwarf_lineno(line, &number) == 0, number > 0 { lineNumber = Int(number) }
            if dw.dwarf_linecol(line, &column) == 0, column > 0 { lineColumn = Int(column) }
            if let source = dw.dwarf_linesrc(line, nil, nil) {
                lineFile = DwarfReader.absolute(String(cString: source), compDir: unit.compDir)
            }
        }
        let chain = scopes(in: unit, at: vaddr)  // innermost first: inlined_subroutine / subprogram DIEs
        guard !chain.isEmpty else {
            if lineFile == nil && lineNumber == nil { return [] }
            return [SourceLocation(symbol: nil, file: lineFile, line: lineNumber, column: lineColumn, isInlined: false)]
        }
        var result: [SourceLocation] = []
        var file = lineFile
        var line = lineNumber
        var column = lineColumn
        for (index, die) in chain.enumerated() {
            var scope = die
            let inlined = dw.dwarf_tag(&scope) == Int32(DW_TAG_inlined_subroutine)
            var start: UInt64?
            if !inlined {
                var low: Dwarf_Addr = 0
                if dw.dwarf_lowpc(&scope, &low) == 0 {
                    start = low
                } else {
                    var base: Dwarf_Addr = 0, rangeStart: Dwarf_Addr = 0, rangeEnd: Dwarf_Addr = 0
                    if dw.dwarf_ranges(&scope, 0, &base, &rangeStart, &rangeEnd) > 0 { start = rangeStart }
                }
            }
            result.append(SourceLocation(symbol: name(of: &scope), file: file, line: line, column: column,
                                         isInlined: inlined && index < chain.count - 1, functionStart: start))
            guard inlined else { break }
            // The caller's location is where this inlined call was made.
            file = nil; line = nil; column = nil
            var attribute = Dwarf_Attribute()
            var value: Dwarf_Word = 0
            if dw.dwarf_formudata(dw.dwarf_attr(&scope, UInt32(DW_AT_call_file), &attribute), &value) == 0,
               let files = sourceFiles(unit), let source = dw.dwarf_filesrc(files, Int(value), nil, nil) {
                file = DwarfReader.absolute(String(cString: source), compDir: unit.compDir)
            }
            if dw.dwarf_formudata(dw.dwarf_attr(&scope, UInt32(DW_AT_call_line), &attribute), &value) == 0, value > 0 {
                line = Int(value)
            }
            if dw.dwarf_formudata(dw.dwarf_attr(&scope, UInt32(DW_AT_call_column), &attribute), &value) == 0, value > 0 {
                column = Int(value)
            }
        }
        return result
    }

    /// ``DwarfFile/prepare()``: reads `.debug_aranges`; builds the table of all units' ranges only when the
    /// file has no `.debug_aranges` (with it, the table is built by the first lookup it does not answer).
    func prepare() {
        if !arangesPresent() { _ = unitRanges ?? buildUnitRanges() }
    }

    // MARK: - Compile units

    /// `true` when libdw reads a non-empty `.debug_aranges` (read on the first call, then remembered).
    private func arangesPresent() -> Bool {
        if let hasAranges { return hasAranges }
        var aranges: OpaquePointer?
        var count = 0
        let present = dw.dwarf_getaranges(dwarf, &aranges, &count) == 0 && count > 0
        hasAranges = present
        return present
    }

    private func unit(containing vaddr: UInt64) -> Unit? {
        if arangesPresent() {
            // .debug_aranges (GCC emits it): libdw maps the address to its compile unit directly.
            var die = Dwarf_Die()
            if dw.dwarf_addrdie(dwarf, vaddr, &die) != nil {
                let offset = dw.dwarf_dieoffset(&die)
                if let index = unitByOffset[offset] { return units[index] }
                var attribute = Dwarf_Attribute()
                let compDir = dw.dwarf_formstring(dw.dwarf_attr(&die, UInt32(DW_AT_comp_dir), &attribute)).map { String(cString: $0) }
                units.append(Unit(die: die, compDir: compDir))
                unitByOffset[offset] = units.count - 1
                return units[units.count - 1]
            }
            // Not every compile unit need be in .debug_aranges: fall back to the table of all units.
        }
        let ranges = unitRanges ?? buildUnitRanges()
        // Last range starting at or below vaddr; ranges may nest or overlap, so look back a little.
        var index = ranges.firstIndex(after: vaddr, by: \.start) - 1
        var checked = 0
        while index >= 0 && checked < 64 {
            if vaddr < ranges[index].end { return units[ranges[index].unit] }
            index -= 1
            checked += 1
        }
        return nil
    }

    private func buildUnitRanges() -> [UnitRange] {
        var ranges: [UnitRange] = []
        var cu: OpaquePointer?
        var version: Dwarf_Half = 0
        var unitType: UInt8 = 0
        var cuDie = Dwarf_Die()
        // No split-unit DIE asked for (the last argument): for a skeleton unit libdw would look for its split
        // unit on disk (Swift's skeleton units name clang module caches, `.pcm` files, resolving each path
        // component and opening the file, per unit), and split units add no address ranges here.
        while dw.dwarf_get_units(dwarf, cu, &cu, &version, &unitType, &cuDie, nil) == 0 {
            var die = cuDie
            var added = false
            var offset = 0
            var base: Dwarf_Addr = 0, start: Dwarf_Addr = 0, end: Dwarf_Addr = 0
            while true {
                offset = dw.dwarf_ranges(&die, offset, &base, &start, &end)
                if offset <= 0 { break }
                if end > start {
                    if !added {
                        // The compile directory only of units with code (most of Swift's are skeleton units
                        // of imported clang modules, without).
                        var attribute = Dwarf_Attribute()
                        let compDir = dw.dwarf_formstring(dw.dwarf_attr(&die, UInt32(DW_AT_comp_dir), &attribute))
                            .map { String(cString: $0) }
                        units.append(Unit(die: die, compDir: compDir))
                        added = true
                    }
                    ranges.append(UnitRange(start: start, end: end, unit: units.count - 1))
                }
            }
        }
        ranges.sort { $0.start < $1.start }
        unitRanges = ranges
        return ranges
    }

    private func sourceFiles(_ unit: Unit) -> OpaquePointer? {
        if let cached = unit.files { return cached }
        var files: OpaquePointer?
        var count = 0
        if dw.dwarf_getsrcfiles(&unit.die, &files, &count) != 0 { files = nil }
        unit.files = .some(files)
        return files
    }

    // MARK: - Scopes

    /// Tags whose children may hold function definitions (namespaces, modules, types). A `switch`, not a
    /// `Set`: it is asked for every DIE of a compile unit.
    private static func isContainer(_ tag: Int32) -> Bool {
        switch tag {
        case Int32(DW_TAG_namespace), Int32(DW_TAG_module), Int32(DW_TAG_structure_type), Int32(DW_TAG_class_type),
             Int32(DW_TAG_union_type), Int32(DW_TAG_enumeration_type): return true
        default: return false
        }
    }

    /// Namespaces and modules: where compilers put function definitions (C++ and Swift put a type's methods
    /// there too, or in the unit, declared in the type).
    private static func isNamespace(_ tag: Int32) -> Bool {
        tag == Int32(DW_TAG_namespace) || tag == Int32(DW_TAG_module)
    }

    /// Tags of scopes inside a function that inlined calls may be nested in.
    private static func isBlock(_ tag: Int32) -> Bool {
        switch tag {
        case Int32(DW_TAG_lexical_block), Int32(DW_TAG_try_block), Int32(DW_TAG_catch_block), Int32(DW_TAG_with_stmt):
            return true
        default: return false
        }
    }

    /// Functions of the unit (subprograms with code, also nested in namespaces and types, and functions nested
    /// in functions) by address: built only when ``outerFunctions(of:)`` has none for an address (a function
    /// nested in another whose code lies outside its parent's, or one defined in a type).
    private func functions(of unit: Unit) -> [FunctionRange] {
        if let functions = unit.functions { return functions }
        var result: [FunctionRange] = []
        collectFunctions(in: &unit.die, nested: true, into: &result)
        DwarfReader.sortByAddress(&result)
        unit.functions = result
        return result
    }

    /// The unit's functions defined in it or in its namespaces and modules (not in a function or a type), by
    /// address: the index a lookup searches first. Made without descending into functions and types, so
    /// their DIEs are parsed once (to skip them: Swift and clang emit no `DW_AT_sibling`) rather than twice:
    /// a Swift type declares each of its methods with their parameters.
    private func outerFunctions(of unit: Unit) -> [FunctionRange] {
        if let functions = unit.outerFunctions { return functions }
        var result: [FunctionRange] = []
        collectFunctions(in: &unit.die, nested: false, into: &result)
        DwarfReader.sortByAddress(&result)
        unit.outerFunctions = result
        return result
    }

    /// Start ascending, then end descending: the innermost range containing an address is the last one that
    /// starts at or below it and ends above it.
    private static func sortByAddress(_ ranges: inout [FunctionRange]) {
        ranges.sort { ($0.start, $1.end) < ($1.start, $0.end) }
    }

    /// Appends the address ranges of the function definitions among `parent`'s children, and of those in
    /// namespaces and modules below them; with `nested`, also of those in types and of the functions nested
    /// in those functions (their children, again through namespaces and types).
    private func collectFunctions(in parent: inout Dwarf_Die, nested: Bool, into result: inout [FunctionRange]) {
        var child = Dwarf_Die()
        guard dw.dwarf_child(&parent, &child) == 0 else { return }
        while true {
            let tag = dw.dwarf_tag(&child)
            if tag == Int32(DW_TAG_subprogram) || tag == Int32(DW_TAG_entry_point) {
                // Without nested functions only DIEs with code are asked more (most subprograms of a unit are
                // declarations, or abstract instances of inlined functions, without).
                let hasCode = nested || dw.dwarf_hasattr(&child, UInt32(DW_AT_low_pc)) != 0
                    || dw.dwarf_hasattr(&child, UInt32(DW_AT_ranges)) != 0
                var declaration = Dwarf_Attribute()
                var isDeclaration = false
                if hasCode, tag == Int32(DW_TAG_subprogram),
                   dw.dwarf_attr(&child, UInt32(DW_AT_declaration), &declaration) != nil {
                    // Present and true: a DW_FORM_flag attribute may also say false.
                    var flag = false
                    isDeclaration = dw.dwarf_formflag(&declaration, &flag) == 0 && flag
                }
                // A declaration (a member function in its type, an external function) has no code, and the
                // functions nested in it are the children of its definition, not of it. Swift types list
                // every method so, with their parameters.
                if hasCode && !isDeclaration {
                    var offset = 0
                    var base: Dwarf_Addr = 0, start: Dwarf_Addr = 0, end: Dwarf_Addr = 0
                    while true {
                        offset = dw.dwarf_ranges(&child, offset, &base, &start, &end)
                        if offset <= 0 { break }
                        if end > start { result.append(FunctionRange(start: start, end: end, die: child)) }
                    }
                    // Functions nested in functions (local functions in some languages) have their own DIEs.
                    if nested { collectFunctions(in: &child, nested: true, into: &result) }
                }
            } else if nested ? DwarfReader.isContainer(tag) : DwarfReader.isNamespace(tag) {
                collectFunctions(in: &child, nested: nested, into: &result)
            }
            var next = Dwarf_Die()
            guard dw.dwarf_siblingof(&child, &next) == 0 else { break }
            child = next
        }
    }

    /// The innermost of `functions` (sorted by ``sortByAddress(_:)``) containing `vaddr`: the latest-starting
    /// one, looking back at most 256 ranges (ranges may nest or overlap). `nil` when none does.
    private static func innermost(_ functions: [FunctionRange], containing vaddr: UInt64) -> FunctionRange? {
        var index = functions.firstIndex(after: vaddr, by: \.start) - 1
        var checked = 0
        while index >= 0 && checked < 256 {
            if vaddr < functions[index].end { return functions[index] }
            index -= 1
            checked += 1
        }
        return nil
    }

    /// The function whose code contains `vaddr`, as the unit's whole function index (``functions(of:)``)
    /// would give it: the innermost of the outer functions and the functions nested in the one found;
    /// the whole index when no outer function contains `vaddr`.
    private func function(in unit: Unit, containing vaddr: UInt64) -> Dwarf_Die? {
        guard let outer = DwarfReader.innermost(outerFunctions(of: unit), containing: vaddr) else {
            return DwarfReader.innermost(functions(of: unit), containing: vaddr)?.die
        }
        var candidates = [outer]
        var die = outer.die
        collectFunctions(in: &die, nested: true, into: &candidates)
        DwarfReader.sortByAddress(&candidates)
        return (DwarfReader.innermost(candidates, containing: vaddr) ?? outer).die
    }

    /// The inlined_subroutine / subprogram DIEs containing `vaddr`, innermost first.
    private func scopes(in unit: Unit, at vaddr: UInt64) -> [Dwarf_Die] {
        guard var current = function(in: unit, containing: vaddr) else { return [] }
        var chain = [current]
        // Descend through lexical blocks and inlined subroutines that contain vaddr.
        descend: while true {
            var child = Dwarf_Die()
            guard dw.dwarf_child(&current, &child) == 0 else { break }
            while true {
                let tag = dw.dwarf_tag(&child)
                if tag == Int32(DW_TAG_inlined_subroutine) || DwarfReader.isBlock(tag) {
                    if dw.dwarf_haspc(&child, vaddr) == 1 {
                        if tag == Int32(DW_TAG_inlined_subroutine) { chain.append(child) }
                        current = child
                        continue descend
                    }
                }
                var next = Dwarf_Die()
                guard dw.dwarf_siblingof(&child, &next) == 0 else { break descend }
                child = next
            }
        }
        return chain.reversed()
    }

    // MARK: - Names and paths

    /// `DW_AT_linkage_name` (or the older `DW_AT_MIPS_linkage_name`), else `DW_AT_name`, through
    /// abstract origins and specifications.
    private func name(of die: inout Dwarf_Die) -> String? {
        var attribute = Dwarf_Attribute()
        for code in [UInt32(DW_AT_linkage_name), UInt32(DW_AT_MIPS_linkage_name)] {
            if let text = dw.dwarf_formstring(dw.dwarf_attr_integrate(&die, code, &attribute)) {
                return String(cString: text)
            }
        }
        if let text = dw.dwarf_formstring(dw.dwarf_attr_integrate(&die, UInt32(DW_AT_name), &attribute)) {
            return String(cString: text)
        }
        return nil
    }

    private static func absolute(_ path: String, compDir: String?) -> String {
        guard !path.hasPrefix("/"), let compDir, !compDir.isEmpty else { return path }
        return compDir.hasSuffix("/") ? compDir + path : compDir + "/" + path
    }
}
