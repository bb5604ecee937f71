/* libelf's headers. Headers only: libelf is not linked (no -lelf); it is opened with dlopen on first use
 * (Sources/CVakaElf, Sources/VakaCrash/install.c). */
#include <libelf.h>
#include <gelf.h>
