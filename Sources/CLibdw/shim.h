/* libelf and libdw (elfutils) for VakaSymbolication: ELF files, and DWARF line tables and scopes.
 *
 * Neither is linked. libelf's functions are called by their own names and resolved to forwarders that open
 * libelf.so.1 with dlopen on the first call (Sources/CVakaElf). libdw is opened with dlopen() the first time
 * something is symbolicated (vaka_libdw(), defined in Sources/CVakaDw), so that a program linking Vaka does not
 * load libdw (and libbz2, which only libdw needs) at process start. Its functions are called through the table
 * vaka_libdw() returns; the declarations of libdw.h below are there for the types and for __typeof__, calling
 * them directly does not link. */
#include <libelf.h>
#include <gelf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <dwarf.h>

/* Every libdw function VakaSymbolication calls. */
#define VAKA_LIBDW_FUNCTIONS(X) \
    X(dwarf_addrdie) X(dwarf_attr) X(dwarf_attr_integrate) X(dwarf_begin_elf) X(dwarf_child) \
    X(dwarf_dieoffset) X(dwarf_end) X(dwarf_filesrc) X(dwarf_formstring) X(dwarf_formudata) \
    X(dwarf_get_units) X(dwarf_getaranges) X(dwarf_getsrc_die) X(dwarf_getsrcfiles) X(dwarf_hasattr) X(dwarf_haspc) \
    X(dwarf_linecol) X(dwarf_lineno) X(dwarf_linesrc) X(dwarf_lowpc) X(dwarf_ranges) X(dwarf_siblingof) \
    X(dwarf_tag) \
    X(dwfl_begin) X(dwfl_build_id_find_elf) X(dwfl_end) X(dwfl_module_build_id) X(dwfl_module_getsym_info) \
    X(dwfl_module_getsymtab) X(dwfl_offline_section_address) X(dwfl_report_begin) X(dwfl_report_end) \
    X(dwfl_report_offline) X(dwarf_formflag)

/* libdw's functions, each member named and typed as the function it points to. */
struct vaka_libdw_functions {
#define VAKA_LIBDW_MEMBER(name) __typeof__(name) *name;
    VAKA_LIBDW_FUNCTIONS(VAKA_LIBDW_MEMBER)
#undef VAKA_LIBDW_MEMBER
};

/* libdw's functions: the first call opens libdw.so.1 with dlopen (RTLD_NOW | RTLD_LOCAL) and looks every
 * function up with dlsym; later calls return the same table. Thread-safe (pthread_once). Returns NULL when
 * libdw cannot be opened or lacks a function; vaka_libdw_error() then says why. The table lives as long as
 * the process (libdw is never closed). */
const struct vaka_libdw_functions *vaka_libdw(void);

/* The callbacks of an offline Dwfl (dwfl_begin) that looks for no separate debug files: find_elf
 * dwfl_build_id_find_elf, find_debuginfo none (-1), section_address dwfl_offline_section_address, all libdw's
 * through vaka_libdw(). NULL when vaka_libdw() is. Static storage: valid for the process's lifetime. */
const Dwfl_Callbacks *vaka_libdw_offline_callbacks(void);

/* Why vaka_libdw() returned NULL (dlerror's text, or "libdw.so.1: no <function>"), or NULL when it did not.
 * A static string, valid for the process's lifetime. */
const char *vaka_libdw_error(void);

/* The compressed DWARF sections of an ELF file, inflated ahead of libdw (defined in Sources/CVakaDw).
 *
 * libdw's dwarf_begin_elf inflates every SHF_COMPRESSED DWARF section it knows with zlib, one after the other,
 * whether a lookup reads it or not. vaka_dw_inflate_sections(elf, threads) does it first, in libelf's copy of the
 * section data: the ELFCOMPRESS_ZLIB .debug_* sections are inflated with libdeflate (libdeflate.so.0, opened with
 * dlopen on first use; zlib when it is missing), each into its own anonymous mapping: the largest on the calling
 * thread and the rest on a second one when `threads` > 1 (which first faults in the calling thread's mappings, at
 * most 32 times their compressed size); each section's data descriptor then holds the inflated bytes
 * and its header no longer says SHF_COMPRESSED (as elf_compress(scn, 0, 0) leaves them), so dwarf_begin_elf
 * inflates nothing. Location lists and macros (.debug_loc, .debug_loclists, .debug_macro, .debug_macinfo,
 * .debug_pubnames, .debug_pubtypes), which no lookup reads, and sections whose stream is damaged (does not inflate
 * to exactly ch_size bytes, or ends before the section does) are marked SHT_NOBITS in libelf's copy of their
 * header, which libdw skips, as it skips a section it fails to inflate. Sections in section groups, sections
 * whose type is neither SHT_PROGBITS nor processor-specific, other compression types, headers libelf refuses (ch_addralign not a power of two, ch_size above 1032 times the
 * stream's) and .zdebug_ sections are left to libdw. Nothing on disk changes.
 *
 * `elf` must be open for reading (ELF_C_READ_MMAP) and used by one thread for the duration. Returns what must be
 * released with vaka_dw_inflated_free after elf_end (the inflated bytes stay referenced by `elf` until then), or
 * NULL when the section headers cannot be read (then nothing was changed). */
struct vaka_dw_inflated;
struct vaka_dw_inflated *vaka_dw_inflate_sections(Elf *elf, int threads);

/* 1 when vaka_dw_inflate_sections hides section `name` without inflating it (no lookup reads it: the location
 * list and macro sections listed above), else 0. */
int vaka_dw_section_is_unread(const char *name);

/* Unmaps the sections vaka_dw_inflate_sections inflated and frees `inflated`; NULL is ignored. Call it after
 * elf_end of the Elf they were inflated for. */
void vaka_dw_inflated_free(struct vaka_dw_inflated *inflated);

/* 1 when libdeflate.so.0 could be opened and has libdeflate_zlib_decompress_ex (libdeflate 1.7 or later; Debian 12
 * has 1.14): vaka_dw_inflate_sections inflates with it; 0 when zlib is used.
 * Opens it if it was not yet opened. */
int vaka_dw_has_libdeflate(void);
