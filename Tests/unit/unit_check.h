/*
 * Check bookkeeping shared by the C unit tests (runtime_unit.c, journal_unit.c): begin("name") starts a check,
 * EXPECT(cond, "format", ...) records its first failure, end_check() prints `ok <name>` or
 * `FAIL <name>: <what differed>`; checks_run and checks_failed make the closing `checks N failed M` line.
 * Included once per program (static storage).
 */
#ifndef VAKA_UNIT_CHECK_H
#define VAKA_UNIT_CHECK_H

#include <stdio.h>

static int checks_run, checks_failed;
static const char *current;
static int current_failed;
static char detail[512];

static void begin(const char *name)
{
    current = name;
    current_failed = 0;
    detail[0] = '\0';
}

static void end_check(void)
{
    checks_run++;
    if (current_failed) {
        checks_failed++;
        printf("FAIL %s: %s\n", current, detail);
    } else {
        printf("ok %s\n", current);
    }
    fflush(stdout);
}

#define EXPECT(cond, ...)                                                                                       \
    do {                                                                                                        \
        if (!(cond) && !current_failed) {                                                                       \
            current_failed = 1;                                                                                 \
            snprintf(detail, sizeof detail, __VA_ARGS__);                                                       \
        }                                                                                                       \
    } while (0)

#endif /* VAKA_UNIT_CHECK_H */
