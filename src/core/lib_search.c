/* The run-time library search of lib_search.h. */
#include "core/lib_search.h"

#include <dlfcn.h>
#include <glob.h>
#include <limits.h>
#include <link.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int is_file(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Appends dir (resolved, when it exists and is new). 0 on out of memory. */
static int add_dir(LibDirs *d, const char *dir) {
    char real[PATH_MAX];
    if (!*dir || !is_dir(dir) || !realpath(dir, real)) return 1;
    for (int i = 0; i < d->n; i++)
        if (strcmp(d->dir[i], real) == 0) return 1;
    if (d->n == d->cap) {
        int cap = d->cap ? 2 * d->cap : 32;
        char **grown = realloc(d->dir, (size_t)cap * sizeof *grown);
        if (!grown) return 0;
        d->dir = grown, d->cap = cap;
    }
    d->dir[d->n] = strdup(real);
    return d->dir[d->n++] != NULL;
}

/* Adds every folder the glob pattern matches, in sorted order. */
static int add_glob(LibDirs *d, const char *pattern) {
    glob_t g;
    int ok = 1;
    if (glob(pattern, GLOB_ONLYDIR, NULL, &g) == 0)
        for (size_t i = 0; i < g.gl_pathc && ok; i++) ok = add_dir(d, g.gl_pathv[i]);
    globfree(&g);
    return ok;
}

/* The nvidia/ * /lib folders of the site-packages (and dist-packages) under a Python prefix. */
static int add_python_prefix(LibDirs *d, const char *prefix) {
    char pat[PATH_MAX];
    int ok = 1;
    const char *kinds[2] = {"site-packages", "dist-packages"};
    for (int k = 0; k < 2 && ok; k++) {
        snprintf(pat, sizeof pat, "%s/lib/python3*/%s/nvidia/*/lib", prefix, kinds[k]);
        ok = add_glob(d, pat);
        if (ok) {
            snprintf(pat, sizeof pat, "%s/lib/python3/%s/nvidia/*/lib", prefix, kinds[k]);
            ok = add_glob(d, pat);
        }
    }
    return ok;
}

/* Every folder of PATH that holds a python3 gives its parent as a Python prefix. */
static int add_pythons_on_path(LibDirs *d) {
    const char *path = getenv("PATH");
    if (!path) return 1;
    char *copy = strdup(path), *save = NULL;
    if (!copy) return 0;
    int ok = 1;
    for (char *dir = strtok_r(copy, ":", &save); dir && ok; dir = strtok_r(NULL, ":", &save)) {
        char exe[PATH_MAX], prefix[PATH_MAX];
        snprintf(exe, sizeof exe, "%s/python3", dir);
        if (access(exe, X_OK) != 0) continue;
        snprintf(prefix, sizeof prefix, "%s/..", dir);
        ok = add_python_prefix(d, prefix);
    }
    free(copy);
    return ok;
}

