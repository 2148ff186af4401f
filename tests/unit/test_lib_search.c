/* Where the GPU libraries are looked for (core/lib_search.h): VFM_CUDA_LIB_DIRS first, then the
 * nvidia/ * /lib wheels of any Python found on the machine; a library that does not load is
 * reported with every place looked in and why (what `vfm version` prints). */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/lib_search.h"
#include "test.h"

static void make_dirs(const char *path) {
    char buf[1024];
    snprintf(buf, sizeof buf, "mkdir -p '%s'", path);
    CHECK(system(buf) == 0);
}

static void write_file(const char *path, const char *text, int mode) {
    FILE *f = fopen(path, "w");
    REQUIRE(f);
    fputs(text, f);
    fclose(f);
    chmod(path, (mode_t)mode);
}

static int index_of(const LibDirs *d, const char *dir) {
    char real[4096];
    if (!realpath(dir, real)) return -1;
    for (int i = 0; i < d->n; i++)
        if (strcmp(d->dir[i], real) == 0) return i;
    return -1;
}

TEST(lib_search_env_dirs_first_then_python_wheels_on_path) {
    const char *tmp = test_tmpdir();
    char a[512], b[512], py_bin[512], wheel[512], exe[600], env[1200], path[2048];
    snprintf(a, sizeof a, "%s/a", tmp);
    snprintf(b, sizeof b, "%s/b", tmp);
    snprintf(py_bin, sizeof py_bin, "%s/venv/bin", tmp);
    snprintf(wheel, sizeof wheel, "%s/venv/lib/python3.12/site-packages/nvidia/cu13/lib", tmp);
    make_dirs(a), make_dirs(b), make_dirs(py_bin), make_dirs(wheel);
    snprintf(exe, sizeof exe, "%s/python3", py_bin);
    write_file(exe, "#!/bin/sh\n", 0755);
    snprintf(env, sizeof env, "%s:%s/missing:%s:%s", b, tmp, a, b); /* b twice, one folder missing */
    setenv("VFM_CUDA_LIB_DIRS", env, 1);
    const char *old_path = getenv("PATH");
    snprintf(path, sizeof path, "%s:%s", py_bin, old_path ? old_path : "/usr/bin");
    setenv("PATH", path, 1);
    LibDirs d;
    REQUIRE_OK(lib_dirs_collect(&d));
    CHECK(index_of(&d, b) == 0);
    CHECK(index_of(&d, a) == 1);
    int w = index_of(&d, wheel);
    CHECK_MSG(w > 1, "the wheel folder of the python3 on PATH is at %d", w);
    for (int i = 0; i < d.n; i++)
        for (int j = i + 1; j < d.n; j++) CHECK(strcmp(d.dir[i], d.dir[j]) != 0);
    lib_dirs_free(&d);
}

TEST(lib_search_reports_where_it_looked_and_why) {
    const char *tmp = test_tmpdir();
    char empty[512], broken_dir[512], broken[600];
    snprintf(empty, sizeof empty, "%s/empty", tmp);
    snprintf(broken_dir, sizeof broken_dir, "%s/broken", tmp);
    make_dirs(empty), make_dirs(broken_dir);
    snprintf(broken, sizeof broken, "%s/libvfm_probe.so.1", broken_dir);
    write_file(broken, "not an ELF file\n", 0644);
    LibDirs d = {0, 0, NULL};
    char *dirs[2] = {empty, broken_dir};
    d.n = 2, d.dir = dirs;
    const char *sonames[] = {"libvfm_probe.so.1", NULL};
    char report[4096], path[512];
    void *h = lib_search_open(&d, sonames, NULL, RTLD_NOW | RTLD_LOCAL, report, sizeof report, path, sizeof path);
    CHECK(h == NULL);
    CHECK(path[0] == 0);
    char want[700];
    snprintf(want, sizeof want, "%s: no libvfm_probe.so.1", empty);
    CHECK_MSG(strstr(report, want) != NULL, "report lacks '%s':\n%s", want, report);
    snprintf(want, sizeof want, "%s: ", broken);
    CHECK_MSG(strstr(report, want) != NULL, "report lacks the dlopen error of %s:\n%s", broken, report);
    CHECK_MSG(strstr(report, "libvfm_probe.so.1 on the loader's path") != NULL, "%s", report);
}

TEST(lib_search_opens_from_the_first_folder_that_holds_it) {
    const char *tmp = test_tmpdir();
    char dir[512], file[600], cmd[1400];
    snprintf(dir, sizeof dir, "%s/lib", tmp);
    make_dirs(dir);
    snprintf(file, sizeof file, "%s/libvfm_probe.so.1", dir);
    /* any shared library will do: a copy of zlib under another name (a new file, so a new load) */
    snprintf(cmd, sizeof cmd, "cp \"$(ls /usr/lib/*/libz.so.1 /lib/*/libz.so.1 2>/dev/null | head -n 1)\" '%s'", file);
    if (system(cmd) != 0) SKIP("no libz.so.1 to copy");
    char *dirs[1] = {dir};
    LibDirs d = {1, 1, dirs};
    const char *sonames[] = {"libvfm_probe.so.1", NULL};
    char report[4096], path[512];
    void *h = lib_search_open(&d, sonames, NULL, RTLD_NOW | RTLD_LOCAL, report, sizeof report, path, sizeof path);
    REQUIRE(h != NULL);
    char real[4096];
    REQUIRE(realpath(file, real));
    CHECK_MSG(strcmp(path, real) == 0, "loaded %s, expected %s", path, real);
    CHECK(dlsym(h, "zlibVersion") != NULL);
    dlclose(h);
}
