import CLibdw
#if canImport(Glibc)
import Glibc
#endif

/// Why an ELF file could not be read.
public enum ElfError: Error, Equatable, CustomStringConvertible {
    /// `open(2)` failed with this errno (missing file, no permission, …).
    case cannotOpen(path: String, errno: Int32)
    /// The file is not a regular file (a directory, FIFO, device…).
    case notARegularFile(path: String)
    /// libelf refused the file: not ELF, or its headers are damaged. `reason` is libelf's message.
    case notELF(path: String, reason: String)
    /// The file is larger than ``ElfFile/maxFileSize`` bytes (`size`, from `fstat`): not opened, so a crafted
    /// or sparse file cannot make symbolication map or read without bound.
    case tooLarge(path: String, size: UInt64)
    /// libelf (`libelf.so.1`, opened with `dlopen` on first use) cannot be loaded in this process, so no ELF file
    /// can be read; `reason` is the loader's message (``ElfFile/unavailableReason``).
    case libelfMissing(path: String, reason: String)

    /// A one-line explanation naming the path.
    public var description: String {
        switch self {
        case .cannotOpen(let path, let code): return "cannot open \(path): \(String(cString: strerror(code)))"
        case .notARegularFile(let path): return "\(path) is not a regular file"
        case .notELF(let path, let reason): return "\(path) is not a readable ELF file: \(reason)"
        case .tooLarge(let path, let size):
            return "\(path) is too large to symbolicate from (\(size) bytes, at most \(ElfFile.maxFileSize))"
        case .libelfMissing(let path, let reason): return "cannot read \(path): libelf cannot be loaded (\(reason))"
        }
    }
}

/// A symbol from an ELF symbol table.
public struct ElfSymbol: Equatable, Sendable {
    /// The raw (mangled) name, as stored in the string table.
    public var name: String
    /// The symbol's value: its start as an ELF virtual address (`st_value`), not a runtime address.
    public var address: UInt64
    /// Its size in bytes (`st_size`), always > 0 for symbols returned by ``ElfFile/symbol(containing:)``.
    public var size: UInt64

    /// Creates a symbol; every field is described on its property.
    public init(name: String, address: UInt64, size: UInt64) {
        self.name = name
        self.address = address
        self.size = size
    }
}

/// A `.gnu_debuglink` section: the file name of the separate debug file a stripped file was linked to
/// (`objcopy --add-gnu-debuglink`), and the CRC-32 of that debug file's contents.
public struct DebugLink: Equatable, Sendable {
    /// The debug file's name (no directory), e.g. `libfoo.so.debug`.
    public var name: String
    /// CRC-32 (the zlib / ISO-HDLC polynomial, as `gdb` checks it) of the whole debug file.
    public var crc: UInt32

    /// Creates a link; every field is described on its property.
    public init(name: String, crc: UInt32) {
        self.name = name
        self.crc = crc
    }
}

/// One section header of an ELF file, as read once at open.
struct ElfSection: Sendable {
    /// The section's index (`elf_ndxscn`), for `elf_getscn`.
    var index: Int
    /// Its name from the section-header string table (empty when unreadable).
    var name: String
    /// `sh_type` (`SHT_SYMTAB`, `SHT_NOBITS`, …).
    var type: UInt32
    /// `sh_offset` and `sh_size`, in bytes.
    var offset: UInt64
    var size: UInt64
    /// `sh_link` (for a symbol table: its string table's index).
    var link: UInt32
    /// `sh_entsize`: size of one entry for tables, else 0.
    var entrySize: UInt64

    /// `true` when the section occupies bytes in the file (not `SHT_NOBITS`) and is not empty.
    var hasBytes: Bool { type != UInt32(SHT_NOBITS) && size > 0 }
}

