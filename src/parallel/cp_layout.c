/* The context-parallel split of a pack: chunk offsets and lengths, the layouts of attention
 * tiles, and row copies between whole and chunked tensors (see cp_layout.h). */
#include "cp_layout.h"

#include <stdlib.h>
#include <string.h>

static vfm_status device_i32(Tensor *t, const int32_t *host, int64_t n, Device dev) {
    VFM_TRY(tensor_alloc(t, DT_I32, dev, 1, (int64_t[]){n}));
    return device_memcpy(t->data, dev, host, DEV_CPU, (size_t)n * sizeof(int32_t));
}

void cp_chunks_free(CpChunks *c) {
    free(c->cu_seqlens), free(c->cu_seqlens_padded), free(c->cu_padded), free(c->cu_valid), free(c->max_valid);
    tensor_free(&c->t_cu_seqlens), tensor_free(&c->t_cu_seqlens_padded), tensor_free(&c->t_cu_padded);
    tensor_free(&c->t_cu_zero);
    if (c->t_cu_valid)
        for (int j = 0; j < c->parts; j++) tensor_free(&c->t_cu_valid[j]);
    free(c->t_cu_valid);
    memset(c, 0, sizeof *c);
}

int cp_chunk_valid(const CpChunks *c, int chunk, int sample) {
    const int32_t *cu = c->cu_valid + (size_t)chunk * (size_t)(c->n_samples + 1);
    return cu[sample + 1] - cu[sample];
}

vfm_status cp_chunks_init(CpChunks *c, int n, const int32_t *cu_seqlens, const int32_t *cu_seqlens_padded, int parts,
                          Device device) {
    memset(c, 0, sizeof *c);
    if (n < 0 || parts < 1) return vfm_fail(VFM_ERR_INTERNAL, "cp_chunks_init: %d samples, %d parts", n, parts);
    c->n_samples = n;
    c->parts = parts;
    c->device = device;
    size_t m = (size_t)n + 1;
    c->cu_seqlens = malloc(m * sizeof(int32_t));
    c->cu_seqlens_padded = malloc(m * sizeof(int32_t));
    c->cu_padded = malloc(m * sizeof(int32_t));
    c->cu_valid = malloc((size_t)parts * m * sizeof(int32_t));
    c->max_valid = calloc((size_t)parts, sizeof(int));
    c->t_cu_valid = calloc((size_t)parts, sizeof(Tensor));
    if (!c->cu_seqlens || !c->cu_seqlens_padded || !c->cu_padded || !c->cu_valid || !c->max_valid || !c->t_cu_valid) {
        cp_chunks_free(c);
        return vfm_fail(VFM_ERR_NOMEM, "cp_chunks_init: %d samples", n);
    }
    memcpy(c->cu_seqlens, cu_seqlens, m * sizeof(int32_t));
    memcpy(c->cu_seqlens_padded, cu_seqlens_padded, m * sizeof(int32_t));
    for (int i = 0; i <= n; i++) c->cu_padded[i] = cu_seqlens_padded[i] / parts;
    for (int j = 0; j < parts; j++) c->cu_valid[(size_t)j * m] = 0;
    for (int i = 0; i < n; i++) {
        int32_t len = cu_seqlens[i + 1] - cu_seqlens[i], padded = cu_seqlens_padded[i + 1] - cu_seqlens_padded[i];
        if (cu_seqlens_padded[i] % parts != 0 || padded % parts != 0 || len < 0 || len > padded) {
            vfm_status s = vfm_fail(VFM_ERR_USAGE,
                                    "context parallelism over %d ranks: sample %d has %d real tokens in a slot of %d "
                                    "at row %d; every slot must be a multiple of %d (packs are padded to "
                                    "lcm(dataset.pad_multiple, TP·CP))",
                                    parts, i, len, padded, cu_seqlens_padded[i], parts);
            cp_chunks_free(c);
            return s;
        }
        int32_t chunk = padded / parts;
        if (len > c->max_len) c->max_len = len;
        for (int j = 0; j < parts; j++) {
            int32_t v = len - j * chunk;
            v = v < 0 ? 0 : v > chunk ? chunk : v;
            int32_t *cu = c->cu_valid + (size_t)j * m;
            cu[i + 1] = cu[i] + v;
            if (v > c->max_valid[j]) c->max_valid[j] = v;
        }
    }
    c->rows = c->cu_padded[n];
    vfm_status s = device_i32(&c->t_cu_seqlens, c->cu_seqlens, (int64_t)m, device);
    if (s == VFM_OK) s = device_i32(&c->t_cu_seqlens_padded, c->cu_seqlens_padded, (int64_t)m, device);
    if (s == VFM_OK) s = device_i32(&c->t_cu_padded, c->cu_padded, (int64_t)m, device);
    for (int j = 0; j < parts && s == VFM_OK; j++) s = device_i32(&c->t_cu_valid[j], c->cu_valid + (size_t)j * m, (int64_t)m, device);
    if (s != VFM_OK) cp_chunks_free(c);
    return s;
}

