/* libunwind's header, for its types and the names its macros give its functions. Headers only: libunwind is not
 * linked (no -lunwind); the crash runtime opens libunwind.so.8 with dlopen and calls it through a table
 * (Sources/VakaCrash/unwind_load.c). */
#define UNW_LOCAL_ONLY
#include <libunwind.h>