/// An ELF file on disk opened with libelf (read-only, memory-mapped), for symbolication:
/// its GNU build ID, the layout of its `PT_LOAD` segments, its `.gnu_debuglink`, and address → symbol
/// lookups in `.symtab` then `.dynsym` (each table is read on first use, then kept).
///
/// Addresses of a running (or crashed) process map to ELF virtual addresses with
/// ``vaddr(ofRuntimeAddress:imageBase:)``. The file stays mapped until the object is released; its
/// descriptor is closed as soon as libelf has mapped it, so many open files never use up descriptors.
/// Thread-safe: the headers are read at open; the libelf handle and the symbol tables read later live
/// behind one lock (libelf allows one thread per handle at a time), which ``DwarfFile`` takes too.
public final class ElfFile: Sendable {
    /// Largest file opened, in bytes (16 GiB): far above real binaries and debug files, below what a crafted
    /// sparse file could claim. Larger files throw ``ElfError/tooLarge(path:size:)``.
    public static let maxFileSize: UInt64 = 16 << 30

    /// Why no ELF file can be read in this process: libelf (`libelf.so.1`, opened with `dlopen` on first use, not
    /// at process start) cannot be opened or lacks a function — the loader's message, e.g. "libelf.so.1: cannot
    /// open shared object file: No such file or directory". `nil` when libelf is there. Without it nothing is
    /// symbolicated (no symbol tables, build IDs or DWARF). Opens libelf if it was not yet opened: the libelf
    /// calls here go to Sources/CVakaElf's forwarders, whose `elf_version` gives `EV_NONE` and `elf_errmsg` the
    /// loader's message (`vaka_libelf_error()`) when libelf cannot be loaded.
    public static var unavailableReason: String? {
        guard elf_version(UInt32(EV_CURRENT)) == UInt32(EV_NONE) else { return nil }
        return elf_errmsg(-1).map { String(cString: $0) } ?? "libelf.so.1 cannot be loaded"
    }
    /// Most entries read from one symbol table (10 million; large real binaries have a few hundred
    /// thousand). A `.symtab`/`.dynsym` claiming more is ignored as damaged, so the memory and time spent
    /// on a table never grow with a size field the file controls.
    public static let maxSymbolsPerTable = 10_000_000

    /// The path the file was opened from.
    public let path: String
    /// The GNU build ID (the `NT_GNU_BUILD_ID` note in the note sections or segments, found with libelf the
    /// way elfutils' `dwelf_elf_gnu_build_id` finds it) in lower-case hex, or `nil` when the file has none.
    public let buildID: String?
    /// The `.gnu_debuglink` section (read with libelf as elfutils' `dwelf_elf_gnu_debuglink` reads it), or `nil`
    /// when the file has none.
    public let debugLink: DebugLink?
    /// The lowest `PT_LOAD` `p_vaddr`, aligned down to the page size: the ELF virtual address of the image's
    /// first mapped byte, which a crash report records as the image base. 0 when there is no `PT_LOAD`.
    public let firstLoadVaddr: UInt64
    /// Span of the `PT_LOAD` segments in bytes, from ``firstLoadVaddr`` to the end of the last segment
    /// in memory (`p_vaddr + p_memsz`); 0 when there is none.
    public let loadSpan: UInt64
    /// The ELF header's `e_machine` (62 for x86_64, 183 for aarch64).
    public let machine: UInt16
    /// The ELF header's `e_type`: 1 relocatable, 2 executable, 3 shared object (also PIE executables), 4 core.
    public let fileType: UInt16
    /// What the section headers say about the file's contents (names, what kind of debug data it holds).
    public let sections: SectionSummary
    /// `true` when the file has a `.symtab` with function symbols (it is not stripped).
    public var hasSymtab: Bool { !table(.symtab).isEmpty }
    /// `true` when the file has a `.dynsym` with defined function symbols (exported functions).
    public var hasDynsym: Bool { !table(.dynsym).isEmpty }

    /// The Sentry / Breakpad architecture name for ``machine``: `x86_64`, `aarch64`, `x86`, `arm`,
    /// `ppc64`, `riscv64`, …; `nil` for machines not listed here.
    public var arch: String? {
        switch Int32(machine) {
        case EM_X86_64: return "x86_64"
        case EM_AARCH64: return "arm64"
        case EM_386: return "x86"
        case EM_ARM: return "arm"
        case EM_PPC64: return "ppc64"
        case EM_PPC: return "ppc"
        case EM_MIPS: return "mips"
        case 243: return "riscv64"  // EM_RISCV
        default: return nil
        }
    }

