/* Placeholder until the crash runtime lands. */
#include "vaka/vaka_crash.h"
#include <stddef.h>
int vaka_crash_install(const vaka_crash_config *config) { (void)config; return 0; }
int vaka_crash_uninstall(void) { return 0; }
int vaka_crash_is_installed(void) { return 0; }
int vaka_crash_thread_attach(void) { return 0; }
const char *vaka_crash_report_path(void) { return NULL; }
int vaka_crash_refresh_images(void) { return 0; }
size_t vaka_crash_capture_frames(uintptr_t *out, size_t max, size_t skip) { (void)out; (void)max; (void)skip; return 0; }
void vaka_crash_test_fault_in_handler(int stage) { (void)stage; }
