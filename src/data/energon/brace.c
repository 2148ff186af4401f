/* Brace expansion and Energon's order-keeping collapse (see brace.h). Expansion follows Python's
 * braceexpand 0.1.7: a pattern is literal text and top-level `{...}` groups whose results combine
 * as a cartesian product (the first group varies slowest); a group is an integer range, a
 * character range, a comma sequence (each item a pattern), or else literal braces around its
 * expanded content. Backslashes protect the next character and are removed at the end. */
#include "data/energon/brace.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BRACE_MAX_RESULTS 10000000

vfm_status strlist_add(StrList *l, const char *s, int64_t len) {
    if (l->n == l->cap) {
        int64_t cap = l->cap ? 2 * l->cap : 16;
        char **q = realloc(l->items, (size_t)cap * sizeof *q);
        if (!q) return vfm_fail(VFM_ERR_NOMEM, "out of memory for a string list");
        l->items = q;
        l->cap = cap;
    }
    char *c = len >= 0 ? strndup(s, (size_t)len) : strdup(s);
    if (!c) return vfm_fail(VFM_ERR_NOMEM, "out of memory for a string list");
    l->items[l->n++] = c;
    return VFM_OK;
}

void strlist_free(StrList *l) {
    for (int64_t i = 0; i < l->n; i++) free(l->items[i]);
    free(l->items);
    memset(l, 0, sizeof *l);
}

/* ---- expansion ---- */

static vfm_status parse_pattern(const char *p, size_t n, StrList *out);

/* acc := acc × alts (concatenations, acc outer). */
static vfm_status product(StrList *acc, const StrList *alts) {
    if ((double)acc->n * (double)alts->n > BRACE_MAX_RESULTS)
        return vfm_fail(VFM_ERR_FORMAT, "brace pattern expands to more than %d names", BRACE_MAX_RESULTS);
    StrList next = {0};
    vfm_status s = VFM_OK;
    for (int64_t i = 0; s == VFM_OK && i < acc->n; i++) {
        size_t a = strlen(acc->items[i]);
        for (int64_t j = 0; s == VFM_OK && j < alts->n; j++) {
            size_t b = strlen(alts->items[j]);
            char *c = malloc(a + b + 1);
            if (!c) {
                s = vfm_fail(VFM_ERR_NOMEM, "out of memory expanding a brace pattern");
                break;
            }
            memcpy(c, acc->items[i], a);
            memcpy(c + a, alts->items[j], b + 1);
            s = strlist_add(&next, c, -1);
            free(c);
        }
    }
    if (s != VFM_OK) {
        strlist_free(&next);
        return s;
    }
    strlist_free(acc);
    *acc = next;
    return VFM_OK;
}

static vfm_status product_literal(StrList *acc, const char *p, size_t n) {
    StrList one = {0};
    vfm_status s = strlist_add(&one, p, (int64_t)n);
    if (s == VFM_OK) s = product(acc, &one);
    strlist_free(&one);
    return s;
}

/* `-?\d+` at p (n bytes available): its length, 0 when none. */
static size_t int_token(const char *p, size_t n) {
    size_t i = 0;
    if (i < n && p[i] == '-') i++;
    size_t d = i;
    while (i < n && isdigit((unsigned char)p[i])) i++;
    return i > d ? i : 0;
}

static int parse_ll(const char *p, size_t n, long long *out) {
    char buf[32];
    if (n == 0 || n >= sizeof buf) return 0;
    memcpy(buf, p, n);
    buf[n] = 0;
    char *end;
    errno = 0;
    long long v = strtoll(buf, &end, 10);
    if (errno || *end) return 0;
    *out = v;
    return 1;
}

/* The optional `..-?\d+` step at p: 1 when it is there (or absent: *step = 1), 0 when malformed. */
static int parse_step(const char *p, size_t n, long long *step, int *ok_range) {
    *step = 1;
    if (n == 0) return 1;
    if (n < 3 || p[0] != '.' || p[1] != '.') return 0;
    size_t i = 2;
    if (p[i] == '-') i++;
    size_t d = i;
    while (i < n && isdigit((unsigned char)p[i])) i++;
    if (i == d || i != n) return 0;
    long long v;
    if (!parse_ll(p + d, n - d, &v)) {
        *ok_range = 0;
        return 1;
    }
    *step = v ? v : 1;
    return 1;
}