    /// Sentry's `debug_id` for this file: from the build ID (``DebugID/fromBuildID(_:)``) when there is one,
    /// else the hash of the first page of `.text` (``DebugID/fromTextSection(_:)``); `nil` when the file has
    /// neither (no build ID and no `.text` bytes, e.g. a debug companion file without a build ID).
    public var debugID: String? {
        if let buildID { return DebugID.fromBuildID(buildID) }
        return DebugID.fromTextSection(firstTextPage())
    }

    /// The file's section headers, condensed to what symbolication and `debug-files check` need.
    public struct SectionSummary: Equatable, Sendable {
        /// `true` when a `.debug_info` section has contents (not `SHT_NOBITS`, size > 0): DWARF is present.
        public var hasDebugInfo = false
        /// `true` when `.eh_frame` or `.debug_frame` has contents: the file carries unwind information.
        public var hasUnwindInfo = false
        /// `true` when `.text` exists but is `SHT_NOBITS`: a debug companion file
        /// (`objcopy --only-keep-debug`), with no code.
        public var textIsNoBits = false
        /// `true` when the file has a `.gnu_debuglink` section (it was stripped with a link to a debug file).
        public var hasDebugLink = false
        /// `true` when the file has a `.gnu_debugdata` section (MiniDebugInfo: an xz-compressed ELF file
        /// with a `.symtab`, as Fedora ships), whose function symbols ``symbol(containing:)`` uses.
        public var hasDebugData = false

        /// Creates an empty summary (nothing present).
        public init() {}

        init(_ headers: [ElfSection]) {
            for section in headers {
                switch section.name {
                case ".debug_info", ".zdebug_info": if section.hasBytes { hasDebugInfo = true }
                case ".eh_frame", ".debug_frame": if section.hasBytes { hasUnwindInfo = true }
                case ".text": if section.type == UInt32(SHT_NOBITS) { textIsNoBits = true }
                case ".gnu_debuglink": hasDebugLink = true
                case ".gnu_debugdata": hasDebugData = true
                default: break
                }
            }
        }
    }

    /// Size of the file in bytes (`fstat` at open); section extents are checked against it.
    let fileSize: UInt64
    /// The file's identity (`st_dev`, `st_ino` from `fstat` at open): two paths naming one file give the same.
    let device: UInt64
    let inode: UInt64
    /// The section headers, read once at open.
    let sectionHeaders: [ElfSection]

    /// The libelf handle and what is read through it after open. Locked for every libelf call after
    /// init: one lock per file, so symbol tables are read once and libelf is never entered by two threads
    /// for one handle.
    private let handle: Locked<Handle>

    private struct Handle {
        /// The `Elf *`, valid while the file lives.
        let elf: OpaquePointer
        var symtab: ElfSymbolTable?
        var dynsym: ElfSymbolTable?
        /// `true` once ``ElfFile/withDwarfSections(_:)`` inflated the compressed DWARF sections into `elf`.
        var dwarfSectionsInflated = false
        /// The inflated sections' memory (`vaka_dw_inflate_sections`), referenced by `elf`'s section data:
        /// released after `elf_end`.
        var inflated: OpaquePointer?
    }

    private enum TableKind { case symtab, dynsym }

