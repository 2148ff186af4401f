/* A pack's arrays as tensors on the device the model trains on: on the CPU views of the host pack
 * (no copy), on CUDA device copies made by pack_tensors_upload — asynchronous on a stream when the
 * pack's memory is page-locked, so the copy of the next pack can overlap the compute of this one
 * (the caller orders them with events). The objectives read these (diffusion/objective.h). */
#ifndef VFM_PACK_TENSORS_H
#define VFM_PACK_TENSORS_H

#include "core/tensor.h"
#include "data/pack/pack.h"

typedef struct PackTensors {
    Device device;
    Tensor tokens;            /* [S, token_dim] f32 clean latent tokens */
    Tensor text;              /* [L, text_dim] f32 */
    Tensor token_sample;      /* [S] i32, -1 on padding rows */
    Tensor token_pos;         /* [S, 3] i32 */
    Tensor loss_mask;         /* [S] f32 */
    Tensor cu_seqlens, cu_seqlens_padded, cu_text, cu_text_padded; /* [n+1] i32 */
    void *buf;                /* CUDA: the device storage (grows, kept between uploads) */
    size_t bytes;
} PackTensors;

/* Host views of p's arrays (device DEV_CPU; nothing allocated, pack_tensors_free not needed). */
void pack_tensors_view(PackTensors *t, const Pack *p);
/* t's device copies of p on dev (DEV_CUDA), issued on `stream` (a cudaStream_t, NULL = the legacy
 * default stream): asynchronous to the host when p is page-locked, so p must stay unchanged until
 * the copies are done (record an event on the stream after this call). The storage grows when p
 * is larger than any pack before (a cudaMalloc, which waits for the device). dev DEV_CPU: views. */
vfm_status pack_tensors_upload(PackTensors *t, Device dev, const Pack *p, void *stream);
void pack_tensors_free(PackTensors *t);

#endif
