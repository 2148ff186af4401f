// The CPU harness in place of src/ops/cuda/cuda_libs.cu (the run-time loading of cuBLASLt, cuDNN
// and NVRTC): cuBLASLt's entry points are those of the stand-in (cublaslt.cpp), looked up by name
// as linear.cu looks them up in the loaded library. cuDNN and NVRTC are not needed: the harness
// replaces cudnn_attention.cpp as a whole (cudnn_attention.cpp of this folder, whose "frontend
// version" says it is the stand-in).
#include <cublasLt.h>
#include <stdio.h>
#include <string.h>

#include "ops/cuda/cuda_libs.h"

namespace {

struct Entry {
    const char *name;
    void *fn;
};

#define ENTRY(name) {#name, (void *)&name}
const Entry kCublasLt[] = {
    ENTRY(cublasLtGetVersion),
    ENTRY(cublasLtGetStatusString),
    ENTRY(cublasLtCreate),
    ENTRY(cublasLtDestroy),
    ENTRY(cublasLtMatmulDescCreate),
    ENTRY(cublasLtMatmulDescDestroy),
    ENTRY(cublasLtMatmulDescSetAttribute),
    ENTRY(cublasLtMatrixLayoutCreate),
    ENTRY(cublasLtMatrixLayoutDestroy),
    ENTRY(cublasLtMatrixLayoutSetAttribute),
    ENTRY(cublasLtMatmulPreferenceCreate),
    ENTRY(cublasLtMatmulPreferenceDestroy),
    ENTRY(cublasLtMatmulPreferenceSetAttribute),
    ENTRY(cublasLtMatmulAlgoGetHeuristic),
    ENTRY(cublasLtMatmul),
};
#undef ENTRY

}  // namespace

extern "C" vfm_status cuda_lib_open(CudaLib lib) {
    if (lib == CUDA_LIB_CUBLASLT) return VFM_OK;
    return vfm_fail(VFM_ERR_UNSUPPORTED, "the CPU harness has no %s (cuDNN attention runs its stand-in)",
                    lib == CUDA_LIB_CUDNN ? "cuDNN" : "NVRTC");
}

extern "C" void *cuda_lib_symbol(CudaLib lib, const char *name) {
    if (lib != CUDA_LIB_CUBLASLT) return NULL;
    for (const Entry &e : kCublasLt)
        if (strcmp(e.name, name) == 0) return e.fn;
    return NULL;  // a function the stand-in does not model: linear.cu reports it missing
}

extern "C" size_t cuda_libs_describe(char *buf, size_t cap) {
    int n = snprintf(buf, cap, "cuBLASLt: CPU stand-in (tests/harness/cublaslt.cpp)\n");
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}
