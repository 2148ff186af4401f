/* UniPC multistep for flow matching (unipc.h). The coefficients are scalars per sample (its own
 * times); the updates are axpy's over the sample's rows. */
#include "diffusion/unipc.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void unipc_sigmas(int n, double shift, double *sigma) {
    for (int i = 0; i < n; i++) {
        double s = flow_shift_sigma(1.0 - (double)i * (1.0 - 1.0 / 1000.0) / (double)n, shift);
        if (i == 0 && fabs(s - 1.0) < 1e-6) s -= 1e-6; /* keeps ln σ_0 and ln α_0 finite */
        sigma[i] = (double)(float)s;
    }
    sigma[n] = 0.0;
}

static double lambda_of(double sigma) { return log(1.0 - sigma) - log(sigma); }

/* x[k] solves the k×k system A·x = b (row-major), by elimination with partial pivoting. */
static void solve(int k, double A[UNIPC_MAX_ORDER][UNIPC_MAX_ORDER], double *b, double *x) {
    for (int c = 0; c < k; c++) {
        int p = c;
        for (int r = c + 1; r < k; r++)
            if (fabs(A[r][c]) > fabs(A[p][c])) p = r;
        for (int j = 0; j < k; j++) {
            double t = A[c][j];
            A[c][j] = A[p][j], A[p][j] = t;
        }
        double t = b[c];
        b[c] = b[p], b[p] = t;
        for (int r = c + 1; r < k; r++) {
            double f = A[r][c] / A[c][c];
            for (int j = c; j < k; j++) A[r][j] -= f * A[c][j];
            b[r] -= f * b[c];
        }
    }
    for (int r = k - 1; r >= 0; r--) {
        double s = b[r];
        for (int j = r + 1; j < k; j++) s -= A[r][j] * x[j];
        x[r] = s / A[r][r];
    }
}

/* One UniPC update from time s0 = sig[0] to t, with the earlier times sig[1..p-1] of the history
 * m[0] (at s0), m[1], ... (newest first):
 *   x_t = (σ_t/σ_s0)·x − α_t·(e^{−h} − 1)·m0 − α_t·B(h)·(Σ_k ρ_k·D_k [+ ρ_p·(m_t − m0)])
 * D_k = (m_k − m0)/r_k, r_k = (λ_k − λ_s0)/h. The predictor (corrector = 0) solves for p − 1
 * weights (p = 2: ½), the corrector for p (p = 1: ½), whose last multiplies m_t − m0. Writes the
 * coefficients of x, m0, m_1.., and m_t into c[0], c[1], c[2..p], c[p+1]. */
static void unipc_coef(int p, int corrector, int bh2, double t, const double *sig, double *c) {
    double lt = lambda_of(t), l0 = lambda_of(sig[0]), h = lt - l0, hh = -h;
    double h_phi_1 = expm1(hh), B = bh2 ? expm1(hh) : hh, alpha_t = 1.0 - t;
    double rk[UNIPC_MAX_ORDER], bvec[UNIPC_MAX_ORDER], R[UNIPC_MAX_ORDER][UNIPC_MAX_ORDER], rho[UNIPC_MAX_ORDER] = {0};
    for (int k = 1; k < p; k++) rk[k - 1] = (lambda_of(sig[k]) - l0) / h;
    rk[p - 1] = 1.0;
    double h_phi_k = h_phi_1 / hh - 1.0, fact = 1.0;
    for (int i = 1; i <= p; i++) {
        for (int k = 0; k < p; k++) R[i - 1][k] = pow(rk[k], i - 1);
        bvec[i - 1] = h_phi_k * fact / B;
        fact *= i + 1;
        h_phi_k = h_phi_k / hh - 1.0 / fact;
    }
    int unknowns = corrector ? p : p - 1;
    if (!corrector && p == 2) rho[0] = 0.5;
    else if (corrector && p == 1) rho[0] = 0.5;
    else if (unknowns > 0) solve(unknowns, R, bvec, rho);
    memset(c, 0, (size_t)(p + 2) * sizeof *c);
    c[0] = t / sig[0];
    c[1] = -alpha_t * h_phi_1;
    for (int k = 1; k < p; k++) { /* ρ_k·D_k = ρ_k·(m_k − m0)/r_k */
        double w = -alpha_t * B * rho[k - 1] / rk[k - 1];
        c[1 + k] += w;
        c[1] -= w;
    }
    if (corrector) {
        double w = -alpha_t * B * rho[p - 1];
        c[p + 1] += w;
        c[1] -= w;
    }
}

typedef struct Rows {
    int64_t C;
    const int64_t *begin;
} Rows;

static Tensor rows_of(const Rows *r, float *base, int b) {
    return TF32(base + r->begin[b] * r->C, r->begin[b + 1] - r->begin[b], r->C);
}

