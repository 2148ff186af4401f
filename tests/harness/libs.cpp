// The CPU harness in place of src/ops/cuda/cuda_libs.cu (the run-time loading of cuBLASLt, cuDNN,
// NVRTC and NCCL): cuBLASLt's and NCCL's entry points are those of the stand-ins (cublaslt.cpp,
// nccl.cpp), looked up by name as linear.cu and comm_nccl.cu look them up in the loaded library.
// cuDNN and NVRTC are not needed: the harness replaces cudnn_attention.cpp as a whole
// (cudnn_attention.cpp of this folder, whose "frontend version" says it is the stand-in).
#include <cublasLt.h>
#ifdef VFM_NCCL
#include <nccl.h>
#endif
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
#ifdef VFM_NCCL
const Entry kNccl[] = {
    ENTRY(ncclGetUniqueId), ENTRY(ncclCommInitRank), ENTRY(ncclCommDestroy), ENTRY(ncclGetErrorString),
    ENTRY(ncclGetLastError), ENTRY(ncclAllReduce), ENTRY(ncclReduceScatter), ENTRY(ncclAllGather),
    ENTRY(ncclBroadcast), ENTRY(ncclReduce), ENTRY(ncclSend), ENTRY(ncclRecv), ENTRY(ncclGroupStart),
    ENTRY(ncclGroupEnd),
};
#endif
#undef ENTRY

template <size_t N> void *find(const Entry (&table)[N], const char *name) {
    for (const Entry &e : table)
        if (strcmp(e.name, name) == 0) return e.fn;
    return NULL;  // a function the stand-in does not model: its caller reports it missing
}

}  // namespace

#ifdef VFM_NCCL
const bool kHaveNccl = true;
#else
const bool kHaveNccl = false;
#endif

extern "C" vfm_status cuda_lib_open(CudaLib lib) {
    if (lib == CUDA_LIB_CUBLASLT || (lib == CUDA_LIB_NCCL && kHaveNccl)) return VFM_OK;
    return vfm_fail(VFM_ERR_UNSUPPORTED, "the CPU harness has no %s (cuDNN attention runs its stand-in)",
                    lib == CUDA_LIB_CUDNN ? "cuDNN" : lib == CUDA_LIB_NCCL ? "NCCL (built without nccl.h)" : "NVRTC");
}

extern "C" void *cuda_lib_symbol(CudaLib lib, const char *name) {
    if (lib == CUDA_LIB_CUBLASLT) return find(kCublasLt, name);
#ifdef VFM_NCCL
    if (lib == CUDA_LIB_NCCL) return find(kNccl, name);
#endif
    return NULL;
}

extern "C" size_t cuda_libs_describe(char *buf, size_t cap) {
    int n = snprintf(buf, cap, "cuBLASLt: CPU stand-in (tests/harness/cublaslt.cpp)\n%s",
                     kHaveNccl ? "NCCL: CPU stand-in over MPI (tests/harness/nccl.cpp)\n" : "");
    return n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
}