static const char k_alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/* A range `{a..b[..s]}` (integers or letters): 1 and *out filled when expr is one, 0 when not,
 * -1 on error (status in *s). */
static int parse_range(const char *e, size_t n, StrList *out, vfm_status *s) {
    size_t a = int_token(e, n);
    if (a && a + 2 <= n && e[a] == '.' && e[a + 1] == '.') {
        size_t b = int_token(e + a + 2, n - a - 2);
        long long step;
        int ok = 1;
        if (b && parse_step(e + a + 2 + b, n - a - 2 - b, &step, &ok)) {
            long long lo, hi;
            if (!ok || !parse_ll(e, a, &lo) || !parse_ll(e + a + 2, b, &hi)) {
                *s = vfm_fail(VFM_ERR_FORMAT, "brace range '{%.*s}': a number does not fit 64 bits", (int)n, e);
                return -1;
            }
            int pad = 0;
            const char *ends[2] = {e, e + a + 2};
            size_t lens[2] = {a, b};
            for (int k = 0; k < 2; k++) {
                const char *t = ends[k];
                size_t l = lens[k];
                int is_zero = (l == 1 && t[0] == '0') || (l == 2 && t[0] == '-' && t[1] == '0');
                if (!is_zero && (t[0] == '0' || (l >= 2 && t[0] == '-' && t[1] == '0'))) pad = 1;
            }
            int width = pad ? (int)(a > b ? a : b) : 0;
            if (step < 0) step = -step;
            double span = lo <= hi ? (double)hi - (double)lo : (double)lo - (double)hi;
            long long count = span / (double)step + 1 > BRACE_MAX_RESULTS ? BRACE_MAX_RESULTS + 1LL
                                                                          : (lo <= hi ? hi - lo : lo - hi) / step + 1;
            if (count > BRACE_MAX_RESULTS) {
                *s = vfm_fail(VFM_ERR_FORMAT, "brace range '{%.*s}' has more than %d values", (int)n, e,
                              BRACE_MAX_RESULTS);
                return -1;
            }
            for (long long k = 0; k < count; k++) {
                long long v = lo <= hi ? lo + k * step : lo - k * step;
                char buf[48];
                snprintf(buf, sizeof buf, "%0*lld", width, v);
                if ((*s = strlist_add(out, buf, -1)) != VFM_OK) return -1;
            }
            return 1;
        }
    }
    if (n >= 4 && isalpha((unsigned char)e[0]) && e[1] == '.' && e[2] == '.' && isalpha((unsigned char)e[3]) &&
        (unsigned char)e[0] < 128 && (unsigned char)e[3] < 128) {
        long long step;
        int ok = 1;
        if (parse_step(e + 4, n - 4, &step, &ok)) {
            if (!ok) step = 1LL << 62;
            if (step < 0) step = -step;
            int lo = (int)(strchr(k_alphabet, e[0]) - k_alphabet), hi = (int)(strchr(k_alphabet, e[3]) - k_alphabet);
            for (long long v = lo; lo < hi ? v <= hi : v >= hi; v += lo < hi ? step : -step) {
                char c[2] = {k_alphabet[v], 0};
                if ((*s = strlist_add(out, c, 1)) != VFM_OK) return -1;
            }
            return 1;
        }
    }
    return 0;
}