/* out (sample b's rows) = c[0]·x + Σ_k c[1+k]·hist[k] (+ c[p+1]·mt). out may be x. */
static vfm_status combine(const Rows *r, int b, float *out, const float *x, float *const *hist, const float *mt, int p,
                          const double *c) {
    Tensor o = rows_of(r, out, b), xs = rows_of(r, (float *)x, b);
    if (out != x) VFM_TRY(op_copy(&o, &xs));
    VFM_TRY(op_scale(&o, c[0]));
    for (int k = 0; k < p; k++) {
        Tensor h = rows_of(r, hist[k], b);
        VFM_TRY(op_axpy(&o, c[1 + k], &h));
    }
    if (!mt) return VFM_OK;
    Tensor m = rows_of(r, (float *)mt, b);
    return op_axpy(&o, c[p + 1], &m);
}

vfm_status flow_unipc_sample(int n_steps, int order, int bh2, int n_samples, const int64_t *row_begin,
                             const double *shift, VelocityFn velocity, void *ctx, Tensor *x,
                             void (*progress)(void *, int, int), void *progress_ctx) {
    if (n_steps < 1) return vfm_fail(VFM_ERR_USAGE, "sampler: num_steps must be at least 1");
    if (order < 1 || order > UNIPC_MAX_ORDER)
        return vfm_fail(VFM_ERR_USAGE, "sampler.unipc_order %d: expected 1 to %d", order, UNIPC_MAX_ORDER);
    int64_t numel = tensor_numel(x);
    Rows r = {tensor_dim(x, 1), row_begin};
    size_t bytes = (size_t)numel * sizeof(float);
    double *sig = malloc((size_t)n_samples * (n_steps + 1) * sizeof *sig), *now = malloc((size_t)n_samples * sizeof *now);
    float *v = malloc(bytes), *m = malloc(bytes), *last = malloc(bytes), *hist[UNIPC_MAX_ORDER] = {0};
    for (int k = 0; k < order; k++) hist[k] = malloc(bytes);
    vfm_status s = sig && now && v && m && last && hist[order - 1] ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "unipc: buffers");
    for (int b = 0; b < n_samples && s == VFM_OK; b++) unipc_sigmas(n_steps, shift[b], sig + (int64_t)b * (n_steps + 1));
    Tensor vt = *x;
    vt.data = v;
    int done = 0, prev_order = 0; /* model outputs kept so far (≤ order), the last predictor's order */
    for (int i = 0; i < n_steps && s == VFM_OK; i++) {
        for (int b = 0; b < n_samples; b++) now[b] = floor(1000.0 * sig[(int64_t)b * (n_steps + 1) + i]) / 1000.0;
        s = velocity(ctx, x, now, &vt);
        for (int b = 0; b < n_samples && s == VFM_OK; b++) { /* m = x − σ_i·v */
            Tensor mb = rows_of(&r, m, b), xb = rows_of(&r, x->data, b), vb = rows_of(&r, v, b);
            s = op_copy(&mb, &xb);
            if (s == VFM_OK) s = op_axpy(&mb, -sig[(int64_t)b * (n_steps + 1) + i], &vb);
        }
        int p_next = order < n_steps - i ? order : n_steps - i;
        if (p_next > done + 1) p_next = done + 1;
        for (int b = 0; b < n_samples && s == VFM_OK; b++) {
            const double *sb = sig + (int64_t)b * (n_steps + 1);
            double times[UNIPC_MAX_ORDER], c[UNIPC_MAX_ORDER + 2];
            if (i > 0) { /* UniC: x_i again from x_{i−1}, with m_i */
                for (int k = 0; k < prev_order; k++) times[k] = sb[i - 1 - k];
                unipc_coef(prev_order, 1, bh2, sb[i], times, c);
                s = combine(&r, b, x->data, last, hist, m, prev_order, c);
            }
        }
        float *oldest = hist[order - 1]; /* the history, newest first: m_i in front */
        memmove(hist + 1, hist, (size_t)(order - 1) * sizeof *hist);
        hist[0] = oldest;
        Tensor h0 = TF32(hist[0], numel), lt = TF32(last, numel), mf = TF32(m, numel), xf = TF32(x->data, numel);
        if (s == VFM_OK) s = op_copy(&h0, &mf);
        if (s == VFM_OK) s = op_copy(&lt, &xf);
        for (int b = 0; b < n_samples && s == VFM_OK; b++) { /* UniP: x_{i+1} */
            const double *sb = sig + (int64_t)b * (n_steps + 1);
            double times[UNIPC_MAX_ORDER], c[UNIPC_MAX_ORDER + 2];
            for (int k = 0; k < p_next; k++) times[k] = sb[i - k];
            unipc_coef(p_next, 0, bh2, sb[i + 1], times, c);
            s = combine(&r, b, x->data, last, hist, NULL, p_next, c);
        }
        if (done < order) done++;
        prev_order = p_next;
        if (s == VFM_OK && progress) progress(progress_ctx, i + 1, n_steps);
    }
    free(sig), free(now), free(v), free(m), free(last);
    for (int k = 0; k < order; k++) free(hist[k]);
    return s;
}
