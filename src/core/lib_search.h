/* Where the GPU libraries vfm loads at run time (cuBLASLt, cuDNN, NVRTC, NCCL) are looked for, and
 * the dlopen that records where it looked. The folders, in order:
 *   1. VFM_CUDA_LIB_DIRS (':'-separated), for every library;
 *   2. the nvidia/ * /lib folders of the site-packages of every Python found on the machine (a
 *      python3 on PATH, VIRTUAL_ENV, CONDA_PREFIX, /opt/ * /.venv, /opt/conda, /usr/local and /usr,
 *      pyenv's versions, ~/.local): PyTorch's CUDA wheels put the libraries there;
 *   3. the CUDA toolkit's lib64 (CUDA_HOME, CUDA_PATH, /usr/local/cuda, /usr/local/cuda-*);
 *   then the loader's own path (LD_LIBRARY_PATH, ld.so.cache) by soname.
 * Only folders that exist are listed, each once. Plain C: the CPU tests run it. */
#ifndef VFM_LIB_SEARCH_H
#define VFM_LIB_SEARCH_H

#include <stddef.h>

#include "core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct LibDirs {
    int n, cap;
    char **dir;
} LibDirs;

/* The folders above, in order (computed afresh on each call). */
vfm_status lib_dirs_collect(LibDirs *out);
void lib_dirs_free(LibDirs *d);

/* dlopen(flags) of the first of sonames (NULL-terminated) found in dirs (only folders holding the
 * file are tried), then of each soname on the loader's path. Before a library is opened from a
 * folder, the files of `preload` (NULL-terminated, may be NULL; glob patterns allowed) are loaded
 * from that same folder, so that the library's own dlopen of them by soname finds them. Returns
 * the handle or NULL; `report` (may be NULL) gets, one per line, where it looked and why each try
 * failed; `path` (may be NULL) the file that was opened. */
void *lib_search_open(const LibDirs *dirs, const char *const *sonames, const char *const *preload, int flags,
                      char *report, size_t report_n, char *path, size_t path_n);

#ifdef __cplusplus
}
#endif
#endif
