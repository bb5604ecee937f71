/* libelf and libdw (elfutils) for VakaSymbolication: ELF files, and DWARF line tables and scopes. */
#include <libelf.h>
#include <gelf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwelf.h>
#include <elfutils/libdwfl.h>
#include <dwarf.h>