    /// Opens `path` and reads its headers, build ID and debug link (symbol tables are read on first use, so
    /// a caller comparing build IDs first never reads the tables of a file it rejects).
    /// - Throws: ``ElfError/cannotOpen(path:errno:)``, ``ElfError/notARegularFile(path:)``,
    ///   ``ElfError/tooLarge(path:size:)`` above ``maxFileSize``, ``ElfError/notELF(path:reason:)`` when
    ///   libelf cannot parse it as ELF, or ``ElfError/libelfMissing(path:reason:)`` when libelf cannot be loaded.
    public init(path: String) throws {
        self.path = path
        if let reason = ElfFile.unavailableReason { throw ElfError.libelfMissing(path: path, reason: reason) }
        _ = elf_version(UInt32(EV_CURRENT))
        let fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { throw ElfError.cannotOpen(path: path, errno: errno) }
        var info = stat()
        guard fstat(fd, &info) == 0, (info.st_mode & S_IFMT) == S_IFREG else {
            close(fd)
            throw ElfError.notARegularFile(path: path)
        }
        let fileSize = UInt64(clamping: info.st_size)
        guard fileSize <= ElfFile.maxFileSize else {
            close(fd)
            throw ElfError.tooLarge(path: path, size: fileSize)
        }
        guard let elf = elf_begin(fd, ELF_C_READ_MMAP, nil) else {
            let reason = ElfFile.lastError()
            close(fd)
            throw ElfError.notELF(path: path, reason: reason)
        }
        guard elf_kind(elf) == ELF_K_ELF else {
            elf_end(elf)
            close(fd)
            throw ElfError.notELF(path: path, reason: "not an ELF object")
        }
        var ehdr = GElf_Ehdr()
        guard gelf_getehdr(elf, &ehdr) != nil else {
            let reason = ElfFile.lastError()
            elf_end(elf)
            close(fd)
            throw ElfError.notELF(path: path, reason: reason)
        }
        // Everything is read through libelf's mapping from here on (ELF_C_FDREAD reads the rest into memory
        // only if mapping had failed), so the descriptor can go now.
        _ = elf_cntl(elf, ELF_C_FDREAD)
        close(fd)
        self.fileSize = fileSize
        self.device = UInt64(info.st_dev)
        self.inode = UInt64(info.st_ino)

        let loads = ElfFile.programHeaders(elf).filter { $0.p_type == UInt32(PT_LOAD) }
        if let lowest = loads.map(\.p_vaddr).min() {
            let page = UInt64(max(sysconf(Int32(_SC_PAGESIZE)), 4096))
            let first = lowest & ~(page - 1)
            let end = loads.map { $0.p_vaddr &+ $0.p_memsz }.max() ?? first
            firstLoadVaddr = first
            loadSpan = end >= first ? end - first : 0
        } else {
            firstLoadVaddr = 0
            loadSpan = 0
        }
        buildID = ElfFile.gnuBuildID(elf)
        debugLink = ElfFile.gnuDebugLink(elf)
        machine = ehdr.e_machine
        fileType = ehdr.e_type
        sectionHeaders = ElfFile.readSections(elf)
        sections = SectionSummary(sectionHeaders)
        handle = Locked(Handle(elf: elf))
    }

    deinit {
        handle.withLock { handle in
            _ = elf_end(handle.elf)
            vaka_dw_inflated_free(handle.inflated)
        }
    }

    /// The ELF virtual address for `address` in a process where this file was loaded with its first byte
    /// at `imageBase`: `address - imageBase + firstLoadVaddr` (wrapping arithmetic; pass addresses inside
    /// the image).
    public func vaddr(ofRuntimeAddress address: UInt64, imageBase: UInt64) -> UInt64 {
        address &- imageBase &+ firstLoadVaddr
    }

    /// The runtime address for an ELF virtual address: the inverse of ``vaddr(ofRuntimeAddress:imageBase:)``.
    public func runtimeAddress(ofVaddr vaddr: UInt64, imageBase: UInt64) -> UInt64 {
        vaddr &- firstLoadVaddr &+ imageBase
    }

    /// The symbol whose `[st_value, st_value + st_size)` contains the ELF virtual address `vaddr`, looking
    /// in `.symtab` first and then `.dynsym`. Only defined `STT_FUNC` symbols and `STT_NOTYPE` symbols with
    /// a non-zero size count. When several contain `vaddr`, the one starting closest below it wins, then
    /// GLOBAL over WEAK over LOCAL binding, then table order.
    /// - Returns: the symbol, or `nil` when no symbol contains `vaddr`.
    public func symbol(containing vaddr: UInt64) -> ElfSymbol? {
        handle.withLock { handle -> ElfSymbol? in
            for kind in [TableKind.symtab, .dynsym] {
                var table = loadedTable(kind, &handle)
                // The lookup may sort the table (ElfSymbolTable.entry(containing:)): taken out of the handle
                // while it does, so the entries are not copied, then put back.
                if kind == .symtab { handle.symtab = nil } else { handle.dynsym = nil }
                let entry = table.entry(containing: vaddr)
                let name = entry.flatMap { table.name(of: $0, in: handle.elf) }
                if kind == .symtab { handle.symtab = table } else { handle.dynsym = table }
                if let entry, let name {
                    return ElfSymbol(name: name, address: entry.value, size: entry.size)
                }
            }
            return nil
        }
    }

