/* CPU backend: one AdamW step (torch.optim.AdamW semantics) over a flat tensor, vectorised
 * (VEC_CLONES; the sqrt vectorises because src/ops/cpu is built with -fno-math-errno) over fixed
 * chunks of elements: elementwise, so the same bits at any thread count. */
#include "real.h"
#include "vec_math.h"

/* Elements per chunk; a tensor of one chunk runs without a parallel region. */
#define ADAMW_CHUNK 16384

typedef struct {
    real keep, b1, one_minus_b1, b2, one_minus_b2, step_size, bc2_sqrt, eps, scale;
} AdamWScalars;

VEC_CLONES static void adamw_rows(real *P, real *M, real *V, const real *G, int64_t n, const AdamWScalars *c) {
    const AdamWScalars k = *c; /* locals, so the compiler need not reload them after each store */
#pragma omp simd
    for (int64_t i = 0; i < n; i++) {
        real g = k.scale * G[i];
        real p = P[i] * k.keep; /* keep = 1 exactly without weight decay */
        real mi = k.b1 * M[i] + k.one_minus_b1 * g;
        real vi = k.b2 * V[i] + k.one_minus_b2 * g * g;
        M[i] = mi;
        V[i] = vi;
        P[i] = p - k.step_size * mi / (sqrt(vi) / k.bc2_sqrt + k.eps);
    }
}

/* param, m, v, grad: flat tensors of the same element count.
 * Scalars are formed in double as torch forms them in Python, then applied in `real`:
 *   g = grad_scale·grad; p ← p·(1 − lr·wd) (only when wd ≠ 0); m ← β1·m + (1−β1)·g;
 *   v ← β2·v + (1−β2)·g²; p ← p − (lr/(1−β1^t))·m / (√v/√(1−β2^t) + eps),
 * evaluated in torch's order (step_size·m first, then the division). With h->step_state the scale,
 * the bias corrections and whether to update at all come from the step's state. */
vfm_status CPU_FN(adamw_step)(Tensor *param, Tensor *m, Tensor *v, const Tensor *grad, const AdamWHyper *h) {
    int64_t n = tensor_numel(param);
    real *P = RDATA(param), *M = RDATA(m), *V = RDATA(v);
    const real *G = CRDATA(grad);
    double lr = h->lr, beta1 = h->beta1, beta2 = h->beta2;
    AdamWScalars c = {
        .keep = (real)(1.0 - lr * (double)h->weight_decay),
        .b1 = (real)beta1,
        .one_minus_b1 = (real)(1.0 - beta1),
        .b2 = (real)beta2,
        .one_minus_b2 = (real)(1.0 - beta2),
        .step_size = (real)(lr / (1.0 - pow(beta1, h->step))),
        .bc2_sqrt = (real)sqrt(1.0 - pow(beta2, h->step)),
        .eps = (real)h->eps,
        .scale = (real)h->grad_scale,
    };
    if (h->step_state) { /* the step's decision, made on the device (op_step_decide): the same values */
        const double *S = h->step_state->data;
        if (S[STEP_OK] == 0) return VFM_OK;
        c.step_size = (real)S[STEP_STEP_SIZE];
        c.bc2_sqrt = (real)S[STEP_BC2_SQRT];
        c.scale = (real)(float)S[STEP_SCALE];
    }
    int64_t chunks = (n + ADAMW_CHUNK - 1) / ADAMW_CHUNK;
#pragma omp parallel for schedule(static) if (chunks > 1)
    for (int64_t ch = 0; ch < chunks; ch++) {
        int64_t i = ch * ADAMW_CHUNK, len = n - i < ADAMW_CHUNK ? n - i : ADAMW_CHUNK;
        adamw_rows(P + i, M + i, V + i, G + i, len, &c);
    }
    return VFM_OK;
}
