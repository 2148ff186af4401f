// Run-time loading of cuBLASLt, NVRTC and cuDNN (see cuda_libs.h), and what was loaded from where.
// Host code only.
#include <cublas_api.h>
#include <cudnn_version.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_libs.h"
#include "ops_cuda.h"

namespace {

struct LibSpec {
    const char *name;            // for messages
    const char *sonames[3];      // tried in order, NULL-terminated
    const char *version_symbol;  // returns the version (size_t), or NULL (NVRTC: nvrtcVersion)
    int major_expected;          // the major version of the headers we built with
    const char *preload[8];      // libraries loaded first from the same folder (cuDNN's parts)
};

const LibSpec kSpecs[CUDA_LIB_COUNT] = {
    {"cuBLASLt", {"libcublasLt.so.13", "libcublasLt.so", NULL}, "cublasLtGetVersion", CUBLAS_VER_MAJOR, {NULL}},
    {"NVRTC", {"libnvrtc.so.13", "libnvrtc.so", NULL}, NULL, 13, {NULL}},
    {"cuDNN",
     {"libcudnn.so.9", "libcudnn.so", NULL},
     "cudnnGetVersion",
     CUDNN_MAJOR,
     // cuDNN 9 dlopens its parts by soname; loading them first from the folder libcudnn.so.9 was
     // found in makes those lookups succeed without LD_LIBRARY_PATH.
     {"libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_heuristic.so.9", "libcudnn_engines_precompiled.so.9",
      "libcudnn_engines_runtime_compiled.so.9", "libcudnn_cnn.so.9", "libcudnn_adv.so.9", NULL}},
};

struct LibState {
    int tried;
    void *handle;
    char path[512];
    char version[64];
    char error[1024];
};

LibState g_libs[CUDA_LIB_COUNT];

void append(char *buf, size_t n, const char *fmt, const char *a, const char *b) {
    size_t used = strlen(buf);
    if (used + 1 < n) snprintf(buf + used, n - used, fmt, a, b);
}

// dlopen of dir/soname (dir may be NULL: the loader's path). Records what failed in st->error.
void *try_open(LibState *st, const char *dir, const char *soname, int flags) {
    char file[1024];
    if (dir) snprintf(file, sizeof file, "%s/%s", dir, soname);
    else snprintf(file, sizeof file, "%s", soname);
    void *h = dlopen(file, flags);
    if (!h) {
        const char *why = dlerror();
        append(st->error, sizeof st->error, "%s%s", st->error[0] ? "; " : "", why ? why : file);
    }
    return h;
}

void preload_parts(const LibSpec *spec, const char *dir) {
    for (int i = 0; spec->preload[i]; i++) {
        char file[1024];
        if (dir) snprintf(file, sizeof file, "%s/%s", dir, spec->preload[i]);
        else snprintf(file, sizeof file, "%s", spec->preload[i]);
        dlopen(file, RTLD_LAZY | RTLD_LOCAL);  // best effort: cuDNN reports a missing part itself
    }
}

void open_once(CudaLib lib) {
    LibState *st = &g_libs[lib];
    const LibSpec *spec = &kSpecs[lib];
    if (st->tried) return;
    st->tried = 1;
    if (lib == CUDA_LIB_CUDNN) {  // its parts need cuBLASLt and NVRTC: load those first
        cuda_lib_open(CUDA_LIB_CUBLASLT);
        cuda_lib_open(CUDA_LIB_NVRTC);
    }
    const char *env = getenv("VFM_CUDA_LIB_DIRS");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", env ? env : "");
    char *save = NULL;
    for (char *dir = strtok_r(dirs, ":", &save); dir && !st->handle; dir = strtok_r(NULL, ":", &save)) {
        if (!*dir) continue;
        for (int i = 0; spec->sonames[i] && !st->handle; i++) {
            char probe[1024];
            snprintf(probe, sizeof probe, "%s/%s", dir, spec->sonames[i]);
            FILE *f = fopen(probe, "rb");  // only folders that hold the file are worth a dlopen
            if (!f) continue;
            fclose(f);
            preload_parts(spec, dir);
            st->handle = try_open(st, dir, spec->sonames[i], RTLD_NOW | RTLD_LOCAL);
        }
    }
    for (int i = 0; spec->sonames[i] && !st->handle; i++) {
        preload_parts(spec, NULL);
        st->handle = try_open(st, NULL, spec->sonames[i], RTLD_NOW | RTLD_LOCAL);
    }
    if (!st->handle) return;
    struct link_map *lm = NULL;
    if (dlinfo(st->handle, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_name) snprintf(st->path, sizeof st->path, "%s", lm->l_name);
    int major = -1;
    if (spec->version_symbol) {
        typedef size_t (*VersionFn)(void);
        VersionFn fn = (VersionFn)dlsym(st->handle, spec->version_symbol);
        if (fn) {
            size_t v = fn();  // both encode major·10000 + minor·100 + patch
            major = (int)(v / 10000);
            snprintf(st->version, sizeof st->version, "%d.%d.%d", major, (int)(v / 100 % 100), (int)(v % 100));
        }
    } else {
        typedef int (*NvrtcVersionFn)(int *, int *);
        NvrtcVersionFn fn = (NvrtcVersionFn)dlsym(st->handle, "nvrtcVersion");
        int mj = 0, mn = 0;
        if (fn && fn(&mj, &mn) == 0) {
            major = mj;
            snprintf(st->version, sizeof st->version, "%d.%d", mj, mn);
        }
    }
    if (major != spec->major_expected) {
        char why[sizeof st->error];
        snprintf(why, sizeof why, "%s is version %s, vfm was built for major version %d", st->path,
                 st->version[0] ? st->version : "(unknown)", spec->major_expected);
        memcpy(st->error, why, sizeof why);
        dlclose(st->handle);
        st->handle = NULL;
    }
}

}  // namespace

extern "C" vfm_status cuda_lib_open(CudaLib lib) {
    open_once(lib);
    if (g_libs[lib].handle) return VFM_OK;
    return vfm_fail(VFM_ERR_UNSUPPORTED, "cannot load %s (set VFM_CUDA_LIB_DIRS to the folder that holds %s): %s",
                    kSpecs[lib].name, kSpecs[lib].sonames[0], g_libs[lib].error);
}

extern "C" void *cuda_lib_symbol(CudaLib lib, const char *name) {
    open_once(lib);
    return g_libs[lib].handle ? dlsym(g_libs[lib].handle, name) : NULL;
}

extern "C" size_t cuda_libs_describe(char *buf, size_t cap) {
    size_t n = 0;
    buf[0] = 0;
    for (int i = 0; i < CUDA_LIB_COUNT; i++) {
        open_once((CudaLib)i);
        const LibState *st = &g_libs[i];
        if (st->handle)
            n += (size_t)snprintf(buf + n, cap - n, "%s: %s (%s)\n", kSpecs[i].name, st->version, st->path);
        else
            n += (size_t)snprintf(buf + n, cap - n, "%s: not loaded (%s)\n", kSpecs[i].name, st->error);
        if (n >= cap) return cap - 1;
    }
    return n;
}
