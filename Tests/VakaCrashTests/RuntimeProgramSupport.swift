import Foundation
import XCTest
import VakaTestSupport

/// Small C programs compiled against the crash runtime's sources (not the SwiftPM build): every
/// `Sources/VakaCrash/*.c` is compiled with `cc` into a static library once per test process, and each
/// program is linked against it. Used by ``RuntimeRobustnessTests`` for situations the Swift harness cannot
/// set up (vfork children, a thread inside dl_iterate_phdr, a FIFO at the report path, a tiny alternate
/// stack, handlers installed after Vaka...).
enum RuntimeProgram {
    /// Prelude every program gets: `vk_start(run_id)` installs Vaka with reports in `$VK_DIR`, unless
    /// `$VK_NOVAKA` is set; `vk_null()` writes through a null pointer; `vk_trap_getppid()` installs a seccomp
    /// filter under which `getppid` traps with SIGSYS (`SECCOMP_RET_TRAP`), returning 0 or -1 with errno.
    static let prelude = """
    #define _GNU_SOURCE
    #include "vaka/vaka_crash.h"
    #include <errno.h>
    #include <pthread.h>
    #include <signal.h>
    #include <stdio.h>
    #include <stdlib.h>
    #include <string.h>
    #include <unistd.h>
    static int NOVAKA;
    static void vk_start(const char *id) {
        const char *dir = getenv("VK_DIR");
        NOVAKA = getenv("VK_NOVAKA") != NULL;
        if (NOVAKA) return;
        vaka_crash_config c = { .report_dir = dir, .run_id = id };
        int rc = vaka_crash_install(&c);
        if (rc) { fprintf(stderr, "install failed %d\\n", rc); exit(99); }
    }
    static int *volatile vk_nullp = 0;
    __attribute__((noinline)) static void vk_null(void) { *vk_nullp = 1; }
    #include <linux/filter.h>
    #include <linux/seccomp.h>
    #include <stddef.h>
    #include <sys/prctl.h>
    #include <sys/syscall.h>
    /* A seccomp filter that answers system call `nr` with `action` (SECCOMP_RET_TRAP: a SIGSYS;
       SECCOMP_RET_ERRNO | EPERM: a refusal) and lets every other one through. 0, or prctl's -1. */
    __attribute__((unused)) static int vk_seccomp_one(int nr, unsigned action) {
        struct sock_filter f[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, action),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog p = { 4, f };
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &p);
    }
    __attribute__((unused)) static int vk_trap_getppid(void) { return vk_seccomp_one(SYS_getppid, SECCOMP_RET_TRAP); }

    """

    static let cc: String? = Peers.cCompiler

    /// C source of `static int reserves(const char *dir)`: how many report reserves in `dir` the process holds
    /// open: unnamed files (an O_TMPFILE, `... (deleted)` in /proc/self/fd) and named reserves (`.reserve-<n>`).
    /// Put in
    /// front of a program's source (which the build's preamble gives stdio, stdlib, string and unistd).
    static let reservesFunction = """
    #include <dirent.h>
    static int reserves(const char *dir) {
        DIR *d = opendir("/proc/self/fd");
        int n = 0;
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL) {
            char path[64], target[4096];
            snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
            ssize_t k = readlink(path, target, sizeof target - 1);
            if (k <= 0) continue;
            target[k] = '\\0';
            if (strncmp(target, dir, strlen(dir)) != 0) continue;
            if (strstr(target, " (deleted)") != NULL || strstr(target + strlen(dir), "/.reserve-") != NULL) n++;
        }
        if (d != NULL) closedir(d);
        return n;
    }

    """

