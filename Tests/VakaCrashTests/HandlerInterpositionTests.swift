import Foundation
import XCTest
import VakaTestSupport

/// "The handler is checked, not trusted": every crash of a set of scenarios runs under an LD_PRELOAD shim
/// (compiled here with `cc`) that interposes the allocator (malloc, free, calloc, realloc, memalign...), stdio
/// (fopen, printf family, fwrite, fputs, flockfile...), locks (pthread_mutex_lock, rwlocks) and dl_iterate_phdr /
/// dladdr, and records every call made while the thread runs on its alternate signal stack, i.e. inside
/// Vaka's handler (Swift's backtracer is turned off, so nothing else runs there).
///
/// Allowed: `dl_iterate_phdr`, and `pthread_mutex_lock` called from libunwind. libunwind looks up unwind tables
/// with dl_iterate_phdr (the dynamic linker's recursive loader lock) and takes its internal memory-pool lock
/// with all signals blocked, so a thread can never be interrupted by our handler while holding it (see
/// docs/crash-handling.md, known limits). Anything else fails the test.
final class HandlerInterpositionTests: XCTestCase {
    /// Scenarios run under the shim: the common paths, the abort path, held locks, dlopen (link-map walk),
    /// the scan fallback, a thread's alternate stack, concurrent crashes, and the Swift fatal message read.
    static let scenarios = ["null-deref", "abort", "background-thread", "locks-held", "heap-corruption", "dlopen-plugin",
                            "corrupt-frame-pointer", "stack-overflow-thread", "concurrent", "swift-fatal-error",
                            "bad-syscall", "all-threads", "stack-overflow-early-thread"]

    /// Builds the shim once. Throws (test failure) when no C compiler is available.
    static let shim: Result<URL, Error> = Result(catching: {
        let dir = Paths.freshDirectory("shim")
        let source = dir.appendingPathComponent("handler-shim.c")
        try Data(shimSource.utf8).write(to: source)
        let library = dir.appendingPathComponent("handler-shim.so")
        guard let cc = Peers.cCompiler else { throw Peers.missing("no C compiler (cc, gcc or clang) to build the shim") }
        let result = try runChild(URL(fileURLWithPath: cc),
                                  ["-shared", "-fPIC", "-O1", "-o", library.path, source.path, "-ldl"],
                                  label: "cc-shim", outputDirectory: dir, timeout: 120)
        guard result.outcome == "exit 0" else { throw ChildError(description: "cc: \(result.stderrTail())") }
        return library
    })

    static func isAllowed(_ entry: String) -> Bool {
        entry == "dl_iterate_phdr" || entry.hasPrefix("pthread_mutex_lock from libunwind.so")
    }

    /// Positive control: the shim does catch an allocation made inside a handler on an alternate stack.
    func testShimDetectsAllocationInHandler() throws {
        let shim = try Self.shim.get()
        let dir = Paths.freshDirectory("shim-self-test")
        let log = dir.appendingPathComponent("calls.log")
        let result = try runChild(Paths.harness, ["--list"], label: "self-test", outputDirectory: dir,
                                  environment: ["LD_PRELOAD": shim.path, "VAKA_SHIM_LOG": log.path,
                                                "VAKA_SHIM_SELF_TEST": "1"])
        XCTAssertEqual(result.outcome, "exit 0", result.stderrTail())
        let entries = (try? String(contentsOf: log, encoding: .utf8))?.split(separator: "\n").map(String.init) ?? []
        XCTAssertTrue(entries.contains("malloc") && entries.contains("free"), "shim missed malloc/free: \(entries)")
    }

    func testHandlerCallsNoAllocatorStdioOrLocks() throws {
        let shim = try Self.shim.get()
        let problems = Locked<[String]>([])
        DispatchQueue.concurrentPerform(iterations: Self.scenarios.count) { index in
            let name = Self.scenarios[index]
            let dir = Paths.freshDirectory("shim-\(name)")
            let storage = dir.appendingPathComponent("storage")
            let log = dir.appendingPathComponent("calls.log")
            do {
                let result = try runChild(Paths.harness, [name, "--storage", storage.path], label: "shim", outputDirectory: dir,
                                          environment: ["LD_PRELOAD": shim.path, "VAKA_SHIM_LOG": log.path,
                                                        "SWIFT_BACKTRACE": "enable=no"])
                var issues: [String] = []
                if !result.diedBySignal || result.timedOut { issues.append("ended \(result.outcome)") }
                let reports = ScenarioRuns.crashFiles(in: storage)
                if reports.count != 1 {
                    issues.append("\(reports.count) reports")
                } else {
                    let text = (try? String(contentsOf: reports[0], encoding: .utf8)) ?? ""
                    if !text.hasSuffix("\nend\n") { issues.append("report without `end`") }
                }
                let entries = (try? String(contentsOf: log, encoding: .utf8))?.split(separator: "\n").map(String.init) ?? []
                let forbidden = Set(entries.filter { !Self.isAllowed($0) })
                if !forbidden.isEmpty { issues.append("handler called: \(forbidden.sorted())") }
                if !issues.isEmpty { problems.withLock { $0.append("\(name): \(issues.joined(separator: "; "))") } }
            } catch {
                problems.withLock { $0.append("\(name): \(error)") }
            }
        }
        let found = problems.withLock { $0 }.sorted()
        XCTAssertTrue(found.isEmpty, found.joined(separator: "\n"))
    }
}

