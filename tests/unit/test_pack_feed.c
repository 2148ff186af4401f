/* The trainer's pack feed (data/loader/pack_feed.h) on the mock source: the packs come in the source's
 * order with their tensors holding the pack's values on the device, and the checkpointed position
 * (pack_feed_get_state) excludes the pack taken ahead, so a source restored from it continues with
 * the feed's next pack. On the CPU (views, no prefetch) and on CUDA (page-locked packs, copies one
 * ahead on a stream; skipped without a device). */
#include <stdlib.h>
#include <string.h>

#include "core/config.h"
#include "data/loader/pack_feed.h"
#include "data/loader/source.h"
#include "test.h"

static PackSource *mock_source(void) {
    const char *ov[] = {"dataset.mock=true", "dataset.mock_samples=6", "dataset.mock_shapes=[4x1x8x8,4x2x4x4]",
                        "dataset.number_packed_samples=2", "dataset.task_encoder_seq_length=64",
                        "model.preset=tiny"};
    Config *cfg = NULL;
    if (config_load(&cfg, NULL, ov, (int)(sizeof ov / sizeof ov[0])) != VFM_OK) {
        test_fail(__FILE__, __LINE__, "config: %s", vfm_last_error());
        return NULL;
    }
    PackSource *src = NULL;
    if (pack_source_create(&src, cfg, 0, 1) != VFM_OK) test_fail(__FILE__, __LINE__, "source: %s", vfm_last_error());
    config_free(cfg);
    return src;
}

/* The tensor t (any device) holds exactly the n bytes at host. */
static int tensor_holds(const Tensor *t, const void *host, size_t n) {
    if (tensor_bytes(t) != n) return 0;
    void *h = malloc(n ? n : 1);
    int ok = h && device_memcpy(h, DEV_CPU, t->data, t->device, n) == VFM_OK && memcmp(h, host, n) == 0;
    free(h);
    return ok;
}

static int pack_matches(const Pack *p, const PackTensors *pt, const Pack *ref) {
    if (p->n_samples != ref->n_samples || p->n_tokens != ref->n_tokens || p->n_text != ref->n_text) return 0;
    if (p->n_samples > 0 && p->samples[0].uid != ref->samples[0].uid) return 0;
    size_t S = (size_t)ref->n_tokens, n1 = (size_t)(ref->n_samples + 1) * sizeof(int32_t);
    return tensor_holds(&pt->tokens, ref->tokens, S * (size_t)ref->token_dim * sizeof(float)) &&
           tensor_holds(&pt->text, ref->text, (size_t)ref->n_text * (size_t)ref->text_dim * sizeof(float)) &&
           tensor_holds(&pt->token_sample, ref->token_sample, S * sizeof(int32_t)) &&
           tensor_holds(&pt->token_pos, ref->token_pos, 3 * S * sizeof(int32_t)) &&
           tensor_holds(&pt->loss_mask, ref->loss_mask, S * sizeof(float)) &&
           tensor_holds(&pt->cu_seqlens, ref->cu_seqlens, n1) &&
           tensor_holds(&pt->cu_seqlens_padded, ref->cu_seqlens_padded, n1) &&
           tensor_holds(&pt->cu_text, ref->cu_text, n1) && tensor_holds(&pt->cu_text_padded, ref->cu_text_padded, n1);
}

static void feed_case(Device dev) {
    PackSource *src = mock_source(), *ref = mock_source(), *resumed = mock_source();
    REQUIRE(src && ref && resumed);
    PackFeed f;
    REQUIRE_OK(pack_feed_init(&f, src, dev, NULL));
    Pack q, r;
    pack_init(&q, ref->token_dim, ref->text_dim, 1, 1);
    pack_init(&r, ref->token_dim, ref->text_dim, 1, 1);
    double wait = 0;
    for (int i = 0; i < 5; i++) {
        const Pack *p;
        const PackTensors *pt;
        REQUIRE_OK(pack_feed_next(&f, &p, &pt, &wait));
        REQUIRE_OK(ref->next(ref, &q));
        CHECK_MSG(pt->device == dev, "pack %d: tensors on the %s", i, device_name(pt->device));
        CHECK_MSG(p->n_samples > 0 && pack_matches(p, pt, &q), "pack %d differs from the source's", i);
        if (i == 2) { /* a checkpoint here: the restored source continues with pack 3 */
            char *state = NULL;
            REQUIRE_OK(pack_feed_get_state(&f, &state));
            REQUIRE_OK(resumed->set_state(resumed, state));
            free(state);
            REQUIRE_OK(resumed->next(resumed, &r));
        }
        if (i == 3)
            CHECK_MSG(pack_matches(p, pt, &r), "the position checkpointed after pack 2 does not continue with pack 3");
    }
    CHECK(wait >= 0);
    pack_feed_free(&f);
    pack_free(&q);
    pack_free(&r);
    pack_source_destroy(src);
    pack_source_destroy(ref);
    pack_source_destroy(resumed);
}

TEST(pack_feed_cpu_gives_the_source_packs_and_its_position) { feed_case(DEV_CPU); }

TEST(cuda_pack_feed_copies_one_ahead_and_checkpoints_the_position_before_it) {
    NEED_GPU();
    feed_case(DEV_CUDA);
}
