// Shared by attention.cu (dispatch, cuDNN glue, padding) and attention_ref.cu (the reference
// kernels): the layout of one call as kernel arguments. nvcc only.
#ifndef VFM_ATTENTION_INTERNAL_H
#define VFM_ATTENTION_INTERNAL_H

#include "cuda_common.h"

#define ATTN_MAX_HEAD_DIM 256

struct AttnDims {
    const int32_t *cu_q, *cu_q_padded, *cu_kv, *cu_kv_padded;  // device [n+1]
    int n;                                                     // samples
    int H, Hkv, hd, group;                                     // group = H / Hkv
    int64_t Sq, Skv;                                           // rows of q and of k/v
    int max_q, max_kv;                                         // longest real sequences (host)
    float scale;                                               // 1/√hd
};

AttnDims attn_dims(const Tensor *q, const Tensor *k, const VarlenLayout *layout);

// The reference kernels (attention_ref.cu): plain, obviously-correct f32 arithmetic on f32 or bf16
// tensors, one block per (query row, sample, head) or (key row, sample, kv head), fixed-order sums.
// They write only real rows; attention.cu's padding pass does the rest.
vfm_status attention_ref_forward(const AttnDims &a, Tensor *o, Tensor *lse, const Tensor *q, const Tensor *k,
                                 const Tensor *v);
vfm_status attention_ref_backward(const AttnDims &a, Tensor *dq, Tensor *dk, Tensor *dv, const Tensor *dout,
                                  const Tensor *q, const Tensor *k, const Tensor *v, const Tensor *o, const Tensor *lse);

#endif