/// The shim's C source (compiled by the tests; not part of any product).
let shimSource = #"""
/* Test shim (LD_PRELOAD): records every call to an allocator, stdio, lock or dynamic-linker function made
 * while the calling thread runs on its alternate signal stack, i.e. inside a signal handler installed with
 * SA_ONSTACK. Calls are forwarded unchanged. Log: $VAKA_SHIM_LOG, one function name per line. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static char log_path[4096];
/* > 0 while this thread is inside dl_iterate_phdr (its loader lock is taken through pthread_mutex_lock). */
static __thread int in_iterate;

static int on_alt_stack(void)
{
    stack_t ss;
    return sigaltstack(NULL, &ss) == 0 && (ss.ss_flags & SS_ONSTACK);
}

/* > 0 while the shim itself runs dlsym or dladdr (which may free the thread's last dlerror buffer): not the
 * handler's calls. volatile: dlsym reaches our free() behind the compiler's back. */
static __thread volatile int in_next;

static void note(const char *what)
{
    if (log_path[0] == '\0' || in_next || !on_alt_stack()) return;
    int fd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0) return;
    /* One write per entry: threads handling signals at the same time must not interleave their lines. */
    char line[700];
    size_t n = 0;
    while (what[n] && n < sizeof line - 1) { line[n] = what[n]; n++; }
    line[n++] = '\n';
    (void)!write(fd, line, n);
    close(fd);
}

static void *shim_next(const char *name)
{
    in_next++;
    void *fn = dlsym(RTLD_NEXT, name);
    in_next--;
    return fn;
}

#define NEXT(type, name) ((type)shim_next(name))

