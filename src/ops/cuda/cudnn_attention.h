/* C API of the one C++ file, cudnn_attention.cpp: cuDNN's fused SDPA (forward with its log-sum-exp,
 * deterministic backward) over packed THD sequences, through the cudnn-frontend graph API. One
 * graph per shape bucket, built on first use and cached; a graph cuDNN declines is remembered too.
 * The forward is built with cuDNN's unified SDPA node, and with the composite one when the unified
 * declines the shape; the backward has the composite node only.
 * attention.cu fills the arguments (bucketed sizes, device lengths and ragged offsets) and falls
 * back to the reference kernel when a bucket is declined. Built only with the cudnn-frontend
 * headers (VFM_CUDNN_FE). */
#ifndef VFM_CUDNN_ATTENTION_H
#define VFM_CUDNN_ATTENTION_H

#include <stddef.h>
#include <stdint.h>

#include "../../core/error.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CudnnAttnArgs {
    int backward;        /* 0: forward graph, 1: backward graph */
    int B;               /* batch slots of the graph (bucketed >= samples; unused slots have length 0) */
    int H, Hkv, hd;      /* query heads, kv heads (dividing H), head dim */
    int Sq, Skv;         /* per-sample length bound of the graph (bucketed >= longest sample) */
    float scale;         /* 1/sqrt(hd) */
    void *stream;        /* cudaStream_t */
    /* device buffers, bf16 token-major [rows, heads, hd]; lse f32 [rows, H] */
    const void *q, *k, *v;
    void *o;
    float *lse;
    const void *dout;    /* backward */
    void *dq, *dk, *dv;  /* backward outputs */
    const int32_t *seq_q, *seq_kv;          /* [B] lengths cuDNN uses */
    const int64_t *off_q, *off_kv, *off_lse; /* [B+1] ragged offsets in elements */
    const char *implementation; /* out (prepare): "unified" or "composite", the SDPA that serves it */
} CudnnAttnArgs;

/* Builds (or finds) the graph of a's shape. VFM_OK with *workspace_bytes and a->implementation;
 * VFM_ERR_UNSUPPORTED with the reason when cuDNN is missing or declines the shape (nothing ran).
 * Pointers are not read. */
vfm_status cudnn_attention_prepare(CudnnAttnArgs *a, size_t *workspace_bytes);
/* Runs the prepared graph of a's shape on a->stream with the given workspace. */
vfm_status cudnn_attention_run(const CudnnAttnArgs *a, void *workspace);
/* "1.32.0": the cudnn-frontend headers this was built with. */
const char *cudnn_attention_frontend_version(void);

#ifdef __cplusplus
}
#endif
#endif
