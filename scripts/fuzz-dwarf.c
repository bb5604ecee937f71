// libFuzzer target for the compressed DWARF section inflater (Sources/CVakaDw/vaka_dw_sections.c) and what libdw
// then reads through it, as VakaSymbolication opens a debug file (ElfFile.withDwarfSections, DwarfFile): the input
// is an ELF file, opened with libelf (ELF_C_READ_MMAP), its sections inflated with vaka_dw_inflate_sections (two
// threads), opened with libdw's dwarf_begin_elf and looked up by address; then everything is released.
//
// Oracle: libelf's own elf_compress(scn, 0, 0) on a second Elf of the same file. Every section the inflater
// inflated must inflate there too, to the same bytes; every section it left out as damaged must fail there.
//
// Built by scripts/fuzz (target `dwarf`) with -fsanitize=fuzzer,address,undefined and every C file of
// Sources/CVakaDw (libdw is opened with dlopen through vaka_libdw(), as in the package).
#include "../Sources/CLibdw/shim.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>


/* Compares `ours` (after vaka_dw_inflate_sections) with `theirs` (untouched) section by section. */
static void check_against_libelf(Elf *ours, Elf *theirs) {
    size_t shstrndx;
    if (elf_getshdrstrndx(theirs, &shstrndx) != 0) return;
    for (Elf_Scn *scn = elf_nextscn(theirs, NULL); scn; scn = elf_nextscn(theirs, scn)) {
        GElf_Shdr before, after;
        Elf_Scn *inflated = elf_getscn(ours, elf_ndxscn(scn));
        if (!inflated || gelf_getshdr(scn, &before) == NULL || gelf_getshdr(inflated, &after) == NULL) continue;
        if ((before.sh_flags & SHF_COMPRESSED) == 0 || before.sh_type == SHT_NOBITS) continue;
        const char *name = elf_strptr(theirs, shstrndx, before.sh_name);
        if (!name || strncmp(name, ".debug_", 7) != 0 || vaka_dw_section_is_unread(name)) continue;
        int hidden = after.sh_type == SHT_NOBITS;
        int done = !hidden && (after.sh_flags & SHF_COMPRESSED) == 0;
        if (!hidden && !done) continue; /* left to libdw */
        int libelf_ok = elf_compress(scn, 0, 0) == 1;
        if (hidden && libelf_ok) {
            /* Left out, but libelf inflates it: only when our mapping could not be made. */
            fprintf(stderr, "%s: left out as damaged, libelf inflates it\n", name);
            abort();
        }
        if (done) {
            Elf_Data *mine = elf_getdata(inflated, NULL);
            Elf_Data *libelf = libelf_ok ? elf_getdata(scn, NULL) : NULL;
            if (!libelf_ok || !mine || !libelf || mine->d_size != libelf->d_size
                || (mine->d_size && memcmp(mine->d_buf, libelf->d_buf, mine->d_size) != 0)) {
                fprintf(stderr, "%s: inflated, but libelf %s\n", name, libelf_ok ? "gives other bytes" : "fails");
                abort();
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const struct vaka_libdw_functions *dw;
    if (!dw) {
        elf_version(EV_CURRENT);
        dw = vaka_libdw();
        if (!dw) {
            fprintf(stderr, "fuzz-dwarf: %s\n", vaka_libdw_error());
            abort();
        }
    }
    int fd = memfd_create("fuzz-dwarf", MFD_CLOEXEC);
    if (fd < 0) return 0;
    size_t written = 0;
    while (written < size) {
        ssize_t n = write(fd, data + written, size - written);
        if (n <= 0) break;
        written += (size_t)n;
    }
    Elf *elf = written == size ? elf_begin(fd, ELF_C_READ_MMAP, NULL) : NULL;
    if (elf && elf_kind(elf) == ELF_K_ELF) {
        struct vaka_dw_inflated *inflated = vaka_dw_inflate_sections(elf, 2);
        Elf *reference = elf_begin(fd, ELF_C_READ_MMAP, NULL);
        if (reference) {
            check_against_libelf(elf, reference);
            elf_end(reference);
        }
        Dwarf *dwarf = dw->dwarf_begin_elf(elf, DWARF_C_READ, NULL);
        if (dwarf) {
            Dwarf_Aranges *aranges;
            size_t count = 0;
            if (dw->dwarf_getaranges(dwarf, &aranges, &count) != 0) count = 0;
            /* Addresses from the compile units' low pc, a few per unit. */
            Dwarf_CU *cu = NULL;
            Dwarf_Die cudie;
            uint8_t unit_type;
            for (int units = 0; units < 16 && dw->dwarf_get_units(dwarf, cu, &cu, NULL, &unit_type, &cudie, NULL) == 0;
                 units++) {
                Dwarf_Addr low;
                if (dw->dwarf_lowpc(&cudie, &low) != 0) continue;
                for (Dwarf_Addr offset = 0; offset < 64; offset += 7) {
                    Dwarf_Die die;
                    if (!dw->dwarf_addrdie(dwarf, low + offset, &die)) continue;
                    Dwarf_Line *line = dw->dwarf_getsrc_die(&die, low + offset);
                    int number;
                    if (line && dw->dwarf_lineno(line, &number) == 0) {
                        const char *file = dw->dwarf_linesrc(line, NULL, NULL);
                        if (file) (void)strlen(file);
                    }
                }
            }
            dw->dwarf_end(dwarf);
        }
        elf_end(elf);
        vaka_dw_inflated_free(inflated);
    } else if (elf) {
        elf_end(elf);
    }
    close(fd);
    return 0;
}
