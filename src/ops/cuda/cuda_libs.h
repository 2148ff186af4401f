/* The GPU libraries vfm loads at run time with dlopen (cuBLASLt, cuDNN, the NVRTC that cuDNN's
 * runtime-compiled engines need, NCCL), so a binary built with CUDA starts on a machine without
 * them and CPU runs never load them. Each is looked for in the folders of core/lib_search.h
 * (VFM_CUDA_LIB_DIRS, every Python's nvidia/ * /lib wheels, the CUDA toolkit), then by soname on
 * the loader's path; NCCL first as VFM_NCCL_LIB when that names a file. */
#ifndef VFM_CUDA_LIBS_H
#define VFM_CUDA_LIBS_H

#include "../../core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CUDA_LIB_CUBLASLT = 0, CUDA_LIB_NVRTC = 1, CUDA_LIB_CUDNN = 2, CUDA_LIB_NCCL = 3, CUDA_LIB_COUNT } CudaLib;

/* Opens lib once (later calls repeat the first answer) and checks its major version against the
 * headers vfm was built with. The error names every place looked in and why each failed. */
vfm_status cuda_lib_open(CudaLib lib);
/* A symbol of an opened library (NULL when missing or when the library did not open). */
void *cuda_lib_symbol(CudaLib lib, const char *name);
/* One line per library into buf[cap]: its version and path, or why it did not load (opening each
 * first). Returns the length written. */
size_t cuda_libs_describe(char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
