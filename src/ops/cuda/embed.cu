// CUDA backend: the sinusoidal timestep embedding and its backward, the fixed 3-D and 2-D sin-cos
// position embeddings, and patchify / unpatchify. Angles and their sines are taken in double, as on the CPU,
// and rounded once; the embedding backward sums in double with a fixed-order block reduction.
#include "cuda_common.h"

// f_i = exp(-ln(max_period)·i/(half - shift))
__device__ __forceinline__ double timestep_freq(int64_t i, int64_t half, float shift, float max_period) {
    return exp(-log((double)max_period) * (double)i / ((double)half - (double)shift));
}

// out[B,dim]: [sin | cos] or with flip [cos | sin]; t[B] f32
template <typename T>
__global__ void timestep_forward_kernel(T *out, const float *t, int64_t B, int64_t half, int flip, float shift,
                                        float max_period) {
    GRID_STRIDE(k, B * half) {
        int64_t b = k / half, i = k % half;
        double angle = (double)t[b] * timestep_freq(i, half, shift, max_period);
        int64_t sin_at = flip ? half : 0, cos_at = flip ? 0 : half;
        out[b * 2 * half + sin_at + i] = from_f32<T>((float)sin(angle));
        out[b * 2 * half + cos_at + i] = from_f32<T>((float)cos(angle));
    }
}

// dt[b] = Σ_i f_i·(dout_sin[i]·cos(t f_i) − dout_cos[i]·sin(t f_i)); one block per sample.
template <typename T>
__global__ void timestep_backward_kernel(float *dt, const T *dout, const float *t, int64_t half, int flip, float shift,
                                         float max_period) {
    int64_t b = blockIdx.x;
    int64_t sin_at = flip ? half : 0, cos_at = flip ? 0 : half;
    const T *row = dout + b * 2 * half;
    double sum = 0;
    for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
        double f = timestep_freq(i, half, shift, max_period), angle = (double)t[b] * f;
        sum += f * ((double)to_f32(row[sin_at + i]) * cos(angle) - (double)to_f32(row[cos_at + i]) * sin(angle));
    }
    sum = block_sum<double>(sum);
    if (threadIdx.x == 0) dt[b] = (float)sum;
}

// x[S,D] += [temporal D/4 (t) | part A 3D/8 (w) | part B 3D/8 (h)] on rows with tok2sample >= 0;
// each part [sin(p·ω_k) | cos(p·ω_k)], ω_k = 1/10000^(k/n) for a part of half width n.
template <typename T>
__global__ void pos_embed_3d_kernel(T *x, const int32_t *pos, const int32_t *t2s, int64_t S, int64_t D) {
    int64_t n_t = D / 8, n_s = 3 * D / 16, pairs = n_t + 2 * n_s;
    GRID_STRIDE(k, S * pairs) {
        int64_t s = k / pairs, j = k % pairs;
        if (t2s[s] < 0) continue;
        int64_t base, n, kk;
        int coord;
        if (j < n_t) {
            base = 0, n = n_t, kk = j, coord = 0;  // t
        } else if (j < n_t + n_s) {
            base = 2 * n_t, n = n_s, kk = j - n_t, coord = 2;  // w
        } else {
            base = 2 * n_t + 2 * n_s, n = n_s, kk = j - n_t - n_s, coord = 1;  // h
        }
        double omega = 1.0 / pow(10000.0, (double)kk / (double)n);
        double angle = (double)pos[3 * s + coord] * omega;
        T *row = x + s * D + base;
        row[kk] = from_f32<T>(to_f32(row[kk]) + (float)sin(angle));
        row[n + kk] = from_f32<T>(to_f32(row[n + kk]) + (float)cos(angle));
    }
}

// x[S,D] += [w part D/2 | h part D/2] (DiT / MAE 2-D sin-cos) on rows with tok2sample >= 0; each
// part [sin(p·ω_k) | cos(p·ω_k)], ω_k = 1/10000^(k/n), n = D/4; pos[s] = (t, h, w).
template <typename T> __global__ void pos_embed_2d_kernel(T *x, const int32_t *pos, const int32_t *t2s, int64_t S, int64_t D) {
    int64_t n = D / 4, pairs = 2 * n;
    GRID_STRIDE(k, S * pairs) {
        int64_t s = k / pairs, j = k % pairs;
        if (t2s[s] < 0) continue;
        int64_t part = j / n, kk = j % n;  // part 0: w (pos[s,2]), part 1: h (pos[s,1])
        double omega = 1.0 / pow(10000.0, (double)kk / (double)n);
        double angle = (double)pos[3 * s + (part == 0 ? 2 : 1)] * omega;
        T *row = x + s * D + part * 2 * n;
        row[kk] = from_f32<T>(to_f32(row[kk]) + (float)sin(angle));
        row[n + kk] = from_f32<T>(to_f32(row[n + kk]) + (float)cos(angle));
    }
}

