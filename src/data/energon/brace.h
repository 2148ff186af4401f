/* Brace patterns in shard lists (Energon's split.yaml): expansion with the semantics of Python's
 * `braceexpand` package (bash-style `{a,b}` alternatives, integer ranges `{07..10}` that keep
 * zero padding, character ranges `{a..e}`, steps `{1..9..2}`, nesting, backslash escapes), and
 * the reverse, Energon's order-keeping collapse of a list of names into `prefix{00..07}.tar`
 * ranges (megatron/energon/bracecollapse.py, keep_order=True). Also a small growable string list. */
#ifndef VFM_DATA_BRACE_H
#define VFM_DATA_BRACE_H

#include <stdint.h>

#include "core/error.h"

typedef struct StrList {
    char **items;
    int64_t n, cap;
} StrList;

/* Appends a copy of s (len bytes when len >= 0, else up to its NUL). */
vfm_status strlist_add(StrList *l, const char *s, int64_t len);
void strlist_free(StrList *l);

/* Appends every string the pattern expands to, in braceexpand's order. Errors (VFM_ERR_FORMAT):
 * unbalanced braces, a range bound out of int64, more than 10 million results. */
vfm_status brace_expand(const char *pattern, StrList *out);

/* Appends the collapsed form of names[n] (order kept): a run of >= 2 consecutive names that differ
 * in exactly one number, ascending by 1 with the same digit count, becomes one `{first..last}`
 * pattern; every other name stays as it is. brace_expand of the result gives names back. */
vfm_status brace_collapse(const char *const *names, int64_t n, StrList *out);

#endif
