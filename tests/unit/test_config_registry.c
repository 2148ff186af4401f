/* No silent keys: every registry key is either read somewhere in vfm's sources or marked "not used
 * by vfm" (which warns when set) — and a key marked unused is read nowhere.
 *
 * Mechanism (static, so conditional reads count too): a key is read when its full name appears as
 * a string literal ("model.hidden_size") in a .c file under src/ other than the registry
 * (src/core/config_keys.c) and the presets (src/core/config_presets.c). Every cfg_* accessor call,
 * and every table of key names a check walks, spells the name that way. A key that some code reads
 * only to refuse or warn counts as read: refusing with a message is not silent. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "core/fileutil.h"
#include "test.h"

typedef struct Sources {
    char *text;
    size_t len, cap;
    int files;
} Sources;

static void add_tree(Sources *s, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue;
        char path[2048];
        path_join(path, sizeof path, dir, e->d_name);
        size_t n = strlen(e->d_name);
        if (n > 2 && strcmp(e->d_name + n - 2, ".c") == 0) {
            if (strcmp(e->d_name, "config_keys.c") == 0 || strcmp(e->d_name, "config_presets.c") == 0) continue;
            char *text;
            size_t len;
            if (read_file_all(path, &text, &len) != VFM_OK) continue;
            if (s->len + len + 2 > s->cap) {
                s->cap = (s->len + len + 2) * 2;
                s->text = realloc(s->text, s->cap);
            }
            memcpy(s->text + s->len, text, len);
            s->len += len;
            s->text[s->len++] = '\n';
            s->text[s->len] = 0;
            s->files++;
            free(text);
        } else if (!strchr(e->d_name, '.')) {
            add_tree(s, path);
        }
    }
    closedir(d);
}

static int read_in(const Sources *s, const char *key) {
    char quoted[300];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    return strstr(s->text, quoted) != NULL;
}

TEST(config_registry_has_no_silent_keys) {
    char root[1024], src[1100];
    test_find_root(root, sizeof root);
    snprintf(src, sizeof src, "%s/src", root);
    Sources s = {0};
    add_tree(&s, src);
    REQUIRE(s.files > 50 && s.text);
    int problems = 0;
    for (int i = 0; i < config_registry_count(); i++) {
        CfgKeyInfo k;
        config_registry_key(i, &k);
        int read = read_in(&s, k.name);
        if (!read && !k.unused && problems++ < 20)
            test_fail(__FILE__, __LINE__, "key '%s' is read nowhere in src/ and not marked \"not used by vfm\"", k.name);
        if (read && k.unused && problems++ < 20)
            test_fail(__FILE__, __LINE__, "key '%s' is marked \"not used by vfm\" but src/ reads it", k.name);
    }
    /* the keys issue 11 found silent, one by one */
    static const char *listed[] = {
        "train.eval_interval", "train.eval_iters", "dataset.use_train_split_for_val", "dataset.split",
        "model.val_generation_num_steps", "model.val_generation_guidance", "logger.tensorboard_dir",
        "ddp.overlap_grad_reduce", "ddp.check_for_nan_in_grad", "diffusion.sigma_min", "diffusion.sigma_max",
        "sampler.s_churn", "train.fixed_pack_length", "model.virtual_pipeline_model_parallel_size", "checkpoint.save",
        "scheduler.lr_wsd_decay_style", "scheduler.lr_wsd_decay_iters", "diffusion.objective"};
    for (size_t i = 0; i < sizeof listed / sizeof listed[0]; i++) {
        int at = config_registry_find(listed[i]);
        CHECK_MSG(at >= 0, "'%s' is not in the registry", listed[i]);
        if (at < 0) continue;
        CfgKeyInfo k;
        config_registry_key(at, &k);
        CHECK_MSG(!k.unused && read_in(&s, listed[i]), "'%s' must be read (or refused) by vfm", listed[i]);
    }
    free(s.text);
}
