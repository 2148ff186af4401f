/* The parameter table: every parameter of a model lives in one contiguous buffer, described by
 * a table of named entries (shape, offset, initialisation, weight decay, tensor-parallel split,
 * reduce groups). Gradients, Adam moments, fp32 master and EMA copies are parallel buffers laid
 * out by the same table. Nothing is found by a hard-coded index: code looks entries up by name
 * once, at model build time. Names follow the PyTorch twin (reference/model_torch.py), so weights
 * export to safetensors that PyTorch loads directly. */
#ifndef VFM_PARAMS_H
#define VFM_PARAMS_H

#include <stdint.h>

#include "core/tensor.h"

typedef enum {
    INIT_ZERO,          /* zeros (adaLN output projection: every block starts as the identity) */
    INIT_ONE,           /* ones (norm weights) */
    INIT_NORMAL,        /* N(0, std²) */
    INIT_UNIFORM_FANIN, /* U(±1/√fan_in): PyTorch nn.Linear's default for weight and bias */
    INIT_XAVIER_UNIFORM,/* U(±√(6/(fan_in+fan_out))), fan_out = shape[0], fan_in = numel/shape[0] (DiT) */
} ParamInit;

/* Reduce groups: which process groups a gradient is summed over (design §3). */
enum {
    REDUCE_DP_CP = 1u,    /* every parameter: data- and context-parallel replicas */
    REDUCE_TP_HEADS = 2u, /* partial on every TP rank whenever TP > 1, so summed over TP: weights shared
                             by the heads TP splits (QK-norm), and row-parallel biases (proj, fc2), which
                             TP rank 0 alone adds so the region's sum counts them once */
    REDUCE_PP = 4u,       /* conditioning embedders every pipeline stage holds */
    REDUCE_TP_SP = 8u,    /* replicated, summed over tokens (adaLN, embedders, norms, the final layer):
                             over TP only under sequence parallelism, where each TP rank sees other
                             tokens */
};

typedef struct ParamEntry {
    char name[96];
    int ndim;
    int64_t shape[VFM_MAX_DIMS];
    int64_t numel;
    int64_t offset;       /* elements from the start of the buffer */
    ParamInit init;
    float init_scale;     /* std for INIT_NORMAL; fan_in for INIT_UNIFORM_FANIN */
    int weight_decay;     /* 1 for weights with >= 2 dims */
    int tp_split_dim;     /* -1 replicated, 0 column-parallel (rows of W), 1 row-parallel */
    int tp_parts;         /* equal parts along tp_split_dim that split separately (3 for a fused
                           * qkv weight [3D, D]: each rank takes its heads of q, of k and of v); 1 */
    unsigned reduce_groups;
    int trainable;        /* 0: frozen (kept in the buffer, never updated) */
    int group;            /* the model's grouping for reports (dit.h DiTParamGroup) */
} ParamEntry;

typedef struct ParamTable {
    ParamEntry *entries;
    int count, capacity;
    int64_t total;        /* elements over all entries */
    int group;            /* given to the entries added next (param_table_set_group) */
} ParamTable;

void param_table_init(ParamTable *t);
void param_table_free(ParamTable *t);
/* dst = a deep copy of src. */
vfm_status param_table_copy(ParamTable *dst, const ParamTable *src);
/* Appends an entry at the end of the buffer; weight_decay defaults to (ndim >= 2). The name is
 * printf-formatted ("blocks.%d.mlp.fc1.weight"). Returns the entry index. */
int param_table_add(ParamTable *t, ParamInit init, float init_scale, int ndim, const int64_t *shape,
                    unsigned reduce_groups, int tp_split_dim, const char *name_fmt, ...)
    __attribute__((format(printf, 8, 9)));
/* Entries added from now on get this group (ParamEntry.group). */
void param_table_set_group(ParamTable *t, int group);
int param_table_find(const ParamTable *t, const char *name); /* -1 when absent */
/* A view of entry i inside a buffer laid out by the table (buf has t->total elements). */
Tensor param_view(const ParamTable *t, int i, void *buf, DType dtype, Device dev);
/* Fills buf (f32, CPU) with each entry's initialisation, drawn from Philox with stream INIT,
 * counter (0, hash of the entry name, element index): the same name gives the same values
 * whatever the table's order or the parallel layout. */
vfm_status param_table_init_values(const ParamTable *t, float *buf, uint64_t seed);
/* Number of trainable elements. */
int64_t param_table_trainable(const ParamTable *t);

/* The table's entries placed in a buffer of their own with each entry at an `align`-byte boundary
 * (elements of elem_bytes; align a multiple of it; the gaps hold nothing): the GPU's weight copy
 * (dit.h wcopy), so that every weight a kernel or a GEMM reads is aligned whatever the entries'
 * sizes, while the table's own layout — the master weights, gradients, moments, checkpoints — stays
 * as it is, without gaps. runs: the maximal pieces that are contiguous in both layouts, in order
 * (one copy or conversion each). */
typedef struct {
    int64_t table_offset, placed_offset, count; /* elements */
} PlacementRun;
typedef struct {
    int64_t *at;        /* [count] each entry's element offset in the placed buffer */
    int64_t total;      /* elements of the placed buffer, gaps included */
    PlacementRun *runs;
    int n_runs;
} ParamPlacement;
vfm_status param_placement(const ParamTable *t, size_t elem_bytes, size_t align, ParamPlacement *out);
void param_placement_free(ParamPlacement *p);

#endif
