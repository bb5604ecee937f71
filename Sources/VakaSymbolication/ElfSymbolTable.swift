import CLibdw

/// The function symbols of one ELF symbol table (`.symtab` or `.dynsym`), for address → symbol lookups.
/// Names stay in the file's string table (section ``stringSection``) and are read with `elf_strptr` when a
/// lookup finds an entry. A table read through libdwfl (MiniDebugInfo,
/// ``init(miniDebugInfoOf:buildID:maxSymbols:)``) keeps its names itself.
///
/// The first ``scansBeforeSorting`` lookups are linear scans in table order, and the next one sorts the
/// function symbols by address, after which lookups are binary searches: a crash report asks a few addresses
/// of each image, and sorting a table of tens of thousands of symbols costs more than that many scans of it;
/// a long-running process that asks many keeps the sorted table. A 64-bit table in the host's byte order (as
/// libelf gives it) is scanned in place, in libelf's section data: its function symbols are copied (32
/// bytes each) only to be sorted. Other tables are copied when read.
struct ElfSymbolTable: Sendable {
    /// One `STT_FUNC` (or sized `STT_NOTYPE`) defined symbol.
    struct Entry: Sendable {
        /// `st_value`: the start as an ELF virtual address.
        var value: UInt64
        /// `st_size` in bytes, > 0.
        var size: UInt64
        /// `st_name`: offset of the name in the string table.
        var nameOffset: UInt32
        /// Binding preference among symbols at one address: GLOBAL 0, WEAK 1, other 2.
        var rank: UInt8
        /// Position in the ELF table (the last tiebreaker).
        var index: UInt32
    }

    /// Lookups answered by a linear scan before the entries are sorted (32).
    static let scansBeforeSorting = 32

    /// libelf's `Elf64_Sym` array of one symbol table section, read in place. `@unchecked Sendable` is safe:
    /// it is section data of the `Elf *` of the ``ElfFile`` whose handle keeps the table, read only under that
    /// handle's lock and freed (`elf_end`) only with the handle; it is never written.
    private struct InPlaceSymbols: @unchecked Sendable {
        var base: UnsafePointer<Elf64_Sym>
        var count: Int
    }

    /// The symbols read in place until ``isSorted`` (then `nil`); `nil` for a table read another way.
    private var inPlace: InPlaceSymbols?
    /// The entries: empty while the table is read in place; otherwise in table order until ``isSorted``,
    /// then sorted by value, then rank, then index.
    private(set) var entries: [Entry] = []
    /// `true` once ``entries`` are sorted (lookups are binary searches from then on).
    private(set) var isSorted = false
    /// Lookups answered by a linear scan so far.
    private var scans = 0
    /// Index of the string table section (`sh_link`) holding the names.
    private(set) var stringSection: Int = 0
    /// The names, for a table read through libdwfl: `Entry.nameOffset` indexes it. Empty otherwise.
    private var names: [String] = []
    /// The largest `st_size`: how far below an address a containing symbol can start.
    private var maxSize: UInt64 = 0

    /// `true` when the table has no function symbols (or the file has no such table).
    private(set) var isEmpty = true

    /// An empty table: the file has no such section, or it was refused as damaged.
    init() {}

    /// Reads the symbols of `section` (header `header`) of `elf`. The header's sizes come from the file, so
    /// they are checked before any allocation: `sh_entsize` must be the size of one `Elf32_Sym`/`Elf64_Sym`,
    /// the section must lie inside the file (`fileSize` bytes) and hold at most `maxSymbols` entries;
    /// otherwise the table is empty.
    init(elf: OpaquePointer, section: OpaquePointer, header: ElfSection, fileSize: UInt64, maxSymbols: Int) {
        stringSection = Int(header.link)
        let entrySize = UInt64(gelf_fsize(elf, ELF_T_SYM, 1, UInt32(EV_CURRENT)))
        guard entrySize > 0, header.entrySize == entrySize, header.size % entrySize == 0,
              header.offset <= fileSize, header.size <= fileSize - header.offset,
              header.size / entrySize <= UInt64(maxSymbols),
              let data = elf_getdata(section, nil) else { return }
        let count = min(Int(header.size / entrySize), data.pointee.d_size / Int(entrySize))
        // libelf's data of a symbol table is in memory form (`Elf64_Sym`/`Elf32_Sym`, host byte order; the
        // file's own bytes when they already are): read in place, not one `gelf_getsym` call (and libelf
        // lock) per symbol.
        guard let buffer = data.pointee.d_buf, data.pointee.d_type == ELF_T_SYM else { return }
        if gelf_getclass(elf) == ELFCLASS64 && entrySize == UInt64(MemoryLayout<Elf64_Sym>.size) {
            let symbols = InPlaceSymbols(base: UnsafeRawPointer(buffer).bindMemory(to: Elf64_Sym.self, capacity: count),
                                         count: count)
            inPlace = symbols
            isEmpty = true
            for index in 0..<count where ElfSymbolTable.entry(symbols.base[index], index: index) != nil {
                isEmpty = false
                break
            }
        } else {
            for index in 0..<count {
                var sym = GElf_Sym()
                guard gelf_getsym(data, Int32(clamping: index), &sym) != nil else { break }
                guard sym.st_name != 0 else { continue }
                add(sym, nameOffset: sym.st_name, index: index)
            }
        }
    }

