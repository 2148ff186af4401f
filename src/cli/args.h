/* Command-line parsing for the subcommands: a table of flags per command, `--flag value` or
 * `--flag=value`, positional arguments (config overrides a.b.c=value) kept in order. An unknown
 * flag is a usage error naming it. */
#ifndef VFM_ARGS_H
#define VFM_ARGS_H

#include "core/error.h"

typedef struct {
    const char *name;     /* "--config" */
    const char *metavar;  /* "FILE", or NULL for a switch */
    const char *help;
    const char *value;    /* parsed value (last one wins); "1" for a present switch */
    int present;
} ArgFlag;

typedef struct {
    const char *items[256];
    int n;
} ArgList;

/* Parses argv[0..argc) (after the command name). `-h`/`--help` sets *want_help. */
vfm_status args_parse(const char *command, int argc, char **argv, ArgFlag *flags, int nflags, ArgList *positional,
                      int *want_help);
const ArgFlag *args_flag(const ArgFlag *flags, int nflags, const char *name);
const char *args_value(const ArgFlag *flags, int nflags, const char *name, const char *fallback);
/* An integer flag value in [lo, hi] (VFM_ERR_USAGE naming the flag and the range otherwise). */
vfm_status args_long(const char *flag, const char *text, long lo, long hi, long *out);
/* Prints "usage: vfm <usage>\n\n<description>\n\noptions:\n  --flag VAL  help ..." */
void args_print_help(const char *usage, const char *description, const ArgFlag *flags, int nflags);

#endif
