// CUDA backend: one AdamW step over flat f32 tensors (fp32 master weights and moments). The scalars
// are formed in double on the host exactly as the CPU backend forms them, and every f32 operation
// is an explicitly rounded one in the CPU's order (no fused multiply-add), so a step gives the same
// bits as the CPU: a GPU run's checkpoint continues on the CPU as if it had never left.
#include <math.h>

#include "cuda_common.h"

struct AdamWScalars {
    float keep, b1, one_minus_b1, b2, one_minus_b2, step_size, bc2_sqrt, eps, scale;
    int decay;
};

// g = scale·grad; p = decay ? p·keep : p; m = b1·m + (1-b1)·g; v = b2·v + ((1-b2)·g)·g;
// p = p − (step_size·m) / (√v / bc2_sqrt + eps). With a step state (ops.h) the scale and the bias
// corrections come from it, and nothing is written when its step was skipped. Chunks of 4 (16-byte
// accesses where the four arrays are aligned: cuda_common.h).
__global__ void adamw_kernel(float *P, float *M, float *V, const float *G, int64_t n, AdamWScalars s,
                             const double *state, int vec) {
    if (state) {
        if (state[STEP_OK] == 0) return;
        s.scale = (float)state[STEP_SCALE];
        s.step_size = (float)state[STEP_STEP_SIZE];
        s.bc2_sqrt = (float)state[STEP_BC2_SQRT];
    }
    GRID_STRIDE(c, chunks_of<4>(n)) {
        float p[4], m[4], v[4], g[4];
        chunk_read<4>(p, P, c, n, vec);
        chunk_read<4>(m, M, c, n, vec);
        chunk_read<4>(v, V, c, n, vec);
        chunk_read<4>(g, G, c, n, vec);
        for (int k = 0; k < 4; k++) {
            float gk = __fmul_rn(s.scale, g[k]);
            float pk = s.decay ? __fmul_rn(p[k], s.keep) : p[k];
            m[k] = __fadd_rn(__fmul_rn(s.b1, m[k]), __fmul_rn(s.one_minus_b1, gk));
            v[k] = __fadd_rn(__fmul_rn(s.b2, v[k]), __fmul_rn(__fmul_rn(s.one_minus_b2, gk), gk));
            float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v[k]), s.bc2_sqrt), s.eps);
            p[k] = __fsub_rn(pk, __fdiv_rn(__fmul_rn(s.step_size, m[k]), denom));
        }
        chunk_write<4>(M, m, c, n, vec);
        chunk_write<4>(V, v, c, n, vec);
        chunk_write<4>(P, p, c, n, vec);
    }
}

extern "C" vfm_status cuda_adamw_step(Tensor *param, Tensor *m, Tensor *v, const Tensor *grad, const AdamWHyper *h) {
    int64_t n = tensor_numel(param);
    if (n == 0) return VFM_OK;
    if (param->dtype != DT_F32) return cuda_bad_dtype("adamw_step", "param", param);
    double lr = h->lr, beta1 = h->beta1, beta2 = h->beta2;
    AdamWScalars s;
    s.decay = h->weight_decay != 0;
    s.keep = (float)(1.0 - lr * (double)h->weight_decay);
    s.b1 = (float)beta1;
    s.one_minus_b1 = (float)(1.0 - beta1);
    s.b2 = (float)beta2;
    s.one_minus_b2 = (float)(1.0 - beta2);
    s.step_size = h->step_state ? 0.f : (float)(lr / (1.0 - pow(beta1, h->step)));
    s.bc2_sqrt = h->step_state ? 0.f : (float)sqrt(1.0 - pow(beta2, h->step));
    s.eps = (float)h->eps;
    s.scale = (float)h->grad_scale;
    CUDA_LAUNCH(adamw_kernel, cuda_blocks(chunks_of<4>(n)), CUDA_THREADS, 0, (float *)param->data, (float *)m->data,
                (float *)v->data, (const float *)grad->data, n, s,
                h->step_state ? (const double *)h->step_state->data : (const double *)NULL,
                vec_ok(param->data, m->data, v->data, grad->data));
    return VFM_OK;
}
