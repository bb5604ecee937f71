import Foundation
import XCTest
import VakaTestSupport

/// Helpers of the VakaTests target (paths, peers, scratch directories and the `vaka` runner: VakaTestSupport).
enum TestSupport {
    /// The path of the running test executable (`/proc/self/exe` resolved).
    static var selfExecutable: String {
        (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? "/proc/self/exe"
    }

    /// One mapping of /proc/self/maps.
    struct Mapping {
        var start: UInt64
        var end: UInt64
        var offset: UInt64
        var path: String
    }

    /// The file-backed mappings of this process.
    static func mappings() throws -> [Mapping] {
        // Not String(contentsOfFile:): it trusts st_size and cuts /proc files after the first read.
        guard let handle = FileHandle(forReadingAtPath: "/proc/self/maps") else {
            throw NSError(domain: "vaka-tests", code: 3, userInfo: [NSLocalizedDescriptionKey: "cannot open /proc/self/maps"])
        }
        defer { try? handle.close() }
        let text = String(decoding: handle.readDataToEndOfFile(), as: UTF8.self)
        var result: [Mapping] = []
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: true)
            guard fields.count >= 6, fields[5].hasPrefix("/") else { continue }
            let range = fields[0].split(separator: "-")
            guard range.count == 2, let start = UInt64(range[0], radix: 16), let end = UInt64(range[1], radix: 16),
                  let offset = UInt64(fields[2], radix: 16) else { continue }
            result.append(Mapping(start: start, end: end, offset: offset,
                                  path: fields[5...].joined(separator: " ")))
        }
        return result
    }

    /// The image containing runtime `address`: its path and the address of its first mapped byte
    /// (the lowest mapping of that file), from /proc/self/maps.
    static func image(containing address: UInt64) throws -> (path: String, base: UInt64)? {
        let maps = try mappings()
        guard let hit = maps.first(where: { address >= $0.start && address < $0.end }) else { return nil }
        let base = maps.filter { $0.path == hit.path }.map(\.start).min()!
        return (hit.path, base)
    }

    /// The build ID that `readelf -n` prints for `path`, lower-case hex.
    static func readelfBuildID(_ path: String) throws -> String? {
        let result = try runProcess(try Peers.tool("readelf", install: "binutils: scripts/bootstrap"), ["-n", path])
        for line in result.stdoutText.split(separator: "\n") {
            if let range = line.range(of: "Build ID: ") {
                return line[range.upperBound...].trimmingCharacters(in: .whitespaces).lowercased()
            }
        }
        return nil
    }
}

/// A small deterministic PRNG (SplitMix64) for reproducible "random" inputs.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E3779B97F4A7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58476D1CE4E5B9
        z = (z ^ (z >> 27)) &* 0x94D049BB133111EB
        return z ^ (z >> 31)
    }
}
