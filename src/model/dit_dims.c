/* Widths a configuration implies (dit.h): a token's values in and out, and a sample's class row. */
#include "model/dit.h"

int dit_token_dim(const DiTConfig *c) { return c->in_channels * c->patch_spatial * c->patch_spatial * c->patch_temporal; }

int dit_out_dim(const DiTConfig *c) {
    return c->out_channels * (c->learn_sigma ? 2 : 1) * c->patch_spatial * c->patch_spatial * c->patch_temporal;
}

int32_t dit_class_row(const DiTConfig *c, int32_t label, int drop) {
    if (c->num_classes <= 0) return -1;
    if (!drop && label >= 0) return label < c->num_classes ? label : -1;
    return c->class_dropout_prob > 0 ? c->num_classes : -1;
}
