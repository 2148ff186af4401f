// CUDA backend: 3-D rotary position embedding (ops.h op_rope_3d). One thread per (row, head, pair):
// the angle and its cos/sin in double, rounded to f32 once, as on the CPU.
#include "cuda_common.h"

template <typename T>
__global__ void rope_3d_kernel(T *y, const T *x, const int32_t *pos, int64_t N, int64_t H, int64_t hd, double theta,
                               double sign) {
    int64_t pairs = hd / 2, i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N * H * pairs) return;
    int64_t n = i / (H * pairs), k2 = 2 * (i % pairs), row = i / pairs;
    int64_t dhw = 2 * (hd / 6), width[3] = {hd - 2 * dhw, dhw, dhw};
    int part = 0;
    int64_t start = 0;
    while (part < 2 && k2 >= start + width[part]) start += width[part++];
    int64_t d = width[part], k = (k2 - start) / 2;
    double angle = (double)pos[n * 3 + part] * pow(theta, -2.0 * (double)k / (double)d);
    float c = (float)cos(angle), s = (float)(sign * sin(angle));
    const T *xr = x + row * hd + k2;
    float a = to_f32(xr[0]), b = to_f32(xr[1]);
    T *yr = y + row * hd + k2;
    yr[0] = from_f32<T>(a * c - b * s);
    yr[1] = from_f32<T>(a * s + b * c);
}

extern "C" vfm_status cuda_rope_3d(Tensor *y, const Tensor *x, const Tensor *pos, float theta, int inverse) {
    int64_t N = x->shape[0], H = x->shape[1], hd = x->shape[2], n = N * H * (hd / 2);
    if (n == 0) return VFM_OK;
    FLOAT_DISPATCH("rope_3d", "x", x, T,
                   CUDA_LAUNCH(rope_3d_kernel<T>, cuda_blocks(n), CUDA_THREADS, 0, (T *)y->data, (const T *)x->data,
                               (const int32_t *)pos->data, N, H, hd, (double)theta, inverse ? -1.0 : 1.0));
    return VFM_OK;
}