vfm_status lib_dirs_collect(LibDirs *out) {
    memset(out, 0, sizeof *out);
    int ok = 1;
    const char *env = getenv("VFM_CUDA_LIB_DIRS");
    if (env) {
        char *copy = strdup(env), *save = NULL;
        ok = copy != NULL;
        for (char *dir = copy ? strtok_r(copy, ":", &save) : NULL; dir && ok; dir = strtok_r(NULL, ":", &save))
            ok = add_dir(out, dir);
        free(copy);
    }
    if (ok) ok = add_pythons_on_path(out);
    const char *prefixes[2] = {getenv("VIRTUAL_ENV"), getenv("CONDA_PREFIX")};
    for (int i = 0; i < 2 && ok; i++)
        if (prefixes[i]) ok = add_python_prefix(out, prefixes[i]);
    const char *home = getenv("HOME");
    char pat[PATH_MAX];
    const char *globs[] = {"/opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib",
                           "/opt/*/lib/python3*/site-packages/nvidia/*/lib",
                           "/usr/local/lib/python3*/site-packages/nvidia/*/lib",
                           "/usr/local/lib/python3*/dist-packages/nvidia/*/lib",
                           "/usr/lib/python3*/site-packages/nvidia/*/lib",
                           "/usr/lib/python3/dist-packages/nvidia/*/lib",
                           NULL};
    for (int i = 0; globs[i] && ok; i++) ok = add_glob(out, globs[i]);
    if (ok && home) {
        snprintf(pat, sizeof pat, "%s/.pyenv/versions/*/lib/python3*/site-packages/nvidia/*/lib", home);
        ok = add_glob(out, pat);
        snprintf(pat, sizeof pat, "%s/.local/lib/python3*/site-packages/nvidia/*/lib", home);
        if (ok) ok = add_glob(out, pat);
    }
    const char *toolkits[2] = {getenv("CUDA_HOME"), getenv("CUDA_PATH")};
    for (int i = 0; i < 2 && ok; i++)
        if (toolkits[i]) {
            snprintf(pat, sizeof pat, "%s/lib64", toolkits[i]);
            ok = add_dir(out, pat);
        }
    if (ok) ok = add_dir(out, "/usr/local/cuda/lib64");
    if (ok) ok = add_glob(out, "/usr/local/cuda-*/lib64");
    if (!ok) {
        lib_dirs_free(out);
        return vfm_fail(VFM_ERR_NOMEM, "the list of library folders");
    }
    return VFM_OK;
}

void lib_dirs_free(LibDirs *d) {
    for (int i = 0; i < d->n; i++) free(d->dir[i]);
    free(d->dir);
    memset(d, 0, sizeof *d);
}

static void report_line(char *report, size_t n, const char *fmt, ...) {
    if (!report || n == 0) return;
    size_t used = strlen(report);
    if (used + 1 >= n) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(report + used, n - used, fmt, ap);
    va_end(ap);
}

/* Loads the preload files from dir (best effort: the library reports a missing part itself). */
static void preload_from(const char *dir, const char *const *preload) {
    for (int i = 0; preload && preload[i]; i++) {
        char pat[PATH_MAX];
        snprintf(pat, sizeof pat, "%s/%s", dir, preload[i]);
        glob_t g;
        if (glob(pat, 0, NULL, &g) == 0)
            for (size_t k = 0; k < g.gl_pathc; k++) dlopen(g.gl_pathv[k], RTLD_LAZY | RTLD_LOCAL);
        globfree(&g);
    }
}

static void *open_file(const char *file, int flags, char *report, size_t report_n, const char *where) {
    void *h = dlopen(file, flags);
    if (!h) {
        const char *why = dlerror();
        report_line(report, report_n, "  %s: %s\n", where, why ? why : "dlopen failed");
    }
    return h;
}

void *lib_search_open(const LibDirs *dirs, const char *const *sonames, const char *const *preload, int flags,
                      char *report, size_t report_n, char *path, size_t path_n) {
    if (report && report_n) report[0] = 0;
    if (path && path_n) path[0] = 0;
    void *h = NULL;
    for (int d = 0; dirs && d < dirs->n && !h; d++) {
        int found = 0;
        for (int i = 0; sonames[i] && !h; i++) {
            char file[PATH_MAX];
            snprintf(file, sizeof file, "%s/%s", dirs->dir[d], sonames[i]);
            if (!is_file(file)) continue;
            found = 1;
            preload_from(dirs->dir[d], preload);
            h = open_file(file, flags, report, report_n, file);
        }
        if (!found) report_line(report, report_n, "  %s: no %s\n", dirs->dir[d], sonames[0]);
    }
    for (int i = 0; sonames[i] && !h; i++) {
        char where[256];
        snprintf(where, sizeof where, "%s on the loader's path (LD_LIBRARY_PATH, ld.so.cache)", sonames[i]);
        h = open_file(sonames[i], flags, report, report_n, where);
    }
    if (h && path && path_n) {
        struct link_map *lm = NULL;
        char real[PATH_MAX];
        if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name && lm->l_name[0])
            snprintf(path, path_n, "%s", realpath(lm->l_name, real) ? real : lm->l_name);
    }
    return h;
}
