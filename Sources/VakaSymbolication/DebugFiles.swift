import Foundation

/// What `vaka debug-files check` reports about one ELF file, in the shape of
/// `sentry-cli debug-files check --json` (`type`, `variants[{debug_id, code_id, arch}]`, `features`,
/// `is_usable`, `problem`, `note`) plus the file's path.
public struct DebugFileCheck: Codable, Equatable, Sendable {
    /// One identity of the file (an ELF file has exactly one).
    public struct Variant: Codable, Equatable, Sendable {
        /// Sentry's `debug_id`: from the GNU build ID, else the hash of the first page of `.text`
        /// (``ElfFile/debugID``); `nil` when neither exists.
        public var debugID: String?
        /// The whole GNU build ID in lower-case hex (`code_id`); `nil` when the file has none.
        public var codeID: String?
        /// Architecture (``ElfFile/arch``), e.g. `x86_64`.
        public var arch: String?

        /// Creates a variant; every field is described on its property.
        public init(debugID: String?, codeID: String?, arch: String?) {
            self.debugID = debugID
            self.codeID = codeID
            self.arch = arch
        }

        private enum CodingKeys: String, CodingKey {
            case debugID = "debug_id"
            case codeID = "code_id"
            case arch
        }

        /// Encodes every key, `null` for missing values (as sentry-cli does).
        public func encode(to encoder: Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(debugID, forKey: .debugID)
            try container.encode(codeID, forKey: .codeID)
            try container.encode(arch, forKey: .arch)
        }
    }

    /// The path that was checked, as given.
    public var path: String
    /// File format: always `elf`.
    public var type: String
    /// The file's identities (one for ELF).
    public var variants: [Variant]
    /// What the file holds, ", "-separated in this order: `symtab` (a `.symtab` or `.dynsym` with function
    /// symbols), `debug` (DWARF `.debug_info`), `unwind` (`.eh_frame` or `.debug_frame`).
    public var features: String
    /// `true` when the file has a `debug_id` and at least one feature.
    public var isUsable: Bool
    /// Why the file is not usable; `nil` when it is.
    public var problem: String?
    /// Extra information: set when the file has no build ID (its `debug_id` is the `.text` hash).
    public var note: String?

    private enum CodingKeys: String, CodingKey {
        case path, type, variants, features
        case isUsable = "is_usable"
        case problem, note
    }

    /// Encodes every key, `null` for missing values (as sentry-cli does).
    public func encode(to encoder: Encoder) throws {
        var container = encoder.container(keyedBy: CodingKeys.self)
        try container.encode(path, forKey: .path)
        try container.encode(type, forKey: .type)
        try container.encode(variants, forKey: .variants)
        try container.encode(features, forKey: .features)
        try container.encode(isUsable, forKey: .isUsable)
        try container.encode(problem, forKey: .problem)
        try container.encode(note, forKey: .note)
    }

    /// Checks the ELF file at `path`.
    /// - Throws: ``ElfError`` when it cannot be opened or is not ELF.
    public init(path: String) throws {
        let file = try ElfFile(path: path)
        self.path = path
        type = "elf"
        variants = [Variant(debugID: file.debugID, codeID: file.buildID, arch: file.arch)]
        var features: [String] = []
        if file.hasSymtab || file.hasDynsym { features.append("symtab") }
        if file.sections.hasDebugInfo { features.append("debug") }
        if file.sections.hasUnwindInfo { features.append("unwind") }
        self.features = features.joined(separator: ", ")
        isUsable = file.debugID != nil && !features.isEmpty
        problem = isUsable ? nil : (file.debugID == nil ? "no build ID and no .text to identify the file"
                                                         : "no symbols, DWARF or unwind information")
        note = file.buildID == nil ? "no GNU build ID: debug_id is the hash of the first page of .text" : nil
    }
}

/// Copies ELF files into the GNU build-ID layout (`OUT/.build-id/ab/cdef….debug`) so they can be found by
/// build ID later (``DebugFileLocator``): what `vaka debug-files collect` does.
public enum DebugFileCollector {
    /// What happened to one file.
    public struct Entry: Equatable, Sendable {
        /// The ELF file found.
        public var source: String
        /// Where it was copied, or `nil` when it was skipped.
        public var destination: String?
        /// Why it was skipped (no build ID, a file with the same build ID came first, copy failed); `nil` when copied.
        public var skipped: String?

        /// Creates an entry; every field is described on its property.
        public init(source: String, destination: String?, skipped: String?) {
            self.source = source
            self.destination = destination
            self.skipped = skipped
        }
    }

    /// Copies every ELF file with a GNU build ID under each of `inputs` (directories, searched recursively,
    /// or single files) to `outputDirectory/.build-id/<first byte>/<rest>.debug`, whole (code, symbol
    /// tables, DWARF). The first file with a given build ID wins; an existing destination is replaced.
    /// Directories are created as needed.
    /// - Returns: one entry per ELF file found, in input order (files of a directory sorted by path).
    /// - Throws: Foundation file errors when `outputDirectory` cannot be created.
    public static func collect(_ inputs: [String], into outputDirectory: String) throws -> [Entry] {
        let manager = FileManager.default
        try manager.createDirectory(atPath: outputDirectory, withIntermediateDirectories: true)
        let outputPrefix = URL(fileURLWithPath: outputDirectory).standardizedFileURL.path + "/"
        var seen = Set<String>()
        var entries: [Entry] = []
        for input in inputs {
            for path in DebugFileLocator.elfFiles(under: input) {
                // Never collect what is already in the output directory.
                if URL(fileURLWithPath: path).standardizedFileURL.path.hasPrefix(outputPrefix) { continue }
                guard let file = try? ElfFile(path: path) else { continue }
                guard let buildID = file.buildID, buildID.utf8.count >= 4 else {
                    entries.append(Entry(source: path, destination: nil, skipped: "no GNU build ID"))
                    continue
                }
                guard seen.insert(buildID).inserted else {
                    entries.append(Entry(source: path, destination: nil, skipped: "build ID \(buildID) already collected"))
                    continue
                }
                let destination = DebugFileLocator.buildIDPaths(for: buildID, in: outputDirectory)[0]
                do {
                    try manager.createDirectory(atPath: (destination as NSString).deletingLastPathComponent,
                                                withIntermediateDirectories: true)
                    let temporary = destination + ".tmp-\(getpid())"
                    try? manager.removeItem(atPath: temporary)
                    try manager.copyItem(atPath: URL(fileURLWithPath: path).resolvingSymlinksInPath().path, toPath: temporary)
                    if rename(temporary, destination) != 0 {
                        let code = errno
                        try? manager.removeItem(atPath: temporary)
                        throw NSError(domain: NSPOSIXErrorDomain, code: Int(code))
                    }
                    entries.append(Entry(source: path, destination: destination, skipped: nil))
                } catch {
                    entries.append(Entry(source: path, destination: nil, skipped: "copy failed: \(error)"))
                }
            }
        }
        return entries
    }
}
