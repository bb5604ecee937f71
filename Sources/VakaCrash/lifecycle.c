/*
 * Install time: the runtime's hooks into install and uninstall for the handler's run state (sig_state.h).
 * Normal context only, under install.c's mutex.
 */
#include "sig_state.h"

#include <fcntl.h>

int vaka_rt_crash_started(void)
{
    return atomic_load(&vaka_run.crash_tid) != 0;
}

void vaka_rt_rearm(void)
{
    if (atomic_load(&vaka_run.crash_done)) {
        atomic_store(&vaka_run.crash_tid, 0);
        atomic_store(&vaka_run.crash_done, 0);
    }
}

void vaka_rt_at_uninstall(void)
{
    vaka_sig_drop_spare();
    /* A survived signal's report kept for a death that may follow: the handlers go, so nothing ends it now. */
    if (vaka_run.kept_survived && atomic_load(&vaka_run.crash_tid) == 0) vaka_sig_remove_kept_report();
    /* The directory descriptors close next (their numbers get reused): a report name still remembered (a
     * previous handler's survival not seen end yet) is kept by its absolute path, else forgotten. */
    if (vaka_run.report_name_used != NULL && vaka_run.report_dir_used != AT_FDCWD) {
        const char *full = NULL;
        for (int k = 0; k < 2; k++) {
            const vaka_report_target *t = &vaka_state.targets[k];
            if (vaka_run.report_name_used == t->path + t->dir_len && t->path[0] == '/') full = t->path;
        }
        vaka_run.report_name_used = full;
        vaka_run.report_dir_used = AT_FDCWD;
        if (full == NULL) vaka_run.kept_survived = 0;
    }
}
