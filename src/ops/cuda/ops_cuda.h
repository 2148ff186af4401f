/* Declarations of the CUDA backend (the .cu files of src/ops/cuda, extern "C"), present when vfm is
 * built with nvcc (VFM_CUDA). Each cuda_<op> (the list: ops_backend.h) takes the same arguments as
 * its op in ops.h, already checked by the dispatcher (dtypes by ops.h's mixed-precision contract),
 * and works on GPU tensors on the ops' stream. Also: the stream, the attention implementation
 * switch, the library report. */
#ifndef VFM_OPS_CUDA_H
#define VFM_OPS_CUDA_H

#include "../ops_backend.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CUDA_DECL(name, params) vfm_status cuda_##name params;

OPS_BACKEND_LIST(CUDA_DECL)
/* dst = src between f32 and bf16, both on the GPU (op_convert; the CPU converts in ops_util.c) */
vfm_status cuda_convert(Tensor *dst, const Tensor *src);

/* The CUDA stream every op is issued on (a cudaStream_t; NULL = the legacy default stream, the
 * start value). Ops are asynchronous on it except those that return a host value. */
void cuda_ops_set_stream(void *stream);
void *cuda_ops_get_stream(void);

/* Which attention implementation the CUDA ops use. AUTO (the start value, or VFM_ATTENTION=auto):
 * cuDNN's fused SDPA for bf16 (the unified node, else the composite one), the reference kernel for
 * f32 and for shapes cuDNN declines. Which one serves each shape bucket is logged once.
 * REFERENCE (VFM_ATTENTION=reference): always the reference kernel. CUDNN (VFM_ATTENTION=cudnn):
 * cuDNN only, an error where it cannot run (tests use it to prove cuDNN ran). */
typedef enum { CUDA_ATTN_AUTO = 0, CUDA_ATTN_REFERENCE = 1, CUDA_ATTN_CUDNN = 2 } CudaAttnImpl;
void cuda_attention_set_impl(CudaAttnImpl impl);
CudaAttnImpl cuda_attention_get_impl(void);
/* Attention calls (forward or backward, with something to compute) the reference kernel served so
 * far: vfm bench refuses figures measured on it unless asked for. */
int64_t cuda_attention_reference_calls(void);

/* Op profiling (ops_profile.c; profile.cu): records an event on the ops' stream and gives its
 * index in a pool; the milliseconds between two recorded events (waits for the later one); reset
 * makes every event of the pool reusable. */
vfm_status cuda_profile_record(int *event);
vfm_status cuda_profile_elapsed(int event0, int event1, float *ms);
void cuda_profile_reset(void);

/* The first index outside its range the lookup and gather ops found on the GPU since the last
 * call (VFM_ERR_SHAPE naming op, position and value), or VFM_OK; waits for the GPU (gather.cu). */
vfm_status cuda_index_errors(void);

/* What ops_describe_libraries returns (cuda_libs.cu). */
const char *cuda_describe_libraries(void);

#ifdef __cplusplus
}
#endif
#endif
