/* libVakaCrashmePlugin.so (test code): see plugin.c. Loaded with dlopen, never linked. */
#ifndef VAKA_CRASHME_PLUGIN_H
#define VAKA_CRASHME_PLUGIN_H
/** Reads an int through NULL inside the plugin image (SIGSEGV, SEGV_MAPERR, 0x0). */
int crashme_dlopen_plugin_crash(void);
#endif
