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

    /// A one-line explanation naming the path.
    public var description: String {
        switch self {
        case .cannotOpen(let path, let code): return "cannot open \(path): \(String(cString: strerror(code)))"
        case .notARegularFile(let path): return "\(path) is not a regular file"
        case .notELF(let path, let reason): return "\(path) is not a readable ELF file: \(reason)"
        case .tooLarge(let path, let size):
            return "\(path) is too large to symbolicate from (\(size) bytes, at most \(ElfFile.maxFileSize))"
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

/// An ELF file on disk opened with libelf (read-only, memory-mapped), for symbolication:
/// its GNU build ID, the layout of its `PT_LOAD` segments, and address → symbol lookups in `.symtab`
/// then `.dynsym` (each table is read on first use, then kept).
///
/// Addresses of a running (or crashed) process map to ELF virtual addresses with
/// ``vaddr(ofRuntimeAddress:imageBase:)``. The file stays mapped until the object is released; its
/// descriptor is closed as soon as libelf has mapped it, so many open files never use up descriptors. Not thread-safe: use one object from one thread at a time (``Symbolicator`` locks).
public final class ElfFile {
    /// Largest file opened, in bytes (16 GiB): far above real binaries and debug files, below what a crafted
    /// sparse file could claim. Larger files throw ``ElfError/tooLarge(path:size:)``.
    public static let maxFileSize: UInt64 = 16 << 30
    /// Most entries read from one symbol table (10 million; large real binaries have a few hundred
    /// thousand). A `.symtab`/`.dynsym` claiming more is ignored as damaged, so the memory and time spent
    /// on a table never grow with a size field the file controls.
    public static let maxSymbolsPerTable = 10_000_000

    /// The path the file was opened from.
    public let path: String
    /// The GNU build ID (`NT_GNU_BUILD_ID` note, from `SHT_NOTE` sections, else from `PT_NOTE` segments)
    /// in lower-case hex, or `nil` when the file has none.
    public let buildID: String?
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
    public var hasSymtab: Bool { !symtab.entries.isEmpty }
    /// `true` when the file has a `.dynsym` with defined function symbols (exported functions).
    public var hasDynsym: Bool { !dynsym.entries.isEmpty }

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

        /// Creates an empty summary (nothing present).
        public init() {}
    }

    /// Size of the file in bytes (`fstat` at open); section extents are checked against it.
    let fileSize: UInt64
    /// The file's identity (`st_dev`, `st_ino` from `fstat` at open): two paths naming one file give the same.
    let device: UInt64
    let inode: UInt64
    /// The libelf handle (`Elf *`), valid while this object lives; DWARF reading (``DwarfFile``) shares it.
    let elf: OpaquePointer
    private lazy var symtab: SymbolTable = ElfFile.readSymbolTable(elf, type: UInt32(SHT_SYMTAB), fileSize: fileSize)
    private lazy var dynsym: SymbolTable = ElfFile.readSymbolTable(elf, type: UInt32(SHT_DYNSYM), fileSize: fileSize)

    private struct SymbolEntry {
        var value: UInt64
        var size: UInt64
        var nameOffset: UInt32
        var rank: UInt8  // binding preference among symbols at one address: GLOBAL 0, WEAK 1, other 2
        var index: UInt32  // position in the ELF table
    }

    private struct SymbolTable {
        var entries: [SymbolEntry] = []   // sorted by value
        var stringSection: Int = 0
        var maxSize: UInt64 = 0
    }

    /// Opens `path` and reads its program headers and build ID (symbol tables are read on first use, so a
    /// caller comparing build IDs first never reads the tables of a file it rejects).
    /// - Throws: ``ElfError/cannotOpen(path:errno:)``, ``ElfError/notARegularFile(path:)``,
    ///   ``ElfError/tooLarge(path:size:)`` above ``maxFileSize``, or ``ElfError/notELF(path:reason:)`` when
    ///   libelf cannot parse it as ELF.
    public init(path: String) throws {
        self.path = path
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
        self.elf = elf

        let segments = ElfFile.programHeaders(elf)
        let loads = segments.filter { $0.p_type == UInt32(PT_LOAD) }
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
        buildID = ElfFile.findBuildID(elf, segments: segments)
        machine = ehdr.e_machine
        fileType = ehdr.e_type
        sections = ElfFile.summarizeSections(elf)
    }

    deinit {
        elf_end(elf)
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
        for table in [symtab, dynsym] where !table.entries.isEmpty {
            if let entry = ElfFile.find(vaddr, in: table),
               let name = elf_strptr(elf, table.stringSection, Int(entry.nameOffset)) {
                return ElfSymbol(name: String(cString: name), address: entry.value, size: entry.size)
            }
        }
        return nil
    }

    /// The bytes of the first page (up to 4096 bytes) of the `.text` section, for
    /// ``DebugID/fromTextSection(_:)`` when the file has no build ID; empty when there is no `.text`
    /// with contents.
    public func firstTextPage() -> [UInt8] {
        var shstrndx = 0
        guard elf_getshdrstrndx(elf, &shstrndx) == 0 else { return [] }
        var scn: OpaquePointer? = elf_nextscn(elf, nil)
        while let section = scn {
            var shdr = GElf_Shdr()
            if gelf_getshdr(section, &shdr) != nil, shdr.sh_type != UInt32(SHT_NOBITS),
               let name = elf_strptr(elf, shstrndx, Int(shdr.sh_name)), String(cString: name) == ".text" {
                guard let data = elf_getdata(section, nil), let buffer = data.pointee.d_buf else { return [] }
                let count = min(data.pointee.d_size, 4096)
                return Array(UnsafeRawBufferPointer(start: buffer, count: count))
            }
            scn = elf_nextscn(elf, section)
        }
        return []
    }

    // MARK: - Reading

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

    private static func findBuildID(_ elf: OpaquePointer, segments: [GElf_Phdr]) -> String? {
        var scn: OpaquePointer? = elf_nextscn(elf, nil)
        while let section = scn {
            var shdr = GElf_Shdr()
            if gelf_getshdr(section, &shdr) != nil, shdr.sh_type == UInt32(SHT_NOTE),
               let data = elf_getdata(section, nil), let id = buildID(inNotes: data) {
                return id
            }
            scn = elf_nextscn(elf, section)
        }
        for segment in segments where segment.p_type == UInt32(PT_NOTE) && segment.p_filesz > 0 {
            if let data = elf_getdata_rawchunk(elf, Int64(clamping: segment.p_offset), Int(clamping: segment.p_filesz),
                                               ELF_T_NHDR),
               let id = buildID(inNotes: data) {
                return id
            }
        }
        return nil
    }

    private static func buildID(inNotes data: UnsafeMutablePointer<Elf_Data>) -> String? {
        guard let base = data.pointee.d_buf else { return nil }
        let size = data.pointee.d_size
        var offset = 0
        while offset < size {
            var header = GElf_Nhdr()
            var nameOffset = 0
            var descOffset = 0
            let next = gelf_getnote(data, offset, &header, &nameOffset, &descOffset)
            if next == 0 || next <= offset { break }
            offset = next
            guard header.n_type == UInt32(NT_GNU_BUILD_ID), header.n_namesz == 4,
                  nameOffset + 4 <= size, Int(header.n_descsz) > 0, descOffset + Int(header.n_descsz) <= size else {
                continue
            }
            let name = UnsafeRawBufferPointer(start: base + nameOffset, count: 4)
            guard Array(name) == Array("GNU\0".utf8) else { continue }
            return DebugID.hexString(UnsafeRawBufferPointer(start: base + descOffset, count: Int(header.n_descsz)))
        }
        return nil
    }

    private static func summarizeSections(_ elf: OpaquePointer) -> SectionSummary {
        var summary = SectionSummary()
        var shstrndx = 0
        guard elf_getshdrstrndx(elf, &shstrndx) == 0 else { return summary }
        var scn: OpaquePointer? = elf_nextscn(elf, nil)
        while let section = scn {
            var shdr = GElf_Shdr()
            if gelf_getshdr(section, &shdr) != nil, let rawName = elf_strptr(elf, shstrndx, Int(shdr.sh_name)) {
                let name = String(cString: rawName)
                let hasBytes = shdr.sh_type != UInt32(SHT_NOBITS) && shdr.sh_size > 0
                switch name {
                case ".debug_info", ".zdebug_info": if hasBytes { summary.hasDebugInfo = true }
                case ".eh_frame", ".debug_frame": if hasBytes { summary.hasUnwindInfo = true }
                case ".text": if shdr.sh_type == UInt32(SHT_NOBITS) { summary.textIsNoBits = true }
                case ".gnu_debuglink": summary.hasDebugLink = true
                default: break
                }
            }
            scn = elf_nextscn(elf, section)
        }
        return summary
    }

    private static func readSymbolTable(_ elf: OpaquePointer, type: UInt32, fileSize: UInt64) -> SymbolTable {
        var scn: OpaquePointer? = elf_nextscn(elf, nil)
        while let section = scn {
            var shdr = GElf_Shdr()
            if gelf_getshdr(section, &shdr) != nil, shdr.sh_type == type {
                return readSymbols(section, shdr, entrySize: UInt64(gelf_fsize(elf, ELF_T_SYM, 1, UInt32(EV_CURRENT))),
                                   fileSize: fileSize)
            }
            scn = elf_nextscn(elf, section)
        }
        return SymbolTable()
    }

    /// The symbols of one table. The header's sizes come from the file, so they are checked before any
    /// allocation: `sh_entsize` must be the size of one `Elf32_Sym`/`Elf64_Sym` (`entrySize`), the section
    /// must lie inside the file and hold at most ``maxSymbolsPerTable`` entries; otherwise the table is
    /// ignored (empty).
    private static func readSymbols(_ section: OpaquePointer, _ shdr: GElf_Shdr, entrySize: UInt64,
                                    fileSize: UInt64) -> SymbolTable {
        var table = SymbolTable()
        table.stringSection = Int(shdr.sh_link)
        guard entrySize > 0, shdr.sh_entsize == entrySize, shdr.sh_size % entrySize == 0,
              shdr.sh_offset <= fileSize, shdr.sh_size <= fileSize - shdr.sh_offset,
              shdr.sh_size / entrySize <= UInt64(maxSymbolsPerTable),
              let data = elf_getdata(section, nil) else { return table }
        let count = min(Int(shdr.sh_size / entrySize), data.pointee.d_size / Int(entrySize))
        table.entries.reserveCapacity(count)
        for index in 0..<count {
            var sym = GElf_Sym()
            guard gelf_getsym(data, Int32(clamping: index), &sym) != nil else { break }
            let type = Int32(sym.st_info & 0xf)
            let binding = Int32(sym.st_info >> 4)
            guard sym.st_shndx != UInt16(SHN_UNDEF), sym.st_size > 0, sym.st_name != 0,
                  type == STT_FUNC || type == STT_NOTYPE else { continue }
            let rank: UInt8 = binding == STB_GLOBAL ? 0 : binding == STB_WEAK ? 1 : 2
            table.entries.append(SymbolEntry(value: sym.st_value, size: sym.st_size, nameOffset: sym.st_name, rank: rank,
                                             index: UInt32(truncatingIfNeeded: index)))
            table.maxSize = max(table.maxSize, sym.st_size)
        }
        // By address, then preferred binding, then table order (the index in the table, as a tiebreaker:
        // one key, so an unstable in-place sort gives the same order as a stable one).
        table.entries.sort { lhs, rhs in
            if lhs.value != rhs.value { return lhs.value < rhs.value }
            if lhs.rank != rhs.rank { return lhs.rank < rhs.rank }
            return lhs.index < rhs.index
        }
        return table
    }

    private static func find(_ vaddr: UInt64, in table: SymbolTable) -> SymbolEntry? {
        let entries = table.entries
        var index = entries.firstIndex(after: vaddr, by: \.value) - 1
        var best: SymbolEntry?
        while index >= 0 {
            let entry = entries[index]
            if let found = best {
                // Same start address: lower indexes have the preferred binding.
                if entry.value != found.value { break }
            } else if vaddr - entry.value >= table.maxSize {
                break  // no symbol this far below can reach vaddr
            }
            if vaddr - entry.value < entry.size { best = entry }
            index -= 1
        }
        return best
    }
}
