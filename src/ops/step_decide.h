/* The training step's decision on one step state (ops.h op_step_decide), written once for the CPU
 * and the GPU backends (ops/cpu/step.c, ops/cuda/step.cu) so both compute the same numbers in the
 * same order. */
#ifndef VFM_STEP_DECIDE_H
#define VFM_STEP_DECIDE_H

#include <math.h>

#include "core/host_device.h"
#include "ops/ops.h"

VFM_HD void step_decide(double *S, const StepDecideHyper *h) {
    double loss = S[STEP_LOSS], norm = sqrt(S[STEP_SUMSQ]);
    int ok = isfinite(loss) && isfinite(norm);
    double scale = 1.0; /* clip_scale of optim/optimizer.h */
    if (h->clip > 0) {
        double coeff = h->clip / (norm + 1e-6);
        scale = coeff < 1.0 ? coeff : 1.0;
    }
    S[STEP_NORM] = norm;
    S[STEP_OK] = ok;
    S[STEP_SCALE] = scale;
    if (ok) { /* the bias corrections op_adamw_step forms from step t, from the f32 lr and betas */
        double t = S[STEP_ADAM_T] + 1.0, lr = h->lr, beta1 = h->beta1, beta2 = h->beta2;
        S[STEP_STEP_SIZE] = lr / (1.0 - pow(beta1, t));
        S[STEP_BC2_SQRT] = sqrt(1.0 - pow(beta2, t));
        S[STEP_ADAM_T] = t;
    }
    double *r = S + STEP_SLOTS + 3 * h->record;
    r[0] = loss, r[1] = norm, r[2] = ok;
    S[STEP_LOSS] = 0;
}

#endif