/* A comma sequence: 1 and *out filled when expr has a top-level comma, 0 when not, -1 on error. */
static int parse_sequence(const char *e, size_t n, StrList *out, vfm_status *s) {
    StrList items = {0};
    size_t start = 0;
    int depth = 0, commas = 0;
    *s = VFM_OK;
    for (size_t pos = 0; *s == VFM_OK && pos < n; pos++) {
        if (e[pos] == '\\') {
            pos++;
        } else if (e[pos] == '{') {
            depth++;
        } else if (e[pos] == '}') {
            depth--;
        } else if (e[pos] == ',' && depth == 0) {
            commas++;
            *s = parse_pattern(e + start, pos - start, &items);
            start = pos + 1;
        }
    }
    int r = *s != VFM_OK ? -1 : depth != 0 || commas == 0 ? 0 : 1;
    if (r == 1 && (*s = parse_pattern(e + start, n - start, &items)) != VFM_OK) r = -1;
    for (int64_t i = 0; r == 1 && i < items.n; i++)
        if ((*s = strlist_add(out, items.items[i], -1)) != VFM_OK) r = -1;
    strlist_free(&items);
    return r;
}

/* Appends the expansion of p[0..n) to out. */
static vfm_status parse_pattern(const char *p, size_t n, StrList *out) {
    StrList acc = {0};
    vfm_status s = strlist_add(&acc, "", 0);
    size_t start = 0, pos = 0;
    int depth = 0;
    while (s == VFM_OK && pos < n) {
        if (p[pos] == '\\') {
            pos += 2;
            continue;
        }
        if (p[pos] == '{') {
            if (depth == 0 && pos > start) {
                s = product_literal(&acc, p + start, pos - start);
                start = pos;
            }
            depth++;
        } else if (p[pos] == '}') {
            depth--;
            if (depth == 0) {
                const char *e = p + start + 1;
                size_t en = pos - start - 1;
                StrList items = {0};
                int r = parse_range(e, en, &items, &s);
                if (r == 0) r = parse_sequence(e, en, &items, &s);
                if (r == 1) {
                    s = product(&acc, &items);
                } else if (r == 0) {
                    s = product_literal(&acc, "{", 1);
                    if (s == VFM_OK) s = parse_pattern(e, en, &items);
                    if (s == VFM_OK) s = product(&acc, &items);
                    if (s == VFM_OK) s = product_literal(&acc, "}", 1);
                }
                strlist_free(&items);
                start = pos + 1;
            }
        }
        pos++;
    }
    if (s == VFM_OK && depth != 0) s = vfm_fail(VFM_ERR_FORMAT, "unbalanced braces in '%.*s'", (int)n, p);
    if (s == VFM_OK && start < n) s = product_literal(&acc, p + start, n - start);
    for (int64_t i = 0; s == VFM_OK && i < acc.n; i++) s = strlist_add(out, acc.items[i], -1);
    strlist_free(&acc);
    return s;
}

/* Removes the escaping backslashes (`\x` -> `x`, except before a newline). */
static void unescape(char *t) {
    char *w = t;
    for (const char *r = t; *r; r++) {
        if (r[0] == '\\' && r[1] && r[1] != '\n') r++;
        *w++ = *r;
    }
    *w = 0;
}

vfm_status brace_expand(const char *pattern, StrList *out) {
    int64_t first = out->n;
    vfm_status s = parse_pattern(pattern, strlen(pattern), out);
    if (s != VFM_OK) return vfm_fail_context(s, "brace pattern '%s'", pattern);
    for (int64_t i = first; i < out->n; i++) unescape(out->items[i]);
    return VFM_OK;
}

/* ---- collapse ---- */

typedef struct {
    int n_nums;
    const char *s;
    size_t lit_at[64], lit_len[64]; /* n_nums + 1 literals */
    size_t num_at[63], num_len[63];
} Tokens;

/* Literals and digit runs of s; 0 when s has more than 63 numbers (it is then kept as it is). */
static int tokenize(const char *s, Tokens *t) {
    t->s = s;
    t->n_nums = 0;
    size_t pos = 0, lit = 0;
    for (;;) {
        while (s[pos] && !isdigit((unsigned char)s[pos])) pos++;
        if (!s[pos]) break;
        if (t->n_nums == 63) return 0;
        t->lit_at[t->n_nums] = lit, t->lit_len[t->n_nums] = pos - lit;
        size_t d = pos;
        while (isdigit((unsigned char)s[pos])) pos++;
        t->num_at[t->n_nums] = d, t->num_len[t->n_nums] = pos - d;
        t->n_nums++;
        lit = pos;
    }
    t->lit_at[t->n_nums] = lit, t->lit_len[t->n_nums] = pos - lit;
    return 1;
}