void *malloc(size_t n) { note("malloc"); return __libc_malloc(n); }
void free(void *p) { note("free"); __libc_free(p); }
void *calloc(size_t a, size_t b) { note("calloc"); return __libc_calloc(a, b); }
void *realloc(void *p, size_t n) { note("realloc"); return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { note("memalign"); return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { note("aligned_alloc"); return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n)
{
    note("posix_memalign");
    void *p = __libc_memalign(a, n);
    if (p == NULL) return 12;
    *out = p;
    return 0;
}

FILE *fopen(const char *path, const char *mode)
{
    note("fopen");
    return NEXT(FILE *(*)(const char *, const char *), "fopen")(path, mode);
}
int fclose(FILE *f) { note("fclose"); return NEXT(int (*)(FILE *), "fclose")(f); }
int fflush(FILE *f) { note("fflush"); return NEXT(int (*)(FILE *), "fflush")(f); }
size_t fwrite(const void *p, size_t a, size_t b, FILE *f)
{
    note("fwrite");
    return NEXT(size_t (*)(const void *, size_t, size_t, FILE *), "fwrite")(p, a, b, f);
}
int fputs(const char *s, FILE *f) { note("fputs"); return NEXT(int (*)(const char *, FILE *), "fputs")(s, f); }
int puts(const char *s) { note("puts"); return NEXT(int (*)(const char *), "puts")(s); }
void flockfile(FILE *f) { note("flockfile"); NEXT(void (*)(FILE *), "flockfile")(f); }

typedef int (*vfprintf_fn)(FILE *, const char *, va_list);
typedef int (*vsnprintf_fn)(char *, size_t, const char *, va_list);
int vfprintf(FILE *f, const char *fmt, va_list ap) { note("vfprintf"); return NEXT(vfprintf_fn, "vfprintf")(f, fmt, ap); }
int vprintf(const char *fmt, va_list ap) { note("vprintf"); return NEXT(vfprintf_fn, "vfprintf")(stdout, fmt, ap); }
int vsnprintf(char *b, size_t n, const char *fmt, va_list ap) { note("vsnprintf"); return NEXT(vsnprintf_fn, "vsnprintf")(b, n, fmt, ap); }
int printf(const char *fmt, ...)
{
    note("printf");
    va_list ap; va_start(ap, fmt);
    int r = NEXT(vfprintf_fn, "vfprintf")(stdout, fmt, ap);
    va_end(ap);
    return r;
}
int fprintf(FILE *f, const char *fmt, ...)
{
    note("fprintf");
    va_list ap; va_start(ap, fmt);
    int r = NEXT(vfprintf_fn, "vfprintf")(f, fmt, ap);
    va_end(ap);
    return r;
}
int snprintf(char *b, size_t n, const char *fmt, ...)
{
    note("snprintf");
    va_list ap; va_start(ap, fmt);
    int r = NEXT(vsnprintf_fn, "vsnprintf")(b, n, fmt, ap);
    va_end(ap);
    return r;
}
int sprintf(char *b, const char *fmt, ...)
{
    note("sprintf");
    va_list ap; va_start(ap, fmt);
    int r = NEXT(vsnprintf_fn, "vsnprintf")(b, (size_t)-1 / 2, fmt, ap);
    va_end(ap);
    return r;
}

/* Set while the shim itself calls dladdr (which locks): those calls are not the handler's. */
static __thread int in_shim;

int pthread_mutex_lock(pthread_mutex_t *m)
{
    if (!in_shim && on_alt_stack()) {
        /* Name the library that called, e.g. "pthread_mutex_lock from libunwind.so.8". */
        in_shim = 1;
        const char *caller = "?";
        Dl_info info;
        in_next++; /* dladdr may free this thread's last dlerror buffer: the shim's call, not the handler's */
        int found = dladdr(__builtin_return_address(0), &info);
        in_next--;
        if (found && info.dli_fname != NULL) {
            caller = strrchr(info.dli_fname, '/') ? strrchr(info.dli_fname, '/') + 1 : info.dli_fname;
        }
        char line[600];
        size_t n = 0;
        const char *parts[] = { "pthread_mutex_lock from ", caller, in_iterate ? " in dl_iterate_phdr" : "" };
        for (size_t p = 0; p < 3; p++)
            for (const char *c = parts[p]; *c && n < sizeof line - 1; c++) line[n++] = *c;
        line[n] = '\0';
        note(line);
        in_shim = 0;
    } return NEXT(int (*)(pthread_mutex_t *), "pthread_mutex_lock")(m); }
int pthread_mutex_trylock(pthread_mutex_t *m) { note("pthread_mutex_trylock"); return NEXT(int (*)(pthread_mutex_t *), "pthread_mutex_trylock")(m); }
int pthread_rwlock_rdlock(pthread_rwlock_t *l) { note("pthread_rwlock_rdlock"); return NEXT(int (*)(pthread_rwlock_t *), "pthread_rwlock_rdlock")(l); }
int pthread_rwlock_wrlock(pthread_rwlock_t *l) { note("pthread_rwlock_wrlock"); return NEXT(int (*)(pthread_rwlock_t *), "pthread_rwlock_wrlock")(l); }

typedef int (*iterate_cb)(struct dl_phdr_info *, size_t, void *);
int dl_iterate_phdr(iterate_cb cb, void *data)
{
    note("dl_iterate_phdr");
    in_iterate++;
    int r = NEXT(int (*)(iterate_cb, void *), "dl_iterate_phdr")(cb, data);
    in_iterate--;
    return r;
}
int dladdr(const void *a, Dl_info *info) { if (!in_shim) note("dladdr"); return NEXT(int (*)(const void *, Dl_info *), "dladdr")(a, info); }

/* Positive control ($VAKA_SHIM_SELF_TEST=1): a handler on an alternate stack that calls malloc. */
static void self_test_handler(int sig)
{
    (void)sig;
    void *volatile p = malloc(16); /* volatile: keep the compiler from eliding the pair */
    free(p);
}

__attribute__((constructor)) static void shim_init(void)
{
    const char *path = getenv("VAKA_SHIM_LOG");
    if (path != NULL && strlen(path) < sizeof log_path) strcpy(log_path, path);
    const char *self_test = getenv("VAKA_SHIM_SELF_TEST");
    if (self_test != NULL && self_test[0] == '1') {
        static char stack[64 * 1024];
        stack_t ss = { .ss_sp = stack, .ss_flags = 0, .ss_size = sizeof stack };
        stack_t old;
        sigaltstack(&ss, &old);
        struct sigaction sa, prev;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = self_test_handler;
        sa.sa_flags = SA_ONSTACK;
        sigaction(SIGUSR1, &sa, &prev);
        raise(SIGUSR1);
        sigaction(SIGUSR1, &prev, NULL);
        sigaltstack(&old, NULL);
    }
}
"""#
