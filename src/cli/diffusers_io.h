/* A diffusers transformer folder — config.json and diffusion_pytorch_model.safetensors, or its shards
 * with diffusion_pytorch_model.safetensors.index.json — as Wan 2.1's WanTransformer3DModel writes it
 * with save_pretrained: `vfm import --from DIR` reads one, `vfm export --format diffusers` writes one
 * that WanTransformer3DModel.from_pretrained loads strictly (docs/models.md "Wan 2.1"). vfm's wan
 * table uses diffusers' names and shapes, so the tensors move without renaming. */
#ifndef VFM_CLI_DIFFUSERS_IO_H
#define VFM_CLI_DIFFUSERS_IO_H

#include "data/formats/safetensors.h"
#include "model/dit_interop.h"

enum { DIFFUSERS_MAX_SHARDS = 256 };

typedef struct DiffusersFolder {
    int n_files;
    SafetensorsFile *files[DIFFUSERS_MAX_SHARDS];
    int *file_of, *index_in;  /* [count]: tensor i is tensor index_in[i] of files[file_of[i]] */
    WeightSource src;         /* every tensor of every shard */
} DiffusersFolder;

/* 1 when dir is a directory holding config.json. */
int diffusers_folder_is(const char *dir);
/* The folder's tensors (one file or the shards its index names). */
vfm_status diffusers_folder_open(DiffusersFolder *f, const char *dir);
void diffusers_folder_close(DiffusersFolder *f);
/* "key=value" settings (at most 16) of model.variant=wan from the folder's config.json; a field vfm
 * cannot honour (image-to-video's image_dim, added_kv_proj_dim, another qk_norm, ...) is refused with
 * VFM_ERR_USAGE naming it. */
vfm_status diffusers_wan_settings(const char *dir, char settings[16][96], int *n);
/* Writes dir/config.json and dir/diffusion_pytorch_model.safetensors from a wan checkpoint's weights
 * file `weights` (model.safetensors or ema.safetensors). */
vfm_status diffusers_wan_export(const DiTConfig *c, const char *weights, const char *dir);

#endif
