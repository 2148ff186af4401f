/* A diffusers transformer folder in and out (diffusers_io.h). */
#include "diffusers_io.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/fileutil.h"
#include "train/checkpoint.h"

static const char *WEIGHTS = "diffusion_pytorch_model.safetensors";

int diffusers_folder_is(const char *dir) {
    char p[1200];
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
    path_join(p, sizeof p, dir, "config.json");
    return path_exists(p);
}

/* ---- the tensors ---- */

static const char *df_name(void *ctx, int i) {
    DiffusersFolder *f = ctx;
    return safetensors_name(f->files[f->file_of[i]], f->index_in[i]);
}
static int df_shape(void *ctx, int i, int64_t *shape) {
    DiffusersFolder *f = ctx;
    DType dt;
    int nd = 0;
    safetensors_info(f->files[f->file_of[i]], f->index_in[i], &dt, &nd, shape);
    return nd;
}
static vfm_status df_read(void *ctx, int i, float *out, int64_t numel) {
    DiffusersFolder *f = ctx;
    return safetensors_read_f32(f->files[f->file_of[i]], f->index_in[i], out, numel);
}

/* The shard files an index names, each once, in order of first mention. */
static vfm_status open_shards(DiffusersFolder *f, const char *dir, const char *index) {
    json_error_t err;
    json_t *root = json_load_file(index, 0, &err), *map = root ? json_object_get(root, "weight_map") : NULL;
    if (!json_is_object(map)) {
        json_decref(root);
        return vfm_fail(VFM_ERR_FORMAT, "%s: no weight_map (%s)", index, root ? "not an object" : err.text);
    }
    const char *names[DIFFUSERS_MAX_SHARDS], *key;
    json_t *v;
    vfm_status s = VFM_OK;
    json_object_foreach(map, key, v) {
        const char *file = json_string_value(v);
        int seen = 0;
        for (int k = 0; k < f->n_files && file; k++) seen |= strcmp(names[k], file) == 0;
        if (!file || strchr(file, '/')) s = vfm_fail(VFM_ERR_FORMAT, "%s: tensor %s: bad shard name", index, key);
        else if (!seen && f->n_files == DIFFUSERS_MAX_SHARDS) s = vfm_fail(VFM_ERR_FORMAT, "%s: over %d shards", index, DIFFUSERS_MAX_SHARDS);
        else if (!seen) names[f->n_files++] = file;
        if (s != VFM_OK) break;
    }
    for (int k = 0; k < f->n_files && s == VFM_OK; k++) {
        char p[1400];
        path_join(p, sizeof p, dir, names[k]);
        s = safetensors_open(&f->files[k], p);
        if (s != VFM_OK) f->n_files = k;
    }
    json_decref(root);
    return s;
}

vfm_status diffusers_folder_open(DiffusersFolder *f, const char *dir) {
    memset(f, 0, sizeof *f);
    char one[1200], index[1300];
    path_join(one, sizeof one, dir, WEIGHTS);
    snprintf(index, sizeof index, "%s.index.json", one);
    if (path_exists(one)) {
        VFM_TRY(safetensors_open(&f->files[0], one));
        f->n_files = 1;
    } else if (path_exists(index)) {
        VFM_TRY(open_shards(f, dir, index));
    } else {
        return vfm_fail(VFM_ERR_USAGE, "%s holds neither %s nor its shard index", dir, WEIGHTS);
    }
    int count = 0;
    for (int k = 0; k < f->n_files; k++) count += safetensors_count(f->files[k]);
    f->file_of = calloc((size_t)count + 1, sizeof *f->file_of);
    f->index_in = calloc((size_t)count + 1, sizeof *f->index_in);
    if (!f->file_of || !f->index_in) return vfm_fail(VFM_ERR_NOMEM, "import: %d tensors", count);
    int i = 0;
    for (int k = 0; k < f->n_files; k++)
        for (int j = 0; j < safetensors_count(f->files[k]); j++) f->file_of[i] = k, f->index_in[i++] = j;
    f->src = (WeightSource){count, dir, f, df_name, df_shape, df_read};
    return VFM_OK;
}

