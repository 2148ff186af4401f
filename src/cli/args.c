/* Flag table parsing shared by the subcommands. */
#include "args.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const ArgFlag *args_flag(const ArgFlag *flags, int nflags, const char *name) {
    for (int i = 0; i < nflags; i++)
        if (strcmp(flags[i].name, name) == 0) return &flags[i];
    return NULL;
}

const char *args_value(const ArgFlag *flags, int nflags, const char *name, const char *fallback) {
    const ArgFlag *f = args_flag(flags, nflags, name);
    return (f && f->present) ? f->value : fallback;
}

vfm_status args_parse(const char *command, int argc, char **argv, ArgFlag *flags, int nflags, ArgList *positional,
                      int *want_help) {
    *want_help = 0;
    positional->n = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            *want_help = 1;
            continue;
        }
        if (a[0] == '-' && a[1] == '-') {
            char name[128];
            const char *eq = strchr(a, '=');
            size_t len = eq ? (size_t)(eq - a) : strlen(a);
            if (len >= sizeof name) len = sizeof name - 1;
            memcpy(name, a, len);
            name[len] = 0;
            ArgFlag *f = NULL;
            for (int k = 0; k < nflags; k++)
                if (strcmp(flags[k].name, name) == 0) f = &flags[k];
            if (!f) return vfm_fail(VFM_ERR_USAGE, "vfm %s: unknown option '%s' (see vfm %s --help)", command, name, command);
            f->present = 1;
            if (!f->metavar) {
                if (eq) return vfm_fail(VFM_ERR_USAGE, "vfm %s: option '%s' takes no value", command, name);
                f->value = "1";
            } else if (eq) {
                f->value = eq + 1;
            } else {
                if (i + 1 >= argc)
                    return vfm_fail(VFM_ERR_USAGE, "vfm %s: option '%s' needs a value %s", command, name, f->metavar);
                f->value = argv[++i];
            }
            continue;
        }
        if (a[0] == '-' && a[1] != 0 && !(a[1] >= '0' && a[1] <= '9'))
            return vfm_fail(VFM_ERR_USAGE, "vfm %s: unknown option '%s' (see vfm %s --help)", command, a, command);
        if (positional->n >= (int)(sizeof positional->items / sizeof positional->items[0]))
            return vfm_fail(VFM_ERR_USAGE, "vfm %s: too many arguments", command);
        positional->items[positional->n++] = a;
    }
    return VFM_OK;
}

void args_print_help(const char *usage, const char *description, const ArgFlag *flags, int nflags) {
    printf("usage: vfm %s\n\n%s\n", usage, description);
    if (nflags) printf("\noptions:\n");
    for (int i = 0; i < nflags; i++) {
        char left[96];
        snprintf(left, sizeof left, "%s%s%s", flags[i].name, flags[i].metavar ? " " : "",
                 flags[i].metavar ? flags[i].metavar : "");
        printf("  %-26s %s\n", left, flags[i].help);
    }
    printf("  %-26s %s\n", "-h, --help", "show this help");
}

vfm_status args_int(const char *command, const ArgFlag *flags, int nflags, const char *name, int64_t fallback,
                    int64_t lo, int64_t hi, int64_t *out) {
    const char *text = args_value(flags, nflags, name, NULL);
    *out = fallback;
    if (!text) return VFM_OK;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (!text[0] || end == text || *end || errno == ERANGE || v < lo || v > hi)
        return vfm_fail(VFM_ERR_USAGE, "vfm %s: %s %s: expected an integer in [%" PRId64 ", %" PRId64 "]", command, name,
                        text[0] ? text : "''", lo, hi);
    *out = (int64_t)v;
    return VFM_OK;
}

vfm_status args_number(const char *command, const ArgFlag *flags, int nflags, const char *name, double fallback,
                       double lo, double hi, double *out) {
    const char *text = args_value(flags, nflags, name, NULL);
    *out = fallback;
    if (!text) return VFM_OK;
    char *end;
    double v = strtod(text, &end);
    if (!text[0] || end == text || *end || !isfinite(v) || v < lo || v > hi)
        return vfm_fail(VFM_ERR_USAGE, "vfm %s: %s %s: expected a number in [%g, %g]", command, name,
                        text[0] ? text : "''", lo, hi);
    *out = v;
    return VFM_OK;
}
