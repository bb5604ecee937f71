import Foundation
import XCTest
import VakaTestSupport

/// `vaka_crash_copy_images`, the one image collector the SDK uses for handled errors' stacks: its edges
/// (NULL, 0, room for fewer images than are loaded) and many threads copying while another loads and
/// unloads a library. A small C program against the runtime (``RuntimeProgram``).
final class ImageCopyTests: XCTestCase {
    /// NULL or `max` 0 count without writing; room for 2 fills exactly 2 (the main program first, by its
    /// /proc/self/exe path) and returns the full count; eight threads copying 128 at a time while a ninth
    /// dlopens and dlcloses a library 300 times: every copy has a plausible count, every image a base, a
    /// size and a NUL-terminated path of the length given, and the library (when listed) has its full path.
    func testCopyEdgesAndCopiesDuringDlopenDlclose() throws {
        let plugin = try RuntimeProgram.buildLibrary("copyplug", "int plugin_value(void) { return 42; }\n")
        let program = try RuntimeProgram.build("image-copy", """
        #include <dlfcn.h>
        static const char *lib;
        static volatile int stop;
        static int bad;
        static void *loader(void *a) {
            for (int i = 0; i < 300; i++) { void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL); if (!h) { fprintf(stderr, "dlopen %s\\n", dlerror()); __atomic_add_fetch(&bad, 1, 0); break; } dlclose(h); }
            stop = 1; return NULL;
        }
        static void *copier(void *a) {
            static __thread vaka_crash_image imgs[128];
            int runs = 0;
            while (!stop || runs < 10) {
                size_t n = vaka_crash_copy_images(imgs, 128);
                if (n == 0 || n > 128) { __atomic_add_fetch(&bad, 1, 0); fprintf(stderr, "count %zu\\n", n); }
                for (size_t i = 0; i < n && i < 128; i++) {
                    if (imgs[i].base == 0 || imgs[i].size == 0 || imgs[i].path_len >= sizeof imgs[i].path || imgs[i].path_len != strnlen(imgs[i].path, sizeof imgs[i].path)) { __atomic_add_fetch(&bad, 1, 0); fprintf(stderr, "image %zu bad\\n", i); }
                    if (imgs[i].path_len > 0 && strstr(imgs[i].path, "plug") && strcmp(imgs[i].path, lib) != 0) { __atomic_add_fetch(&bad, 1, 0); fprintf(stderr, "plugin path %s\\n", imgs[i].path); }
                }
                runs++;
            }
            return NULL;
        }
        int main(int argc, char **argv) {
            lib = argv[1];
            vk_start("img");
            /* NULL / 0 / small max */
            size_t total = vaka_crash_copy_images(NULL, 5);
            size_t zero = vaka_crash_copy_images(NULL, 0);
            vaka_crash_image two[3]; memset(two, 0x5a, sizeof two);
            size_t small = vaka_crash_copy_images(two, 2);
            unsigned char *guard = (unsigned char *)&two[2]; int untouched = 1;
            for (size_t i = 0; i < sizeof two[2]; i++) if (guard[i] != 0x5a) untouched = 0;
            char exe[4096] = {0}; readlink("/proc/self/exe", exe, sizeof exe - 1);
            printf("total %d zero %d small %d untouched %d main %d\\n", total == zero, zero > 2, small == total, untouched, strcmp(two[0].path, exe) == 0);
            pthread_t t[9];
            pthread_create(&t[8], NULL, loader, NULL);
            for (int i = 0; i < 8; i++) pthread_create(&t[i], NULL, copier, NULL);
            for (int i = 0; i < 9; i++) pthread_join(t[i], NULL);
            printf("bad %d\\n", bad);
            return 0;
        }

        """)
        let run = try RuntimeProgram.run(program, [plugin.path], timeout: 120)
        XCTAssertEqual(run.result.outcome, "exit 0", run.result.stderrTail())
        XCTAssertEqual(String(decoding: run.result.stdout, as: UTF8.self),
                       "total 1 zero 1 small 1 untouched 1 main 1\nbad 0\n", run.result.stderrTail())
    }
}