void diffusers_folder_close(DiffusersFolder *f) {
    for (int k = 0; k < f->n_files; k++) safetensors_close(f->files[k]);
    free(f->file_of), free(f->index_in);
    memset(f, 0, sizeof *f);
}

/* ---- config.json ---- */

static vfm_status refuse(const char *path, const char *field, const char *why) {
    return vfm_fail(VFM_ERR_USAGE, "%s: %s %s", path, field, why);
}

static vfm_status int_field(json_t *root, const char *path, const char *field, int64_t *out) {
    json_t *v = json_object_get(root, field);
    if (!json_is_integer(v)) return refuse(path, field, "must be an integer");
    *out = json_integer_value(v);
    return VFM_OK;
}

vfm_status diffusers_wan_settings(const char *dir, char settings[16][96], int *n) {
    char path[1200];
    path_join(path, sizeof path, dir, "config.json");
    json_error_t err;
    json_t *root = json_load_file(path, 0, &err);
    if (!json_is_object(root)) {
        json_decref(root);
        return vfm_fail(VFM_ERR_FORMAT, "%s: %s", path, root ? "not a JSON object" : err.text);
    }
    vfm_status s = VFM_OK;
    const char *cls = json_string_value(json_object_get(root, "_class_name"));
    if (!cls || strcmp(cls, "WanTransformer3DModel") != 0)
        s = refuse(path, "_class_name", "must be WanTransformer3DModel (vfm imports Wan 2.1's transformer)");
    static const char *const image_fields[] = {"image_dim", "added_kv_proj_dim", "pos_embed_seq_len"};
    for (int k = 0; k < 3 && s == VFM_OK; k++) {
        json_t *v = json_object_get(root, image_fields[k]);
        if (v && !json_is_null(v))
            s = refuse(path, image_fields[k], "is set: an image-to-video model, which vfm does not train (text-to-video only)");
    }
    const char *qk = json_string_value(json_object_get(root, "qk_norm"));
    if (s == VFM_OK && (!qk || strcmp(qk, "rms_norm_across_heads") != 0))
        s = refuse(path, "qk_norm", "must be \"rms_norm_across_heads\" (Wan 2.1's)");
    if (s == VFM_OK && !json_is_true(json_object_get(root, "cross_attn_norm")))
        s = refuse(path, "cross_attn_norm", "must be true (Wan 2.1's)");
    json_t *patch = json_object_get(root, "patch_size");
    if (s == VFM_OK && (json_array_size(patch) != 3 || json_integer_value(json_array_get(patch, 1)) !=
                                                          json_integer_value(json_array_get(patch, 2))))
        s = refuse(path, "patch_size", "must be [pt, p, p]");
    int64_t heads = 0, hd = 0, in = 0, out = 0, text = 0, freq = 0, ffn = 0, layers = 0;
    if (s == VFM_OK) s = int_field(root, path, "num_attention_heads", &heads);
    if (s == VFM_OK) s = int_field(root, path, "attention_head_dim", &hd);
    if (s == VFM_OK) s = int_field(root, path, "in_channels", &in);
    if (s == VFM_OK) s = int_field(root, path, "text_dim", &text);
    if (s == VFM_OK) s = int_field(root, path, "freq_dim", &freq);
    if (s == VFM_OK) s = int_field(root, path, "ffn_dim", &ffn);
    if (s == VFM_OK) s = int_field(root, path, "num_layers", &layers);
    json_t *oc = json_object_get(root, "out_channels");
    if (s == VFM_OK) s = json_is_null(oc) || !oc ? (out = in, VFM_OK) : int_field(root, path, "out_channels", &out);
    if (s == VFM_OK && freq != 256) s = refuse(path, "freq_dim", "must be 256 (Wan 2.1's)");
    json_t *eps = json_object_get(root, "eps");
    if (s == VFM_OK && !json_is_number(eps)) s = refuse(path, "eps", "must be a number");
    if (s == VFM_OK) {
        int k = 0;
        snprintf(settings[k++], 96, "model.variant=wan");
        snprintf(settings[k++], 96, "model.hidden_size=%lld", (long long)(heads * hd));
        snprintf(settings[k++], 96, "model.num_attention_heads=%lld", (long long)heads);
        snprintf(settings[k++], 96, "model.num_layers=%lld", (long long)layers);
        snprintf(settings[k++], 96, "model.ffn_hidden_size=%lld", (long long)ffn);
        snprintf(settings[k++], 96, "model.in_channels=%lld", (long long)in);
        snprintf(settings[k++], 96, "model.out_channels=%lld", (long long)out);
        snprintf(settings[k++], 96, "model.patch_temporal=%lld", (long long)json_integer_value(json_array_get(patch, 0)));
        snprintf(settings[k++], 96, "model.patch_spatial=%lld", (long long)json_integer_value(json_array_get(patch, 1)));
        snprintf(settings[k++], 96, "model.crossattn_emb_size=%lld", (long long)text);
        snprintf(settings[k++], 96, "model.layernorm_epsilon=%.9g", json_number_value(eps));
        *n = k;
    }
    json_decref(root);
    return s;
}