    /// ``symbol(containing:)`` for each of `vaddrs` (ELF virtual addresses, any order, repeats allowed), the
    /// results in their order: the same symbols, found by one pass over each symbol table for all of them
    /// (while the table is unsorted) rather than one each.
    public func symbols(containing vaddrs: [UInt64]) -> [ElfSymbol?] {
        handle.withLock { handle -> [ElfSymbol?] in
            var result = [ElfSymbol?](repeating: nil, count: vaddrs.count)
            var pending = Array(vaddrs.indices)
            for kind in [TableKind.symtab, .dynsym] where !pending.isEmpty {
                var table = loadedTable(kind, &handle)
                if table.isEmpty { continue }
                // Taken out of the handle while the lookup may sort it, as in symbol(containing:).
                if kind == .symtab { handle.symtab = nil } else { handle.dynsym = nil }
                let entries = table.entries(containing: pending.map { vaddrs[$0] })
                var unanswered: [Int] = []
                for (index, entry) in zip(pending, entries) {
                    if let entry, let name = table.name(of: entry, in: handle.elf) {
                        result[index] = ElfSymbol(name: name, address: entry.value, size: entry.size)
                    } else {
                        unanswered.append(index)
                    }
                }
                if kind == .symtab { handle.symtab = table } else { handle.dynsym = table }
                pending = unanswered
            }
            return result
        }
    }

    /// The bytes of the first page (up to 4096 bytes) of the `.text` section, for
    /// ``DebugID/fromTextSection(_:)`` when the file has no build ID; empty when there is no `.text`
    /// with contents.
    public func firstTextPage() -> [UInt8] {
        guard let text = sectionHeaders.first(where: { $0.name == ".text" && $0.type != UInt32(SHT_NOBITS) }) else {
            return []
        }
        return handle.withLock { handle -> [UInt8] in
            guard let section = elf_getscn(handle.elf, text.index), let data = elf_getdata(section, nil),
                  let buffer = data.pointee.d_buf else { return [] }
            return Array(UnsafeRawBufferPointer(start: buffer, count: min(data.pointee.d_size, 4096)))
        }
    }

    /// The CRC-32 of the whole file (zlib's `crc32`, the checksum `.gnu_debuglink` records), computed over
    /// libelf's mapping of it (`elf_rawfile`); `nil` when libelf has no image of the file or zlib cannot be
    /// loaded (`vaka_zlib()`, which opens `libz.so.1` with `dlopen` at the first call).
    public func crc32() -> UInt32? {
        handle.withLock { handle -> UInt32? in
            var size = 0
            guard var crc = CRC32(), let base = elf_rawfile(handle.elf, &size) else { return nil }
            crc.add(UnsafeRawBufferPointer(start: base, count: size))
            return crc.value
        }
    }

    /// Runs `body` with the libelf handle, holding the file's lock: how ``DwarfFile`` reaches libdw, which
    /// reads through the same `Elf *`.
    func withHandle<Result: Sendable>(_ body: (OpaquePointer) -> Result) -> Result {
        handle.withLock { handle -> Result in body(handle.elf) }
    }

