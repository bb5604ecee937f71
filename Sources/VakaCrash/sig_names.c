/*
 * Signal path: names of signals and si_code values, as the kernel headers spell them.
 * Only string constants; no lookups that could fault.
 */
#include "vaka_internal.h"

#include <signal.h>

const char *vaka_sig_signal_name(int sig)
{
    switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
#ifdef SIGSTKFLT
    case SIGSTKFLT: return "SIGSTKFLT";
#endif
    case SIGCHLD: return "SIGCHLD";
    case SIGCONT: return "SIGCONT";
    case SIGSTOP: return "SIGSTOP";
    case SIGTSTP: return "SIGTSTP";
    case SIGTTIN: return "SIGTTIN";
    case SIGTTOU: return "SIGTTOU";
    case SIGURG: return "SIGURG";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGVTALRM: return "SIGVTALRM";
    case SIGPROF: return "SIGPROF";
    case SIGWINCH: return "SIGWINCH";
    case SIGIO: return "SIGIO";
    case SIGPWR: return "SIGPWR";
    case SIGSYS: return "SIGSYS";
    default: return NULL;
    }
}

/* Codes any signal can carry (si_code <= 0, and SI_KERNEL). Numeric values: <asm-generic/siginfo.h>. */
static const char *generic_code_name(int code)
{
    switch (code) {
    case 0: return "SI_USER";
    case 0x80: return "SI_KERNEL";
    case -1: return "SI_QUEUE";
    case -2: return "SI_TIMER";
    case -3: return "SI_MESGQ";
    case -4: return "SI_ASYNCIO";
    case -5: return "SI_SIGIO";
    case -6: return "SI_TKILL";
    case -7: return "SI_DETHREAD";
    case -60: return "SI_ASYNCNL";
    default: return NULL;
    }
}

const char *vaka_sig_si_code_name(int sig, int code)
{
    if (code <= 0 || code == 0x80) return generic_code_name(code);
    switch (sig) {
    case SIGSEGV:
        switch (code) {
        case 1: return "SEGV_MAPERR";
        case 2: return "SEGV_ACCERR";
        case 3: return "SEGV_BNDERR";
        case 4: return "SEGV_PKUERR";
        case 5: return "SEGV_ACCADI";
        case 6: return "SEGV_ADIDERR";
        case 7: return "SEGV_ADIPERR";
        case 8: return "SEGV_MTEAERR";
        case 9: return "SEGV_MTESERR";
        case 10: return "SEGV_CPERR";
        }
        break;
    case SIGBUS:
        switch (code) {
        case 1: return "BUS_ADRALN";
        case 2: return "BUS_ADRERR";
        case 3: return "BUS_OBJERR";
        case 4: return "BUS_MCEERR_AR";
        case 5: return "BUS_MCEERR_AO";
        }
        break;
    case SIGILL:
        switch (code) {
        case 1: return "ILL_ILLOPC";
        case 2: return "ILL_ILLOPN";
        case 3: return "ILL_ILLADR";
        case 4: return "ILL_ILLTRP";
        case 5: return "ILL_PRVOPC";
        case 6: return "ILL_PRVREG";
        case 7: return "ILL_COPROC";
        case 8: return "ILL_BADSTK";
        case 9: return "ILL_BADIADDR";
        }
        break;
    case SIGFPE:
        switch (code) {
        case 1: return "FPE_INTDIV";
        case 2: return "FPE_INTOVF";
        case 3: return "FPE_FLTDIV";
        case 4: return "FPE_FLTOVF";
        case 5: return "FPE_FLTUND";
        case 6: return "FPE_FLTRES";
        case 7: return "FPE_FLTINV";
        case 8: return "FPE_FLTSUB";
        case 14: return "FPE_FLTUNK";
        case 15: return "FPE_CONDTRAP";
        }
        break;
    case SIGTRAP:
        switch (code) {
        case 1: return "TRAP_BRKPT";
        case 2: return "TRAP_TRACE";
        case 3: return "TRAP_BRANCH";
        case 4: return "TRAP_HWBKPT";
        case 5: return "TRAP_UNK";
        case 6: return "TRAP_PERF";
        }
        break;
    case SIGSYS:
        switch (code) {
        case 1: return "SYS_SECCOMP";
        case 2: return "SYS_USER_DISPATCH";
        }
        break;
    case SIGCHLD:
        switch (code) {
        case 1: return "CLD_EXITED";
        case 2: return "CLD_KILLED";
        case 3: return "CLD_DUMPED";
        case 4: return "CLD_TRAPPED";
        case 5: return "CLD_STOPPED";
        case 6: return "CLD_CONTINUED";
        }
        break;
    case SIGIO:
        switch (code) {
        case 1: return "POLL_IN";
        case 2: return "POLL_OUT";
        case 3: return "POLL_MSG";
        case 4: return "POLL_ERR";
        case 5: return "POLL_PRI";
        case 6: return "POLL_HUP";
        }
        break;
    }
    return NULL;
}

/* The public entry points (vaka/vaka_report_format.h): the Swift reader names signals with the same table. */
#pragma GCC visibility push(default)
const char *vaka_signal_name(int sig) { return vaka_sig_signal_name(sig); }
const char *vaka_si_code_name(int sig, int code) { return vaka_sig_si_code_name(sig, code); }
#pragma GCC visibility pop
