/* Declarations of the CUDA backend (the .cu files of src/ops/cuda, extern "C"), present when vfm is built
 * with nvcc (VFM_CUDA). Each function takes the same arguments as its op in ops.h, already
 * checked by the dispatcher, and works on GPU tensors. */
#ifndef VFM_OPS_CUDA_H
#define VFM_OPS_CUDA_H

#include "../ops.h"

#ifdef __cplusplus
extern "C" {
#endif

vfm_status cuda_randn_fill(Tensor *out, uint64_t seed, uint32_t stream, uint32_t step, uint64_t uid,
                           uint64_t element_offset, float std);

#ifdef __cplusplus
}
#endif
#endif