    /// C source of `static int start_plugin_thread(const char *path, pthread_t *thread)`: a thread that dlopens
    /// the plugin at `path`, started once `$VK_PLUGIN_FD` names the write end of a pipe; returns 0 when the
    /// plugin's constructor (which writes one byte to that descriptor, with the dynamic linker's load lock held)
    /// has begun, else the program's exit code 91-93. Put in front of a program's source.
    static let pluginThreadFunction = """
    #include <dlfcn.h>
    static void *open_plugin(void *path) { return dlopen((const char *)path, RTLD_NOW | RTLD_LOCAL); }
    static int start_plugin_thread(const char *path, pthread_t *thread) {
        int fds[2];
        if (pipe(fds) != 0) return 91;
        char number[16];
        snprintf(number, sizeof number, "%d", fds[1]);
        setenv("VK_PLUGIN_FD", number, 1);
        if (pthread_create(thread, NULL, open_plugin, (void *)path) != 0) return 92;
        char byte;
        if (read(fds[0], &byte, 1) != 1) return 93;
        return 0;
    }

    """

    /// The static library built from the runtime sources (once).
    static let library: Result<URL, Error> = Result(catching: {
        guard let cc else { throw ChildError(description: "no C compiler (cc)") }
        let dir = Paths.freshDirectory("libvaka")
        let sources = Paths.repositoryRoot.appendingPathComponent("Sources/VakaCrash")
        // With libelf's forwarders (Sources/CVakaElf), as the package links the runtime.
        let libelf = Paths.repositoryRoot.appendingPathComponent("Sources/CVakaElf")
        let names = try FileManager.default.contentsOfDirectory(atPath: sources.path).filter { $0.hasSuffix(".c") }.sorted()
        var objects: [String] = []
        for file in names.map({ sources.appendingPathComponent($0) }) + [libelf.appendingPathComponent("vaka_libelf.c")] {
            let name = file.lastPathComponent
            let object = dir.appendingPathComponent(name + ".o").path
            let result = try runChild(URL(fileURLWithPath: cc),
                                      ["-c", "-g", "-O0", "-std=gnu11", "-D_GNU_SOURCE", "-fno-omit-frame-pointer",
                                       "-I", Paths.repositoryRoot.appendingPathComponent("include").path,
                                       "-I", sources.path, "-I", libelf.appendingPathComponent("include").path,
                                       "-o", object, file.path],
                                      label: "cc-\(name)", outputDirectory: dir, timeout: 120)
            guard result.outcome == "exit 0" else { throw ChildError(description: "cc \(name): \(result.stderrTail())") }
            objects.append(object)
        }
        let archive = dir.appendingPathComponent("libvaka.a")
        let ar = try runChild(URL(fileURLWithPath: "/usr/bin/ar"), ["rcs", archive.path] + objects,
                              label: "ar", outputDirectory: dir, timeout: 60)
        guard ar.outcome == "exit 0" else { throw ChildError(description: "ar: \(ar.stderrTail())") }
        return archive
    })

    /// Compiles `body` (C, after ``prelude``) into an executable named `name`.
    /// - Throws: ``ChildError`` when the compiler fails.
    static func build(_ name: String, _ body: String, extraFlags: [String] = []) throws -> URL {
        let library = try library.get()
        guard let cc else { throw ChildError(description: "no C compiler (cc)") }
        let dir = Paths.freshDirectory("prog-\(name)")
        let source = dir.appendingPathComponent("\(name).c")
        try Data((prelude + body).utf8).write(to: source)
        let executable = dir.appendingPathComponent(name)
        let result = try runChild(URL(fileURLWithPath: cc),
                                  ["-g", "-O0", "-fno-omit-frame-pointer",
                                   "-I", Paths.repositoryRoot.appendingPathComponent("include").path,
                                   source.path] + extraFlags + [library.path, "-lpthread", "-ldl", "-o", executable.path],
                                  label: "cc", outputDirectory: dir, timeout: 120)
        guard result.outcome == "exit 0" else { throw ChildError(description: "cc \(name): \(result.stderrTail())") }
        return executable
    }

    /// Compiles `body` (C) into a shared library `lib<name>.so` (with a GNU build ID) in a fresh directory.
    /// - Throws: ``ChildError`` when the compiler fails.
    static func buildLibrary(_ name: String, _ body: String, extraFlags: [String] = []) throws -> URL {
        guard let cc else { throw ChildError(description: "no C compiler (cc)") }
        let dir = Paths.freshDirectory("lib-\(name)")
        let source = dir.appendingPathComponent("\(name).c")
        try Data(body.utf8).write(to: source)
        let library = dir.appendingPathComponent("lib\(name).so")
        let result = try runChild(URL(fileURLWithPath: cc),
                                  ["-shared", "-fPIC", "-g", "-O0", "-fno-omit-frame-pointer", "-Wl,--build-id",
                                   source.path] + extraFlags + ["-o", library.path],
                                  label: "cc", outputDirectory: dir, timeout: 120)
        guard result.outcome == "exit 0" else { throw ChildError(description: "cc lib\(name): \(result.stderrTail())") }
        return library
    }

