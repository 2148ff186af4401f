/* The objectives by kind, the one place that names them all: objective.c dispatches through this
 * table, so the losses below it never call back up. A new objective adds its row here. */
#include "diffusion/objective_internal.h"

const ObjectiveLoss *const objective_losses[OBJECTIVE_KINDS] = {
    [OBJECTIVE_EDM] = &edm_loss,
    [OBJECTIVE_FLOW] = &flow_loss,
    [OBJECTIVE_DDPM] = &ddpm_loss,
};