static int same_literals(const Tokens *a, const Tokens *b) {
    if (a->n_nums != b->n_nums) return 0;
    for (int i = 0; i <= a->n_nums; i++)
        if (a->lit_len[i] != b->lit_len[i] || memcmp(a->s + a->lit_at[i], b->s + b->lit_at[i], a->lit_len[i]) != 0)
            return 0;
    return 1;
}

/* Compares the integer values of two digit runs: <0, 0, >0. */
static int value_cmp(const char *a, size_t na, const char *b, size_t nb) {
    while (na > 1 && *a == '0') a++, na--;
    while (nb > 1 && *b == '0') b++, nb--;
    if (na != nb) return na < nb ? -1 : 1;
    return memcmp(a, b, na);
}

/* 1 when digit run b's value is a's value + 1 (any widths). */
static int is_successor(const char *a, size_t na, const char *b, size_t nb) {
    char inc[256];
    if (na + 1 >= sizeof inc) return 0;
    memcpy(inc + 1, a, na);
    inc[0] = '0';
    size_t i = na;
    for (;; i--) {
        if (inc[i] == '9') {
            inc[i] = '0';
        } else {
            inc[i]++;
            break;
        }
    }
    return value_cmp(inc, na + 1, b, nb) == 0;
}

vfm_status brace_collapse(const char *const *names, int64_t n, StrList *out) {
    int64_t i = 0;
    while (i < n) {
        Tokens t0;
        if (!tokenize(names[i], &t0) || t0.n_nums == 0) {
            VFM_TRY(strlist_add(out, names[i], -1));
            i++;
            continue;
        }
        Tokens prev = t0;
        int var = -1;
        int64_t run_end = i;
        for (int64_t j = i + 1; j < n; j++) {
            Tokens t1;
            if (!tokenize(names[j], &t1) || !same_literals(&t0, &t1)) break;
            int diff = -1, n_diff = 0;
            for (int k = 0; k < t1.n_nums; k++)
                if (value_cmp(prev.s + prev.num_at[k], prev.num_len[k], t1.s + t1.num_at[k], t1.num_len[k]) != 0) {
                    diff = k;
                    n_diff++;
                }
            if (n_diff != 1) break;
            if (t1.num_len[diff] != prev.num_len[diff]) break;
            if (var == -1) var = diff;
            else if (var != diff) break;
            if (!is_successor(prev.s + prev.num_at[diff], prev.num_len[diff], t1.s + t1.num_at[diff], t1.num_len[diff]))
                break;
            run_end = j;
            prev = t1;
        }
        if (run_end > i && var >= 0) {
            /* the first name's literals and numbers, the varying slot as {first..last} */
            size_t cap = strlen(names[i]) + prev.num_len[var] + 8, at = 0;
            char *e = malloc(cap);
            if (!e) return vfm_fail(VFM_ERR_NOMEM, "out of memory collapsing shard names");
            for (int k = 0; k < t0.n_nums; k++) {
                memcpy(e + at, t0.s + t0.lit_at[k], t0.lit_len[k]);
                at += t0.lit_len[k];
                if (k == var) {
                    at += (size_t)snprintf(e + at, cap - at, "{%.*s..%.*s}", (int)t0.num_len[k], t0.s + t0.num_at[k],
                                           (int)prev.num_len[k], prev.s + prev.num_at[k]);
                } else {
                    memcpy(e + at, t0.s + t0.num_at[k], t0.num_len[k]);
                    at += t0.num_len[k];
                }
            }
            memcpy(e + at, t0.s + t0.lit_at[t0.n_nums], t0.lit_len[t0.n_nums]);
            at += t0.lit_len[t0.n_nums];
            vfm_status s = strlist_add(out, e, (int64_t)at);
            free(e);
            VFM_TRY(s);
            i = run_end + 1;
        } else {
            VFM_TRY(strlist_add(out, names[i], -1));
            i++;
        }
    }
    return VFM_OK;
}