/* ---- out ---- */

static vfm_status write_config(const DiTConfig *c, const char *dir) {
    char path[1200], eps[32];
    path_join(path, sizeof path, dir, "config.json");
    snprintf(eps, sizeof eps, "%.6g", (double)c->ln_eps);
    json_t *j = json_pack("{s:s,s:s,s:[i,i,i],s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:b,s:s,s:f,s:n,s:n,s:i,s:n}",
                          "_class_name", "WanTransformer3DModel", "_diffusers_version", "0.42.1", "patch_size",
                          c->patch_temporal, c->patch_spatial, c->patch_spatial, "num_attention_heads", c->heads,
                          "attention_head_dim", c->head_dim, "in_channels", c->in_channels, "out_channels",
                          c->out_channels, "text_dim", c->d_text, "freq_dim", 256, "ffn_dim", c->ffn, "num_layers",
                          c->layers, "cross_attn_norm", 1, "qk_norm", "rms_norm_across_heads", "eps", strtod(eps, NULL),
                          "image_dim", "added_kv_proj_dim", "rope_max_seq_len", 1024, "pos_embed_seq_len");
    if (!j) return vfm_fail(VFM_ERR_NOMEM, "export: config.json");
    int rc = json_dump_file(j, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(j);
    return rc == 0 ? VFM_OK : vfm_fail(VFM_ERR_IO, "export: cannot write %s", path);
}

vfm_status diffusers_wan_export(const DiTConfig *c, const char *weights, const char *dir) {
    if (c->variant != DIT_VARIANT_WAN)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "--format", "diffusers", "writes Wan 2.1's WanTransformer3DModel: the "
                           "checkpoint is model.variant=%s", dit_variant_name(c->variant));
    if (c->moe.experts > 0)
        return vfm_fail_at(VFM_ERR_USAGE, NULL, "--format", "diffusers", "WanTransformer3DModel has a dense MLP: the "
                           "checkpoint has model.num_moe_experts=%d", c->moe.experts);
    VFM_TRY(mkdir_p(dir));
    DiT m;
    dit_describe(&m, c);
    const ParamTable *t = &m.table;
    float *buf = malloc((size_t)t->total * sizeof(float) + 1);
    SafetensorsEntry *e = calloc((size_t)t->count + 1, sizeof *e);
    vfm_status s = buf && e ? VFM_OK : vfm_fail(VFM_ERR_NOMEM, "export: %lld floats", (long long)t->total);
    if (s == VFM_OK) s = load_named_tensors(weights, t, "", buf);
    for (int i = 0; s == VFM_OK && i < t->count; i++) {
        const ParamEntry *p = &t->entries[i];
        e[i] = (SafetensorsEntry){p->name, DT_F32, p->ndim, {0}, buf + p->offset};
        memcpy(e[i].shape, p->shape, sizeof p->shape);
    }
    char path[1200];
    path_join(path, sizeof path, dir, WEIGHTS);
    const char *meta[] = {"format", "pt", NULL};
    if (s == VFM_OK) s = safetensors_write(path, e, t->count, meta);
    if (s == VFM_OK) s = write_config(c, dir);
    if (s == VFM_OK) printf("wrote %s: config.json and %s (%d tensors) from %s\n", dir, WEIGHTS, t->count, weights);
    free(buf), free(e);
    dit_destroy(&m);
    return s;
}