    /// Runs the bash `script` in a private mount namespace (`unshare -m --propagation private`), with `$MNT` (exported)
    /// an empty directory under a fresh directory named after `label`, for the script to mount a small tmpfs on (a
    /// full or read-only file system that leaves the machine's alone). Returns its stdout as text and the result.
    /// - Throws: `XCTSkip` without root or unshare(1); ``ChildError`` when it cannot be run.
    static func runInPrivateMounts(_ label: String, _ script: String, environment: [String: String] = [:],
                                   timeout: TimeInterval = 60) throws -> (stdout: String, result: ChildResult) {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare") else {
            throw XCTSkip("needs root and unshare(1) for a private tmpfs mount")
        }
        let dir = Paths.freshDirectory(label)
        let mnt = dir.appendingPathComponent("mnt")
        try FileManager.default.createDirectory(at: mnt, withIntermediateDirectories: true)
        let result = try runChild(URL(fileURLWithPath: "/usr/bin/unshare"),
                                  ["-m", "--propagation", "private", "/bin/bash", "-c", "export MNT='\(mnt.path)'; " + script],
                                  label: "unshare", outputDirectory: dir, environment: environment, timeout: timeout)
        return (String(decoding: result.stdout, as: UTF8.self), result)
    }

    /// One run of a program: how it ended and the files left in its report directory.
    struct Run {
        var result: ChildResult
        var directory: URL
        /// Names of the `*.crash` files in the report directory, sorted.
        var reports: [String]
        /// Text of the report named `name`.
        func report(_ name: String) -> String {
            (try? String(contentsOf: directory.appendingPathComponent(name), encoding: .utf8)) ?? ""
        }
        /// The only report's text, or "" when there is not exactly one.
        var onlyReport: String { reports.count == 1 ? report(reports[0]) : "" }
    }

    /// Runs `executable` with `$VK_DIR` set to a fresh directory (and `$VK_NOVAKA` when `vaka` is false) and
    /// `environment` added, killing it after `timeout` seconds (a hang then shows as `timedOut`).
    static func run(_ executable: URL, _ arguments: [String] = [], vaka: Bool = true, timeout: TimeInterval = 30,
                    environment extra: [String: String] = [:], prepare: (URL) throws -> Void = { _ in }) throws -> Run {
        let dir = Paths.freshDirectory("run-\(executable.lastPathComponent)")
        let reports = dir.appendingPathComponent("reports", isDirectory: true)
        try FileManager.default.createDirectory(at: reports, withIntermediateDirectories: true)
        try prepare(reports)
        var environment = ["VK_DIR": reports.path].merging(extra) { _, new in new }
        if !vaka { environment["VK_NOVAKA"] = "1" }
        let result = try runChild(executable, arguments, label: "run", outputDirectory: dir,
                                  environment: environment, timeout: timeout)
        let names = ((try? FileManager.default.contentsOfDirectory(atPath: reports.path)) ?? [])
            .filter { $0.hasSuffix(".crash") }.sorted()
        return Run(result: result, directory: reports, reports: names)
    }
}

/// The methods of a report's `frame` lines (the crashed thread), newest first.
func frameMethods(_ report: String) -> [String] {
    report.split(separator: "\n").filter { $0.hasPrefix("frame ") }.map { String($0.split(separator: " ").last ?? "") }
}

/// The value of the first line `key ...` of a report (without the key), or nil.
func reportValue(_ report: String, _ key: String) -> String? {
    for line in report.split(separator: "\n") where line.hasPrefix(key + " ") {
        return String(line.dropFirst(key.count + 1))
    }
    return nil
}
