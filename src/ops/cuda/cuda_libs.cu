// Run-time loading of cuBLASLt, NVRTC, cuDNN and NCCL (see cuda_libs.h; where they are looked for:
// core/lib_search.h), and what was loaded from where: the full path of each library loaded, and for
// each that was not, every place looked in and why it failed. Host code only.
#include <cublas_api.h>
#include <cudnn_version.h>
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/lib_search.h"
#include "cuda_libs.h"
#include "ops_cuda.h"

namespace {

struct LibSpec {
    const char *name;            // for messages
    const char *sonames[3];      // tried in order, NULL-terminated
    const char *version_symbol;  // size_t fn(void) giving major·10000 + minor·100 + patch, or NULL
    int major_expected;          // the major version of the headers we built with
    const char *preload[8];      // files loaded first from the same folder (globs; NULL-terminated)
    const char *env_file;        // a variable naming the file itself (tried first), or NULL
};

const LibSpec kSpecs[CUDA_LIB_COUNT] = {
    {"cuBLASLt", {"libcublasLt.so.13", "libcublasLt.so", NULL}, "cublasLtGetVersion", CUBLAS_VER_MAJOR, {NULL}, NULL},
    // NVRTC dlopens its builtins by soname: loading them from NVRTC's own folder first makes that
    // lookup succeed without LD_LIBRARY_PATH
    {"NVRTC", {"libnvrtc.so.13", "libnvrtc.so", NULL}, NULL, 13, {"libnvrtc-builtins.so.13*", NULL}, NULL},
    {"cuDNN",
     {"libcudnn.so.9", "libcudnn.so", NULL},
     "cudnnGetVersion",
     CUDNN_MAJOR,
     // cuDNN 9 dlopens its parts by soname; likewise
     {"libcudnn_graph.so.9", "libcudnn_ops.so.9", "libcudnn_heuristic.so.9", "libcudnn_engines_precompiled.so.9",
      "libcudnn_engines_runtime_compiled.so.9", "libcudnn_cnn.so.9", "libcudnn_adv.so.9", NULL},
     NULL},
    {"NCCL", {"libnccl.so.2", "libnccl.so", NULL}, NULL, 2, {NULL}, "VFM_NCCL_LIB"},
};

struct LibState {
    int tried;
    void *handle;
    char path[512];
    char version[64];
    char error[4096];  // where it looked and why each try failed
};

LibState g_libs[CUDA_LIB_COUNT];

// The version as "major.minor[.patch]" into st->version; the major number, or -1.
int read_version(CudaLib lib, LibState *st) {
    const LibSpec *spec = &kSpecs[lib];
    if (spec->version_symbol) {
        typedef size_t (*VersionFn)(void);
        VersionFn fn = (VersionFn)dlsym(st->handle, spec->version_symbol);
        if (!fn) return -1;
        size_t v = fn();
        snprintf(st->version, sizeof st->version, "%d.%d.%d", (int)(v / 10000), (int)(v / 100 % 100), (int)(v % 100));
        return (int)(v / 10000);
    }
    if (lib == CUDA_LIB_NVRTC) {
        typedef int (*NvrtcVersionFn)(int *, int *);
        NvrtcVersionFn fn = (NvrtcVersionFn)dlsym(st->handle, "nvrtcVersion");
        int mj = 0, mn = 0;
        if (!fn || fn(&mj, &mn) != 0) return -1;
        snprintf(st->version, sizeof st->version, "%d.%d", mj, mn);
        return mj;
    }
    typedef int (*NcclVersionFn)(int *);  // ncclGetVersion: major·10000 + minor·100 + patch (NCCL >= 2.9)
    NcclVersionFn fn = (NcclVersionFn)dlsym(st->handle, "ncclGetVersion");
    int v = 0;
    if (!fn || fn(&v) != 0) return -1;
    snprintf(st->version, sizeof st->version, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    return v / 10000;
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
    const char *file = spec->env_file ? getenv(spec->env_file) : NULL;
    if (file && *file) {  // named explicitly: that file or nothing
        st->handle = dlopen(file, RTLD_NOW | RTLD_LOCAL);
        if (!st->handle) snprintf(st->error, sizeof st->error, "  %s (%s): %s\n", file, spec->env_file, dlerror());
        else snprintf(st->path, sizeof st->path, "%s", file);
    } else {
        LibDirs dirs;
        if (lib_dirs_collect(&dirs) != VFM_OK) memset(&dirs, 0, sizeof dirs);
        st->handle = lib_search_open(&dirs, spec->sonames, spec->preload, RTLD_NOW | RTLD_LOCAL, st->error,
                                     sizeof st->error, st->path, sizeof st->path);
        lib_dirs_free(&dirs);
    }
    if (!st->handle) return;
    int major = read_version(lib, st);
    if (major != spec->major_expected) {
        char why[sizeof st->error];  // (st->error may hold nothing of st->path: no overlap, but say so)
        snprintf(why, sizeof why, "  %s is version %s, vfm was built for major version %d\n", st->path,
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
    return vfm_fail(VFM_ERR_UNSUPPORTED, "cannot load %s (set VFM_CUDA_LIB_DIRS to the folder that holds %s); looked in:\n%s",
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
            n += (size_t)snprintf(buf + n, cap - n, "%s: not loaded; looked in:\n%s", kSpecs[i].name, st->error);
        if (n >= cap) return cap - 1;
    }
    return n;
}