    /// Runs `body` with the libelf handle, holding the file's lock, after the file's zlib-compressed DWARF
    /// sections were inflated into libelf's copy of their data (the first call does it; see
    /// `vaka_dw_inflate_sections` in Sources/CLibdw/shim.h): how ``DwarfFile`` opens libdw, whose
    /// `dwarf_begin_elf` then inflates nothing itself. The sections a lookup reads are inflated with libdeflate
    /// (zlib when `libdeflate.so.0` is missing), the largest on a thread of its own on a machine with more than
    /// one core; location lists and macros, which no lookup reads, are not inflated; a section whose stream is
    /// damaged is left out, as libdw leaves out one it fails to inflate.
    func withDwarfSections<Result: Sendable>(_ body: (OpaquePointer) -> Result) -> Result {
        handle.withLock { handle -> Result in
            if !handle.dwarfSectionsInflated {
                handle.inflated = vaka_dw_inflate_sections(handle.elf, ElfFile.inflateThreads)
                handle.dwarfSectionsInflated = true
            }
            return body(handle.elf)
        }
    }

    /// Threads that inflate one file's DWARF sections: 2 when the machine has more than one core online.
    private static let inflateThreads: Int32 = sysconf(Int32(_SC_NPROCESSORS_ONLN)) > 1 ? 2 : 1

    // MARK: - Reading

    private func table(_ kind: TableKind) -> ElfSymbolTable {
        handle.withLock { handle -> ElfSymbolTable in loadedTable(kind, &handle) }
    }

    /// The symbol table of `kind`, read on first use into `handle`.
    private func loadedTable(_ kind: TableKind, _ handle: inout Handle) -> ElfSymbolTable {
        if let table = kind == .symtab ? handle.symtab : handle.dynsym { return table }
        let type = UInt32(kind == .symtab ? SHT_SYMTAB : SHT_DYNSYM)
        var table = ElfSymbolTable()
        if kind == .dynsym, sections.hasDebugData, !sectionHeaders.contains(where: { $0.type == UInt32(SHT_SYMTAB) }) {
            // MiniDebugInfo: libdwfl gives .dynsym and the compressed .symtab's functions as one table.
            table = ElfSymbolTable(miniDebugInfoOf: path, buildID: buildID, maxSymbols: ElfFile.maxSymbolsPerTable)
        }
        if table.isEmpty, let header = sectionHeaders.first(where: { $0.type == type }),
           let section = elf_getscn(handle.elf, header.index) {
            table = ElfSymbolTable(elf: handle.elf, section: section, header: header, fileSize: fileSize,
                                   maxSymbols: ElfFile.maxSymbolsPerTable)
        }
        if kind == .symtab { handle.symtab = table } else { handle.dynsym = table }
        return table
    }

    private static func lastError() -> String {
        if let message = elf_errmsg(-1) { return String(cString: message) }
        return "unknown libelf error"
    }

    private static func programHeaders(_ elf: OpaquePointer) -> [GElf_Phdr] {
        var count = 0
        guard elf_getphdrnum(elf, &count) == 0 else { return [] }
        var result: [GElf_Phdr] = []
        for index in 0..<count {
            var phdr = GElf_Phdr()
            if gelf_getphdr(elf, Int32(clamping: index), &phdr) != nil { result.append(phdr) }
        }
        return result
    }

    /// Every section header, in file order: the one walk over the sections.
    /// The GNU build ID, as elfutils' `dwelf_elf_gnu_build_id` finds it, with libelf only (so that opening a
    /// file does not load libdw): the first `NT_GNU_BUILD_ID` note named "GNU" in the `SHT_NOTE` sections, in
    /// section order, or in the `PT_NOTE` segments when the file has no section headers. Lowercase hex, or
    /// `nil` when there is none.
    private static func gnuBuildID(_ elf: OpaquePointer) -> String? {
        func find(in data: UnsafeMutablePointer<Elf_Data>?) -> String? {
            guard let data, data.pointee.d_buf != nil else { return nil }
            var offset = 0
            var header = GElf_Nhdr()
            var nameOffset = 0
            var descOffset = 0
            while offset < data.pointee.d_size {
                let next = gelf_getnote(data, offset, &header, &nameOffset, &descOffset)
                guard next > 0 else { return nil }
                offset = next
                let base = UnsafeRawPointer(data.pointee.d_buf!)
                if header.n_type == UInt32(NT_GNU_BUILD_ID), header.n_namesz == 4,
                   memcmp(base + nameOffset, "GNU", 4) == 0, header.n_descsz > 0 {
                    return DebugID.hexString(UnsafeRawBufferPointer(start: base + descOffset, count: Int(header.n_descsz)))
                }
            }
            return nil
        }
        var scn = elf_nextscn(elf, nil)
        if scn == nil {
            for phdr in programHeaders(elf) where phdr.p_type == UInt32(PT_NOTE) {
                if let id = find(in: elf_getdata_rawchunk(elf, Int64(clamping: phdr.p_offset), Int(clamping: phdr.p_filesz), ELF_T_NHDR)) {
                    return id
                }
            }
            return nil
        }
        while let section = scn {
            var shdr = GElf_Shdr()
            if gelf_getshdr(section, &shdr) != nil, shdr.sh_type == UInt32(SHT_NOTE), let id = find(in: elf_getdata(section, nil)) {
                return id
            }
            scn = elf_nextscn(elf, section)
        }
        return nil
    }

