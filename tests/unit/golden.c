/* Golden file reader (see golden.h). */
#include "golden.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"

typedef struct {
    char name[128];
    Tensor t;
} GoldenEntry;

struct Golden {
    GoldenEntry *e;
    int n;
};

static int read_exact(FILE *f, void *p, size_t n) { return fread(p, 1, n, f) == n; }

Golden *golden_load(const char *name) {
    char path[1500];
    snprintf(path, sizeof path, "%s", test_fixture("golden"));
    strncat(path, "/", sizeof path - strlen(path) - 1);
    strncat(path, name, sizeof path - strlen(path) - 1);
    FILE *f = fopen(path, "rb");
    if (!f) { vfm_fail(VFM_ERR_IO, "%s: cannot open (regenerate with `make goldens`)", path); return NULL; }
    char magic[8];
    uint32_t version = 0, count = 0;
    Golden *g = calloc(1, sizeof *g);
    if (!read_exact(f, magic, 8) || memcmp(magic, "VFMGOLD", 8) != 0 || !read_exact(f, &version, 4) ||
        version != 1 || !read_exact(f, &count, 4) || count > 100000)
        goto bad;
    g->e = calloc(count, sizeof *g->e);
    for (uint32_t i = 0; i < count; i++) {
        uint16_t len;
        uint8_t dtype, ndim;
        GoldenEntry *e = &g->e[i];
        if (!read_exact(f, &len, 2) || len >= sizeof e->name || !read_exact(f, e->name, len)) goto bad;
        e->name[len] = 0;
        if (!read_exact(f, &dtype, 1) || !read_exact(f, &ndim, 1) || ndim > VFM_MAX_DIMS || dtype > DT_I64) goto bad;
        int64_t shape[VFM_MAX_DIMS] = {0};
        if (ndim && !read_exact(f, shape, 8u * ndim)) goto bad;
        e->t = tensor_make(NULL, (DType)dtype, DEV_CPU, ndim, shape);
        size_t bytes = tensor_bytes(&e->t);
        e->t.data = malloc(bytes ? bytes : 1);
        if (!read_exact(f, e->t.data, bytes)) goto bad;
        g->n++;
    }
    fclose(f);
    return g;
bad:
    fclose(f);
    vfm_fail(VFM_ERR_FORMAT, "%s: malformed golden file", path);
    golden_free(g);
    return NULL;
}

void golden_free(Golden *g) {
    if (!g) return;
    for (int i = 0; i < g->n; i++) free(g->e[i].t.data);
    free(g->e);
    free(g);
}

int golden_count(const Golden *g) { return g ? g->n : 0; }

const char *golden_name(const Golden *g, int i) { return g->e[i].name; }

const Tensor *golden_get(const Golden *g, const char *name) {
    for (int i = 0; g && i < g->n; i++)
        if (strcmp(g->e[i].name, name) == 0) return &g->e[i].t;
    return NULL;
}

const Tensor *golden_need(const Golden *g, const char *name) {
    const Tensor *t = golden_get(g, name);
    if (!t) test_fail(__FILE__, __LINE__, "golden tensor '%s' missing", name);
    return t;
}

double golden_scalar(const Golden *g, const char *name) {
    const Tensor *t = golden_get(g, name);
    if (!t || tensor_numel(t) < 1) return NAN;
    switch (t->dtype) {
    case DT_F32: return ((float *)t->data)[0];
    case DT_F64: return ((double *)t->data)[0];
    case DT_I32: return ((int32_t *)t->data)[0];
    case DT_I64: return (double)((int64_t *)t->data)[0];
    default: return NAN;
    }
}
