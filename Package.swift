// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "Vaka",
    products: [
        .library(name: "Vaka", targets: ["Vaka"]),
        .executable(name: "vaka", targets: ["vaka"]),
        .executable(name: "vaka-crashme", targets: ["vaka-crashme"]),
        // scripts/bench's start and crash-cost programs: without Foundation, with it, linking Vaka, calling start.
        .executable(name: "bench-start-plain", targets: ["bench-start-plain"]),
        .executable(name: "bench-start-foundation", targets: ["bench-start-foundation"]),
        .executable(name: "bench-start-linked", targets: ["bench-start-linked"]),
        .executable(name: "bench-start-vaka", targets: ["bench-start-vaka"]),
        // Test-only: the shared library the harness dlopen()s in the dlopen-plugin scenario.
        .library(name: "VakaCrashmePlugin", type: .dynamic, targets: ["VakaCrashmePlugin"]),
    ],
    targets: [
        // C libraries from Debian (scripts/bootstrap installs them), none linked: each is opened with dlopen where
        // it is first needed, so that a program linking Vaka loads none of them at process start.
        // Headers only (no pkg-config, whose `--libs libunwind` would link libunwind): the crash runtime opens
        // libunwind.so.8 with dlopen (Sources/VakaCrash/unwind_load.c), so that neither it nor liblzma is loaded at
        // process start.
        .systemLibrary(name: "CLibunwind", path: "Sources/CLibunwind", providers: [.apt(["libunwind-dev"])]),
        // Headers only (no pkg-config, whose `--libs libelf` would link libelf): libelf is opened with dlopen on
        // first use (CVakaElf for symbolication; the crash runtime's install.c for its own one use).
        .systemLibrary(name: "CLibelf", path: "Sources/CLibelf", providers: [.apt(["libelf-dev"])]),
        // Headers only (no pkg-config, whose `--libs zlib` would link libz): CVakaDw opens libz with dlopen.
        .systemLibrary(name: "CZlib", path: "Sources/CZlib", providers: [.apt(["zlib1g-dev"])]),
        // Headers only (no pkg-config, whose `--libs libdw` would link libdw): CVakaDw opens libdw with dlopen.
        .systemLibrary(name: "CLibdw", path: "Sources/CLibdw", providers: [.apt(["libdw-dev"])]),

        // The C crash runtime. Public headers live in the top-level include/.
        .target(
            name: "VakaCrash",
            dependencies: ["CLibunwind", "CVakaElf"],
            // Sources/VakaCrash/include is a symlink to the top-level include/ (SwiftPM wants public
            // headers inside the target's directory).
            publicHeadersPath: "include",
            // libunwind (the handler's unwinding) is opened with dlopen (Sources/VakaCrash/unwind_load.c); libelf
            // (symbols the dynamic symbol table lacks, -static-stdlib, read at install) through CVakaElf.
            // No unsafe flags in any target of the `Vaka` product: SwiftPM refuses them in a package depended on
            // by version (PackageManifestTests). Frame pointers need no flag: SwiftPM compiles C targets with
            // -fno-omit-frame-pointer on Linux (debug and release; Swift with -Xcc -fno-omit-frame-pointer), the
            // handler unwinds the interrupted code from its ucontext, not its own frames, and the one function
            // that walks from its own frame record (vaka_crash_capture_frames, capture.c) makes that record with
            // __builtin_frame_address(0) whatever the build.
            cSettings: [.define("_GNU_SOURCE")]
        ),
        // ELF symbol tables (libelf), DWARF file/line and inlined frames (libdw), debug files, demangling.
        // libdw is opened with dlopen() on first use (CVakaDw), libelf likewise (CVakaElf), so that neither is loaded
        // at process start.
        .target(name: "VakaSymbolication", dependencies: ["CLibdw", "CVakaDw", "CVakaElf", "CZlib"]),
        // libelf's functions, called by their own names from VakaSymbolication and CVakaDw, resolved to hidden
        // forwarders that open libelf.so.1 with dlopen on the first call (no -lelf).
        .target(name: "CVakaElf", cSettings: [.define("_GNU_SOURCE")]),
        // vaka_libdw(): libdw's functions through dlopen/dlsym (declared in Sources/CLibdw/shim.h; no -ldw),
        // vaka_zlib(): zlib's, likewise (declared in Sources/CZlib/shim.h; no -lz), for Vaka's gzip and
        // VakaSymbolication's CRC-32, and vaka_dw_inflate_sections(): compressed DWARF sections inflated ahead of
        // libdw with libdeflate (opened with dlopen, compiled against Debian's libdeflate-dev header, no
        // -ldeflate) or zlib.
        .target(name: "CVakaDw", dependencies: ["CZlib", "CVakaElf"], cSettings: [.define("_GNU_SOURCE")]),
        // The HTTP client: libcurl opened with dlopen() on the delivery thread at the first send (not linked:
        // compiled against Debian's curl headers from libcurl4-openssl-dev, no -lcurl).
        .target(name: "CVakaCurl", cSettings: [.define("_GNU_SOURCE")]),
        // The Swift SDK: public API, report reader, Sentry protocol types.
        .target(name: "Vaka", dependencies: ["VakaCrash", "VakaSymbolication", "CZlib", "CVakaDw", "CVakaCurl"]),
        // The `vaka` command-line tool.
        .executableTarget(name: "vaka", dependencies: ["Vaka", "VakaSymbolication"]),
        // The crash harness and its C scenarios.
        .target(name: "VakaCrashmeC",
                cSettings: [.define("_GNU_SOURCE"), .unsafeFlags(["-fno-omit-frame-pointer", "-O0"])]),
        .executableTarget(name: "vaka-crashme", dependencies: ["Vaka", "VakaCrashmeC"]),
        // scripts/bench's programs (see the products above); each crashes through BenchNullDeref's NULL read.
        .target(name: "BenchNullDeref", cSettings: [.unsafeFlags(["-O0"])]),
        .executableTarget(name: "bench-start-plain", dependencies: ["BenchNullDeref"]),
        .executableTarget(name: "bench-start-foundation", dependencies: ["BenchNullDeref"]),
        .executableTarget(name: "bench-start-linked", dependencies: ["Vaka", "BenchNullDeref"]),
        .executableTarget(name: "bench-start-vaka", dependencies: ["Vaka", "BenchNullDeref"]),
        .target(name: "VakaCrashmePlugin",
                cSettings: [.unsafeFlags(["-fno-omit-frame-pointer", "-O0"])]),

        // What the test targets share: real peers and tools (a missing one skips the test with the reason, or
        // fails it under VAKA_REQUIRE_PEERS=1), the `vaka` runner, product paths and scratch directories.
        .target(name: "VakaTestSupport", path: "Tests/VakaTestSupport"),
        .testTarget(name: "VakaTests", dependencies: ["Vaka", "VakaSymbolication", "VakaTestSupport"]),
        .testTarget(name: "VakaCrashTests", dependencies: ["Vaka", "VakaTestSupport"]),
        .testTarget(name: "VakaDeliveryTests", dependencies: ["Vaka", "VakaTestSupport"]),
        // EventGolden.json is read from beside its test's source file (#filePath), not bundled.
        .testTarget(name: "VakaSDKTests", dependencies: ["Vaka", "VakaTestSupport"], exclude: ["EventGolden.json"]),
    ],
    // Every Swift target, tests included, in the Swift 6 language mode: complete concurrency checking with
    // data races as errors. (Tools version 6.0 already defaults to it; said here so that it stays so.)
    swiftLanguageModes: [.v6]
)