// One thread per token element; to_tokens: tokens <- latent, else latent <- tokens. Elements are
// moved as raw bits (E = the element's storage type), so any float dtype works.
template <typename E>
__global__ void patch_copy_kernel(E *tokens, E *latent, int64_t C, int64_t T, int64_t H, int64_t W, int pt, int ph,
                                  int pw, int to_tokens) {
    int64_t Tn = T / pt, Hn = H / ph, Wn = W / pw, n_tokens = Tn * Hn * Wn;
    int64_t token_dim = (int64_t)ph * pw * pt * C;
    GRID_STRIDE(i, n_tokens * token_dim) {
        int64_t tok = i / token_dim, j = i % token_dim;
        int64_t tt = tok / (Hn * Wn), hh = (tok / Wn) % Hn, ww = tok % Wn;
        // inside a token: C fastest, then pt, then pw, then ph
        int64_t c = j % C, rest = j / C;
        int64_t ipt = rest % pt;
        rest /= pt;
        int64_t ipw = rest % pw, iph = rest / pw;
        int64_t t = tt * pt + ipt, h = hh * ph + iph, w = ww * pw + ipw;
        E *cell = latent + ((c * T + t) * H + h) * W + w;
        if (to_tokens) tokens[i] = *cell;
        else *cell = tokens[i];
    }
}

extern "C" vfm_status cuda_timestep_embedding_forward(Tensor *out, const Tensor *t, int flip_sin_to_cos, float shift,
                                                      float max_period) {
    int64_t B = tensor_dim(out, 0), half = tensor_dim(out, 1) / 2;
    if (B * half == 0) return VFM_OK;
    FLOAT_DISPATCH("timestep_embedding_forward", "out", out, T,
                   CUDA_LAUNCH(timestep_forward_kernel<T>, cuda_blocks(B * half), CUDA_THREADS, 0, (T *)out->data,
                               (const float *)t->data, B, half, flip_sin_to_cos, shift, max_period));
    return VFM_OK;
}

extern "C" vfm_status cuda_timestep_embedding_backward(Tensor *dt, const Tensor *dout, const Tensor *t,
                                                       int flip_sin_to_cos, float shift, float max_period) {
    int64_t B = tensor_dim(dout, 0), half = tensor_dim(dout, 1) / 2;
    if (B == 0) return VFM_OK;
    FLOAT_DISPATCH("timestep_embedding_backward", "dout", dout, T,
                   CUDA_LAUNCH(timestep_backward_kernel<T>, (unsigned)B, CUDA_THREADS, 0, (float *)dt->data,
                               (const T *)dout->data, (const float *)t->data, half, flip_sin_to_cos, shift,
                               max_period));
    return VFM_OK;
}

extern "C" vfm_status cuda_pos_embed_3d_add(Tensor *x, const Tensor *pos, const Tensor *tok2sample) {
    int64_t S = tensor_dim(x, 0), D = tensor_dim(x, 1), pairs = D / 8 + 2 * (3 * D / 16);
    if (S * pairs == 0) return VFM_OK;
    FLOAT_DISPATCH("pos_embed_3d_add", "x", x, T,
                   CUDA_LAUNCH(pos_embed_3d_kernel<T>, cuda_blocks(S * pairs), CUDA_THREADS, 0, (T *)x->data,
                               (const int32_t *)pos->data, (const int32_t *)tok2sample->data, S, D));
    return VFM_OK;
}

extern "C" vfm_status cuda_pos_embed_2d_add(Tensor *x, const Tensor *pos, const Tensor *tok2sample) {
    int64_t S = tensor_dim(x, 0), D = tensor_dim(x, 1), pairs = 2 * (D / 4);
    if (S * pairs == 0) return VFM_OK;
    FLOAT_DISPATCH("pos_embed_2d_add", "x", x, T,
                   CUDA_LAUNCH(pos_embed_2d_kernel<T>, cuda_blocks(S * pairs), CUDA_THREADS, 0, (T *)x->data,
                               (const int32_t *)pos->data, (const int32_t *)tok2sample->data, S, D));
    return VFM_OK;
}

static vfm_status patch_copy(const char *op, Tensor *tokens, Tensor *latent, int pt, int ph, int pw, int to_tokens) {
    int64_t n = tensor_numel(latent);
    if (n == 0) return VFM_OK;
    const int64_t *L = latent->shape;
    if (dtype_size(latent->dtype) == 4)
        CUDA_LAUNCH(patch_copy_kernel<uint32_t>, cuda_blocks(n), CUDA_THREADS, 0, (uint32_t *)tokens->data,
                    (uint32_t *)latent->data, L[0], L[1], L[2], L[3], pt, ph, pw, to_tokens);
    else if (dtype_size(latent->dtype) == 2)
        CUDA_LAUNCH(patch_copy_kernel<uint16_t>, cuda_blocks(n), CUDA_THREADS, 0, (uint16_t *)tokens->data,
                    (uint16_t *)latent->data, L[0], L[1], L[2], L[3], pt, ph, pw, to_tokens);
    else
        return cuda_bad_dtype(op, "latent", latent);
    return VFM_OK;
}

extern "C" vfm_status cuda_patchify(Tensor *tokens, const Tensor *latent, int pt, int ph, int pw) {
    return patch_copy("patchify", tokens, (Tensor *)latent, pt, ph, pw, 1);
}

extern "C" vfm_status cuda_unpatchify(Tensor *latent, const Tensor *tokens, int pt, int ph, int pw) {
    return patch_copy("unpatchify", (Tensor *)tokens, latent, pt, ph, pw, 0);
}