vfm_status cp_chunks_diagonal(CpChunks *c) {
    int32_t *zero = calloc((size_t)c->n_samples + 1, sizeof *zero);
    if (!zero) return vfm_fail(VFM_ERR_NOMEM, "cp_chunks_diagonal: %d samples", c->n_samples);
    vfm_status s = device_i32(&c->t_cu_zero, zero, (int64_t)c->n_samples + 1, c->device);
    free(zero);
    c->diagonal = s == VFM_OK;
    return s;
}

VarlenLayout cp_tile_layout(const CpChunks *c, int q_chunk, int kv_chunk) {
    VarlenLayout l = {c->n_samples, c->t_cu_valid[q_chunk], c->t_cu_padded, c->t_cu_valid[kv_chunk], c->t_cu_padded,
                      c->max_valid[q_chunk], c->max_valid[kv_chunk]};
    if (c->diagonal && q_chunk != kv_chunk) l.cu_kv = c->t_cu_zero, l.max_kv = 0;
    return l;
}

VarlenLayout cp_gathered_kv_layout(const CpChunks *c, int q_chunk) {
    VarlenLayout l = {c->n_samples, c->t_cu_valid[q_chunk], c->t_cu_padded, c->t_cu_seqlens, c->t_cu_seqlens_padded,
                      c->max_valid[q_chunk], c->max_len};
    return l;
}

VarlenLayout cp_cross_layout(const CpChunks *c, int q_chunk, const VarlenLayout *whole_cross) {
    VarlenLayout l = *whole_cross;
    l.cu_q = c->t_cu_valid[q_chunk];
    l.cu_q_padded = c->t_cu_padded;
    l.max_q = c->max_valid[q_chunk];
    return l;
}

VarlenLayout cp_whole_layout(const CpChunks *c) {
    VarlenLayout l = {c->n_samples, c->t_cu_seqlens, c->t_cu_seqlens_padded, c->t_cu_seqlens, c->t_cu_seqlens_padded,
                      c->max_len, c->max_len};
    return l;
}

/* rows [r0, r0 + rows) of t viewed as [rows, row elements] */
static Tensor row_block(const Tensor *t, int64_t r0, int64_t rows) {
    int64_t width = tensor_numel(t) / (t->shape[0] > 0 ? t->shape[0] : 1);
    return tensor_make((char *)t->data + (size_t)(r0 * width) * dtype_size(t->dtype), t->dtype, t->device, 2,
                       (int64_t[]){rows, width});
}

static vfm_status chunk_copy(Tensor *whole, Tensor *local, const int32_t *cu_local, int n, int parts, int chunk,
                             int to_local) {
    const char *op = to_local ? "cp_take_chunk" : "cp_put_chunk";
    int64_t rows = cu_local[n];
    if (chunk < 0 || chunk >= parts || local->ndim < 1 || whole->ndim < 1 || local->shape[0] != rows ||
        whole->shape[0] != rows * parts || local->dtype != whole->dtype ||
        tensor_numel(local) * parts != tensor_numel(whole))
        return vfm_fail(VFM_ERR_SHAPE, "%s: chunk %d of %d: a chunk set of %lld rows (%lld elements) and a whole of "
                        "%lld rows (%lld elements) do not match", op, chunk, parts, (long long)local->shape[0],
                        (long long)tensor_numel(local), (long long)whole->shape[0], (long long)tensor_numel(whole));
    for (int i = 0; i < n; i++) {
        int64_t c = cu_local[i + 1] - cu_local[i];
        if (c == 0) continue;
        Tensor w = row_block(whole, (int64_t)cu_local[i] * parts + chunk * c, c), l = row_block(local, cu_local[i], c);
        VFM_TRY(to_local ? op_copy(&l, &w) : op_copy(&w, &l));
    }
    return VFM_OK;
}

vfm_status cp_take_chunk(Tensor *local, const Tensor *whole, const int32_t *cu_local, int n, int parts, int chunk) {
    return chunk_copy((Tensor *)whole, local, cu_local, n, parts, chunk, 1);
}

vfm_status cp_put_chunk(Tensor *whole, const Tensor *local, const int32_t *cu_local, int n, int parts, int chunk) {
    return chunk_copy(whole, (Tensor *)local, cu_local, n, parts, chunk, 0);
}
