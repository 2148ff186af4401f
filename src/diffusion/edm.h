/* EDM training objective (research/dfm.md §2.1, Karras et al. 2022) over one pack:
 *   x0 = σ_data·latent, x_t = x0 + σ·ε,
 *   F = net(c_in·x_t; c_noise = ¼ ln σ, fps, text), D = c_skip·x_t + c_out·F,
 *   loss = mean over real tokens of w(σ)·mean_c (D − x0)², w = (σ²+σ_d²)/(σ·σ_d)².
 * The draws (σ per sample, CFG coins, ε) come from objective.c; this file is the loss given them. */
#ifndef VFM_EDM_H
#define VFM_EDM_H

#include "diffusion/objective.h"

/* The EDM names of the objective's draws and result (draws->sigma is the per-sample σ). */
typedef DiffusionDraws EdmDraws;
typedef ObjectiveResult EdmStepResult;

#endif
