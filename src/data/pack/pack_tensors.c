/* A pack's tensors on the model's device (see pack_tensors.h). */
#include "data/pack/pack_tensors.h"

#include <string.h>

#include "core/cuda_runtime_shim.h"

/* The tensors over the storage at base (NULL: only sizes): each array 256-byte aligned. Returns bytes. */
static size_t layout(PackTensors *t, char *base, Device dev, const Pack *p) {
    size_t at = 0;
    int64_t S = p->n_tokens, L = p->n_text, n1 = p->n_samples + 1;
    struct {
        Tensor *t;
        DType dt;
        int ndim;
        int64_t d0, d1;
        const void *host;
    } arrays[] = {
        {&t->tokens, DT_F32, 2, S, p->token_dim, p->tokens},
        {&t->text, DT_F32, 2, L, p->text_dim, p->text},
        {&t->token_sample, DT_I32, 1, S, 0, p->token_sample},
        {&t->token_pos, DT_I32, 2, S, 3, p->token_pos},
        {&t->loss_mask, DT_F32, 1, S, 0, p->loss_mask},
        {&t->cu_seqlens, DT_I32, 1, n1, 0, p->cu_seqlens},
        {&t->cu_seqlens_padded, DT_I32, 1, n1, 0, p->cu_seqlens_padded},
        {&t->cu_text, DT_I32, 1, n1, 0, p->cu_text},
        {&t->cu_text_padded, DT_I32, 1, n1, 0, p->cu_text_padded},
    };
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++) {
        int64_t shape[2] = {arrays[i].d0, arrays[i].d1};
        void *data = dev == DEV_CPU ? (void *)arrays[i].host : base ? base + at : NULL;
        *arrays[i].t = tensor_make(data, arrays[i].dt, dev, arrays[i].ndim, shape);
        at += (tensor_bytes(arrays[i].t) + 255) / 256 * 256;
    }
    return at;
}

void pack_tensors_view(PackTensors *t, const Pack *p) {
    memset(t, 0, sizeof *t);
    t->device = DEV_CPU;
    layout(t, NULL, DEV_CPU, p);
}

vfm_status pack_tensors_upload(PackTensors *t, Device dev, const Pack *p, void *stream) {
    if (dev == DEV_CPU) {
        pack_tensors_free(t);
        pack_tensors_view(t, p);
        return VFM_OK;
    }
    size_t need = layout(t, NULL, dev, p);
    if (need > t->bytes || t->device != dev) {
        pack_tensors_free(t);
        VFM_TRY(device_malloc(dev, need, &t->buf));
        t->bytes = need;
    }
    t->device = dev;
    layout(t, t->buf, dev, p);
    const Tensor *dst[] = {&t->tokens, &t->text, &t->token_sample, &t->token_pos, &t->loss_mask, &t->cu_seqlens,
                           &t->cu_seqlens_padded, &t->cu_text, &t->cu_text_padded};
    const void *src[] = {p->tokens, p->text, p->token_sample, p->token_pos, p->loss_mask, p->cu_seqlens,
                         p->cu_seqlens_padded, p->cu_text, p->cu_text_padded};
    for (size_t i = 0; i < sizeof dst / sizeof dst[0]; i++) {
        size_t bytes = tensor_bytes(dst[i]);
        if (bytes) VFM_TRY(vfm_cuda_memcpy_async(dst[i]->data, 1, src[i], 0, bytes, stream));
    }
    return VFM_OK;
}

void pack_tensors_free(PackTensors *t) {
    if (t->buf) device_free(t->device, t->buf);
    memset(t, 0, sizeof *t);
}
