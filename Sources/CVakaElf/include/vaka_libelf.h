/* vaka_libelf: libelf (elfutils) opened with dlopen on first use instead of linked.
 *
 * Vaka's symbolication (VakaSymbolication's ELF files and symbol tables, CVakaDw's section inflater) and the crash
 * runtime's install (Sources/VakaCrash/install.c) call libelf
 * by its own function names. Those calls are resolved, at link time, to forwarders defined in this target
 * (vaka_libelf.c) with hidden visibility: a program linking Vaka has no libelf.so.1 among its NEEDED libraries and
 * does not load it at process start; the first forwarder called opens libelf.so.1 with dlopen (RTLD_NOW |
 * RTLD_LOCAL) and looks every forwarded function up with dlsym (thread-safe, once per process; never closed). Being
 * hidden, the forwarders are not exported: libdw, which needs libelf itself, keeps calling libelf directly.
 *
 * When libelf cannot be opened or lacks a function, every forwarder returns its function's failure value (NULL,
 * -1, 0, ELF_K_NONE, EV_NONE, ELFCLASSNONE, SHN_UNDEF) and elf_errmsg returns vaka_libelf_error()'s text, so an
 * ELF file fails to open with that reason. The crash runtime's one libelf use (the executable's own symbol table,
 * read at install for a -static-stdlib program, Sources/VakaCrash/install.c) goes through them too.
 */
#ifndef VAKA_LIBELF_H
#define VAKA_LIBELF_H

#ifdef __cplusplus
extern "C" {
#endif

/* Why libelf cannot be used in this process (dlerror's text, or "libelf.so.1: no <function>"), or NULL when it
 * was loaded. Opens it if it was not yet opened. A static string, valid for the process's lifetime. */
const char *vaka_libelf_error(void);

#ifdef __cplusplus
}
#endif

#endif