    /// The `.gnu_debuglink` section, as elfutils' `dwelf_elf_gnu_debuglink` reads it, with libelf only: the
    /// zero-terminated file name at its start and the CRC-32 in the section's last 4 bytes (in the file's byte
    /// order). `nil` when the file has no such section or it is malformed.
    private static func gnuDebugLink(_ elf: OpaquePointer) -> DebugLink? {
        var shstrndx = 0
        guard elf_getshdrstrndx(elf, &shstrndx) == 0 else { return nil }
        var scn = elf_nextscn(elf, nil)
        while let section = scn {
            var shdr = GElf_Shdr()
            guard gelf_getshdr(section, &shdr) != nil, let name = elf_strptr(elf, shstrndx, Int(shdr.sh_name)) else {
                return nil
            }
            if strcmp(name, ".gnu_debuglink") == 0 { break }
            scn = elf_nextscn(elf, section)
        }
        guard let scn, let raw = elf_rawdata(scn, nil), let buffer = raw.pointee.d_buf else { return nil }
        let size = raw.pointee.d_size
        let crcSize = MemoryLayout<GElf_Word>.size
        guard size > crcSize, memchr(buffer, 0, size - crcSize) != nil else { return nil }
        var crc: GElf_Word = 0
        let converted = withUnsafeMutableBytes(of: &crc) { crcBytes -> Bool in
            var destination = Elf_Data(d_buf: crcBytes.baseAddress, d_type: ELF_T_WORD, d_version: UInt32(EV_CURRENT),
                                       d_size: crcSize, d_off: 0, d_align: 0)
            var source = Elf_Data(d_buf: buffer + (size - crcSize), d_type: ELF_T_WORD, d_version: UInt32(EV_CURRENT),
                                  d_size: crcSize, d_off: 0, d_align: 0)
            var ehdr = GElf_Ehdr()
            guard gelf_getehdr(elf, &ehdr) != nil else { return false }
            return gelf_xlatetom(elf, &destination, &source, UInt32(ehdr.e_ident.5)) != nil
        }
        guard converted else { return nil }
        return DebugLink(name: String(cString: buffer.assumingMemoryBound(to: CChar.self)), crc: crc)
    }

    private static func readSections(_ elf: OpaquePointer) -> [ElfSection] {
        var shstrndx = 0
        let hasNames = elf_getshdrstrndx(elf, &shstrndx) == 0
        var result: [ElfSection] = []
        var scn: OpaquePointer? = elf_nextscn(elf, nil)
        while let section = scn {
            var shdr = GElf_Shdr()
            if gelf_getshdr(section, &shdr) != nil {
                let name = hasNames ? elf_strptr(elf, shstrndx, Int(shdr.sh_name)).map { String(cString: $0) } : nil
                result.append(ElfSection(index: elf_ndxscn(section), name: name ?? "", type: shdr.sh_type,
                                         offset: shdr.sh_offset, size: shdr.sh_size, link: shdr.sh_link,
                                         entrySize: shdr.sh_entsize))
            }
            scn = elf_nextscn(elf, section)
        }
        return result
    }
}
