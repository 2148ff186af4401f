// CUDA backend: the learned factorized 3-D position (MovieGen). The forward adds three table rows per
// token in f32 (in the CPU's order, rounded once). The backward is a scatter-add without atomics:
// a block owns 32 columns of POS_ROW_TILE rows of one table and walks every token in ascending order,
// each thread adding into its own column of a shared tile, so every destination's terms are added
// in the CPU's order (f32: the CPU's bits). The tables are small (a few hundred rows); dout is read
// once per row tile. Positions are checked on the host by the model; one outside its table adds 0.
#include "cuda_common.h"

#define POS_ROW_TILE 64

template <typename T> __device__ __forceinline__ float row_at(const T *tab, int32_t i, int64_t n, int64_t D, int64_t d) {
    return i >= 0 && i < n ? to_f32(tab[(int64_t)i * D + d]) : 0.f;
}

template <typename T>
__global__ void pos_learned_forward_kernel(T *out, const T *et, const T *eh, const T *ew, int64_t nt, int64_t nh,
                                           int64_t nw, const int32_t *pos, const int32_t *t2s, int64_t S, int64_t D) {
    GRID_STRIDE(i, S * D) {
        int64_t s = i / D, d = i % D;
        if (t2s[s] < 0) {
            out[i] = from_f32<T>(0.f);
            continue;
        }
        const int32_t *p = pos + 3 * s;
        float v = row_at(et, p[0], nt, D, d) + row_at(eh, p[1], nh, D, d);
        out[i] = from_f32<T>(v + row_at(ew, p[2], nw, D, d));
    }
}

// grid (column tiles of 32, row tiles of POS_ROW_TILE, 3 tables), 32 threads: thread x owns column
// 32·blockIdx.x + x of rows [r0, r0 + POS_ROW_TILE) of table blockIdx.z.
template <typename T>
__global__ void pos_learned_backward_kernel(float *dt, float *dh, float *dw, int64_t nt, int64_t nh, int64_t nw,
                                            const T *dout, const int32_t *pos, const int32_t *t2s, int64_t S,
                                            int64_t D) {
    __shared__ float acc[POS_ROW_TILE][32];
    int axis = blockIdx.z;
    float *dtab = axis == 0 ? dt : axis == 1 ? dh : dw;
    int64_t n = axis == 0 ? nt : axis == 1 ? nh : nw;
    int64_t r0 = (int64_t)blockIdx.y * POS_ROW_TILE, col = (int64_t)blockIdx.x * 32 + threadIdx.x;
    if (r0 >= n || col >= D) return;  // whole blocks of one table's tiles, or columns past D: no barrier below
    for (int r = 0; r < POS_ROW_TILE; r++) acc[r][threadIdx.x] = 0.f;
    for (int64_t s = 0; s < S; s++) {
        if (t2s[s] < 0) continue;
        int64_t r = (int64_t)pos[3 * s + axis] - r0;
        if (r < 0 || r >= POS_ROW_TILE || r0 + r >= n) continue;
        acc[r][threadIdx.x] = __fadd_rn(acc[r][threadIdx.x], to_f32(dout[s * D + col]));
    }
    for (int64_t r = 0; r < POS_ROW_TILE && r0 + r < n; r++) {
        float *cell = dtab + (r0 + r) * D + col;
        *cell = __fadd_rn(*cell, acc[r][threadIdx.x]);
    }
}

extern "C" vfm_status cuda_pos_embed_learned_forward(Tensor *out, const Tensor *tab_t, const Tensor *tab_h,
                                                     const Tensor *tab_w, const Tensor *pos, const Tensor *tok2sample) {
    int64_t S = tensor_dim(out, 0), D = tensor_dim(out, 1);
    if (S * D == 0) return VFM_OK;
    FLOAT_DISPATCH("pos_embed_learned_forward", "out", out, T,
                   CUDA_LAUNCH(pos_learned_forward_kernel<T>, cuda_blocks(S * D), CUDA_THREADS, 0, (T *)out->data,
                               (const T *)tab_t->data, (const T *)tab_h->data, (const T *)tab_w->data,
                               tensor_dim(tab_t, 0), tensor_dim(tab_h, 0), tensor_dim(tab_w, 0),
                               (const int32_t *)pos->data, (const int32_t *)tok2sample->data, S, D));
    return VFM_OK;
}

extern "C" vfm_status cuda_pos_embed_learned_backward(Tensor *dtab_t, Tensor *dtab_h, Tensor *dtab_w,
                                                      const Tensor *dout, const Tensor *pos, const Tensor *tok2sample) {
    const char *op = "pos_embed_learned_backward";
    int64_t S = tensor_dim(dout, 0), D = tensor_dim(dout, 1);
    int64_t nt = tensor_dim(dtab_t, 0), nh = tensor_dim(dtab_h, 0), nw = tensor_dim(dtab_w, 0);
    int64_t most = nt > nh ? (nt > nw ? nt : nw) : (nh > nw ? nh : nw);
    if (S * D == 0 || most == 0) return VFM_OK;
    dim3 grid((unsigned)((D + 31) / 32), (unsigned)((most + POS_ROW_TILE - 1) / POS_ROW_TILE), 3);
    FLOAT_DISPATCH(op, "dout", dout, T,
                   CUDA_LAUNCH(pos_learned_backward_kernel<T>, grid, 32, 0, (float *)dtab_t->data,
                               (float *)dtab_h->data, (float *)dtab_w->data, nt, nh, nw, (const T *)dout->data,
                               (const int32_t *)pos->data, (const int32_t *)tok2sample->data, S, D));
    return VFM_OK;
}