    /// The function symbols libdwfl gives for the file at `path` (`dwfl_module_getsym_info`): `.dynsym` (or
    /// `.symtab`) and, when the file has a `.gnu_debugdata` section, the `.symtab` of the xz-compressed ELF
    /// file inside it (MiniDebugInfo, decompressed by libdwfl with liblzma). Empty when libdwfl cannot
    /// read the file, or its build ID is not `buildID`. Values are ELF virtual addresses (`st_value`).
    init(miniDebugInfoOf path: String, buildID: String?, maxSymbols: Int) {
        stringSection = -1
        // Offline, no separate debug files (the Symbolicator finds those), section addresses as in the file.
        guard let dw = vaka_libdw()?.pointee, let callbacks = vaka_libdw_offline_callbacks(),
              let dwfl = dw.dwfl_begin(callbacks) else { return }
        defer { dw.dwfl_end(dwfl) }
        dw.dwfl_report_begin(dwfl)
        let module = dw.dwfl_report_offline(dwfl, "", path, -1)
        _ = dw.dwfl_report_end(dwfl, nil, nil)
        guard let module else { return }
        var bits: UnsafePointer<UInt8>?
        var vaddr: GElf_Addr = 0
        let idSize = dw.dwfl_module_build_id(module, &bits, &vaddr)
        let id = idSize > 0 ? bits.map { DebugID.hexString(UnsafeRawBufferPointer(start: $0, count: Int(idSize))) } : nil
        guard id == buildID else { return }
        let count = Int(dw.dwfl_module_getsymtab(module))
        guard count > 0, count <= maxSymbols else { return }
        for index in 1..<count {
            var sym = GElf_Sym()
            var address: GElf_Addr = 0
            var section: GElf_Word = 0
            guard let name = dw.dwfl_module_getsym_info(module, Int32(index), &sym, &address, &section, nil, nil) else { continue }
            guard name.pointee != 0, add(sym, nameOffset: UInt32(names.count), index: index) else { continue }
            names.append(String(cString: name))
        }
    }

    /// Adds `sym` when it is a defined `STT_FUNC`, or a sized `STT_NOTYPE`, symbol with a size; `false` when
    /// it is skipped.
    @discardableResult
    private mutating func add(_ sym: GElf_Sym, nameOffset: UInt32, index: Int) -> Bool {
        guard let entry = ElfSymbolTable.entry(info: sym.st_info, shndx: sym.st_shndx, value: sym.st_value,
                                               size: sym.st_size, nameOffset: nameOffset, index: index) else {
            return false
        }
        entries.append(entry)
        maxSize = max(maxSize, sym.st_size)
        isEmpty = false
        return true
    }

    /// The entry of a defined `STT_FUNC`, or sized `STT_NOTYPE`, symbol with a size; `nil` for other symbols.
    @inline(__always)
    private static func entry(info: UInt8, shndx: UInt16, value: UInt64, size: UInt64, nameOffset: UInt32,
                              index: Int) -> Entry? {
        let type = Int32(info & 0xf)
        guard shndx != UInt16(SHN_UNDEF), size > 0, type == STT_FUNC || type == STT_NOTYPE else { return nil }
        let binding = Int32(info >> 4)
        let rank: UInt8 = binding == STB_GLOBAL ? 0 : binding == STB_WEAK ? 1 : 2
        return Entry(value: value, size: size, nameOffset: nameOffset, rank: rank, index: UInt32(truncatingIfNeeded: index))
    }

    /// ``entry(info:shndx:value:size:nameOffset:index:)`` of an `Elf64_Sym` read in place, which also needs
    /// a name (`st_name` not 0), as the tables read otherwise.
    @inline(__always)
    private static func entry(_ sym: Elf64_Sym, index: Int) -> Entry? {
        guard sym.st_name != 0 else { return nil }
        return entry(info: sym.st_info, shndx: sym.st_shndx, value: sym.st_value, size: sym.st_size,
                     nameOffset: sym.st_name, index: index)
    }

    /// Calls `body` with each entry in table order: from the symbols read in place, else from ``entries``.
    @inline(__always)
    private func forEachEntry(_ body: (Entry) -> Void) {
        if let inPlace {
            for index in 0..<inPlace.count {
                if let entry = ElfSymbolTable.entry(inPlace.base[index], index: index) { body(entry) }
            }
        } else {
            entries.withUnsafeBufferPointer { entries in
                for entry in entries { body(entry) }
            }
        }
    }

