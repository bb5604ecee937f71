/*
 * libVakaCrashmePlugin.so: a shared library the crash harness dlopen()s by path after Vaka.start
 * (scenario dlopen-plugin), so the crash happens in an image the crash runtime did not see at install.
 * Built by SwiftPM next to vaka-crashme (products directory). Test code only.
 */
#include <stdint.h>

/** Reads an int through a NULL pointer: SIGSEGV, SEGV_MAPERR, fault address 0x0, inside this image.
 *  Looked up by name (VAKA_CRASHME_PLUGIN_SYMBOL in vaka_crashme.h). */
__attribute__((noinline, used, visibility("default"))) int crashme_dlopen_plugin_crash(void)
{
    volatile int *volatile pointer = (volatile int *)(uintptr_t)0;
    return *pointer;
}