    /// Sorts by address, then preferred binding, then table order (the index in the table, as a tiebreaker:
    /// one key, so an unstable in-place sort gives the same order as a stable one).
    private mutating func sortEntries() {
        if inPlace != nil {
            var copied: [Entry] = []
            var largest: UInt64 = 0
            forEachEntry { entry in
                copied.append(entry)
                largest = max(largest, entry.size)
            }
            entries = copied
            maxSize = largest
            inPlace = nil
        }
        entries.sort { lhs, rhs in
            if lhs.value != rhs.value { return lhs.value < rhs.value }
            if lhs.rank != rhs.rank { return lhs.rank < rhs.rank }
            return lhs.index < rhs.index
        }
        isSorted = true
    }

    /// The name of `entry`: from the table's own names, else from the string table section of `elf`.
    func name(of entry: Entry, in elf: OpaquePointer) -> String? {
        if stringSection < 0 {
            return Int(entry.nameOffset) < names.count ? names[Int(entry.nameOffset)] : nil
        }
        return elf_strptr(elf, stringSection, Int(entry.nameOffset)).map { String(cString: $0) }
    }

    /// The entry whose `[value, value + size)` contains `vaddr`: the one starting closest below it, then
    /// GLOBAL over WEAK over LOCAL binding, then table order; `nil` when none does. A linear scan for the
    /// first ``scansBeforeSorting`` lookups; the next one sorts the entries (once) and searches them.
    mutating func entry(containing vaddr: UInt64) -> Entry? {
        if !isSorted {
            if scans < ElfSymbolTable.scansBeforeSorting {
                scans += 1
                return scan(containing: vaddr)
            }
            sortEntries()
        }
        return search(containing: vaddr)
    }

    /// ``entry(containing:)`` for each of `addresses` (any order, repeats allowed), the results in their
    /// order. Before the entries are sorted, one pass over them answers all the addresses (and counts as one
    /// scan): each entry is matched against the addresses in its range by a binary search in them, so a
    /// frame list's addresses of one image cost about one scan, not one each.
    mutating func entries(containing addresses: [UInt64]) -> [Entry?] {
        if !isSorted {
            if scans < ElfSymbolTable.scansBeforeSorting {
                scans += 1
                return scan(containing: addresses)
            }
            sortEntries()
        }
        return addresses.map { search(containing: $0) }
    }

    /// ``entries(containing:)`` by one pass over the entries in any order.
    private func scan(containing addresses: [UInt64]) -> [Entry?] {
        guard !addresses.isEmpty else { return [] }
        let sorted = addresses.sorted()
        var best = [Entry?](repeating: nil, count: sorted.count)
        sorted.withUnsafeBufferPointer { sorted in
            best.withUnsafeMutableBufferPointer { best in
                let lowest = sorted[0], highest = sorted[sorted.count - 1]
                forEachEntry { entry in
                    // Entries that start above the highest address, or end at or below the lowest, contain none.
                    guard entry.value <= highest && (entry.value > lowest || lowest - entry.value < entry.size) else { return }
                    // The first address at or above the entry's start, then every one inside the entry.
                    var index = sorted.firstIndex(notBelow: entry.value, by: { $0 })
                    while index < sorted.count && sorted[index] - entry.value < entry.size {
                        if ElfSymbolTable.prefers(entry, over: best[index]) { best[index] = entry }
                        index += 1
                    }
                }
            }
        }
        return addresses.map { address in best[sorted.firstIndex(after: address, by: { $0 }) - 1] }
    }

    /// ``entry(containing:)`` by one pass over the entries in any order.
    private func scan(containing vaddr: UInt64) -> Entry? {
        var best: Entry?
        forEachEntry { entry in
            if entry.value <= vaddr && vaddr - entry.value < entry.size && ElfSymbolTable.prefers(entry, over: best) {
                best = entry
            }
        }
        return best
    }

    /// Whether `entry`, which contains the address looked up, answers it rather than `found` (the best so far,
    /// if any): the innermost (the higher start), then the preferred binding, then the lower table index.
    @inline(__always)
    private static func prefers(_ entry: Entry, over found: Entry?) -> Bool {
        guard let found else { return true }
        return entry.value > found.value
            || (entry.value == found.value && (entry.rank, entry.index) < (found.rank, found.index))
    }

    /// ``entry(containing:)`` in the sorted entries.
    private func search(containing vaddr: UInt64) -> Entry? {
        var index = entries.firstIndex(after: vaddr, by: \.value) - 1
        var best: Entry?
        while index >= 0 {
            let entry = entries[index]
            if let found = best {
                // Same start address: lower indexes have the preferred binding.
                if entry.value != found.value { break }
            } else if vaddr - entry.value >= maxSize {
                break  // no symbol this far below can reach vaddr
            }
            if vaddr - entry.value < entry.size { best = entry }
            index -= 1
        }
        return best
    }
}
